"""Seeded logs of every shape the benchmarks (and the linear-cost test) need.

* **Step streams**: one row per step, with or without an ``epoch`` column, with 20 metrics a row
  (the canonical ones a PPO/GRPO trainer logs) or 200 (those plus 180 carried-through keys named
  as veRL names its timing, throughput, sequence-length and validation metrics); the learning rate
  constant, or scheduled (``lr_schedule``: a linear warm-up, then a cosine decay, a new value on
  every row as a scheduler logs it).
* **Gauss step streams**: ``step`` and 20 metrics of ``round(gauss, 6)`` values (no epoch, no
  timestamp): short numbers, under the canonical names or under names no trainer logs.
* **Sample streams**: one row per response (``step``, ``length``, ``reward``, ``truncated``,
  ``advantage``), ``per_step`` responses a step; from ``bias_from`` on the reward pays for length
  (``reward += bias * (length - 200)``), the length-bias seed of issue 10.

Columns come in chunks, each from its own seeded generator (``default_rng([seed, chunk])``), so a
10,000,000-row file is written with bounded memory and the same rows whatever the chunking.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["CHUNK", "gauss_chunks", "lr_schedule", "sample_chunks", "step_chunks", "write_jsonl", "write_parquet"]

#: Rows generated (and written) at a time.
CHUNK = 50_000

#: The 20 canonical metrics of the step stream.
CANONICAL = ("kl", "kl_coef", "entropy", "loss", "policy_loss", "value_loss", "grad_norm",
             "grad_norm_value", "learning_rate", "advantage_mean", "advantage_std", "reward_mean",
             "reward_std", "response_length_mean", "response_length_max", "truncation_rate",
             "clip_frac", "approx_kl", "step_time", "train_tokens_per_s")

#: Prefixes of the carried-through keys of a wide (veRL-like) row: none of them is an alias of a
#: canonical metric, so they reach metrics.csv under their own names.
EXTRA_PREFIXES = ("timing_s/stage", "timing_per_token_ms/stage", "global_seqlen/part",
                  "prompt_length/q", "val-core/source", "val-aux/source", "perf/counter",
                  "actor/extra", "critic/extra")


def extra_names(count: int) -> list[str]:
    """``count`` carried-through metric names, cycling over :data:`EXTRA_PREFIXES`.

    >>> extra_names(3)
    ['timing_s/stage0', 'timing_per_token_ms/stage0', 'global_seqlen/part0']
    """
    return [f"{EXTRA_PREFIXES[i % len(EXTRA_PREFIXES)]}{i // len(EXTRA_PREFIXES)}"
            for i in range(count)]


#: Steps over which reward and entropy approach their final levels. Trends follow the step, not
#: the share of the run, so a shorter log is a prefix of a longer one with the same seed.
TREND_STEPS = 200_000

#: The scheduled learning rate (``lr_schedule``): its peak, the steps of its linear warm-up, and
#: the steps of its cosine decay to a tenth of the peak (held there after).
LR_PEAK, LR_WARMUP, LR_DECAY = 1e-6, 2_000, 1_000_000


def lr_schedule(t: np.ndarray) -> np.ndarray:
    """The learning rate a warm-up and cosine scheduler logs at steps ``t``.

    >>> lr_schedule(np.array([0, 1_000, 2_000, 502_000, 2_000_000])).round(9).tolist()
    [0.0, 5e-07, 1e-06, 5.5e-07, 1e-07]
    """
    warm = np.minimum(t / LR_WARMUP, 1.0)
    decay = np.clip((t - LR_WARMUP) / LR_DECAY, 0.0, 1.0)
    return LR_PEAK * np.where(t < LR_WARMUP, warm, 0.1 + 0.9 * 0.5 * (1.0 + np.cos(np.pi * decay)))


def _step_chunk(start: int, n: int, metrics: int, epoch: bool, seed: int,
                steps_per_epoch: int, scheduled: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, start // CHUNK])
    t = np.arange(start, start + n)
    frac = 1.0 - np.exp(-t / TREND_STEPS)
    cols: dict[str, np.ndarray] = {"step": t}
    if epoch:
        cols["epoch"] = t / steps_per_epoch
    cols["timestamp"] = 1.7e9 + t * 2.5 + rng.normal(0, 0.05, n)
    base = {
        "kl": 0.05 * np.exp(rng.normal(0, 0.1, n)),
        "kl_coef": np.full(n, 0.05),
        "entropy": 1.5 - 0.2 * frac + rng.normal(0, 0.02, n),
        "loss": rng.normal(0.0, 0.05, n),
        "policy_loss": rng.normal(0.0, 0.05, n),
        "value_loss": 0.3 * np.exp(rng.normal(0, 0.2, n)),
        "grad_norm": 0.8 * np.exp(rng.normal(0, 0.15, n)),
        "grad_norm_value": 0.5 * np.exp(rng.normal(0, 0.15, n)),
        "learning_rate": lr_schedule(t) if scheduled else np.full(n, 1e-6),
        "advantage_mean": rng.normal(0, 0.01, n),
        "advantage_std": 1 + rng.normal(0, 0.02, n),
        "reward_mean": 0.2 + 0.4 * frac + rng.normal(0, 0.03, n),
        "reward_std": 0.3 + rng.normal(0, 0.01, n),
        "response_length_mean": 200 + rng.normal(0, 8, n),
        "response_length_max": 400 + rng.normal(0, 20, n),
        "truncation_rate": np.abs(rng.normal(0.01, 0.005, n)),
        "clip_frac": np.abs(rng.normal(0.05, 0.01, n)),
        "approx_kl": np.abs(rng.normal(0.005, 0.001, n)),
        "step_time": 2.5 * np.exp(rng.normal(0, 0.05, n)),
        "train_tokens_per_s": 4000 * np.exp(rng.normal(0, 0.05, n)),
    }
    cols.update({k: base[k] for k in CANONICAL[:metrics]})
    for i, name in enumerate(extra_names(max(metrics - len(CANONICAL), 0))):
        cols[name] = (1.0 + i % 7) * np.exp(rng.normal(0, 0.1, n))
    return cols


def step_chunks(rows: int, metrics: int = 20, epoch: bool = True, seed: int = 0,
                steps_per_epoch: int = 10_000, scheduled: bool = False) -> Iterator[dict[str, np.ndarray]]:
    """The step stream in chunks of :data:`CHUNK` rows (a shorter log is a prefix of a longer);
    ``scheduled``: the learning rate of :func:`lr_schedule` instead of a constant one.

    >>> [len(c["step"]) for c in step_chunks(120_000, metrics=200, epoch=False)]
    [50000, 50000, 20000]
    >>> len(next(step_chunks(10, metrics=200))) - 3  # step, epoch, timestamp
    200
    """
    for start in range(0, rows, CHUNK):
        yield _step_chunk(start, min(CHUNK, rows - start), metrics, epoch, seed, steps_per_epoch, scheduled)


def gauss_chunks(rows: int, metrics: int = 20, names: str = "canonical",
                 seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """``step`` and ``metrics`` columns of standard normal values rounded to 6 decimals, in chunks
    of :data:`CHUNK` rows; ``names`` "canonical" (the step stream's metrics, then
    carried-through names) or "plain" (``m00``, ``m01``, ...: names no trainer logs).

    >>> c = next(gauss_chunks(3, metrics=2, names="plain"))
    >>> sorted(c), c["step"].tolist(), bool((c["m00"] == c["m00"].round(6)).all())
    (['m00', 'm01', 'step'], [0, 1, 2], True)
    """
    keys = ([*CANONICAL, *extra_names(max(metrics - len(CANONICAL), 0))][:metrics]
            if names == "canonical" else [f"m{i:02d}" for i in range(metrics)])
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        rng = np.random.default_rng([seed, 7, start // CHUNK])
        cols: dict[str, np.ndarray] = {"step": np.arange(start, start + n)}
        cols.update({k: np.round(rng.normal(0, 1, n), 6) for k in keys})
        yield cols


def sample_chunks(steps: int, per_step: int = 2000, seed: int = 0, bias_from: int | None = None,
                  bias: float = 0.004) -> Iterator[dict[str, np.ndarray]]:
    """The sample stream, ``per_step`` responses a step, in chunks of whole steps.

    Lengths are log-normal around 200 tokens; a reward is a quality term plus noise, and from
    step ``bias_from`` on also ``bias * (length - 200)`` (a within-step correlation near 0.9 at
    the default bias). Responses at the 1,024-token cap are truncated.

    >>> c = next(sample_chunks(3, per_step=4))
    >>> c["step"].tolist(), sorted(c)
    ([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], ['advantage', 'length', 'reward', 'step', 'truncated'])
    """
    steps_per_chunk = max(1, CHUNK // per_step)
    for s0 in range(0, steps, steps_per_chunk):
        k = min(steps_per_chunk, steps - s0)
        rng = np.random.default_rng([seed, s0])
        n = k * per_step
        step = np.repeat(np.arange(s0, s0 + k), per_step)
        length = np.minimum(np.round(200 * np.exp(rng.normal(0, 0.35, n))), 1024)
        reward = 0.5 + 0.1 * rng.normal(0, 1, n)
        if bias_from is not None:
            reward = reward + np.where(step >= bias_from, bias * (length - 200), 0.0)
        yield {"step": step, "length": length.astype(np.int64), "reward": reward,
               "truncated": (length >= 1024).astype(np.int64),
               "advantage": rng.normal(0, 1, n)}


#: Values in a row group of the Parquet files written here: pyarrow decodes a row group at a time,
#: so a reader's memory is bounded by it (65,536 rows of 200 float64 columns, 105 MB, make
#: pyarrow's own read peak near 900 MB). 65,536 rows of a 20-metric log; 10,000 of a 200-metric.
ROW_GROUP_VALUES = 1 << 21


def write_parquet(path: Path, chunks: Iterator[dict[str, np.ndarray]],
                  row_group: int | None = None) -> Path:
    """Write the chunks as one Parquet file, in row groups of ``row_group`` rows (default:
    :data:`ROW_GROUP_VALUES` values, at most 65,536 rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer: pq.ParquetWriter | None = None
    pending: list[pa.Table] = []
    held = 0
    try:
        for chunk in chunks:
            table = pa.table(chunk)
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
                if row_group is None:
                    row_group = max(1024, min(65_536, ROW_GROUP_VALUES // table.num_columns))
            pending.append(table)
            held += table.num_rows
            if held >= row_group:
                writer.write_table(pa.concat_tables(pending), row_group_size=row_group)
                pending, held = [], 0
        if writer is not None and pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=row_group)
    finally:
        if writer is not None:
            writer.close()
    tmp.replace(path)
    return path


def write_jsonl(path: Path, chunks: Iterator[dict[str, np.ndarray]]) -> Path:
    """Write the chunks as JSON lines (polars' writer: floats in full precision, as Python's
    ``json`` writes them; integers as integers)."""
    import polars as pl

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        for chunk in chunks:
            pl.DataFrame(chunk).write_ndjson(fh)
    tmp.replace(path)
    return path

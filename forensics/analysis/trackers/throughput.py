"""Throughput and efficiency: tokens/s, samples/s, steps/s, step time, MFU, ETA, duration, teacher or
judge API usage, and host/GPU resources, with findings for throughput degradation and memory growth.

Statistics (mean, p50, p99) are computed at the end from the logged values (numpy's linear
percentiles), so they do not depend on batching. MFU is the logged ``mfu`` or, when the run metadata
gives ``param_count`` and ``peak_flops``, ``6 * param_count * train_tokens_per_s / peak_flops``
(Kaplan et al. 2020: ~6 FLOPs per parameter per token for forward and backward). The ETA needs the
planned number of steps in the trainer config (``max_steps``, ``total_steps``,
``total_training_steps``, ``trainer.total_training_steps``, ``num_training_steps``).

* ``throughput.degradation`` (warning, SIGNATURES #27): the median step time over the last
  ``recent_rows`` rows exceeds ``step_time_ratio`` x the run's median (trailing ``run_window``
  rows before them) and the run's ``run_quantile`` (0.9) step time, or the recent median of
  generation/training tokens/s falls ``tokens_drop`` below the run's median and below its 0.1
  quantile, for ``tokens_rows`` rows. Medians of recent rows rather than single rows (SIGNATURES
  says 5/5 rows) because per-step tokens/s varies with response lengths; the quantile guard keeps
  a noisy host (CPU runs, shared nodes) from firing on its normal spread.
* ``throughput.memory_growth`` (warning): GPU memory (allocated or reserved) or host RAM grows
  steadily: four consecutive block medians of ``growth_block`` rows each rise, by at least
  ``growth_share`` in all, sustained for ``growth_block`` rows (a leak, not a warm-up plateau).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..spans import step_span
from ..stats.episodes import Episodes
from ..stats.noise import block_median
from ..stats.order import distinct, median
from ..stats.run_values import RunValues
from ..stats.trailing import Context, History, aligned_blocks, block_quantiles, shift, window_median
from .base import Tracker, TrackerResult

__all__ = ["TOTAL_STEP_KEYS", "Throughput"]

RATES = ("step_time", "gen_tokens_per_s", "train_tokens_per_s", "samples_per_s")
RESOURCES = ("gpu_mem_allocated_gb", "gpu_mem_reserved_gb", "ram_gb", "cpu_percent")
MEMORY = ("gpu_mem_allocated_gb", "gpu_mem_reserved_gb", "ram_gb")
API = ("api_tokens_sent", "api_tokens_received")
#: Columns whose finite values are kept over the run (their quantiles and exact sums need every
#: value; :class:`RunValues` bounds the memory); timestamps, num_tokens and epochs are summarised as
#: they stream by.
STORED = (*RATES, *RESOURCES, *API, "mfu", "api_input_tokens_per_s", "api_output_tokens_per_s")
#: Trainer-config keys that give the planned number of steps (for the ETA).
TOTAL_STEP_KEYS = ("max_steps", "total_steps", "total_training_steps", "trainer.total_training_steps",
                   "num_training_steps")


@record
class ThroughputParams:
    """The throughput tracker's thresholds (``[throughput]`` in a config)."""

    probation: int = param(50, "Rows at the start (warm-up, compilation) on which no rule fires.", ge=0)
    recent_rows: int = param(30, "Rows whose median step time is compared with the run median.")
    run_window: int = param(1000, "Trailing rows (before the recent ones) whose median is the run "
                            "median.")
    min_history: int = param(100, "Rows of run history needed before step times are compared.")
    run_block: int = param(50, "Rows per block (aligned on the row index) of the run statistics: "
                           "the run median and quantile are medians of per-block medians and "
                           "quantiles over the run_window rows of complete blocks before the "
                           "recent rows.")
    step_time_ratio: float = param(1.25, "Recent median step time above this multiple of the run "
                                   "median is degradation (SIGNATURES #27).")
    step_time_rows: int = param(30, "Consecutive rows the step-time condition must hold (a slow "
                                "stretch of host load passes; a lasting slowdown does not).")
    run_quantile: float = param(0.9, "The recent median must also pass this quantile of the run's "
                                "step times (1 - it for tokens/s): on a noisy host a 25% slower "
                                "median is within the run's normal spread.", le=1)
    tokens_drop: float = param(0.30, "Recent median tokens/s this share below the run median is a "
                               "drop (SIGNATURES #27).", le=1)
    tokens_rows: int = param(30, "Consecutive rows the tokens/s drop must hold.")
    growth_block: int = param(50, "Rows per block median in the memory-growth test.")
    growth_share: float = param(0.05, "Total rise over the four blocks, as a share of the first, "
                                "that is growth.")
    eta_rows: int = param(30, "Last rows whose median step time predicts the ETA.")
    relations: ClassVar[Relations] = (("run_window", ">=", 2, "run_block"), ("min_history", "<=", 1, "run_window"))


_R = RuleSpec
RULES = (
    _R("throughput.degradation", Severity.WARNING, "Throughput degradation",
       "Steps got slower than the run's own median (or tokens/s fell well below it) for a "
       "sustained stretch, not one slow checkpoint or eval step.",
       "Check the nodes, NCCL and the generation server; compare with response length (longer "
       "responses slow steps legitimately) and with dynamic sampling.",
       ("recent_rows", "step_time_ratio", "run_window", "run_quantile", "tokens_drop", "tokens_rows"),
       "SIGNATURES #27"),
    _R("throughput.memory_growth", Severity.WARNING, "Memory grows steadily",
       "GPU or host memory rises block after block: a leak (tensors kept alive, growing caches, "
       "lists of logged tensors) that ends in an out-of-memory crash.",
       "Look for tensors kept across steps (logging without .item()/.detach()), growing replay "
       "buffers or caches; call torch.cuda.empty_cache() only to confirm, not as a fix.",
       ("growth_block", "growth_share", "probation"), formerly=("resource.memory_growth",)),
)


#: Rate x step time, summed into the run's estimated token totals.
TOKEN_TOTALS = (("gen_tokens_per_s", "gen_tokens_estimated"), ("train_tokens_per_s", "train_tokens_estimated"))


def _stats(v: RunValues) -> dict[str, Any]:
    p50, p99 = v.quantiles([0.5, 0.99])
    return {"rows": len(v), "mean": v.mean(), "p50": p50, "p99": p99, "min": v.min(), "max": v.max()}


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    if dotted in config:
        return config[dotted]
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


class Throughput(Tracker):
    """Throughput, efficiency, API usage and resources; degradation and memory growth."""

    name = "throughput"
    area = "throughput"
    requires = (*RATES, *RESOURCES, *API, "mfu", "timestamp", "num_tokens", "epoch")
    starts_on = (*RATES, *RESOURCES, *API, "mfu", "timestamp", "num_tokens")
    rules = RULES
    Params = ThroughputParams

    def __init__(self, params: ThroughputParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: ThroughputParams = self.params
        self.p = p
        self.values: dict[str, RunValues] = {}  # a column's, from its first finite value
        self.n_steps = 0
        self.last_step = 0
        # timestamps: first and last finite value, how many, and the last eta_rows + 1 of them
        # with their steps (the ETA); the last finite num_tokens; the whole epochs seen
        self.ts_first = self.ts_last = float("nan")
        self.ts_count = 0
        self.eta_ts = History(p.eta_rows + 1)
        self.eta_steps = History(p.eta_rows + 1, dtype=np.int64)
        self.num_tokens: float | None = None
        self.epochs: set[float] = set()
        self.ctx = Context(p.run_window + p.recent_rows + 4 * p.growth_block + 2)
        self.ep: dict[str, Episodes] = {
            "step_time": Episodes(p.step_time_rows, p.step_time_rows, gap=p.recent_rows, mode="max"),
            "gen_tokens_per_s": Episodes(p.tokens_rows, p.tokens_rows, gap=p.recent_rows, mode="min"),
            "train_tokens_per_s": Episodes(p.tokens_rows, p.tokens_rows, gap=p.recent_rows, mode="min"),
            **{m: Episodes(p.growth_block, p.growth_block, gap=p.growth_block, mode="max")
               for m in MEMORY},
        }
        self.logged: set[str] = set()

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        seen = {c for c in self.starts() if batch.has(c)}
        if not seen and not self.active:
            return None
        self.active = True
        self.logged |= seen
        self.rows += len(batch)
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._update(batch)

    def _update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        p = self.p
        rows, steps = batch.rows, batch.steps
        out: dict[str, np.ndarray] = {}
        st = batch.col("step_time")
        cols = {name: batch.col(name) for name in STORED}
        for name, api in (("api_input_tokens_per_s", "api_tokens_sent"),
                          ("api_output_tokens_per_s", "api_tokens_received")):
            derived = batch.col(api) / st
            cols[name] = np.where(np.isfinite(cols[name]), cols[name], derived)
            if np.isfinite(derived).any():
                out[name] = derived
        if self.meta.param_count and self.meta.peak_flops:
            cols["mfu_estimated"] = (6.0 * self.meta.param_count * batch.col("train_tokens_per_s")
                                     / self.meta.peak_flops)
            if np.isfinite(cols["mfu_estimated"]).any():
                out["mfu_estimated"] = cols["mfu_estimated"]
        for name, key in TOKEN_TOTALS:
            cols[key] = batch.col(name) * st
        for name, v in cols.items():
            if name not in self.values and np.isfinite(v).any():
                self.values[name] = RunValues(ends=p.eta_rows)
            if name in self.values:
                self.values[name].extend(v)
        self._stream(steps, batch)
        after = rows >= p.probation
        full, n0 = self.ctx.extend(**{k: batch.col(k) for k in
                                      ("step_time", "gen_tokens_per_s", "train_tokens_per_s", *MEMORY)})
        # step time and tokens/s: median of the recent rows vs the run's median (and quantile)
        # over the run_window rows before them; both medians, so single slow steps do not count
        start = int(rows[0]) - n0 if len(rows) else 0  # global row of full[...][0]
        for name, slower in (("step_time", True), ("gen_tokens_per_s", False),
                             ("train_tokens_per_s", False)):
            y = full[name]
            if not np.isfinite(y).any():
                self.ep[name].update(rows, steps, np.zeros(len(rows), dtype=bool))
                continue
            recent = block_median(y, p.recent_rows, max(p.recent_rows // 2, 1))[n0:]
            run, tail = self._run_stats(y, start, rows,
                                        p.run_quantile if slower else 1.0 - p.run_quantile)
            ratio = recent / run
            if slower:
                cond = (ratio > p.step_time_ratio) & (recent > tail)
            else:
                cond = (ratio < 1.0 - p.tokens_drop) & (recent < tail)
            self.ep[name].update(rows, steps, after & np.isfinite(ratio) & cond, ratio,
                                 {"recent": recent, "run": run})
        q = p.growth_block
        for name in MEMORY:
            y = full[name]
            m3 = block_median(y, q, max(q // 2, 1))
            m2, m1, m0 = shift(m3, q), shift(m3, 2 * q), shift(m3, 3 * q)
            growth = (m3 / m0 - 1.0)[n0:]
            grow = (after & np.isfinite(growth) & ((m3 > m2) & (m2 > m1) & (m1 > m0))[n0:]
                    & (growth > p.growth_share))
            self.ep[name].update(rows, steps, grow, growth,
                                 {"level": m3[n0:], "first": m0[n0:],
                                  "slope": ((m3 - m0) / (3 * q))[n0:]})
        return out or None

    def _stream(self, steps: np.ndarray, batch: Batch) -> None:
        """The run summaries that need no per-row history (exact whatever the batching)."""
        self.n_steps += len(steps)
        self.last_step = int(steps[-1])
        ts = batch.col("timestamp")
        fin = np.isfinite(ts)
        if fin.any():
            t = ts[fin]
            if not self.ts_count:
                self.ts_first = float(t[0])
            self.ts_last = float(t[-1])
            self.ts_count += len(t)
            self.eta_ts.extend(t)
            self.eta_steps.extend(steps[fin])
        nt = batch.col("num_tokens")
        nt = nt[np.isfinite(nt)]
        if len(nt):
            self.num_tokens = float(nt[-1])
        ep = batch.col("epoch")
        ep = ep[np.isfinite(ep)]
        if len(ep):
            self.epochs.update(distinct(np.floor(ep)).tolist())

    def _run_stats(self, y: np.ndarray, start: int, rows: np.ndarray,
                   q: float) -> tuple[np.ndarray, np.ndarray]:
        """Run median and ``q``-quantile for each new row, over the ``run_window`` rows before
        its recent rows.

        A per-row rolling median and quantile over 1000 rows (pandas' skip list) cost about a
        second per million rows and series; medians of per-block medians and quantiles over
        blocks aligned on the row index cost a sort of ``run_block``-wide rows. The window ends
        with the last complete block before the first recent row (at most ``run_block - 1``
        rows earlier than the exact trailing window).
        """
        p = self.p
        out = np.full((2, len(rows)), np.nan)
        blocks, b0 = aligned_blocks(y, start, p.run_block)
        if not len(blocks):
            return out[0], out[1]
        summ = block_quantiles(blocks, (0.5, q))
        nblk = max(p.run_window // p.run_block, 1)
        need = max(-(-p.min_history // p.run_block), 1)  # blocks worth min_history rows
        j = (rows - p.recent_rows + 1) // p.run_block - 1 - b0  # last block before the recent rows
        ok = (j >= 0) & (j < len(summ))
        for k in range(2):
            roll = window_median(summ[:, k], nblk, need)
            out[k, ok] = roll[j[ok]]
        return out[0], out[1]

    # -- finish ---------------------------------------------------------------------------
    def conclude(self) -> TrackerResult:
        notes: list[str] = []
        v = self.values
        summary: dict[str, Any] = {"rows": self.rows}
        if self.active:
            summary.update(self._summary(v, notes))
        self._emit_all()
        return self.result(summary, notes)

    def _summary(self, v: dict[str, RunValues], notes: list[str]) -> dict[str, Any]:
        s: dict[str, Any] = {name: _stats(v[name]) for name in RATES if name in v}
        s.update(self._duration(v.get("step_time")))
        totals: dict[str, Any] = {}
        if self.num_tokens is not None:
            totals["num_tokens"] = self.num_tokens
        for _, key in TOKEN_TOTALS:
            if key in v:
                totals[key] = v[key].fsum()
        s["totals"] = totals
        for name in ("mfu", "mfu_estimated"):
            if name in v:
                s["mfu"] = {**_stats(v[name]), "source": "logged" if name == "mfu" else
                            "6 * param_count * train_tokens_per_s / peak_flops"}
                break
        else:
            if "train_tokens_per_s" in v and not (self.meta.param_count and self.meta.peak_flops):
                notes.append("MFU not logged and param_count / peak_flops not in run metadata: MFU "
                             "not estimated")
        eta = self._eta(v.get("step_time"))
        if eta is not None:
            s["eta"] = eta
        api = self._api_usage(v)
        if api:
            s["api"] = api
        res: dict[str, Any] = {}
        for name in RESOURCES:
            if name in v:
                res[name] = {**_stats(v[name]), "last": float(v[name].tail()[-1])}
        if res:
            s["resources"] = res
        return s

    def _duration(self, st_t: RunValues | None) -> dict[str, Any]:
        """The run's duration (from timestamps, else the sum of step times) and its step rate."""
        s: dict[str, Any] = {}
        duration: dict[str, Any] | None = None
        if self.ts_count >= 2:
            duration = {"seconds": self.ts_last - self.ts_first, "source": "timestamps"}
        elif st_t is not None:
            duration = {"seconds": st_t.fsum(), "source": "sum of step_time"}
        s["duration"] = duration
        if duration and duration["seconds"] > 0:
            s["steps_per_s"] = (self.n_steps - (1 if duration["source"] == "timestamps" else 0)) / duration[
                "seconds"]
        return s

    def _eta(self, st_t: RunValues | None) -> dict[str, Any] | None:
        """Steps left to the configured total and the time they take at the recent pace."""
        total = None
        for key in TOTAL_STEP_KEYS:
            val = _config_value(self.meta.config, key)
            if isinstance(val, (int, float)) and not isinstance(val, bool) and val > 0:
                total = (key, float(val))
                break
        if total is None or not self.n_steps:
            return None
        remaining = max(total[1] - float(self.last_step), 0.0)
        per_step = None
        if st_t is not None:
            per_step = median(st_t.tail()[-self.p.eta_rows:])
        elif self.ts_count >= 2:
            dt = np.diff(self.eta_ts.values) / np.diff(self.eta_steps.values)
            per_step = median(dt) if len(dt) else None
        return {"total_steps": total[1], "config_key": total[0], "remaining_steps": remaining,
                "seconds_per_step": per_step,
                "eta_seconds": remaining * per_step if per_step is not None else None}

    def _api_usage(self, v: dict[str, RunValues]) -> dict[str, Any]:
        """API calls and tokens: run totals, per step and per epoch, and the token rates."""
        api: dict[str, Any] = {}
        for name in API:
            if name in v:
                run_total = v[name].fsum()
                api[name] = {"total": run_total, "per_step_mean": v[name].mean()}
                if self.epochs:
                    api[name]["per_epoch_mean"] = run_total / len(self.epochs)
        for name in ("api_input_tokens_per_s", "api_output_tokens_per_s"):
            if name in v:
                api[name] = _stats(v[name])
        return api

    def _emit_all(self) -> None:
        p = self.p
        for name, eps in self.ep.items():
            for ep in eps.finish():
                span = step_span(ep.first_step, ep.last_step)
                if name == "step_time":
                    self.emit("throughput.degradation", ep,
                              f"median step time over the last {p.recent_rows} rows reached "
                              f"{ep.peak:.2f}x the run median ({ep.extras.get('recent', float('nan')):.4g}"
                              f" s vs {ep.extras.get('run', float('nan')):.4g} s), {span}",
                              {"series": name, "ratio": ep.peak, "recent_median": ep.extras.get("recent"),
                               "run_median": ep.extras.get("run"), "threshold": p.step_time_ratio,
                               "metrics": [name]})
                elif name in MEMORY:
                    self.emit("throughput.memory_growth", ep,
                              f"{name} grew {ep.peak:.0%} over {4 * p.growth_block} rows (to "
                              f"{ep.extras.get('level', float('nan')):.4g}, "
                              f"{ep.extras.get('slope', float('nan')):.3g} per row), {span}",
                              {"series": name, "growth_share": ep.peak, "level": ep.extras.get("level"),
                               "first_level": ep.extras.get("first"), "slope_per_row": ep.extras.get("slope"),
                               "threshold": p.growth_share, "metrics": [name]})
                else:
                    self.emit("throughput.degradation", ep,
                              f"median {name} over the last {p.recent_rows} rows fell to {ep.peak:.0%} "
                              f"of the run median ({ep.extras.get('recent', float('nan')):.4g} vs "
                              f"{ep.extras.get('run', float('nan')):.4g}), {span}",
                              {"series": name, "ratio": ep.peak, "recent_median": ep.extras.get("recent"),
                               "run_median": ep.extras.get("run"),
                               "threshold": 1.0 - p.tokens_drop, "metrics": [name]})

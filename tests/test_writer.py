"""RunWriter: round trips (JSONL, Parquet), crash safety, metadata, and one transfer per flush."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from forensics.config import load_run_meta
from forensics.errors import UsageError
from forensics.trainer.writer import RunWriter

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_jsonl_round_trip_python_and_numpy_values(tmp_path: Path) -> None:
    with RunWriter(tmp_path, flush_every=3, timestamp=False) as w:
        for step in range(7):
            w.log_step(step, {"kl": np.float32(0.25) * step, "num_tokens": np.int64(10 * step)},
                       reward_mean=0.5, flag=np.bool_(step % 2), note="x" if step == 6 else None)
    rows = _lines(tmp_path / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(7))
    assert rows[2] == {"step": 2, "kl": 0.5, "num_tokens": 20, "reward_mean": 0.5, "flag": 0,
                       "note": None}
    assert rows[6]["note"] == "x" and rows[5]["flag"] == 1


def test_nonfinite_values_are_kept_not_nulled(tmp_path: Path) -> None:
    with RunWriter(tmp_path, timestamp=False) as w:
        w.log_step(0, loss=float("nan"), grad_norm=float("inf"), kl=None)
    text = (tmp_path / "steps.jsonl").read_text()
    assert "NaN" in text and "Infinity" in text
    row = json.loads(text)
    assert math.isnan(row["loss"]) and row["grad_norm"] == math.inf and row["kl"] is None


def test_parquet_round_trip_one_row_group_per_flush(tmp_path: Path) -> None:
    with RunWriter(tmp_path, format="parquet", flush_every=4, timestamp=False) as w:
        for step in range(10):
            w.log_step(step, kl=0.1 * step, reward_mean=float(step))
        w.log_samples(9, {"length": [3, 4], "reward": [0.1, 0.2], "completion": ["ab", "cd"]})
    pf = pq.ParquetFile(tmp_path / "steps.parquet")
    assert pf.num_row_groups == 3  # 4 + 4 + 2 rows
    table = pf.read()
    assert table.column("step").to_pylist() == list(range(10))
    assert table.schema.field("step").type == "int64"
    assert table.column("kl").to_pylist()[3] == pytest.approx(0.3)
    samples = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    assert samples == [{"step": 9, "length": 3.0, "reward": 0.1, "completion": "ab"},
                       {"step": 9, "length": 4.0, "reward": 0.2, "completion": "cd"}]


def test_parquet_key_appearing_late_widens_the_file(tmp_path: Path) -> None:
    with RunWriter(tmp_path, format="parquet", flush_every=2, timestamp=False) as w:
        for step in range(6):
            extra = {"eval_reward": 1.5} if step == 4 else {}
            w.log_step(step, kl=0.1, **extra)
    table = pq.read_table(tmp_path / "steps.parquet")
    assert table.column("eval_reward").to_pylist() == [None, None, None, None, 1.5, None]
    assert table.column("step").to_pylist() == list(range(6))
    assert not (tmp_path / "steps.parquet.tmp").exists()


def test_jsonl_hard_kill_loses_only_the_unflushed_batch(tmp_path: Path) -> None:
    # os._exit skips atexit and every finaliser: the harshest crash short of SIGKILL mid-write
    proc = _run_python(f"""
        import os
        from forensics.trainer.writer import RunWriter
        w = RunWriter({str(tmp_path)!r}, flush_every=10)
        for step in range(25):
            w.log_step(step, kl=0.01 * step)
        os._exit(1)
    """)
    assert proc.returncode == 1, proc.stderr
    rows = _lines(tmp_path / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(20))


def test_jsonl_partial_last_line_is_trimmed_on_resume(tmp_path: Path) -> None:
    with RunWriter(tmp_path, timestamp=False) as w:
        w.log_step(0, kl=0.1)
        w.log_step(1, kl=0.2)
    with open(tmp_path / "steps.jsonl", "a") as fh:
        fh.write('{"step":2,"kl":0.')  # a kill in the middle of a write
    with RunWriter(tmp_path, resume=True, timestamp=False) as w:
        w.log_step(2, kl=0.3)
    assert [r["step"] for r in _lines(tmp_path / "steps.jsonl")] == [0, 1, 2]


@pytest.mark.parametrize("how", ["exception", "atexit"])
def test_parquet_crash_by_exception_leaves_a_readable_file(tmp_path: Path, how: str) -> None:
    # an unhandled exception reaches atexit; a with-block closes the writer on the way out
    body = ("with RunWriter(p, format='parquet', flush_every=5) as w:\n"
            "    [w.log_step(s, kl=0.1) for s in range(12)]\n"
            "    raise RuntimeError('boom')\n") if how == "exception" else (
            "w = RunWriter(p, format='parquet', flush_every=5)\n"
            "[w.log_step(s, kl=0.1) for s in range(12)]\n"
            "raise RuntimeError('boom')\n")
    proc = _run_python(f"from forensics.trainer.writer import RunWriter\np = {str(tmp_path)!r}\n" + body)
    assert proc.returncode == 1 and "boom" in proc.stderr
    pf = pq.ParquetFile(tmp_path / "steps.parquet")
    # 5 + 5 flushed, the last 2 flushed by close()
    assert pf.metadata.num_rows == 12 and pf.num_row_groups == 3


def test_parquet_resume_keeps_earlier_rows(tmp_path: Path) -> None:
    with RunWriter(tmp_path, format="parquet", timestamp=False) as w:
        for step in range(3):
            w.log_step(step, kl=0.1)
    with RunWriter(tmp_path, format="parquet", resume=True, timestamp=False) as w:
        for step in range(2, 5):
            w.log_step(step, kl=0.2)
    steps = pq.read_table(tmp_path / "steps.parquet").column("step").to_pylist()
    assert steps == [0, 1, 2, 2, 3, 4]


def test_run_meta_is_written_and_readable(tmp_path: Path) -> None:
    meta = {"name": "r", "algorithm": "ppo", "kl_target": 6.0, "kl_target_unit": "sequence",
            "kl_controller": "adaptive", "kl_horizon": 10000, "advantage_normalization": True,
            "param_count": np.int64(1000), "trainer_version": "1.2"}
    RunWriter(tmp_path, meta=meta, register_atexit=False).close()
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["advantage_normalization"] is True
    loaded = load_run_meta(tmp_path / "run.json")
    assert loaded.kl_target == 6.0 and loaded.kl_controller == "adaptive"
    assert loaded.param_count == 1000 and loaded.config == {"trainer_version": "1.2"}


def test_invalid_input_raises_usage_errors(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, register_atexit=False)
    with pytest.raises(UsageError):
        w.log_step(0, kl=np.zeros(3))
    with pytest.raises(UsageError):
        w.log_samples(0, {"length": [1, 2], "reward": [1.0]})
    with pytest.raises(UsageError):
        w.log_step(0, kl=object())
    w.close()
    with pytest.raises(UsageError):
        w.log_step(1, kl=0.1)
    with pytest.raises(UsageError):
        RunWriter(tmp_path, format="csv")


def test_writer_imports_without_torch() -> None:
    proc = _run_python("""
        import sys, tempfile
        sys.modules["torch"] = None  # makes 'import torch' raise ImportError
        from forensics.trainer.writer import RunWriter
        with RunWriter(tempfile.mkdtemp()) as w:
            w.log_step(0, kl=0.5)
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# --------------------------------------------------------------------------- torch tensors
_SYNC_METHODS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__",
                 "__index__", "__array__")


@pytest.fixture
def sync_counter(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count every Tensor method that moves data to the host (a device sync on CUDA)."""
    torch = pytest.importorskip("torch")
    counts = {name: 0 for name in _SYNC_METHODS}
    for name in _SYNC_METHODS:
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, __name=name, __original=original, **kwargs):  # type: ignore[no-untyped-def]
            counts[__name] += 1
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return counts


def test_one_transfer_per_flush_and_none_per_log_call(tmp_path: Path,
                                                      sync_counter: dict[str, int]) -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    w = RunWriter(tmp_path, flush_every=10, timestamp=False,
                  detokenize=lambda ids: "".join(chr(97 + i) for i in ids))
    for step in range(25):
        x = torch.rand(8, generator=gen)
        metrics = {"kl": x.mean(), "kl_coef": torch.tensor(0.1, dtype=torch.float64),
                   "grad_norm": x.max(), "num_tokens": torch.tensor(step * 3),
                   "reward_mean": 0.5}
        w.log_step(step, metrics)
        w.log_samples(step, {"length": torch.arange(4) + step, "reward": x[:4],
                             "truncated": x[:4] > 0.5,
                             "completion": torch.arange(6).reshape(2, 3).repeat(2, 1)})
        if step < 20:
            # no host transfer at all while logging, only inside the flushes
            assert sum(sync_counter.values()) == sync_counter["tolist"] == w.flushes
    before = dict(sync_counter)
    w.close()
    assert w.flushes == 3
    # 25 steps, flush_every=10 -> flushes at 10, 20 and close: one tolist() each, nothing else
    assert sync_counter["tolist"] - before["tolist"] == 1
    rows = _lines(tmp_path / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(25))
    assert rows[7]["num_tokens"] == 21 and isinstance(rows[7]["num_tokens"], int)
    assert rows[7]["kl_coef"] == 0.1
    samples = _lines(tmp_path / "samples.jsonl")
    assert len(samples) == 100
    assert samples[5] == {"step": 1, "length": 2, "reward": samples[5]["reward"],
                          "truncated": int(samples[5]["reward"] > 0.5), "completion": "def"}


def test_tensor_values_match_their_float32_values(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    values = torch.tensor([0.1, 1 / 3, 1e-8, 12345.678, float("nan")], dtype=torch.float32)
    with RunWriter(tmp_path, timestamp=False) as w:
        for i, v in enumerate(values):
            w.log_step(i, kl=v)
    got = [r["kl"] for r in _lines(tmp_path / "steps.jsonl")]
    # the shortest float32 repr round-trips to exactly the logged float32 value
    assert np.array_equal(np.asarray(got, dtype=np.float32), values.numpy(), equal_nan=True)
    assert got[0] == 0.1


def test_tensor_logged_then_modified_in_place_keeps_logged_value(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    acc = torch.zeros(())
    with RunWriter(tmp_path, flush_every=100, timestamp=False) as w:
        for step in range(3):
            acc += 1.0
            w.log_step(step, loss=acc)
    assert [r["loss"] for r in _lines(tmp_path / "steps.jsonl")] == [1.0, 2.0, 3.0]


def test_cuda_logging_does_not_synchronise(tmp_path: Path) -> None:
    """On a GPU, CUDA's own sync detector must stay silent while logging (skipped on CPU)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.rand(1000, device="cuda")
    w = RunWriter(tmp_path, flush_every=1000, register_atexit=False)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(20):
            w.log_step(step, {"kl": x.mean(), "grad_norm": x.norm(), "n": (x > 0.5).sum()})
            w.log_samples(step, {"length": (x[:4] * 10).long(), "reward": x[:4]})
    finally:
        torch.cuda.set_sync_debug_mode("default")
    w.close()
    assert len(_lines(tmp_path / "steps.jsonl")) == 20
    assert len(_lines(tmp_path / "samples.jsonl")) == 80


def test_parquet_hard_kill_leaves_readable_parts(tmp_path: Path) -> None:
    # os._exit: no close, no atexit, no footer; every flushed part must still be readable
    proc = _run_python(f"""
        import os
        from forensics.trainer.writer import RunWriter
        w = RunWriter({str(tmp_path)!r}, format="parquet", flush_every=10)
        for step in range(25):
            w.log_step(step, kl=0.01 * step, **({{"late": 1.0}} if step == 15 else {{}}))
        os._exit(1)
    """)
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "steps.parquet").exists()
    assert len(list((tmp_path / "steps.parquet.parts").glob("part-*.parquet"))) == 2
    from forensics import scan_path

    analysis = scan_path(tmp_path)  # the run folder scans: the parts are one stream
    assert analysis.steps["rows"] == 20 and analysis.inputs[0].format == "parquet-parts"
    frame = analysis.metrics_frame()
    assert frame["step"].tolist() == list(range(20))
    assert frame["late"][15] == 1.0
    # resuming carries on and close() merges everything into one file
    with RunWriter(tmp_path, format="parquet", resume=True, timestamp=False) as w:
        w.log_step(20, kl=0.2)
    assert not (tmp_path / "steps.parquet.parts").exists()
    steps = pq.read_table(tmp_path / "steps.parquet").column("step").to_pylist()
    assert steps == list(range(21))

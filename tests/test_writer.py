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


# --------------------------------------------------------------------------- the device path
# Every tensor value goes through the same gather, copy and decode whatever its device; the
# tests below run it on CPU tensors, with CUDA's asynchronous copy and event emulated where the
# CUDA path differs (``copies_async`` and ``record_event`` in forensics.trainer.device_values).


def test_mixed_dtypes_stay_exact(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    big = 2**60 + 1  # beyond float64's 2**53: exact only if int64 never passes through a float
    with RunWriter(tmp_path, timestamp=False) as w:
        w.log_step(0, {"f64": torch.tensor(0.1, dtype=torch.float64),
                       "f32": torch.tensor(0.1, dtype=torch.float32),
                       "bf16": torch.tensor(0.1, dtype=torch.bfloat16),
                       "f16": torch.tensor(0.1, dtype=torch.float16),
                       "i64": torch.tensor(big), "i32": torch.tensor(-7, dtype=torch.int32),
                       "u8": torch.tensor(255, dtype=torch.uint8), "flag": torch.tensor(True),
                       "lr": 3e-4, "name": "x"})
        w.log_samples(0, {"length": torch.tensor([big, 3]),
                          "reward": torch.tensor([0.25, -1.5], dtype=torch.bfloat16),
                          "truncated": torch.tensor([True, False]),
                          "completion": torch.tensor([[big, 1], [2, 3]])})
    row = _lines(tmp_path / "steps.jsonl")[0]
    assert row == {"step": 0, "f64": 0.1, "f32": 0.1, "bf16": 0.100097656, "f16": 0.099975586,
                   "i64": big, "i32": -7, "u8": 255, "flag": 1, "lr": 3e-4, "name": "x"}
    assert list(row) == ["step", "f64", "f32", "bf16", "f16", "i64", "i32", "u8", "flag", "lr",
                         "name"]  # logging order, tensors and host values alike
    # the narrow floats are their own float32 values, written shortest
    assert np.float32(row["bf16"]) == torch.tensor(0.1, dtype=torch.bfloat16).float().item()
    assert np.float32(row["f16"]) == np.float32(np.float16(0.1))
    samples = _lines(tmp_path / "samples.jsonl")
    assert samples == [
        {"step": 0, "length": big, "reward": 0.25, "truncated": 1, "completion": f"[{big}, 1]"},
        {"step": 0, "length": 3, "reward": -1.5, "truncated": 0, "completion": "[2, 3]"}]


def test_in_place_updates_after_logging_do_not_change_logged_values(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    stats = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    count = torch.tensor(10)
    lengths = torch.tensor([4, 5])
    rewards = torch.tensor([0.5, 0.75])
    with RunWriter(tmp_path, flush_every=100, timestamp=False) as w:
        for step in range(3):
            # views of a larger tensor, an int64 counter and float32 columns, all updated in
            # place after they were logged
            w.log_step(step, {"mean": stats[0], "max": stats[2], "n": count})
            w.log_samples(step, {"length": lengths, "reward": rewards})
            stats.add_(1.0)
            count += 5
            lengths.mul_(2)
            rewards.zero_()
    rows = _lines(tmp_path / "steps.jsonl")
    assert [(r["mean"], r["max"], r["n"]) for r in rows] == [(1.0, 3.0, 10), (2.0, 4.0, 15),
                                                            (3.0, 5.0, 20)]
    samples = _lines(tmp_path / "samples.jsonl")
    assert [s["length"] for s in samples] == [4, 5, 8, 10, 16, 20]
    assert [s["reward"] for s in samples] == [0.5, 0.75, 0.0, 0.0, 0.0, 0.0]


def test_tensors_that_require_grad_are_logged_without_touching_autograd(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    w_param = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    loss = (w_param ** 2).sum()
    with RunWriter(tmp_path, timestamp=False) as w:
        w.log_step(0, {"loss": loss, "norm": w_param.norm(), "param0": w_param[0]})
        assert torch.is_grad_enabled()
    loss.backward()  # the graph is intact: logging neither consumed nor extended it
    assert w_param.grad is not None and w_param.grad.tolist() == [6.0, 8.0]
    assert _lines(tmp_path / "steps.jsonl")[0] == {"step": 0, "loss": 25.0, "norm": 5.0,
                                                    "param0": 3.0}


def test_scalar_shapes_and_bad_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with RunWriter(tmp_path, timestamp=False) as w:
        # 1-element tensors of any shape are scalars, also behind a 0-d first value
        w.log_step(0, {"a": torch.tensor(1.5), "b": torch.tensor([2.5]),
                       "c": torch.tensor([[3.5]]), "step": torch.tensor(99)})
        w.log_step(1, b=torch.tensor([2.5]), a=torch.tensor(1.5))
        with pytest.raises(UsageError, match="'v' must be a scalar"):
            w.log_step(2, {"u": torch.tensor(1.0), "v": torch.tensor([1.0, 2.0])})
        with pytest.raises(UsageError, match="complex"):
            w.log_step(2, z=torch.tensor(1 + 2j))
        with pytest.raises(UsageError, match="must be 1-D"):
            w.log_samples(2, {"reward": torch.ones(2, 2)})
        if hasattr(torch, "float8_e4m3fn"):  # a dtype the buffer does not carry: widened
            w.log_step(3, q=torch.tensor(0.5).to(torch.float8_e4m3fn))
    rows = _lines(tmp_path / "steps.jsonl")
    assert rows[0] == {"step": 0, "a": 1.5, "b": 2.5, "c": 3.5}  # a "step" metric is no metric
    assert rows[1] == {"step": 1, "b": 2.5, "a": 1.5}
    assert [r["step"] for r in rows] == [0, 1, 3][:len(rows)]


class _Dispatched:
    """Counts the aten operations that reach the dispatcher, views apart (they copy nothing)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = []  # type: list[str]

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                if not func.is_view:
                    ops.append(func.__name__)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self) -> list[str]:
        self.ops.clear()
        self.mode.__enter__()
        return self.ops

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)


@pytest.mark.parametrize("n_values", [1, 4, 24, 96])
def test_one_gather_per_device_and_step_whatever_the_number_of_values(
        tmp_path: Path, n_values: int) -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(n_values)
    steps = [{f"m{i}": v for i, v in enumerate(torch.rand(n_values, generator=gen).unbind())}
             for _ in range(6)]
    counter = _Dispatched()
    w = RunWriter(tmp_path, flush_every=1000, timestamp=False, register_atexit=False)
    for step in range(6):
        with counter as ops:
            w.log_step(step, steps[step], lr=1e-3)
        assert ops == ["stack.default"], ops
    # mixed dtypes: one gather per dtype, still none per value
    mixed = {f"m{i}": v.to([torch.float32, torch.float64, torch.int64][i % 3])
             for i, v in enumerate(torch.rand(3 * n_values, generator=gen).unbind())}
    with counter as ops:
        w.log_step(6, mixed)
    assert ops == ["stack.default"] * min(3, len(mixed)), ops
    columns = {"length": torch.arange(n_values), "group": torch.arange(n_values),
               "reward": torch.rand(n_values, generator=gen), "prompt": "p"}
    with counter as ops:
        w.log_samples(6, columns)
    assert ops == ["cat.default", "cat.default"], ops  # int64 columns, float32 columns
    with counter as ops:  # the flush: one region per dtype in one buffer, read at once (CPU)
        w.flush()
    assert sorted(ops) == ["cat.out", "cat.out", "cat.out", "empty.memory_format"], ops
    w.close()
    rows = _lines(tmp_path / "steps.jsonl")
    assert [np.float32(rows[s][f"m{i}"]) for s in range(6) for i in range(n_values)] == [
        v.item() for s in range(6) for v in steps[s].values()]


def test_one_batched_kernel_per_gather_no_copy_per_value(tmp_path: Path) -> None:
    """The profiler sees the kernels under each gather: a batched cat, never a copy a value.

    ``torch.cat`` falls back to one copy per input when dtypes differ (on CUDA as on the CPU),
    which is why the writer gathers per dtype; this checks that no such fallback happens.
    """
    torch = pytest.importorskip("torch")
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    values = {f"m{i}": torch.tensor(float(i)).to([torch.float32, torch.float64][i % 2])
              for i in range(40)}
    with RunWriter(tmp_path, flush_every=1000, timestamp=False) as w:
        w.log_step(0, values)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            w.log_step(1, values)
    ops = Counter(e.name for e in prof.events())
    assert ops["aten::cat"] == 2 and ops["aten::copy_"] == 0, ops
    # the fallback this avoids: one mixed-dtype cat copies input by input
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.stack(list(values.values()))
    # (a copy for each of the 20 float32 inputs: the float64 ones match the result's dtype)
    assert Counter(e.name for e in prof.events())["aten::copy_"] == 20


class _FakeEvent:
    """Stands for a ``torch.cuda.Event`` recorded behind a copy: completes when told to."""

    def __init__(self, log: list[str]) -> None:
        self.done = False
        self.log = log

    def query(self) -> bool:
        self.log.append("query")
        return self.done

    def synchronize(self) -> None:
        self.log.append("synchronize")
        self.done = True


@pytest.fixture
def async_device(monkeypatch: pytest.MonkeyPatch) -> list[_FakeEvent]:
    """Run the CUDA transfer path on the CPU: a non-blocking copy and an event per chunk."""
    pytest.importorskip("torch")
    from forensics.trainer import device_values

    events: list[_FakeEvent] = []
    log: list[str] = []

    def record_event(device: object) -> _FakeEvent:
        events.append(_FakeEvent(log))
        return events[-1]

    monkeypatch.setattr(device_values, "copies_async", lambda device: True)
    monkeypatch.setattr(device_values, "record_event", record_event)
    return events


def test_async_copy_is_written_once_it_lands_without_waiting(
        tmp_path: Path, async_device: list[_FakeEvent], sync_counter: dict[str, int]) -> None:
    torch = pytest.importorskip("torch")
    counter = _Dispatched()
    w = RunWriter(tmp_path, flush_every=4, timestamp=False, register_atexit=False)
    acc = torch.zeros(())
    for step in range(4):
        acc += 1.0
        if step == 3:
            with counter as ops:  # the flush: a region per dtype, then one copy to the host
                w.log_step(step, loss=acc, n=torch.tensor(step))
            assert sorted(ops) == ["cat.out", "cat.out", "copy_.default", "empty.memory_format",
                                   "empty.memory_format", "stack.default", "stack.default"], ops
        else:
            w.log_step(step, loss=acc, n=torch.tensor(step))
    assert w.flushes == 1 and len(async_device) == 1
    # handed off, not landed: nothing written, nothing read, nothing waited for
    assert (tmp_path / "steps.jsonl").read_text() == ""
    assert sum(sync_counter.values()) == 0
    assert "synchronize" not in async_device[0].log
    w.log_step(4, loss=acc, n=torch.tensor(4))
    assert (tmp_path / "steps.jsonl").read_text() == ""  # still in flight
    async_device[0].done = True  # the copy lands
    w.log_step(5, loss=acc, n=torch.tensor(5))  # the next call writes it
    assert [r["step"] for r in _lines(tmp_path / "steps.jsonl")] == [0, 1, 2, 3]
    assert sync_counter["tolist"] == 1 and sum(sync_counter.values()) == 1
    assert "synchronize" in async_device[0].log  # a completed event is waited on at no cost
    w.close()  # close waits for the last copy
    rows = _lines(tmp_path / "steps.jsonl")
    assert [(r["step"], r["loss"], r["n"]) for r in rows] == [
        (0, 1.0, 0), (1, 2.0, 1), (2, 3.0, 2), (3, 4.0, 3), (4, 4.0, 4), (5, 4.0, 5)]
    assert all(e.done for e in async_device)


def test_copies_in_flight_are_bounded(tmp_path: Path, async_device: list[_FakeEvent]) -> None:
    torch = pytest.importorskip("torch")
    from forensics.trainer import writer as writer_module

    w = RunWriter(tmp_path, flush_every=1, timestamp=False, register_atexit=False)
    limit = writer_module._MAX_IN_FLIGHT
    for step in range(limit + 3):
        w.log_step(step, kl=torch.tensor(0.5))
        # the device never reports completion: past the limit the oldest copy is waited for
        assert len(w._in_flight) <= limit
    written = len(_lines(tmp_path / "steps.jsonl"))
    assert written == limit + 3 - len(w._in_flight) and written >= 3
    w.close()
    assert len(_lines(tmp_path / "steps.jsonl")) == limit + 3


def test_async_flush_and_public_flush_write_samples_too(
        tmp_path: Path, async_device: list[_FakeEvent]) -> None:
    torch = pytest.importorskip("torch")
    w = RunWriter(tmp_path, flush_every=100, timestamp=False, register_atexit=False,
                  detokenize=lambda ids: "".join(chr(97 + i) for i in ids))
    w.log_step(0, kl=torch.tensor(0.25))
    w.log_samples(0, {"length": torch.tensor([2, 3]), "completion": torch.tensor([[0, 1], [2, 3]]),
                      "reward": torch.tensor(1.0)})
    w.flush()  # the public flush waits: everything is on disk when it returns
    assert _lines(tmp_path / "steps.jsonl") == [{"step": 0, "kl": 0.25}]
    assert _lines(tmp_path / "samples.jsonl") == [
        {"step": 0, "length": 2, "completion": "ab", "reward": 1.0},
        {"step": 0, "length": 3, "completion": "cd", "reward": 1.0}]
    w.close()


def test_many_values_in_one_flush_keep_their_places(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    n_steps, n_values = 300, 40  # 12,000 float64 values, and int64 and float32 between them
    values = torch.arange(n_steps * n_values, dtype=torch.float64).reshape(n_steps, n_values)
    with RunWriter(tmp_path, flush_every=n_steps, timestamp=False) as w:
        for step in range(n_steps):
            w.log_step(step, {f"m{i}": v for i, v in enumerate(values[step].unbind())})
            w.log_step(step, n=torch.tensor(step), f=torch.tensor(step / 4))
            w.log_samples(step, {"length": torch.tensor([step, 2 * step])})
    rows = _lines(tmp_path / "steps.jsonl")
    assert [rows[2 * s][f"m{i}"] for s in range(n_steps) for i in range(n_values)] == [
        float(x) for x in range(n_steps * n_values)]
    assert [(r["n"], r["f"]) for r in rows[1::2]] == [(s, s / 4) for s in range(n_steps)]
    assert [r["length"] for r in _lines(tmp_path / "samples.jsonl")] == [
        x for s in range(n_steps) for x in (s, 2 * s)]


def test_tensor_values_round_trip_through_parquet(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with RunWriter(tmp_path, format="parquet", flush_every=2, timestamp=False) as w:
        for step in range(5):
            w.log_step(step, kl=torch.tensor(0.1 * step), n=torch.tensor(step * 10))
            w.log_samples(step, {"length": torch.tensor([step, step + 1]),
                                 "reward": torch.tensor([0.5, 1.5])})
    table = pq.read_table(tmp_path / "steps.parquet")
    assert table.column("kl").to_pylist() == [0.0, 0.1, 0.2, 0.3, 0.4]  # float32, shortest
    assert table.column("n").to_pylist() == [0.0, 10.0, 20.0, 30.0, 40.0]
    samples = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    assert len(samples) == 10 and samples[3] == {"step": 1, "length": 2.0, "reward": 1.5}


def test_shortest_float32_matches_numpy_and_round_trips() -> None:
    from forensics.trainer.device_values import shortest_float32

    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.random(20000).astype(np.float32) * 10,
        rng.standard_normal(20000).astype(np.float32),
        (10.0 ** rng.uniform(-45, 38.5, 40000)).astype(np.float32),  # every exponent
        (rng.integers(-10**6, 10**6, 5000) / 100).astype(np.float32),  # short decimals
        np.array([0.0, -0.0, 0.1, 0.5, 1.0, 1e-45, 1.17549435e-38, 3.4028235e38, 1e22, 1e23,
                  1e-22, 1e-23, 16777216.0, 123456790.0, np.inf, -np.inf, np.nan],
                 dtype=np.float32),
    ])
    got = shortest_float32(values)
    assert np.array_equal(np.asarray(got, dtype=np.float32), values, equal_nan=True)
    # numpy prints a float32 with its shortest round-tripping decimal (Dragon4): the same one
    expected = [float(str(v)) for v in values]
    assert [g for g, e in zip(got, expected, strict=True) if g != e
            and not (math.isnan(g) and math.isnan(e))] == []


def test_keywords_win_over_the_mapping_for_tensors_too(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with RunWriter(tmp_path, timestamp=False) as w:
        w.log_step(0, {"a": torch.tensor(1.0), "b": 2.0}, a=0.5, b=torch.tensor(3))
        w.log_step(1, {"a": 1.0}, a=torch.tensor(0.25))
    assert _lines(tmp_path / "steps.jsonl") == [{"step": 0, "a": 0.5, "b": 3},
                                                {"step": 1, "a": 0.25}]

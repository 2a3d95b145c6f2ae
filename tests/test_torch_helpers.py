"""Torch helpers against numpy/scipy/torch references, and their promise of no host syncs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import scipy.stats

torch = pytest.importorskip("torch")

from forensics.trainer.torch_helpers import (  # noqa: E402 - after the importorskip
    PhaseTimer,
    advantage_stats,
    grad_norms,
    memory_stats,
    mfu,
    response_rows,
    throughput,
)

_SYNC_METHODS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__",
                 "__index__")


@contextlib.contextmanager
def no_sync() -> Iterator[None]:
    """Fail on any Tensor method that would move data to the host (a sync on CUDA)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in _SYNC_METHODS:
            def boom(self, *args, __name=name, **kwargs):  # type: ignore[no-untyped-def]
                raise AssertionError(f"host sync: Tensor.{__name}")

            mp.setattr(torch.Tensor, name, boom)
        yield


def _model(seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    trunk = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    value = torch.nn.Linear(3, 1)
    x = torch.randn(11, 5)
    h = trunk(x)
    (h.square().sum() * 3 + value(h).sum()).backward()
    return trunk, value


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_norm", [None, 0.5, 1e6])
def test_grad_norms_match_clip_grad_norm(seed: int, max_norm: float | None) -> None:
    trunk, value = _model(seed)
    ref_trunk, ref_value = _model(seed)
    out = grad_norms({"policy": trunk.parameters(), "value": value.parameters()}, max_norm)
    big = 1e30 if max_norm is None else max_norm
    ref_pre = torch.nn.utils.clip_grad_norm_(ref_trunk.parameters(), big)
    ref_val = torch.nn.utils.clip_grad_norm_(ref_value.parameters(), big)
    assert float(out["grad_norm"]) == pytest.approx(float(ref_pre), rel=1e-6)
    assert float(out["grad_norm_value"]) == pytest.approx(float(ref_val), rel=1e-6)
    expected_post = min(float(ref_pre), big) if max_norm else float(ref_pre)
    assert float(out["grad_norm_clipped"]) == pytest.approx(expected_post, rel=1e-5)
    for p, q in zip([*trunk.parameters(), *value.parameters()],
                    [*ref_trunk.parameters(), *ref_value.parameters()], strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_grad_norms_is_one_fused_call_without_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    trunk, value = _model(0)
    calls = []
    original = torch._foreach_norm

    def counting(tensors, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(tensors))
        return original(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", counting)
    with no_sync():
        out = grad_norms({"policy": trunk.parameters(), "value": value.parameters()}, 1.0)
    assert calls == [6]  # 4 trunk tensors + 2 value tensors in a single call
    assert set(out) == {"grad_norm", "grad_norm_clipped", "grad_norm_value",
                        "grad_norm_value_clipped"}


def test_grad_norms_nonfinite_gradient_is_reported() -> None:
    w = torch.nn.Parameter(torch.zeros(3))
    w.grad = torch.tensor([1.0, float("nan"), 2.0])
    out = grad_norms({"policy": [w]}, 1.0)
    assert torch.isnan(out["grad_norm"]) and torch.isnan(out["grad_norm_clipped"])


@pytest.mark.parametrize("seed", range(6))
def test_advantage_stats_match_numpy_and_scipy(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    shape = (int(torch.randint(3, 40, (1,), generator=gen)), 9)
    adv = torch.randn(shape, generator=gen, dtype=torch.float64).exp() - 1.3  # skewed
    mask = torch.rand(shape, generator=gen) < 0.7
    mask[0, :2] = True
    adv[~mask] = float("nan")  # padding may hold garbage; it must not leak into the stats
    got = {k: float(v) for k, v in advantage_stats(adv, mask).items()}
    x = adv[mask].numpy()
    assert got["advantage_mean"] == pytest.approx(x.mean(), rel=1e-9, abs=1e-12)
    assert got["advantage_std"] == pytest.approx(x.std(ddof=1), rel=1e-9)
    assert got["advantage_skew"] == pytest.approx(scipy.stats.skew(x), rel=1e-7, abs=1e-10)
    assert got["advantage_kurtosis"] == pytest.approx(scipy.stats.kurtosis(x), rel=1e-7,
                                                      abs=1e-10)
    assert got["advantage_min"] == x.min() and got["advantage_max"] == x.max()
    assert got["advantage_p01"] == pytest.approx(np.percentile(x, 1), rel=1e-9, abs=1e-12)
    assert got["advantage_p99"] == pytest.approx(np.percentile(x, 99), rel=1e-9, abs=1e-12)


def test_advantage_stats_unmasked_float32_and_no_sync() -> None:
    adv = torch.linspace(-2.0, 3.0, 101)
    with no_sync():
        stats = advantage_stats(adv, prefix="adv_")
        stats_masked = advantage_stats(adv, adv > 0)
    assert float(stats_masked["advantage_min"]) > 0
    assert set(stats) == {f"adv_{k}" for k in ("mean", "std", "skew", "kurtosis", "min", "max",
                                               "p01", "p99")}
    assert all(v.dim() == 0 for v in stats.values())


def test_advantage_stats_unmasked_values() -> None:
    x = np.random.default_rng(3).standard_t(4, size=500)
    got = advantage_stats(torch.from_numpy(x))
    assert float(got["advantage_kurtosis"]) == pytest.approx(scipy.stats.kurtosis(x), rel=1e-9)
    assert float(got["advantage_p01"]) == pytest.approx(np.percentile(x, 1), rel=1e-9)


def test_response_rows_subsamples_on_device() -> None:
    lengths = torch.tensor([3, 8, 5, 8])
    rewards = torch.tensor([0.1, 0.2, 0.3, 0.4])
    with no_sync():
        cols = response_rows(lengths, rewards, {"correctness": rewards * 2},
                             advantages=rewards - 0.25, groups=torch.tensor([0, 0, 1, 1]),
                             max_length=8, completions=torch.zeros(4, 8, dtype=torch.long),
                             index=torch.tensor([1, 2]))
    assert set(cols) == {"length", "reward", "reward/correctness", "advantage", "group",
                         "truncated", "completion"}
    assert cols["completion"].shape == (2, 8)
    torch.testing.assert_close(cols["truncated"], torch.tensor([True, False]), check_dtype=True)


def test_response_rows_with_text_lists() -> None:
    cols = response_rows(torch.tensor([1, 2, 3]), torch.tensor([0.0, 1.0, 2.0]),
                         prompts=["a", "b", "c"], completions=["x", "y", "z"],
                         index=torch.tensor([2, 0]))
    assert cols["prompt"] == ["c", "a"] and cols["completion"] == ["z", "x"]


def test_mfu_and_throughput() -> None:
    # 6 * N * tokens/s / peak for training; 2 * N for generation
    assert mfu(2000.0, 1e9, 1e15) == pytest.approx(6 * 1e9 * 2000 / 1e15)
    assert mfu(2000.0, 1e9, 1e15, training=False) == pytest.approx(2 * 1e9 * 2000 / 1e15)
    t = throughput(torch.tensor(300.0), 1.5)
    assert isinstance(t, torch.Tensor) and float(t) == pytest.approx(200.0)
    assert np.isnan(throughput(10, 0.0))


def test_phase_timer_and_memory_stats() -> None:
    timer = PhaseTimer("cpu")
    with timer.phase("generation"):
        torch.randn(64, 64) @ torch.randn(64, 64)
    with timer.phase("training"):
        pass
    secs = timer.seconds()
    assert set(secs) == {"generation", "training"} and all(v >= 0 for v in secs.values())
    timer.reset()
    assert timer.seconds() == {}
    mem = memory_stats("cpu")
    assert mem["ram_gb"] > 0.0 and "gpu_mem_allocated_gb" not in mem

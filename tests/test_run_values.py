"""RunValues: run-long order statistics in bounded memory, equal to numpy's at any length."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from forensics.analysis.stats.run_values import RunValues
from forensics.analysis.stats.trailing import trend_spearman

QS = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0]


def _series(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=n) * 10.0 ** rng.integers(-5, 5)
    if kind == "ties":
        return np.round(x)
    if kind == "constant":
        return np.full(n, 3.25)
    if kind == "gaps":
        return np.where(rng.random(n) < 0.3, np.nan, x)
    if kind == "extremes":
        return np.concatenate([x, [-0.0, 0.0, 1e300, -1e300, 5e-324, np.inf]])
    return x


def _fill(x: np.ndarray, memory: int, rng: np.random.Generator, ends: int = 7) -> RunValues:
    rv = RunValues(memory=memory, ends=ends)
    i = 0
    while i < len(x):
        j = i + int(rng.integers(1, 400))
        rv.extend(x[i:j])
        i = j
    return rv


@pytest.mark.parametrize("kind", ["normal", "ties", "constant", "gaps", "extremes"])
@pytest.mark.parametrize("seed", range(4))
def test_spilled_statistics_equal_numpys(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _series(kind, int(rng.integers(1, 5000)), rng)
    rv = _fill(x, int(rng.integers(1, 300)), rng)
    f = x[np.isfinite(x)]
    assert len(rv) == len(f)
    assert rv.quantiles(QS) == np.percentile(f, [100 * q for q in QS]).tolist()
    assert (rv.min(), rv.max(), rv.fsum()) == (f.min(), f.max(), math.fsum(f))
    assert rv.head().tolist() == f[:7].tolist() and rv.tail().tolist() == f[-7:].tolist()
    if kind != "extremes":  # (1e300 squared overflows either way)
        assert math.isclose(rv.mean(), float(np.mean(f)), rel_tol=1e-12)
        if len(f) > 1:
            assert math.isclose(rv.std(1), float(np.std(f, ddof=1)), rel_tol=1e-9)


def test_held_values_give_numpys_own_results() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=3000)
    rv = _fill(x, 10_000, rng)
    assert rv.spilled == 0 and rv.file is None
    assert rv.quantiles([0.5, 0.99]) == np.percentile(x, [50, 99]).tolist()
    assert (rv.mean(), rv.std(1)) == (float(np.mean(x)), float(np.std(x, ddof=1)))
    assert rv.trend_spearman() == (trend_spearman(x), 3000)


def test_memory_is_bounded_and_the_spearman_sample_is_stated() -> None:
    rng = np.random.default_rng(6)
    n = 100_000
    x = np.arange(n) / n + rng.normal(0, 0.3, n)  # a rising series
    rv = _fill(x, 4096, rng, ends=0)
    assert rv.held <= 4096 + 400 and rv.spilled >= n - 4096 - 400
    rho, used = rv.trend_spearman()
    assert used <= 4096 and abs(rho - trend_spearman(x)) < 0.05


def test_a_copy_shares_the_file_and_reads_its_own_values() -> None:
    """A live peek (deepcopy) finishes on what it saw; the original goes on appending."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=2000)
    rv = _fill(x[:1500], 100, rng)
    peek = copy.deepcopy(rv)
    rv.extend(x[1500:])
    assert peek.quantiles([0.5]) == [float(np.median(x[:1500]))]
    assert rv.quantiles([0.5]) == [float(np.median(x))]


def test_every_quantile_is_selected_in_the_passes_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Radix selection follows all the wanted ranks at once: seven quantiles (fourteen ranks)
    read the spilled file as often as a median does, and give numpy's values."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=20_000)
    passes = 0
    chunks = RunValues.chunks

    def counted(self: RunValues):  # type: ignore[no-untyped-def]
        nonlocal passes
        passes += 1
        return chunks(self)

    monkeypatch.setattr(RunValues, "chunks", counted)
    one = _fill(x, 500, rng)
    assert one.quantiles([0.5]) == [float(np.percentile(x, 50))]
    median_passes, passes = passes, 0
    assert one.quantiles(QS) == np.percentile(x, [100 * q for q in QS]).tolist()
    assert passes == median_passes >= 2


@pytest.mark.parametrize("seed", range(3))
def test_the_exact_sum_is_fsums_value_however_the_values_are_cut(seed: int) -> None:
    """``exact_sum`` (RunValues.fsum) is the correctly rounded exact sum, as ``math.fsum``: on
    values spanning the whole float range, subnormals, cancelling pairs and zeros of both signs."""
    from fractions import Fraction

    from forensics.analysis.stats.run_values import exact_sum

    rng = np.random.default_rng(seed)
    for trial in range(400):
        n = int(rng.integers(0, 80))
        exps = rng.integers(-1074, 960, size=n) if trial % 2 else rng.integers(-30, 30, size=n)  # no overflow
        x = rng.choice([-1.0, 1.0], size=n) * rng.integers(1, 2**53, size=n).astype(float) * 2.0 ** exps
        if trial % 3 == 0:
            x = np.concatenate([x, -x[: n // 2], [-0.0, 0.0, 5e-324]])
        cuts = np.sort(rng.integers(0, len(x) + 1, size=3))
        parts = np.split(x, cuts)
        assert exact_sum(parts) == math.fsum(x.tolist())
    # where math.fsum gives up on an intermediate overflow, the exact sum still holds
    assert exact_sum([np.array([1e308, 1e308, -1e308, 5e-324])]) == 1e308
    assert exact_sum([np.array([1.7976931348623157e308] * 2)]) == math.inf
    assert exact_sum([np.array([-1.7976931348623157e308] * 2)]) == -math.inf
    assert float(sum(map(Fraction, [0.1] * 7))) == exact_sum([np.array([0.1] * 7)]) == math.fsum([0.1] * 7)

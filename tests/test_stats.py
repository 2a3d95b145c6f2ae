"""Oracle tests: every statistic against pandas/scipy/numpy on seeded random data."""

from __future__ import annotations

from contextlib import nullcontext
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from forensics.analysis.stats.episodes import Episodes
from forensics.analysis.stats.grouping import StepGrouper
from forensics.analysis.stats.trailing import (
    BlockStats,
    History,
    block_median_mad,
    pearson,
    persist,
    rankdata,
    spearman,
    trailing_median,
    trend_spearman,
    window_median,
)

RNG = np.random.default_rng(42)


def _with_nans(n: int) -> np.ndarray:
    x = RNG.normal(size=n)
    x[RNG.random(n) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("window,min_count", [(5, 1), (10, 3), (50, 20)])
def test_window_median_matches_pandas(window: int, min_count: int) -> None:
    x = _with_nans(500)
    ref = pd.Series(x).rolling(window, min_periods=min_count).median().to_numpy()
    np.testing.assert_allclose(window_median(x, window, min_count), ref, equal_nan=True)


def test_trailing_median_excludes_current_point() -> None:
    x = _with_nans(300)
    ref = pd.Series(x).rolling(20, min_periods=5).median().shift(1).to_numpy()
    np.testing.assert_allclose(trailing_median(x, 20, 5), ref, equal_nan=True)


def test_block_stats_against_direct_computation() -> None:
    x = _with_nans(1000)
    bs = BlockStats(window=100, block=10, min_blocks=2)
    med, sigma = bs.update(x, 0)
    blocks = x.reshape(-1, 10)
    bmed = np.nanmedian(blocks, axis=1)
    bmad = np.nanmedian(np.abs(blocks - bmed[:, None]), axis=1)
    for i in (25, 99, 100, 555, 999):
        b = i // 10
        prev = slice(max(b - 10, 0), b)
        assert med[i] == pytest.approx(np.median(bmed[prev]))
        assert sigma[i] == pytest.approx(np.median(bmad[prev]) / 0.6745)
    assert np.isnan(med[:20]).all()  # fewer than two complete blocks before


@pytest.mark.parametrize("width", [1, 2, 5, 10, 11])
def test_block_median_mad_of_complete_and_gappy_blocks(width: int) -> None:
    """Blocks of finite values (the column-wise path) and blocks with NaN in some rows (the
    row-by-row path) give numpy's NaN-ignoring median and MAD, row by row."""
    whole = RNG.normal(size=(40, width)) * 3.0
    gappy = whole.copy()
    gappy[RNG.random(gappy.shape) < 0.2] = np.nan
    gappy[0] = np.nan  # a row without a value: NaN
    for m in (whole, np.round(whole), gappy):
        med, mad = block_median_mad(m)
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if np.isnan(m).all(axis=1).any() \
                else nullcontext():
            ref = np.nanmedian(m, axis=1)
            ref_mad = np.nanmedian(np.abs(m - ref[:, None]), axis=1)
        np.testing.assert_allclose(med, ref, rtol=0, atol=0, equal_nan=True)
        np.testing.assert_allclose(mad, ref_mad, rtol=0, atol=1e-15, equal_nan=True)


def test_block_stats_batch_invariant() -> None:
    x = _with_nans(777)
    whole = BlockStats(60, 7).update(x, 0)
    bs = BlockStats(60, 7)
    parts = [bs.update(x[a:b], a) for a, b in [(0, 3), (3, 100), (100, 101), (101, 777)]]
    for k in range(2):
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])


def test_correlations_match_scipy() -> None:
    x, y = RNG.normal(size=200), RNG.normal(size=200)
    y = y + 0.5 * x
    assert spearman(x, y) == pytest.approx(sps.spearmanr(x, y).statistic)
    assert pearson(x, y) == pytest.approx(sps.pearsonr(x, y).statistic)
    assert np.isnan(pearson(np.ones(10), y[:10]))
    # with ties (rounded values) and NaN: ranks shared, NaN rows left out
    z = np.round(y + np.linspace(0, 3, 200), 1)
    z[[5, 50]] = np.nan
    ok = np.isfinite(z)
    assert trend_spearman(z) == pytest.approx(sps.spearmanr(np.arange(200)[ok], z[ok]).statistic, rel=1e-12)
    np.testing.assert_array_equal(rankdata(z[ok]), sps.rankdata(z[ok]))


def test_persist_matches_loop() -> None:
    c = RNG.random(300) < 0.4
    ref = [sum(c[max(0, i - 7) : i + 1]) >= 5 for i in range(300)]
    assert persist(c, 5, 8).tolist() == ref


def test_history_keeps_tail() -> None:
    h = History(4)
    for chunk in np.array_split(np.arange(10.0), 4):
        h.extend(chunk)
    assert h.values.tolist() == [6.0, 7.0, 8.0, 9.0]


def test_episodes_split_merge_and_batching() -> None:
    cond = RNG.random(500) < 0.05
    cond[100:130] = True
    vals = RNG.normal(size=500)

    def run(cuts: list[int]):
        ep = Episodes(k=3, m=5, gap=10)
        bounds = [0, *cuts, 500]
        for a, b in pairwise(bounds):
            ep.update(np.arange(a, b), np.arange(a, b) * 2, cond[a:b], vals[a:b])
        return [(e.onset_step, e.first_step, e.last_step, e.n_rows, e.peak) for e in ep.finish()]

    whole = run([])
    assert any(e[0] <= 200 <= e[2] for e in whole)  # the burst at rows 100-130 (steps 200-260)
    assert run([1, 99, 101, 102, 250, 499]) == whole


def test_step_grouper_complete_steps_only() -> None:
    g = StepGrouper()
    out = list(g.push(np.array([0, 0, 1]), {"x": np.array([1.0, 2.0, 3.0])}))
    out += list(g.push(np.array([1, 1, 2]), {"x": np.array([4.0, 5.0, 6.0])}))
    out += list(g.flush())
    groups = [(int(s), d["x"].tolist()) for steps, gs in out for s, d in zip(steps, gs)]
    assert groups == [(0, [1.0, 2.0]), (1, [3.0, 4.0, 5.0]), (2, [6.0])]


@pytest.mark.parametrize("n,window,min_periods", [(10, 50, 25), (10, 50, 5), (300, 50, 10), (3, 3, 3)])
def test_window_median_matches_pandas_any_length(n: int, window: int, min_periods: int) -> None:
    x = _with_nans(n)
    ref = pd.Series(x).rolling(window, min_periods=min_periods).median().to_numpy()
    np.testing.assert_array_equal(window_median(x, window, min_periods), ref)


def test_trailing_run_median_refreshes_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """The histogram pass of a refresh happens after each of the first 64 blocks, then once per
    1/64 growth: about 64 + 64 ln(blocks / 64) times (a 10M-row scan paid it once per 20-row
    block before: 500,000 passes per series), the same whatever the batches."""
    from forensics.analysis.stats import trailing as stats

    calls = {"n": 0}
    median = stats.RunMedian.median

    def counted(self: stats.RunMedian) -> float:
        calls["n"] += 1
        return median(self)

    monkeypatch.setattr(stats.RunMedian, "median", counted)
    rng = np.random.default_rng(3)
    x = rng.random(400_000)
    tm = stats.TrailingRunMedian(block=20, lag=100)
    out = np.concatenate([tm.update(np.arange(i, min(i + 65536, len(x))), x[i:i + 65536])
                          for i in range(0, len(x), 65536)])
    blocks = len(x) // 20
    assert calls["n"] <= 64 + 64 * np.log(blocks / 64) + 64, calls["n"]
    assert abs(out[-1] - 0.5) < 0.01  # still the run's median

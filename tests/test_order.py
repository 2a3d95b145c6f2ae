"""``stats.order`` gives numpy's median and percentiles to the bit (it exists so that a scan does not
import ``numpy.ma``, which ``np.median`` and ``np.percentile`` load on their first call)."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from forensics.analysis.stats.order import distinct, median, percentile, percentiles, quantiles


def _bits(x: float) -> bytes:
    return struct.pack("<d", float(x))


def _same(ours: float, theirs: float) -> bool:
    """The same float: the same bits, or both NaN."""
    return (np.isnan(ours) and np.isnan(theirs)) or _bits(ours) == _bits(theirs)


def _arrays(seed: int):  # type: ignore[no-untyped-def]
    """Arrays of the kinds a scan takes medians of: small and large, ties, signed zeros, NaN,
    infinities, float32, integers and booleans, lists."""
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 4, 5, 7, 8, 10, 19, 20, 33, 64, 101, 1000, 4097):
        x = rng.normal(size=n) * 10.0 ** rng.integers(-8, 8)
        yield x
        yield np.round(x, 1)  # ties
        z = rng.choice(np.array([0.0, -0.0, 1.0, -1.0]), size=n)
        yield z  # signed zeros, where the element numpy finds decides the sign
        with_special = x.copy()
        k = rng.integers(0, n, size=max(1, n // 5))
        with_special[k] = rng.choice(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0]), size=len(k))
        yield with_special
        no_nan = np.where(np.isnan(with_special), 0.0, with_special)
        yield no_nan
        yield x.astype(np.float32)
        yield rng.integers(-50, 50, size=n)
        yield rng.integers(0, 2, size=n).astype(bool)
        yield x.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_the_median_is_numpys_to_the_bit(seed: int) -> None:
    for x in _arrays(seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = float(np.median(x))
        assert _same(median(x), theirs), (x, median(x), theirs)


@pytest.mark.parametrize("seed", range(6))
def test_percentiles_are_numpys_to_the_bit(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for x in _arrays(seed):
        if np.asarray(x).dtype == bool:
            continue  # numpy cannot subtract booleans in its interpolation, nor can we
        qs = [0, 100, 50, 90, 10, 25, 75, 99, 1, float(rng.uniform(0, 100))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = np.percentile(x, qs)
            for q in (90, 10, 37.5, 100, 0):
                assert _same(percentile(x, q), float(np.percentile(x, q))), (x, q)
            for fractions in ([0.25, 0.75], [0.5]):
                for ours, t in zip(quantiles(x, fractions), np.quantile(x, fractions), strict=True):
                    assert _same(ours, float(t))
            ours_all = percentiles(x, qs)
        for q, ours, t in zip(qs, ours_all, theirs.tolist(), strict=True):
            assert _same(ours, t), (x, q, ours, t)


def test_an_empty_input_is_nan_and_a_bad_percentile_an_error() -> None:
    assert np.isnan(median([])) and np.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], 101)


@pytest.mark.parametrize("seed", range(4))
def test_distinct_is_numpys_unique(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    for x in (rng.integers(0, 30, size=int(rng.integers(0, 200))), np.floor(rng.normal(size=50) * 3),
              np.array([], dtype=np.int64), np.array([2.0, np.nan, 1.0, np.nan])):
        ours, theirs = distinct(x), np.unique(x)
        assert ours.dtype == theirs.dtype
        assert np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")

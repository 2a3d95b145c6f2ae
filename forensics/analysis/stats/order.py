"""The median and percentiles of 1-D values, as numpy gives them, without ``numpy.ma``.

``np.median``, ``np.percentile`` and ``np.quantile`` import numpy's masked-array module on their
first call (to ask whether the input is masked, and through ``np.unique``): 13 ms of every
command's start, half of it ``inspect.signature`` reading numpy's docstrings. These functions
give the same floats, to the bit: the same ``np.partition`` with the same ``kth`` positions (so
the element numpy would find lands where it finds it, ``-0.0`` or ``0.0`` alike), the same mean of
the middle values, numpy's linear interpolation (7th of Hyndman and Fan, numpy's default) with its
two-sided form, NaN when a value is NaN. ``tests/test_order.py`` compares them with numpy's bits on
generated arrays; ``tests/test_small_scan.py`` checks that a scan does not load ``numpy.ma``.

>>> median([3.0, 1.0, 2.0, 10.0]), percentile([1.0, 2.0, 3.0, 4.0], 90)
(2.5, 3.7)
>>> percentiles(np.arange(11.0), [10, 90]), quantiles([1, 2, 3, 4], [0.25, 0.75])
([1.0, 9.0], [1.75, 3.25])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["distinct", "median", "percentile", "percentiles", "quantiles"]


def median(values: Any) -> float:
    """``float(np.median(values))`` of a 1-D sequence (NaN for an empty one, without numpy's
    warning)."""
    a = np.asarray(values)
    if a.dtype.kind not in "biuf":
        return float(np.median(a))
    a = a.ravel()
    n = a.size
    if n == 0:
        return math.nan
    half = n // 2
    kth = [half - 1, half] if n % 2 == 0 else [half]
    inexact = a.dtype.kind == "f"
    if inexact:  # NaN sorts last: numpy's check of the last position
        kth.append(-1)
    part = np.partition(a, kth)
    if inexact and math.isnan(part[-1]):
        return math.nan
    return float(np.mean(part[half - 1 : half + 1] if n % 2 == 0 else part[half : half + 1]))


def percentile(values: Any, q: float) -> float:
    """``float(np.percentile(values, q))`` of a 1-D sequence, ``q`` in percent."""
    return float(_quantiles(values, np.true_divide(q, 100), weak=type(q) in (int, float)))


def percentiles(values: Any, qs: Sequence[float]) -> list[float]:
    """``np.percentile(values, qs)`` as floats, ``qs`` in percent."""
    return [float(v) for v in _quantiles(values, np.true_divide(np.asarray(qs), 100), weak=False)]


def quantiles(values: Any, qs: Sequence[float]) -> list[float]:
    """``np.quantile(values, qs)`` as floats, ``qs`` in [0, 1]."""
    return [float(v) for v in _quantiles(values, np.asarray(qs), weak=False)]


def distinct(values: Any) -> np.ndarray:
    """``np.unique(values)`` (sorted, each value once) of values without NaN (with one: numpy's)."""
    s = np.sort(np.asarray(values).ravel())
    if s.dtype.kind == "f" and len(s) and math.isnan(s[-1]):
        return np.unique(s)  # numpy's rule for NaN (one of them kept)
    keep = np.empty(len(s), dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _quantiles(values: Any, q: np.ndarray, weak: bool) -> Any:
    """numpy's ``_quantile`` for a flat copy of ``values`` and the linear method."""
    if not bool(np.all((q >= 0) & (q <= 1))):
        raise ValueError("quantiles must be in [0, 1] (percentiles in [0, 100])")
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        return np.quantile(arr, q)
    arr = arr.flatten()
    n = arr.shape[0]
    if n == 0:
        return np.full(q.shape, math.nan)[()]
    virtual = np.asarray((n - 1) * q)
    prev = np.floor(virtual, out=np.empty_like(virtual))
    nxt = np.add(prev, 1, out=np.empty_like(prev))
    above = virtual >= n - 1  # the top: the largest value
    prev[above] = -1
    nxt[above] = -1
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    inexact = arr.dtype.kind == "f"
    # np.unique's sorted set of the positions, from Python's (np.unique loads numpy.ma)
    arr.partition(sorted({0, -1, *prev.ravel().tolist(), *nxt.ravel().tolist()}))
    nan = inexact and math.isnan(arr[-1])
    a, b = arr[prev], arr[nxt]
    gamma: Any = np.asarray(virtual - prev, dtype=virtual.dtype)
    gamma = float(gamma) if weak else gamma.reshape(virtual.shape)
    diff = b - a
    out = np.asarray(np.add(a, diff * gamma))
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe",
                dtype=type(out.dtype))
    if nan:
        out = np.full(out.shape, arr[-1], dtype=out.dtype)
    return out[()] if out.ndim == 0 else out

"""Mergeable moments of a series: count, mean, variance, lag-1 autocovariance and extremes.

A window of a training run is summarised by a few sums (:class:`Moments`) from which its mean,
variance, lag-1 autocorrelation and largest value follow. Two adjacent windows merge by adding
their sums (and the one pair of values that straddles the boundary), so a window table can
start with small windows and double their size as the run grows, with constant memory and
constant work per window.

Sums are taken around a *shift* ``k`` (the first value of the series), which keeps ``sum((x -
k)**2)`` free of the cancellation a raw sum of squares suffers. Non-finite values are left out;
a lag-1 pair counts only where both of its values are finite.

Determinism: :func:`segment_moments` sums each segment's values on their own, and
:func:`accumulate` adds segments to a running total strictly left to right, so the same rows give
the same sums however the stream was cut into batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace

import numpy as np

from ...records import record

__all__ = ["FIELDS", "Moments", "accumulate", "segment_moments"]

#: The additive fields: rows, finite values, their sums around the shift, the lag-1 pair sums.
ADDITIVE = ("rows", "n", "s1", "s2", "pn", "pa", "pb", "pp")
#: Every field of a segment row (see :func:`segment_moments`).
FIELDS = (*ADDITIVE, "first", "last", "mn", "mx")


@record
class Moments:
    """Sums of a series around ``shift`` over ``rows`` rows: ``n`` finite values, ``s1 = sum(x - k)``, ``s2 =
    sum((x - k)**2)``, and over the ``pn`` lag-1 pairs ``(x_t, x_t+1)`` with both finite: ``pa =
    sum(x_t - k)``, ``pb = sum(x_t+1 - k)``, ``pp = sum((x_t - k)(x_t+1 - k))``. ``first`` and
    ``last`` are the values of the first and last rows (NaN where missing: a pair across a
    boundary needs both), ``mn`` and ``mx`` the extremes.

    >>> m = Moments.of(np.array([1.0, 2.0, 3.0, 4.0]))
    >>> m.mean, m.var, round(m.lag1, 3)
    (2.5, 1.6666666666666667, 0.25)
    >>> a, b = Moments.of(np.array([1.0, 2.0]), 1.0), Moments.of(np.array([3.0, 4.0]), 1.0)
    >>> a.merge(b) == m
    True
    """

    shift: float = 0.0
    rows: float = 0.0
    n: float = 0.0
    s1: float = 0.0
    s2: float = 0.0
    pn: float = 0.0
    pa: float = 0.0
    pb: float = 0.0
    pp: float = 0.0
    first: float = math.nan
    last: float = math.nan
    mn: float = math.inf
    mx: float = -math.inf

    @classmethod
    def of(cls, values: np.ndarray, shift: float | None = None) -> Moments:
        """The moments of one array (shift: its first finite value unless given)."""
        x = np.asarray(values, dtype=np.float64).ravel()
        if shift is None:
            ok = x[np.isfinite(x)]
            shift = float(ok[0]) if len(ok) else 0.0
        if not len(x):
            return cls(shift)
        row = segment_moments(x, np.array([0]), shift)[0]
        return cls(shift, *(float(v) for v in row))

    @classmethod
    def from_row(cls, shift: float, row: np.ndarray) -> Moments:
        return cls(shift, *(float(v) for v in row))

    # -- derived values ---------------------------------------------------------------------
    @property
    def mean(self) -> float | None:
        return self.shift + self.s1 / self.n if self.n else None

    @property
    def m2(self) -> float:
        """Sum of squared deviations from the mean."""
        return max(self.s2 - self.s1 * self.s1 / self.n, 0.0) if self.n else 0.0

    @property
    def var(self) -> float | None:
        """Sample variance (ddof=1, as pandas)."""
        return self.m2 / (self.n - 1) if self.n > 1 else None

    @property
    def lag_cov(self) -> float:
        """Sum over the lag-1 pairs of the product of their deviations from the mean."""
        if not self.n or not self.pn:
            return 0.0
        d = self.s1 / self.n
        return self.pp - d * (self.pa + self.pb) + self.pn * d * d

    @property
    def lag1(self) -> float:
        """Lag-1 autocorrelation (``lag_cov / m2``), 0 when undefined."""
        m2 = self.m2
        return self.lag_cov / m2 if m2 > 0 else 0.0

    def max_z(self) -> float | None:
        """How many standard deviations of the *other* values the largest value lies above their
        mean (leave-one-out, so the spike does not hide in the spread it creates); None below 8
        values or when the others are constant."""
        if self.n < 8 or not math.isfinite(self.mx):
            return None
        top = self.mx - self.shift
        n, s1, s2 = self.n - 1, self.s1 - top, self.s2 - top * top
        var = (s2 - s1 * s1 / n) / (n - 1)
        if var <= 0:
            return None
        return (top - s1 / n) / math.sqrt(var)

    # -- merging ----------------------------------------------------------------------------
    def shifted(self, shift: float) -> Moments:
        """The same sums around another shift."""
        d = self.shift - shift
        if d == 0.0:
            return self
        return replace(self, shift=shift, s1=self.s1 + self.n * d,
                       s2=self.s2 + 2 * d * self.s1 + self.n * d * d, pa=self.pa + self.pn * d,
                       pb=self.pb + self.pn * d, pp=self.pp + d * (self.pa + self.pb) + self.pn * d * d)

    def merge(self, right: Moments) -> Moments:
        """The moments of this window followed by ``right`` (the pair across the boundary counts)."""
        r = right.shifted(self.shift)
        out = Moments(self.shift, self.rows + r.rows, self.n + r.n, self.s1 + r.s1, self.s2 + r.s2,
                      self.pn + r.pn, self.pa + r.pa, self.pb + r.pb, self.pp + r.pp,
                      first=self.first if self.rows else r.first, last=r.last if r.rows else self.last,
                      mn=min(self.mn, r.mn), mx=max(self.mx, r.mx))
        if self.rows and r.rows and math.isfinite(self.last) and math.isfinite(right.first):
            a, b = self.last - self.shift, right.first - self.shift
            out.pn += 1
            out.pa += a
            out.pb += b
            out.pp += a * b
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Moments):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def segment_moments(x: np.ndarray, starts: np.ndarray, shift: float) -> np.ndarray:
    """One row of :data:`FIELDS` per segment ``x[starts[i]:starts[i + 1]]`` (the last runs to the
    end). Pairs are counted within a segment only; :func:`accumulate` adds those across
    boundaries.

    >>> segment_moments(np.array([1.0, 2.0, np.nan, 4.0]), np.array([0, 2]), 1.0)[:, :4].tolist()
    [[2.0, 2.0, 1.0, 1.0], [2.0, 1.0, 3.0, 9.0]]
    """
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x)
    d = np.where(ok, x - shift, 0.0)
    out = np.empty((len(starts), len(FIELDS)))
    ends = np.r_[starts[1:], len(x)]
    out[:, 0] = ends - starts
    out[:, 1] = np.add.reduceat(ok.astype(np.float64), starts)
    out[:, 2] = np.add.reduceat(d, starts)
    out[:, 3] = np.add.reduceat(d * d, starts)
    # lag-1 pairs inside a segment: (x_t, x_t+1) with t+1 not a segment start
    pair = np.zeros(len(x), dtype=bool)  # pair[t+1]: the pair ending at t+1
    pair[1:] = ok[1:] & ok[:-1]
    pair[starts] = False
    left = np.zeros(len(x))
    left[1:] = d[:-1]
    pf = pair.astype(np.float64)
    out[:, 4] = np.add.reduceat(pf, starts)
    out[:, 5] = np.add.reduceat(left * pf, starts)
    out[:, 6] = np.add.reduceat(d * pf, starts)
    out[:, 7] = np.add.reduceat(left * d * pf, starts)
    out[:, 8] = x[starts]
    out[:, 9] = x[ends - 1]
    out[:, 10] = np.minimum.reduceat(np.where(ok, x, np.inf), starts)
    out[:, 11] = np.maximum.reduceat(np.where(ok, x, -np.inf), starts)
    return out


def accumulate(total: Moments, rows: np.ndarray) -> Moments:
    """``total`` followed by the segments ``rows`` (from :func:`segment_moments`, same shift),
    added strictly left to right with the pairs across each boundary.

    >>> x = np.array([1.0, 5.0, 2.0, np.nan, 3.0, 4.0])
    >>> seg = segment_moments(x, np.array([0, 2, 3]), 1.0)
    >>> accumulate(Moments(1.0), seg) == Moments.of(x, 1.0)
    True
    """
    if not len(rows):
        return total
    if len(rows) <= _FEW_SEGMENTS:
        return _accumulate_few(total, rows)
    k = len(ADDITIVE)
    firsts, lasts = rows[:, k], rows[:, k + 1]
    prev_last = np.r_[total.last if total.rows else np.nan, lasts[:-1]]
    cross = np.isfinite(prev_last) & np.isfinite(firsts)
    a = np.where(cross, prev_last - total.shift, 0.0)
    b = np.where(cross, firsts - total.shift, 0.0)
    add = rows[:, :k].copy()
    add[:, 4] += cross
    add[:, 5] += a
    add[:, 6] += b
    add[:, 7] += a * b
    start = np.array([[getattr(total, f) for f in ADDITIVE]])
    sums = np.cumsum(np.vstack([start, add]), axis=0)[-1]  # cumsum adds strictly in order
    return Moments(total.shift, **{f: float(v) for f, v in zip(ADDITIVE, sums)},
                   first=total.first if total.rows else float(firsts[0]), last=float(lasts[-1]),
                   mn=min(total.mn, float(rows[:, k + 2].min())), mx=max(total.mx, float(rows[:, k + 3].max())))


#: Up to this many segments :func:`accumulate` adds them in Python floats: the same operations
#: in the same order (so the same floats) without numpy's cost per call, which a window of a
#: small run (one to four segments) pays a dozen times over.
_FEW_SEGMENTS = 8


def _accumulate_few(total: Moments, rows: np.ndarray) -> Moments:
    """:func:`accumulate` one segment at a time: the pairs across each boundary, then the sums
    left to right, as its ``cumsum`` adds them (the same operations in the same order: each sum
    plus the segment's value plus what its boundary pair adds); the extremes as numpy's (NaN if
    any is NaN)."""
    shift = total.shift
    rows_, n, s1, s2 = float(total.rows), float(total.n), float(total.s1), float(total.s2)
    pn, pa, pb, pp = float(total.pn), float(total.pa), float(total.pb), float(total.pp)
    prev = total.last if total.rows else math.nan
    table = rows.tolist()
    for r0, r1, r2, r3, r4, r5, r6, r7, first, last, _, _ in table:
        if math.isfinite(prev) and math.isfinite(first):
            a, b = prev - shift, first - shift
            pn, pa, pb, pp = pn + (r4 + 1.0), pa + (r5 + a), pb + (r6 + b), pp + (r7 + a * b)
        else:
            pn, pa, pb, pp = pn + (r4 + 0.0), pa + (r5 + 0.0), pb + (r6 + 0.0), pp + (r7 + 0.0)
        rows_, n, s1, s2 = rows_ + r0, n + r1, s1 + r2, s2 + r3
        prev = last
    if len(table) == 1:  # (a window's usual share of a batch: one segment)
        low, high = table[0][10], table[0][11]
    else:
        low, high = _extreme([r[10] for r in table], min), _extreme([r[11] for r in table], max)
    return Moments(shift, rows_, n, s1, s2, pn, pa, pb, pp, first=total.first if total.rows else table[0][8],
                   last=table[-1][9], mn=min(total.mn, low), mx=max(total.mx, high))


def _extreme(values: list[float], pick: Callable[[list[float]], float]) -> float:
    """``min`` or ``max`` of a few floats as numpy's (NaN when one is NaN: numpy decides when
    their sum is NaN, which a NaN or opposite infinities make)."""
    total = sum(values)
    if total != total:
        return float((np.min if pick is min else np.max)(values))
    return pick(values)

"""Per-step statistics of the sample stream over every response, vectorised across steps.

A batch of the sample stream (one row per response) holds the responses of several steps, each
step's rows together, as trainers write them. :class:`StepRuns` hands on the complete steps of
each batch as one block of rows with a step code per row (``0 .. k-1``), so that every per-step
statistic is a few numpy passes over the block (``np.bincount`` segment sums, one sort for the ranks)
instead of a Python loop over steps: 10,000,000 responses cost the same per row as 10,000.

>>> runs = StepRuns()
>>> block = runs.push(np.array([3, 3, 4, 4, 5]), {"x": np.array([1., 2., 3., 5., 9.])})
>>> block.steps.tolist(), block.codes.tolist(), block.cols["x"].tolist()
([3, 4], [0, 0, 1, 1], [1.0, 2.0, 3.0, 5.0])
>>> segment_mean(block.cols["x"], block.codes, block.k).tolist()
[1.5, 4.0]
>>> runs.flush().steps.tolist()
[5]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...records import record

__all__ = ["Block", "Moments", "StepRuns", "segment_mean", "segment_moments", "segment_ranks",
           "segment_spearman"]


@record
class Block:
    """Complete steps: ``steps[j]`` is the step of code ``j``; ``codes`` the code of each row."""

    steps: np.ndarray
    codes: np.ndarray
    cols: dict[str, np.ndarray]

    @property
    def k(self) -> int:
        return len(self.steps)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.codes, minlength=self.k)


class StepRuns:
    """Holds back the rows of the last (possibly incomplete) step until a later step appears."""

    def __init__(self) -> None:
        self._steps = np.zeros(0, dtype=np.int64)
        self._cols: dict[str, np.ndarray] = {}

    def push(self, steps: np.ndarray, cols: dict[str, np.ndarray]) -> Block | None:
        """The complete steps so far (None when there are none yet)."""
        if len(steps) == 0:
            return None
        steps = steps.astype(np.int64, copy=False)
        if len(self._steps):  # the held-back rows of one step: small
            steps = np.concatenate([self._steps, steps])
            cols = {k: np.concatenate([self._cols.get(k, np.full(len(self._steps), np.nan)), v])
                    for k, v in cols.items()}
        cut = len(steps) - int(np.argmax(steps[::-1] != steps[-1])) if steps[0] != steps[-1] else 0
        self._steps = steps[cut:]
        self._cols = {k: v[cut:] for k, v in cols.items()}
        return _block(steps[:cut], {k: v[:cut] for k, v in cols.items()}) if cut else None

    def flush(self) -> Block | None:
        """The held-back step, at the end of the stream."""
        out = _block(self._steps, self._cols) if len(self._steps) else None
        self._steps = np.zeros(0, dtype=np.int64)
        self._cols = {}
        return out


def _block(steps: np.ndarray, cols: dict[str, np.ndarray]) -> Block:
    new = np.empty(len(steps), dtype=bool)
    new[:1] = True
    np.not_equal(steps[1:], steps[:-1], out=new[1:])
    codes = np.cumsum(new) - 1
    return Block(steps[new], codes, cols)

@record
class Moments:
    """Per-segment pair count, means and centred sums of squares and products."""

    n: np.ndarray
    mx: np.ndarray
    my: np.ndarray
    sxx: np.ndarray
    syy: np.ndarray
    sxy: np.ndarray

    def pearson(self) -> np.ndarray:
        """Pearson's r per segment; NaN with fewer than 3 pairs or a constant column."""
        denom = np.sqrt(self.sxx * self.syy)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where((self.n >= 3) & (denom > 0), self.sxy / np.where(denom > 0, denom, 1.0),
                         np.nan)
        return np.clip(r, -1.0, 1.0)

    def merged_into(self, total: list[float]) -> list[float]:
        """``total`` (``[n, mx, my, sxx, syy, sxy]`` of all the rows before) with each segment
        merged in, one at a time in order (Chan et al.'s update): exact over any number of rows,
        and the same floating-point result however the segments were batched.

        >>> m = segment_moments(np.array([1., 2, 3, 4]), np.array([2., 4, 6, 8]),
        ...                     np.array([0, 0, 1, 1]), 2)
        >>> m.merged_into([0.0] * 6)
        [4.0, 2.5, 5.0, 5.0, 20.0, 10.0]
        """
        n, mx, my, sxx, syy, sxy = total
        for nb, bx, by, bxx, byy, bxy in zip(self.n.tolist(), self.mx.tolist(), self.my.tolist(),
                                             self.sxx.tolist(), self.syy.tolist(),
                                             self.sxy.tolist()):
            if not nb:
                continue
            m = n + nb
            ex, ey, f = bx - mx, by - my, n * nb / m
            n, mx, my = m, mx + ex * nb / m, my + ey * nb / m
            sxx, syy, sxy = sxx + bxx + ex * ex * f, syy + byy + ey * ey * f, sxy + bxy + ex * ey * f
        return [n, mx, my, sxx, syy, sxy]


def _summer(codes: np.ndarray, k: int, counts: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The per-segment sum of a column of values, for segments of ``counts`` rows each.

    A block's codes ascend (each step's rows together, a filter keeps their order): one
    ``np.add.reduceat`` over the segments that hold rows (a tenth of ``np.bincount``'s time with
    weights; numpy sums each segment pairwise, so a step's sum still depends on its own rows
    alone, not on the batch). Codes in any other order are summed by ``np.bincount``.
    """
    if len(codes) and bool((codes[1:] >= codes[:-1]).all()):
        held = counts > 0
        starts = (np.cumsum(counts) - counts)[held]

        def total(values: np.ndarray) -> np.ndarray:
            out = np.zeros(k)
            out[held] = np.add.reduceat(values, starts)
            return out

        return total
    return lambda values: np.bincount(codes, weights=values, minlength=k)


def segment_moments(x: np.ndarray, y: np.ndarray, codes: np.ndarray, k: int,
                    means: tuple[np.ndarray, np.ndarray] | None = None) -> Moments:
    """:class:`Moments` of the pairs ``(x, y)`` of each segment (no NaN in ``x`` or ``y``).

    Centred on each segment's means (given, or from the data) before squaring: no cancellation
    on large values. A segment's sums are of its own rows alone (:func:`_summer`), so a step's
    do not depend on which other steps share its batch (a scan's result must not depend on how
    it was cut).

    >>> m = segment_moments(np.array([1., 2, 3, 1, 2, 3]), np.array([2., 4, 6, 3, 2, 1]),
    ...                     np.array([0, 0, 0, 1, 1, 1]), 2)
    >>> m.pearson().round(6).tolist(), m.n.tolist(), m.my.tolist()
    ([1.0, -1.0], [3, 3], [4.0, 2.0])
    """
    n = np.bincount(codes, minlength=k)
    total = _summer(codes, k, n)
    if means is None:
        safe = np.maximum(n, 1)
        means = (total(x) / safe, total(y) / safe)
    dx, dy = x - means[0][codes], y - means[1][codes]
    return Moments(n, means[0], means[1], total(dx * dx), total(dy * dy), total(dx * dy))


def segment_mean(x: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """Mean of the finite values of each segment (NaN for a segment with none)."""
    ok = np.isfinite(x)
    if not ok.all():
        x, codes = x[ok], codes[ok]
    n = np.bincount(codes, minlength=k)
    s = _summer(codes, k, n)(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


#: Most bins (segments x distinct values) the counting path of :func:`segment_ranks` uses.
COUNTING_BINS = 1 << 22


def segment_ranks(x: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """Ranks ``1 .. n`` of ``x`` within each segment, ties sharing their average rank (as
    :func:`forensics.analysis.stats.trailing.rankdata` on each segment alone). No NaN in ``x``.

    Integer values in a small range (token counts, 0/1 rewards) are ranked by counting, with no
    sort; segments of one size (a fixed number of responses a step) by one row-wise sort; others
    by one sort of the values and a stable (radix) sort of the segment codes.

    >>> codes = np.array([0, 0, 0, 0, 1, 1])
    >>> segment_ranks(np.array([3., 1., 3., 2., 5., 4.]), codes, 2).tolist()
    [3.5, 1.0, 3.5, 2.0, 2.0, 1.0]
    >>> segment_ranks(np.array([.3, .1, .3, .2, .5, .4]), codes, 2).tolist()
    [3.5, 1.0, 3.5, 2.0, 2.0, 1.0]
    >>> segment_ranks(np.array([.3, .1, .4, .2, .5, .6]), np.array([0, 0, 1, 1, 2, 2]), 3).tolist()
    [2.0, 1.0, 2.0, 1.0, 1.0, 2.0]
    """
    n = len(x)
    if n == 0:
        return np.zeros(0)
    counts = np.bincount(codes, minlength=k)
    seg_start = np.cumsum(counts) - counts
    lo, hi = float(x.min()), float(x.max())
    if (hi - lo + 1) * k <= COUNTING_BINS and np.array_equal(x, np.floor(x)):
        # each (segment, value) bin's rank, worked out over the bins (at most COUNTING_BINS, so
        # 32-bit keys), then one gather: a row's rank is its bin's
        width = int(hi - lo) + 1
        key = (x - lo).astype(np.int32)
        key += (codes * width).astype(np.int32)
        cnt = np.bincount(key, minlength=k * width)
        return ((np.cumsum(cnt) - cnt - np.repeat(seg_start, width)) + (cnt + 1) / 2.0)[key]
    if k > 1 and counts.min() == counts.max() and np.array_equal(codes, np.repeat(np.arange(k), counts[0])):
        m = int(counts[0])  # equal, contiguous segments: sort each row
        within = np.argsort(x.reshape(k, m), axis=1)
        within += seg_start[:, None]  # in place: a fresh array of the block's size costs its page faults
        order = within.ravel()
    else:
        order = np.argsort(x)
        if k > 1:
            small = np.uint16 if k < 1 << 16 else np.int64
            order = order[np.argsort(codes[order].astype(small), kind="stable")]
    xs, cs = x[order], codes[order]
    new = np.empty(n, dtype=bool)  # a run of equal values within one segment starts here
    new[:1] = True
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    new[1:] |= cs[1:] != cs[:-1]
    ranks = np.empty(n)
    if new.all():  # no ties (the usual case for a continuous reward): ranks are positions
        ranks[order] = np.arange(1.0, n + 1.0) - seg_start[cs]
        return ranks
    starts = np.flatnonzero(new)
    run_len = np.diff(np.append(starts, n))
    ranks[order] = np.repeat(starts - seg_start[cs[starts]] + (run_len + 1) / 2.0, run_len)
    return ranks


def segment_spearman(x: np.ndarray, y: np.ndarray, codes: np.ndarray, k: int) -> Moments:
    """Spearman rank correlation within each segment (no NaN in ``x`` or ``y``): the
    :class:`Moments` of the ranks, whose mean is ``(n + 1) / 2`` with or without ties.

    >>> m = segment_spearman(np.array([1., 2, 3, 4, 9, 8, 7]), np.array([1., 4, 9, 16, 1, 2, 3]),
    ...                      np.array([0, 0, 0, 0, 1, 1, 1]), 2)
    >>> m.pearson().tolist(), m.n.tolist()
    ([1.0, -1.0], [4, 3])
    """
    mid = (np.bincount(codes, minlength=k) + 1) / 2.0
    return segment_moments(segment_ranks(x, codes, k), segment_ranks(y, codes, k), codes, k,
                           (mid, mid))

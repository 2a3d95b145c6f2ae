"""Pure, batch-invariant statistics over trailing windows.

Every function here computes the value at position ``i`` from the values at positions before
``i`` (or up to and including ``i`` where it says so) and nothing else. A tracker prepends the tail
it kept from earlier batches (:class:`History`), calls these on the concatenation and keeps the
results for the new rows, so its output does not depend on how the stream was cut into batches.

Medians and quantiles select values, so they are exact; means are computed per window (never as
running sums, whose rounding depends on where the sum started).
"""

from __future__ import annotations

import bottleneck as bn
import numpy as np

__all__ = [
    "BlockScale",
    "BlockStats",
    "Context",
    "History",
    "PrefixSums",
    "RunMedian",
    "TrailingRunMedian",
    "aligned_blocks",
    "block_median_mad",
    "block_quantiles",
    "pearson",
    "persist",
    "rankdata",
    "shift",
    "skew_kurtosis",
    "spearman",
    "trailing_median",
    "trend_spearman",
    "window_mad",
    "window_median",
]

#: 1.349 is the IQR of the standard normal: IQR / 1.349 estimates sigma robustly, as MAD / 0.6745 does.
IQR_TO_SIGMA = 1.349


class History:
    """The last ``size`` values of a series, kept across batches.

    >>> h = History(3)
    >>> full, n_prior = h.extend(np.array([1.0, 2.0]))
    >>> full.tolist(), n_prior
    ([1.0, 2.0], 0)
    >>> full, n_prior = h.extend(np.array([3.0, 4.0]))
    >>> full.tolist(), n_prior
    ([1.0, 2.0, 3.0, 4.0], 2)
    >>> h.values.tolist()
    [2.0, 3.0, 4.0]
    """

    def __init__(self, size: int, dtype: type = np.float64) -> None:
        self.size = size
        self.values: np.ndarray = np.empty(0, dtype=dtype)

    def extend(self, new: np.ndarray) -> tuple[np.ndarray, int]:
        """Return ``(tail + new, len(tail))`` and keep the last ``size`` values."""
        full = np.concatenate([self.values, new.astype(self.values.dtype, copy=False)])
        n_prior = len(self.values)
        self.values = full[-self.size :] if self.size > 0 else full[:0]
        return full, n_prior


class PrefixSums:
    """Running prefix sums and counts of the finite values of a stream, kept through every
    ``stride``-th row (the rows ``r`` with ``(r + 1) % stride == 0``), the oldest forgotten.

    :meth:`extend` returns the new rows' own prefixes; :meth:`at` gives them for kept rows (rows
    before the stream's first row: zero). The stride is a power of two that may only grow (:meth:`coarsen`
    drops the rows it no longer keeps), so a caller whose look-back grows with the run keeps a
    bounded number of prefixes by rounding its rows down to the stride. Sums are a sequential
    cumsum, so they are the same however the stream was batched.

    >>> ps = PrefixSums()
    >>> s, c = ps.extend(np.array([1.0, np.nan, 2.0])); _ = ps.extend(np.array([4.0]))
    >>> [v.tolist() for v in ps.at(np.array([-5, 0, 1, 3]))]
    [[0.0, 1.0, 1.0, 7.0], [0, 1, 1, 3]]
    >>> ps.coarsen(2); ps.rows.tolist()
    [1, 3]
    """

    def __init__(self) -> None:
        self.stride = 1
        self.rows = np.zeros(0, dtype=np.int64)
        self.s = np.zeros(0)
        self.c = np.zeros(0, dtype=np.int64)
        self._last = (0.0, 0)  # the prefix through the last row given
        self._first: int | None = None  # the stream's first row
        self._next = 0  # the next row

    def extend(self, x: np.ndarray, row0: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Add the rows from ``row0`` on (the first call's ``row0`` starts the stream; later
        calls continue it) and return their prefixes."""
        if self._first is None:
            self._first = self._next = row0
        fin = np.isfinite(x)
        s = np.cumsum(np.concatenate([[self._last[0]], np.where(fin, x, 0.0)]))[1:]
        c = self._last[1] + np.cumsum(fin)
        rows = self._next + np.arange(len(x), dtype=np.int64)
        keep = (rows + 1) % self.stride == 0
        self.rows = np.concatenate([self.rows, rows[keep]])
        self.s, self.c = np.concatenate([self.s, s[keep]]), np.concatenate([self.c, c[keep]])
        if len(x):
            self._last, self._next = (float(s[-1]), int(c[-1])), self._next + len(x)
        return s, c

    def at(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.minimum(np.searchsorted(self.rows, rows), max(len(self.rows) - 1, 0))
        before = rows < (self._first or 0)
        if not len(self.rows) or np.any(~before & (self.rows[i] != rows)):
            raise RuntimeError("prefix sums of rows not kept were asked for")
        return np.where(before, 0.0, self.s[i]), np.where(before, 0, self.c[i])

    def __len__(self) -> int:  # prefixes kept
        return len(self.rows)

    def coarsen(self, stride: int) -> None:
        """Keep every ``stride``-th row only (a power of two, at least the current stride)."""
        if stride > self.stride:
            self.stride = stride
            keep = (self.rows + 1) % stride == 0
            self.rows, self.s, self.c = self.rows[keep], self.s[keep], self.c[keep]

    def forget_before(self, row: int) -> None:
        """Forget the prefixes of rows before ``row``."""
        k = int(np.searchsorted(self.rows, row))
        self.rows, self.s, self.c = self.rows[k:], self.s[k:], self.c[k:]


class RunMedian:
    """The median of the non-negative values seen so far, in bounded memory and O(1) per value.

    Values go into a histogram of ``bins_per_decade`` logarithmic bins per decade from 1e-15 to
    1e15 (zero and smaller into the first); :meth:`median` is the lower median, to the bins'
    relative resolution (about 1% at 100 bins a decade), and the same whatever the order or the
    batches the values came in.

    >>> rm = RunMedian()
    >>> rm.add(np.array([1.0, 100.0, np.nan])); rm.add(np.array([2.0]))
    >>> round(rm.median(), 1)
    2.0
    >>> RunMedian().median()
    nan
    """

    LOW, HIGH = -15.0, 15.0

    def __init__(self, bins_per_decade: int = 100) -> None:
        self.per_decade = bins_per_decade
        self.counts = np.zeros(int((self.HIGH - self.LOW) * bins_per_decade) + 1, dtype=np.int64)
        self.n = 0

    def add(self, values: np.ndarray) -> None:
        self.add_bins(self.bins(values))

    def bins(self, values: np.ndarray) -> np.ndarray:
        """The bin of each value (-1 for a value that is not finite), for :meth:`add_bins`."""
        fin = np.isfinite(values)
        v = np.where(fin, values, 1.0)
        with np.errstate(divide="ignore"):
            b = np.where(v > 0, (np.log10(np.where(v > 0, v, 1.0)) - self.LOW) * self.per_decade, 0.0)
        out = np.clip(b.astype(np.int64), 0, len(self.counts) - 1)
        out[~fin] = -1
        return out

    def add_bins(self, bins: np.ndarray) -> None:
        """Add the values of these :meth:`bins` (those of -1 are left out)."""
        b = bins[bins >= 0]
        if len(b):
            self.counts += np.bincount(b, minlength=len(self.counts))
            self.n += len(b)

    def medians_at(self, bins: np.ndarray, cuts: np.ndarray, chunk: int = 32) -> list[float]:
        """Add ``bins[:cuts[-1]]`` (``cuts`` non-decreasing) and return the median as it stood
        after each cut: what :meth:`add_bins` of each slice and :meth:`median` after it give,
        ``chunk`` cuts at a time in a few numpy calls over the bins in use (a run's first batch
        has hundreds of cuts)."""
        used = np.concatenate([np.flatnonzero(self.counts), bins[: cuts[-1]][bins[: cuts[-1]] >= 0]])
        lo, hi = (int(used.min()), int(used.max())) if len(used) else (0, 0)
        width, meds, prev = hi - lo + 1, [], 0
        for first in range(0, len(cuts), chunk):
            part = cuts[first: first + chunk]
            b = bins[prev: part[-1]]
            seg = np.searchsorted(part, np.arange(prev, part[-1]), side="right")  # slice of each bin
            keep = b >= 0
            m = np.bincount(seg[keep] * width + (b[keep] - lo), minlength=len(part) * width)
            counts = np.cumsum(m.reshape(len(part), width), axis=0) + self.counts[lo: hi + 1]
            n = counts.sum(axis=1)  # no value lies outside the bins in use
            at = lo + (np.cumsum(counts, axis=1) < ((n + 1) // 2)[:, None]).sum(axis=1)
            meds += [self._value(b, k) for b, k in zip(at.tolist(), n.tolist(), strict=True)]
            self.counts[lo: hi + 1], self.n, prev = counts[-1], int(n[-1]), int(part[-1])
        return meds

    def median(self) -> float:
        if self.n == 0:
            return float("nan")
        return self._value(int(np.searchsorted(np.cumsum(self.counts), (self.n + 1) // 2)), self.n)

    def _value(self, b: int, n: int) -> float:
        """The lower median of ``n`` values whose median fell in bin ``b``."""
        if n == 0:
            return float("nan")
        return 0.0 if b == 0 else float(10.0 ** (self.LOW + (b + 0.5) / self.per_decade))


class TrailingRunMedian:
    """For each row ``t``, the median of a stream's values over the run up to about ``lag`` rows
    back: the rows of the ``block``-row blocks (aligned on multiples of ``block``) that ended by
    row ``t - lag``. A run-long yardstick that a short quiet stretch cannot shrink and a few
    outliers cannot move, at O(1) memory and O(1) work per row, the same however the rows were
    batched. Rows must increase; rows never given count as missing.

    The median is refreshed after each of the first ``EVERY_BLOCK`` blocks, then each time the
    blocks done grow by a 1/``EVERY_BLOCK`` share (between refreshes a row gets the last one):
    a run-long median moves slowly, and a refresh costs a pass over the histogram's bins, which a
    ten-million-row run would otherwise pay 500,000 times for 20-row blocks.

    >>> tm = TrailingRunMedian(block=2, lag=1)
    >>> np.round(tm.update(np.arange(4), np.array([1.0, 3.0, 5.0, 7.0])), 1).tolist()
    [nan, nan, 1.0, 1.0]
    >>> np.round(tm.update(np.arange(4, 6), np.array([9.0, 9.0])), 1).tolist()
    [3.0, 3.0]
    """

    EVERY_BLOCK = 64

    def __init__(self, block: int, lag: int) -> None:
        self.block, self.lag = max(block, 1), max(lag, 1)
        self.hist = RunMedian()
        self.rows = np.zeros(0, dtype=np.int64)  # rows of the block not yet done, and their values' bins
        self.bins = np.zeros(0, dtype=np.int64)
        self.done = 0  # blocks done: every block ending before row done * block
        self.next_refresh = 1
        # the refreshes still needed: after how many blocks, and the median then (0 blocks: none)
        self.ref_k = np.zeros(1, dtype=np.int64)
        self.ref_med = np.full(1, np.nan)

    def _after(self, k: int) -> int:
        return k + max(1, k // self.EVERY_BLOCK)

    def update(self, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0)
        r = np.concatenate([self.rows, rows.astype(np.int64, copy=False)])
        v = np.concatenate([self.bins, self.hist.bins(values)])  # binned once, added in slices
        last = int(rows[-1])
        n_done = max((last + 1) // self.block, self.done)
        ks: list[int] = []
        while self.next_refresh <= n_done:
            ks.append(self.next_refresh)
            self.next_refresh = self._after(self.next_refresh)
        cuts = np.searchsorted(r, np.array([*ks, n_done], dtype=np.int64) * self.block)
        meds = self.hist.medians_at(v, cuts[:-1]) if ks else []
        c = int(cuts[-1])  # the rest of the blocks done
        self.hist.add_bins(v[int(cuts[-2]) if ks else 0: c])
        self.done = n_done
        self.rows, self.bins = r[c:], v[c:]
        if ks:
            self.ref_k = np.concatenate([self.ref_k, ks])
            self.ref_med = np.concatenate([self.ref_med, meds])
        k = np.maximum((rows + 1 - self.lag) // self.block, 0)
        out = self.ref_med[np.searchsorted(self.ref_k, k, side="right") - 1]
        # later rows need no fewer blocks: keep the refresh in force then and the later ones
        keep = max(int(np.searchsorted(self.ref_k, max((last + 2 - self.lag) // self.block, 0),
                                       side="right")) - 1, 0)
        self.ref_k, self.ref_med = self.ref_k[keep:], self.ref_med[keep:]
        return out


def _move_median(x: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    # bottleneck's double-heap moving median: the same values as pandas' rolling median
    # (NaN ignored, min_count) at about a quarter of the cost
    if len(x) == 0:
        return np.zeros(0)
    need = max(min_periods, 1)
    if need > len(x) or need > window:  # a window with fewer values than needed is never enough
        return np.full(len(x), np.nan)
    # a window longer than the array covers all of it, as the array's length does
    return bn.move_median(np.asarray(x, dtype=np.float64), min(window, len(x)), min_count=need)


def trailing_median(x: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """Median of the ``window`` values before each position (NaN ignored; NaN when too few).

    >>> trailing_median(np.array([1.0, 5.0, 3.0, 100.0]), 3, 2).tolist()[2:]
    [3.0, 3.0]
    """
    med = _move_median(x, window, min_periods)
    return np.concatenate([[np.nan], med[:-1]]) if len(x) else med


def persist(cond: np.ndarray, k: int, m: int) -> np.ndarray:
    """True where ``cond`` held on at least ``k`` of the last ``m`` positions (inclusive).

    >>> persist(np.array([1, 1, 0, 1, 0, 0, 0], dtype=bool), 2, 3).tolist()
    [False, True, True, True, False, False, False]
    """
    c = np.cumsum(np.concatenate([[0], cond.astype(np.int64)]))
    idx = np.arange(1, len(cond) + 1)
    counts = c[idx] - c[np.maximum(idx - m, 0)]
    return counts >= k


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of finite pairs; NaN when fewer than 3 pairs or a constant input."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    return pearson(rankdata(x[ok]), rankdata(y[ok]))


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks ``1 .. n`` of the values of ``x`` (no NaN), ties sharing their average rank (as
    ``scipy.stats.rankdata`` and pandas' ``rank``; here without importing either on the scan path).

    >>> rankdata(np.array([3.0, 1.0, 3.0, 2.0])).tolist()
    [3.5, 1.0, 3.5, 2.0]
    """
    n = len(x)
    order = np.argsort(x)  # the order among ties does not matter: they share one rank
    s = x[order]
    new = np.empty(n, dtype=bool)  # True where a run of equal values starts
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    del s
    ranks = np.empty(n)
    if new.all():  # no ties (the usual case for a continuous metric): ranks are positions
        ranks[order] = np.arange(1.0, n + 1.0)
        return ranks
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, n))
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)
    return ranks


def skew_kurtosis(a: np.ndarray) -> tuple[float, float]:
    """Sample skewness and excess kurtosis, biased (moment) estimators: the definitions of
    ``scipy.stats.skew``/``kurtosis`` and of the writer's :func:`forensics.trainer.torch_helpers.advantage_stats`,
    so per-response and per-step moments agree. NaN for fewer than 2 values or a constant input.

    >>> [round(v, 4) for v in skew_kurtosis(np.array([1.0, 2.0, 3.0, 10.0]))]
    [1.0182, -0.7696]
    """
    if len(a) < 2:
        return float("nan"), float("nan")
    d = a - a.mean()
    d2 = d * d
    m2 = float(d2.mean())
    if not m2 > 0.0:
        return float("nan"), float("nan")
    return float((d2 * d).mean() / m2**1.5), float((d2 * d2).mean() / m2**2 - 3.0)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of finite pairs; NaN when fewer than 3 pairs or a constant input."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    xs, ys = x[ok] - x[ok].mean(), y[ok] - y[ok].mean()
    denom = float(np.sqrt((xs * xs).sum() * (ys * ys).sum()))
    if denom == 0.0:
        return float("nan")
    return float((xs * ys).sum() / denom)


class Context:
    """Trailing context for several series at once: ``extend`` returns full arrays and n_prior.

    >>> ctx = Context(2)
    >>> full, n = ctx.extend(a=np.array([1.0, 2.0, 3.0]))
    >>> full["a"].tolist(), n
    ([1.0, 2.0, 3.0], 0)
    >>> full, n = ctx.extend(a=np.array([4.0]))
    >>> full["a"].tolist(), n
    ([2.0, 3.0, 4.0], 2)
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._hist: dict[str, History] = {}

    def extend(self, **series: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
        out: dict[str, np.ndarray] = {}
        n_prior = 0
        for name, values in series.items():
            hist = self._hist.get(name)
            if hist is None:
                hist = self._hist[name] = History(self.size, dtype=values.dtype.type)
            out[name], n_prior = hist.extend(values)
        return out, n_prior


def shift(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` delayed by ``k`` positions (NaN-filled at the start)."""
    if k <= 0:
        return x
    return np.concatenate([np.full(min(k, len(x)), np.nan), x[:-k] if k < len(x) else x[:0]])


def block_median_mad(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row median and MAD of a 2-D array, ignoring NaN (NaN when a row has no value).

    >>> [v.tolist() for v in block_median_mad(np.array([[1.0, 4.0, 2.0], [np.nan, 3.0, 5.0]]))]
    [[2.0, 4.0], [1.0, 1.0]]
    """
    s = np.sort(m, axis=1)  # NaN sorts last
    width = s.shape[1]
    if width and len(s) and np.isfinite(s[:, 0]).all() and np.isfinite(s[:, -1]).all():  # (sorted: ends)
        # every value finite (the usual block): the same middle positions in every row, read as
        # columns, not gathered row by row (the same floats, a third less time)
        lo, hi = (width - 1) // 2, width // 2
        med = 0.5 * (s[:, lo] + s[:, hi])
        dev = np.abs(m - med[:, None])
        dev.sort(axis=1)
        return med, 0.5 * (dev[:, lo] + dev[:, hi])
    c = np.isfinite(s).sum(axis=1)
    rows = np.arange(len(s))
    lo, hi = np.maximum((c - 1) // 2, 0), np.maximum(c // 2, 0)
    with np.errstate(invalid="ignore"):
        med = np.where(c > 0, 0.5 * (s[rows, lo] + s[rows, hi]), np.nan)
        dev = np.sort(np.abs(m - med[:, None]), axis=1)
        mad = np.where(c > 0, 0.5 * (dev[rows, lo] + dev[rows, hi]), np.nan)
    return med, mad


def window_median(x: np.ndarray, window: int, min_count: int) -> np.ndarray:
    """Median of the ``window`` values ending at each position (inclusive), NaN ignored;
    NaN where fewer than ``min_count`` non-NaN values. Exact (bottleneck's moving median).

    >>> window_median(np.array([1.0, np.nan, 3.0, 10.0, 2.0]), 3, 2).tolist()
    [nan, nan, 2.0, 6.5, 3.0]
    """
    return _move_median(x, window, min_count)


class BlockStats:
    """Robust trailing statistics computed on blocks of rows: fast and batch-invariant.

    Rows are grouped into blocks of ``block`` consecutive rows, aligned on the global row index.
    Each complete block is summarised by its median and its MAD. A row's baseline is the median of
    the block medians of the ``window // block`` blocks *before* the block that holds the row (the
    row and its neighbours in its own block are excluded, so a short burst cannot mask itself);
    its robust sigma is the median of those blocks' MADs divided by 0.6745 (Iglewicz-Hoaglin), or
    the spread of the block medians themselves when larger (an autocorrelated series wanders
    across blocks more than it moves within one).
    Per-row rolling medians cost O(n log w) with a large constant; this costs two sorts of
    ``block``-wide rows plus a rolling median over n / block values.

    >>> bs = BlockStats(window=40, block=10)
    >>> x = np.r_[np.tile([1.0, 1.2, 0.8, 1.1, 0.9], 12), 5.0]
    >>> med, sigma = bs.update(x, row0=0)
    >>> float(med[-1]), round(float(sigma[-1]), 3)
    (1.0, 0.148)
    """

    def __init__(self, window: int = 100, block: int = 10, min_blocks: int = 2,
                 keep: int | None = None) -> None:
        self.block = block
        self.nblocks = max(window // block, 1)
        self.min_blocks = min_blocks
        self.keep = max(keep or 0, 2 * self.nblocks)
        self._partial = np.zeros(0)
        self._meds = np.zeros(0)
        self._mads = np.zeros(0)
        self._last: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0, dtype=np.int64))

    def update(self, x: np.ndarray, row0: int) -> tuple[np.ndarray, np.ndarray]:
        """Baseline median and robust sigma for each row of ``x`` (rows ``row0 ...``)."""
        _ = row0  # alignment is implied: the partial block always starts on a block boundary
        full = np.concatenate([self._partial, x.astype(np.float64, copy=False)])
        n_complete = len(full) // self.block
        meds, mads = block_median_mad(full[: n_complete * self.block].reshape(-1, self.block))
        all_meds = np.concatenate([self._meds, meds])
        all_mads = np.concatenate([self._mads, mads])
        # block position of each new row within all_meds' coordinates
        first_pos = len(self._meds)  # the partial block (if any) sits at this position
        offs = np.arange(len(self._partial), len(full)) // self.block
        pos = first_pos + offs
        base = self._trailing(all_meds, pos)
        sigma = self._trailing(all_mads, pos) / 0.6745
        # the spread *between* blocks too: an autocorrelated series moves little within a block
        # and wanders across blocks, so the within-block MAD alone would make its wander look
        # like spikes (for iid noise the block medians spread less than the values: no change)
        # (measured by consecutive block medians' differences, so a steady trend is not spread)
        if len(all_meds) > 1:
            dev = np.abs(np.diff(all_meds, prepend=np.nan)) / np.sqrt(2.0)
            sigma = np.fmax(sigma, self._trailing(dev, pos) / 0.6745)
        self._partial = full[n_complete * self.block :]
        self._meds = all_meds[-self.keep :]
        self._mads = all_mads[-self.keep :]
        self._last = (all_meds, pos)
        return base, sigma

    def trend(self, nblocks: int) -> tuple[np.ndarray, np.ndarray]:
        """For the rows of the last update: median of the ``nblocks`` blocks before each row's
        block, and of the ``nblocks`` blocks before those (recent, previous)."""
        meds, pos = self._last
        return self._trailing(meds, pos, nblocks), self._trailing(meds, pos - nblocks, nblocks)

    def _trailing(self, series: np.ndarray, pos: np.ndarray, nblocks: int | None = None) -> np.ndarray:
        k = nblocks or self.nblocks
        if len(series) == 0:
            return np.full(len(pos), np.nan)
        roll = window_median(series, k, self.min_blocks)
        # roll[pos - 1], NaN where pos - 1 falls outside it: one take from roll padded with NaN
        padded = np.concatenate([[np.nan], roll, [np.nan]])
        return padded[np.clip(pos, 0, len(roll) + 1)]

    def block_medians(self) -> np.ndarray:
        """Medians of the complete blocks kept (most recent last)."""
        return self._meds


def block_quantiles(m: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """Quantiles (linear interpolation, as numpy's default; NaN ignored) of each row of a 2-D array.

    Returns shape ``(rows, len(qs))``; NaN for a row without a finite value. One sort of the rows
    serves every quantile (``np.nanquantile`` re-partitions per call and is several times slower).

    >>> block_quantiles(np.array([[1.0, 2.0, 3.0, 4.0], [np.nan, 5.0, np.nan, np.nan]]),
    ...                 (0.5, 0.9)).tolist()
    [[2.5, 3.7], [5.0, 5.0]]
    """
    s = np.sort(m, axis=1)  # NaN sorts last
    c = np.isfinite(s).sum(axis=1)
    rows = np.arange(len(s))
    out = np.full((len(s), len(qs)), np.nan)
    for k, q in enumerate(qs):
        pos = np.maximum(c - 1, 0) * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(c - 1, 0))
        frac = pos - lo
        with np.errstate(invalid="ignore"):
            v = s[rows, lo] + frac * (s[rows, hi] - s[rows, lo])
        # an exact position (frac 0) must not pick up NaN or inf - inf from its neighbour
        v = np.where(frac == 0.0, s[rows, lo], v)
        out[:, k] = np.where(c > 0, v, np.nan)
    return out


def aligned_blocks(x: np.ndarray, start_row: int, block: int) -> tuple[np.ndarray, int]:
    """The complete blocks of ``block`` rows, aligned on the global row index, inside ``x``.

    ``x[0]`` is global row ``start_row``. Returns a ``(n_blocks, block)`` view and the global
    index of its first block (row ``r`` belongs to block ``r // block``). Aligning on the global
    index, not on the array, keeps block summaries independent of how the stream was batched.

    >>> b, first = aligned_blocks(np.arange(7.0), 3, 2)
    >>> b.tolist(), first
    ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], 2)
    """
    skip = (-start_row) % block
    n = max((len(x) - skip) // block, 0)
    return x[skip : skip + n * block].reshape(n, block), (start_row + skip) // block


def window_mad(x: np.ndarray, window: int, min_count: int) -> np.ndarray:
    """MAD (around its own median) of the ``window`` values ending at each position (inclusive),
    NaN ignored; NaN where fewer than ``min_count`` finite values. Exact, computed per window.

    >>> window_mad(np.array([1.0, 2.0, 4.0, np.nan, 10.0]), 3, 2).tolist()
    [nan, 0.5, 1.0, 1.0, 3.0]
    """
    if len(x) == 0:
        return np.zeros(0)
    padded = np.concatenate([np.full(window - 1, np.nan), x])
    view = np.lib.stride_tricks.sliding_window_view(padded, window)
    _, mad = block_median_mad(view)
    return np.where(np.isfinite(view).sum(axis=1) >= max(min_count, 1), mad, np.nan)


class BlockScale(BlockStats):
    """:class:`BlockStats` whose sigma also counts how the block medians spread over the window.

    ``BlockStats``' sigma (the median of the blocks' own MADs) sees only the noise inside a block:
    a trend across the window, which a rolling IQR of the rows counts, is left out, so a trending
    but healthy series (a loss that drifts as the policy learns) would score large z. Here
    ``sigma = hypot(within, between)`` with ``between`` the MAD / 0.6745 of the window's block
    medians around their median. For iid noise ``between`` is small (block medians vary by about
    sigma / sqrt(block)) and partly offsets the small-sample low bias of ``within``.

    >>> bs = BlockScale(window=40, block=10)
    >>> x = np.r_[np.tile([1.0, 1.2, 0.8, 1.1, 0.9], 12), 5.0]
    >>> med, sigma = bs.update(x, row0=0)
    >>> float(med[-1]), round(float(sigma[-1]), 3)
    (1.0, 0.148)
    """

    def update(self, x: np.ndarray, row0: int) -> tuple[np.ndarray, np.ndarray]:
        base, within = super().update(x, row0)
        meds, pos = self._last
        between = np.full(len(pos), np.nan)
        if len(meds):
            roll = window_mad(meds, self.nblocks, self.min_blocks)
            idx = pos - 1  # the blocks before the row's own block, as the baseline
            ok = (idx >= 0) & (idx < len(roll))
            between[ok] = roll[idx[ok]] / 0.6745
        return base, np.hypot(within, np.where(np.isfinite(between), between, 0.0))


def trend_spearman(y: np.ndarray) -> float:
    """Spearman correlation of the finite values of ``y`` with their order in ``y``: is the series
    rising over the run? For a step stream (steps strictly increasing, as the engine's step policy
    keeps them) this is the Spearman correlation with the step. The order's ranks are positions,
    which saves ranking (and keeping) a million steps, and the correlation is computed in place.

    >>> trend_spearman(np.array([1.0, 3.0, np.nan, 2.0, 5.0, 4.0]))
    0.8
    """
    ok = np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return float("nan")
    # pearson()'s arithmetic, on arrays it may overwrite (every rank is finite)
    xs = np.arange(1.0, n + 1.0)
    xs -= xs.mean()
    ys = rankdata(y[ok])
    ys -= ys.mean()
    denom = float(np.sqrt((xs * xs).sum() * (ys * ys).sum()))
    if denom == 0.0:
        return float("nan")
    return float((xs * ys).sum() / denom)

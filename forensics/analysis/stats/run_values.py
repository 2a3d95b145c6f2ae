"""Every finite value of a series over the whole run, in bounded memory.

A tracker that reports run-long order statistics (a median, a 99th percentile) needs every value,
and a ten-million-step log holds 80 MB of each series. :class:`RunValues` keeps the first
``memory`` values in memory and appends the rest to an unnamed temporary file, so a scan's memory
does not grow with the run. Everything it reports is exact at any length:

* quantiles by radix selection over the file: the values are mapped to unsigned integers in the
  same order, and each pass over the file counts one 16-bit digit of the wanted ranks' keys (at
  most four passes; a pass collects the candidates and finishes in memory once they fit);
* mean, standard deviation, minimum, maximum and the exact sum (``math.fsum``'s value,
  :func:`exact_sum`) a chunk at a time;
* the first and last ``ends`` values, kept beside.

The one statistic that is not exact past the memory is :meth:`trend_spearman` (it ranks every
value): there it is computed on every k-th value, a systematic sample of at most ``memory`` values
whose size it states. While the values fit in memory every result is the numpy function's own.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np

from .order import percentiles
from .trailing import trend_spearman

__all__ = ["RunValues"]

_SIGN = np.uint64(1 << 63)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_DIGIT = 16
_CHUNK = 1 << 18  # values read back at a time (2 MB)


def _keys(v: np.ndarray) -> np.ndarray:
    """Unsigned integers in the order of the (finite) float64 values."""
    b = v.view(np.uint64)
    return b ^ np.where(b >> np.uint64(63), _ALL, _SIGN)


def _value(key: int) -> float:
    k = np.uint64(key)
    b = k ^ _SIGN if k & _SIGN else k ^ _ALL
    return float(np.array([b], dtype=np.uint64).view(np.float64)[0])


def _under(values: np.ndarray, keys: np.ndarray, prefix: int, bits: int) -> np.ndarray:
    """The ``values`` whose ``keys`` (:func:`_keys`) have ``prefix`` as their top ``64 - bits``
    bits (all of them when ``bits`` is 64: no bit known yet)."""
    return values if bits >= 64 else values[(keys >> np.uint64(bits)) == np.uint64(prefix)]


#: Values summed per numpy call in :func:`exact_sum`: the sums of their 26- and 27-bit halves
#: stay below 2**53, whole numbers that float64 holds exactly.
_SUM_SLICE = 1 << 20
_TWO27, _TWO53 = float(1 << 27), float(1 << 53)


def exact_sum(chunks: Iterable[np.ndarray]) -> float:
    """The exact sum of finite float64 values, correctly rounded: what ``math.fsum`` returns,
    at about half its cost (no Python float per value), and ``inf`` (signed) where the sum
    itself overflows, where ``math.fsum`` also raises on an intermediate overflow.

    Each value is ``M * 2**(e - 53)`` with a 53-bit integer ``M`` (``np.frexp``), cut into a
    high and a low half. numpy sums the halves of each exponent (``np.bincount``): whole
    numbers below 2**53, so exactly. Python's integers add the exponents' sums, and one
    correctly rounded division makes the float.

    >>> exact_sum([np.array([0.1] * 10)]), exact_sum([np.array([1e100, 1.0, -1e100])])
    (1.0, 1.0)
    >>> exact_sum([np.array([1e308, 1e308])]), exact_sum([]), exact_sum([np.array([-0.0])])
    (inf, 0.0, 0.0)
    """
    terms: list[tuple[int, int]] = []  # (exponent, integer sum of the mantissas there)
    for chunk in chunks:
        for at in range(0, len(chunk), _SUM_SLICE):
            m, e = np.frexp(chunk[at: at + _SUM_SLICE])
            whole = m * _TWO53
            high = np.trunc(whole / _TWO27)
            low = whole - high * _TWO27
            lo = int(e.min())
            idx = e - lo
            hs, ls = np.bincount(idx, weights=high), np.bincount(idx, weights=low)
            used = np.flatnonzero((hs != 0.0) | (ls != 0.0))
            terms += [(lo + j, (int(h) << 27) + int(x))
                      for j, h, x in zip(used.tolist(), hs[used].tolist(), ls[used].tolist(), strict=True)]
    if not terms:
        return 0.0
    e0 = min(e for e, _ in terms)
    total = sum(v << (e - e0) for e, v in terms)
    scale = e0 - 53  # the sum is total * 2**scale
    try:
        return total / (1 << -scale) if scale < 0 else float(total << scale)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


class RunValues:
    """The finite values of one series over the run (see module doc).

    >>> rv = RunValues(memory=4, ends=2)
    >>> for part in ([3.0, np.nan, 1.0], [4.0, 1.0, 5.0], [9.0, 2.0, 6.0]):
    ...     rv.extend(np.array(part))
    >>> len(rv), rv.spilled, rv.head().tolist(), rv.tail().tolist()
    (8, 5, [3.0, 1.0], [2.0, 6.0])
    >>> rv.quantiles([0.0, 0.5, 0.99]) == np.percentile([3, 1, 4, 1, 5, 9, 2, 6], [0, 50, 99]).tolist()
    True
    >>> rv.min(), rv.max(), rv.fsum(), rv.mean()
    (1.0, 9.0, 31.0, 3.875)
    """

    def __init__(self, memory: int = 1 << 18, ends: int = 0) -> None:
        self.memory = max(int(memory), 1)
        self.ends = ends
        self.parts: list[np.ndarray] = []
        self.held = 0  # values in parts
        self.spilled = 0  # values in the file
        self.file: IO[bytes] | None = None
        self._head = np.zeros(0)
        self._tail = np.zeros(0)

    def __len__(self) -> int:
        return self.held + self.spilled

    def __deepcopy__(self, memo: dict[int, Any]) -> RunValues:
        """A copy for a live peek: the file is shared (it is only appended to, and read by offset
        up to the copy's own count), the in-memory parts are copied."""
        out = copy.copy(self)
        out.parts = [p.copy() for p in self.parts]
        return out

    def extend(self, x: np.ndarray) -> None:
        v = np.asarray(x, dtype=np.float64)
        v = v[np.isfinite(v)]
        if not len(v):
            return
        if self.ends:
            if len(self._head) < self.ends:
                self._head = np.concatenate([self._head, v[: self.ends - len(self._head)]])
            self._tail = np.concatenate([self._tail, v[-self.ends:]])[-self.ends:]
        # a copy: a view would keep the caller's whole buffer (a reader's column) alive
        self.parts.append(v.copy() if v.base is not None else v)
        self.held += len(v)
        if self.held > self.memory:
            self._spill()

    def _spill(self) -> None:
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="forensics-values-")
        self.file.seek(0, os.SEEK_END)
        for p in self.parts:
            self.file.write(p.tobytes())
        self.file.flush()
        self.spilled += self.held
        self.parts, self.held = [], 0

    def chunks(self) -> Iterator[np.ndarray]:
        """The values in order, at most ``_CHUNK`` of the file's at a time, then the held ones."""
        if self.file is not None:
            fd = self.file.fileno()
            for start in range(0, self.spilled, _CHUNK):
                n = min(_CHUNK, self.spilled - start)
                yield np.frombuffer(os.pread(fd, 8 * n, 8 * start), dtype=np.float64)
        yield from self.parts

    def values(self) -> np.ndarray:
        """All values, in memory: only while they are held there (``spilled == 0``)."""
        if self.spilled:
            raise RuntimeError("the values were spilled to disk: use the chunked statistics")
        if len(self.parts) > 1:
            self.parts = [np.concatenate(self.parts)]
        return self.parts[0] if self.parts else np.zeros(0)

    def head(self) -> np.ndarray:
        return self._head

    def tail(self) -> np.ndarray:
        return self._tail

    # -- statistics -----------------------------------------------------------------------------
    def min(self) -> float:
        return min(float(c.min()) for c in self.chunks() if len(c))

    def max(self) -> float:
        return max(float(c.max()) for c in self.chunks() if len(c))

    def fsum(self) -> float:
        """The exact sum, rounded once: ``math.fsum``'s value (:func:`exact_sum`)."""
        return exact_sum(self.chunks())

    def mean(self) -> float:
        if not self.spilled:
            return float(np.mean(self.values()))
        return self.fsum() / len(self)

    def std(self, ddof: int = 0) -> float:
        if not self.spilled:
            return float(np.std(self.values(), ddof=ddof))
        m = self.mean()
        ss = math.fsum(float(np.sum(np.square(c - m))) for c in self.chunks())
        return math.sqrt(ss / (len(self) - ddof))

    def quantiles(self, qs: list[float]) -> list[float]:
        """Exact quantiles, as ``np.percentile``'s default (linear) interpolation gives them."""
        n = len(self)
        if not self.spilled:
            return percentiles(self.values(), [100.0 * q for q in qs])
        h = [(n - 1) * q for q in qs]
        ranks = sorted({r for x in h for r in (math.floor(x), min(math.floor(x) + 1, n - 1))})
        at = dict(zip(ranks, self._select(ranks)))
        out = []
        for x in h:
            lo = math.floor(x)
            a, b, t = at[lo], at[min(lo + 1, n - 1)], x - lo
            out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)  # numpy's lerp
        return out

    def _select(self, ranks: list[int]) -> list[float]:
        """The values of the given 0-based ranks in sorted order (radix selection).

        Every rank is followed at once: each pass over the file serves all the ranks still
        open, counting the next 16-bit digit of the keys under each rank's known prefix, or, once
        a rank's candidates fit in memory, collecting them (a median and a 99th percentile, four
        ranks, cost the passes of one). Each rank then takes the same steps, and its candidates
        the same values in the same order, as when it was followed alone."""
        # per rank: the key's known top (64 - bits) bits, its rank among the keys with that
        # prefix, and how many there are
        state = [(0, rank, 64, len(self)) for rank in ranks]
        out: dict[int, float] = {}
        while len(out) < len(ranks):
            open_ = [i for i in range(len(ranks)) if i not in out]
            fit = [i for i in open_ if state[i][3] <= self.memory]
            groups: dict[tuple[int, int], list[int]] = {}  # (prefix, bits) -> ranks under it
            for i in fit or open_:
                groups.setdefault((state[i][0], state[i][2]), []).append(i)
            if fit:  # the candidates fit: collect them and finish in memory
                parts: dict[tuple[int, int], list[np.ndarray]] = {g: [] for g in groups}
                for c in self.chunks():
                    k = _keys(c)
                    for prefix, bits in groups:
                        parts[(prefix, bits)].append(_under(c, k, prefix, bits))
                for g, members in groups.items():
                    cand = np.concatenate(parts[g])
                    for i in members:
                        left = state[i][1]
                        out[i] = float(np.partition(cand, left)[left])
                continue
            hists = {g: np.zeros(1 << _DIGIT, dtype=np.int64) for g in groups}
            for c in self.chunks():
                keys = _keys(c)
                for prefix, bits in groups:
                    k = _under(keys, keys, prefix, bits)
                    hists[(prefix, bits)] += np.bincount(
                        ((k >> np.uint64(bits - _DIGIT)) & np.uint64(0xFFFF)).astype(np.int64),
                        minlength=1 << _DIGIT)
            for (prefix, bits), members in groups.items():
                cum = np.cumsum(hists[(prefix, bits)])
                for i in members:
                    left = state[i][1]
                    d = int(np.searchsorted(cum, left, side="right"))
                    left -= int(cum[d - 1]) if d else 0
                    state[i] = ((prefix << _DIGIT) | d, left, bits - _DIGIT, int(hists[(prefix, bits)][d]))
                    if bits == _DIGIT:  # every bit known: the value itself
                        out[i] = _value(state[i][0])
        return [out[i] for i in range(len(ranks))]

    def trend_spearman(self) -> tuple[float, int]:
        """:func:`trend_spearman` of the values in order, and how many values it used (every k-th
        value once they were spilled)."""
        if not self.spilled:
            v = self.values()
            return trend_spearman(v), len(v)
        k = -(-len(self) // self.memory)
        picked, pos = [], 0
        for c in self.chunks():
            first = (-pos) % k
            picked.append(c[first::k])
            pos += len(c)
        sample = np.concatenate(picked)
        return trend_spearman(sample), len(sample)

"""Turn a per-row alarm condition into episodes: one finding per contiguous range, never per step."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ...records import record
from .trailing import History, persist

__all__ = ["Episode", "Episodes"]


@record(slots=True)
class Episode:
    """A contiguous range of rows over which a rule's condition held (after persistence).

    ``onset_step`` is the first row where the raw condition held inside the window that
    confirmed the episode; ``peak`` is the most extreme ``value`` seen on an active row, with the
    step and the ``extras`` observed there.
    """

    onset_step: int
    first_step: int
    last_step: int
    last_row: int
    n_rows: int = 0
    peak: float = float("nan")
    peak_step: int = 0
    value_sum: float = 0.0
    value_count: int = 0
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return self.value_sum / self.value_count if self.value_count else float("nan")


class Episodes:
    """Streaming episode detector.

    Parameters
    ----------
    k, m
        the condition must hold on ``k`` of the last ``m`` rows for a row to be active.
    gap
        active rows at most ``gap`` rows apart belong to one episode.
    mode
        ``"max"``, ``"min"`` or ``"absmax"``: which ``value`` counts as the peak.

    >>> ep = Episodes(k=2, m=3, gap=2)
    >>> cond = np.array([0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0], dtype=bool)
    >>> ep.update(np.arange(12), np.arange(100, 112), cond, np.arange(12.0))
    >>> [(e.onset_step, e.first_step, e.last_step) for e in ep.finish()]
    [(101, 101, 104), (109, 109, 111)]
    """

    def __init__(self, k: int = 1, m: int = 1, gap: int = 0, mode: str = "max") -> None:
        if not 1 <= k <= m:
            raise ValueError(f"need 1 <= k <= m, got k={k}, m={m}")
        self.k, self.m, self.gap, self.mode = k, m, gap, mode
        self._cond = History(m - 1, dtype=bool)
        self._steps = History(m - 1, dtype=np.int64)
        self._open: Episode | None = None
        self._done: list[Episode] = []

    def update(
        self,
        rows: np.ndarray,
        steps: np.ndarray,
        cond: np.ndarray,
        value: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Feed consecutive rows: global row indexes, steps, condition and the value to report."""
        cond = np.asarray(cond, dtype=bool)
        if not cond.any() and self.idle():
            # fast path (the common, healthy case): nothing can become active
            self._cond.extend(cond)
            self._steps.extend(np.asarray(steps, dtype=np.int64))
            return
        cond_full, n_prior = self._cond.extend(cond)
        steps_full, _ = self._steps.extend(np.asarray(steps, dtype=np.int64))
        active = persist(cond_full, self.k, self.m)[n_prior:]
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            return
        vals = np.full(len(rows), np.nan) if value is None else np.asarray(value, dtype=float)
        breaks = np.flatnonzero(np.diff(rows[idx]) > self.gap + 1) + 1
        # the first run may extend the open episode; every later one is an episode of its own
        run = idx[: breaks[0]] if len(breaks) else idx
        first = int(run[0])
        ep = self._open
        if ep is not None and rows[first] - ep.last_row > self.gap + 1:
            self._done.append(ep)
            ep = None
        if ep is None:
            onset = int(steps_full[self._onsets(cond_full, np.array([first + n_prior]))[0]])
            ep = Episode(onset_step=onset, first_step=onset, last_step=int(steps[first]),
                         last_row=int(rows[first]))
        self._absorb(ep, run, rows, steps, vals, extras)
        self._open = ep
        if len(breaks):
            self._done.append(ep)
            fresh = self._fresh(idx, breaks, n_prior, cond_full, steps_full, rows, steps, vals, extras)
            self._done.extend(fresh[:-1])
            self._open = fresh[-1]

    def idle(self) -> bool:
        """Whether no row of the persistence window held the condition: an update whose
        condition never holds then only extends the history, reading neither value nor extras
        (a caller may leave costly evidence uncomputed)."""
        return not self._cond.values.any()

    def _onsets(self, cond_full: np.ndarray, at: np.ndarray) -> np.ndarray:
        """For each position ``at`` (in ``cond_full``) that confirmed an episode: the earliest
        position inside its window where the raw condition held (the episode's onset)."""
        lo = np.maximum(at - (self.m - 1), 0)
        if self.m == 1:
            return lo
        pos = np.where(cond_full, np.arange(len(cond_full)), len(cond_full))
        nxt = np.minimum.accumulate(pos[::-1])[::-1]  # the next position at or after each
        return np.where(nxt[lo] <= at, nxt[lo], lo)

    def _fresh(self, idx: np.ndarray, breaks: np.ndarray, n_prior: int, cond_full: np.ndarray,
               steps_full: np.ndarray, rows: np.ndarray, steps: np.ndarray, vals: np.ndarray,
               extras: dict[str, np.ndarray] | None) -> list[Episode]:
        """The episodes of the runs of active rows after the first (``idx[breaks[i]:...]``),
        each one new: what :meth:`_absorb` makes of a run, computed for all runs at once (a noisy
        series opens thousands of episodes a batch)."""
        idx = idx[breaks[0]:]
        starts = breaks - breaks[0]
        lens = np.diff(np.append(starts, len(idx)))
        onsets = steps_full[self._onsets(cond_full, idx[starts] + n_prior)]
        last = idx[starts + lens - 1]
        v = vals[idx]
        finite = np.isfinite(v)
        counts = np.add.reduceat(finite.astype(np.int64), starts)
        key = np.abs(v) if self.mode == "absmax" else (-v if self.mode == "min" else v)
        key = np.where(finite, key, -np.inf)
        # the first row of each run holding its largest key (its first row when none is finite)
        hit = np.flatnonzero(key == np.repeat(np.maximum.reduceat(key, starts), lens))
        _, first_hit = np.unique(np.searchsorted(starts, hit, side="right") - 1, return_index=True)
        peak_at = idx[hit[first_hit]]
        at = {"last_step": steps[last], "last_row": rows[last], "peak_step": steps[peak_at]}
        ints = {k: a.astype(np.int64).tolist() for k, a in at.items()}
        peaks = np.where(counts > 0, vals[peak_at], np.nan).tolist()
        found = {name: np.asarray(arr[peak_at], dtype=np.float64).tolist() for name, arr in (extras or {}).items()}
        out = []
        for i, (onset, n_rows, n_fin, total) in enumerate(zip(onsets.astype(np.int64).tolist(), lens.tolist(),
                                                             counts.tolist(), self._sums(v[finite], counts),
                                                             strict=True)):
            out.append(Episode(
                onset_step=onset, first_step=onset, last_step=ints["last_step"][i],
                last_row=ints["last_row"][i], n_rows=n_rows, peak=peaks[i],
                peak_step=ints["peak_step"][i], value_sum=total, value_count=n_fin,
                extras={name: vs[i] for name, vs in found.items()}))
        return out

    @staticmethod
    def _sums(finite_values: np.ndarray, counts: np.ndarray) -> list[float]:
        """``0.0 +`` numpy's sum of each run's finite values (``counts`` of them, in order), as
        :meth:`_absorb` takes them: runs of one or two values at once (one rounding, whatever the
        order), longer ones by numpy's own sum (pairwise: its rounding is its own)."""
        c0 = np.cumsum(counts) - counts
        sums = np.zeros(len(counts))
        for n in (1, 2):
            sel = counts == n
            sums[sel] = finite_values[c0[sel]] + (finite_values[c0[sel] + 1] if n == 2 else 0.0)
        for i in np.flatnonzero(counts > 2).tolist():
            sums[i] = float(finite_values[c0[i]: c0[i] + counts[i]].sum())
        return (0.0 + sums).tolist()

    def _absorb(self, ep: Episode, run: np.ndarray, rows: np.ndarray, steps: np.ndarray,
                vals: np.ndarray, extras: dict[str, np.ndarray] | None) -> None:
        ep.last_step = int(steps[run[-1]])
        ep.last_row = int(rows[run[-1]])
        ep.n_rows += len(run)
        v = vals[run]
        finite = np.isfinite(v)
        if finite.any():
            ep.value_sum += float(v[finite].sum())
            ep.value_count += int(finite.sum())
            key = np.abs(v) if self.mode == "absmax" else (-v if self.mode == "min" else v)
            key = np.where(finite, key, -np.inf)
            j = int(np.argmax(key))
            if not np.isfinite(ep.peak) or key[j] > (
                abs(ep.peak) if self.mode == "absmax" else (-ep.peak if self.mode == "min" else ep.peak)
            ):
                ep.peak = float(v[j])
                ep.peak_step = int(steps[run[j]])
                if extras:
                    ep.extras = {name: float(arr[run[j]]) for name, arr in extras.items()}
        elif ep.n_rows == len(run):
            ep.peak_step = int(steps[run[0]])
            if extras:
                ep.extras = {name: float(arr[run[0]]) for name, arr in extras.items()}

    def closed(self, start: int = 0) -> list[Episode]:
        """The episodes closed so far, from the ``start``-th on: no later row changes them."""
        return self._done[start:]

    @property
    def open_first_step(self) -> int | None:
        """The first step of the episode a later row may still extend (None when none is open)."""
        return None if self._open is None else self._open.first_step

    def finish(self) -> list[Episode]:
        """All episodes in order, the open one ending at its last row. Copies: the detector goes
        on as before (a later row may still extend the open episode), and a caller may annotate
        what it gets."""
        eps = [*self._done, self._open] if self._open is not None else self._done
        # the constructor with every field, not dataclasses.replace (which looks the fields up
        # per call: a noisy run's tens of thousands of episodes spent half a second there)
        return [Episode(e.onset_step, e.first_step, e.last_step, e.last_row, e.n_rows, e.peak, e.peak_step,
                        e.value_sum, e.value_count, dict(e.extras)) for e in eps]

"""The course of a whole series: where it started, where it ended, its best level and its noise.

The consequence pass (``forensics.analysis.diagnosis.consequence``) asks of the reward "did it
improve, since when, and does it sit near the best level the run reached?" to tell a run that
converges (entropy settling while the reward holds its ceiling) from one that is damaged (a
collapse while the reward stalls or falls). Levels are medians of blocks of rows, so one noisy
batch moves nothing, and every comparison is made in the series' own noise (the standard error of
a block median) and range, so a reward in [0, 1], one in [-10, 10] and one shifted or scaled are
judged alike.

>>> import numpy as np
>>> rising = Course.of(np.arange(100.0), np.linspace(0, 1, 100))
>>> rising.improved(), rising.near_best()
(True, True)
>>> flat = Course.of(np.arange(100.0), np.zeros(100) + np.tile([0.0, 0.1], 50))
>>> flat.improved(), flat.falls_from(50)
(False, False)
"""

from __future__ import annotations

import numpy as np

from ...records import record
from .noise import DIFF_TO_SIGMA
from .order import median

__all__ = ["Course"]


@record(frozen=True)
class Course:
    """A series' course over the run (``of``); ``None`` levels where too few values were logged."""

    steps: np.ndarray
    values: np.ndarray
    #: rows per block median (a tenth of the run, at least 3)
    block: int
    #: the standard error of one block median, from the series' row-to-row noise
    se: float
    #: the spread of the block levels (best minus worst)
    span: float

    @classmethod
    def of(cls, steps: np.ndarray, values: np.ndarray, min_rows: int = 8) -> Course | None:
        ok = np.isfinite(values)
        steps, values = np.asarray(steps)[ok], np.asarray(values, dtype=np.float64)[ok]
        if len(values) < min_rows:
            return None
        block = max(3, len(values) // 10)
        d = np.abs(np.diff(values))
        sigma = median(d) / DIFF_TO_SIGMA if len(d) else 0.0
        se = 1.2533 * sigma / np.sqrt(block)
        levels = cls._levels(values, block)
        return cls(steps, values, block, float(se), float(levels.max() - levels.min()))

    @staticmethod
    def _levels(values: np.ndarray, block: int) -> np.ndarray:
        n = len(values) // block * block
        s = np.sort(values[:n].reshape(-1, block), axis=1)  # (np.median would load numpy.ma)
        return 0.5 * (s[:, (block - 1) // 2] + s[:, block // 2])

    def level_at(self, step: float) -> float:
        """The block median centred on ``step`` (clamped to the run)."""
        i = int(np.searchsorted(self.steps, step))
        lo = min(max(i - self.block // 2, 0), len(self.values) - self.block)
        return median(self.values[lo : lo + self.block])

    @property
    def start(self) -> float:
        return median(self.values[: self.block])

    @property
    def end(self) -> float:
        return median(self.values[-self.block :])

    @property
    def best(self) -> float:
        return float(self._levels(self.values, self.block).max())

    def _moved(self, delta: float) -> bool:
        """Whether a difference of two block levels is a move: beyond their noise and a tenth of
        the range the levels cover."""
        return bool(delta > max(2.0 * np.sqrt(2.0) * self.se, 0.1 * self.span, 1e-12))

    def improved(self, since: float | None = None) -> bool:
        """Whether the level at the end is above the level at ``since`` (the start by default)."""
        ref = self.start if since is None else self.level_at(since)
        return self._moved(self.end - ref)

    def falls_from(self, since: float) -> bool:
        """Whether the level at the end is below the level at ``since``."""
        return self._moved(self.level_at(since) - self.end)

    def near_best(self, at: float | None = None) -> bool:
        """Whether the level at the end (or at step ``at``) is near the best level the run
        reached (within noise and a fifth of its range): a reward at its ceiling."""
        level = self.end if at is None else self.level_at(at)
        return bool(self.best - level <= max(2.0 * np.sqrt(2.0) * self.se, 0.2 * self.span))

    @property
    def pinned(self) -> bool:
        """Whether the series ends on one repeated value (its last block, at least 5 rows): it no
        longer moves at all, which no learning run's reward does."""
        tail = self.values[-max(self.block, 5):]
        return len(tail) >= 5 and bool(np.all(tail == tail[0]))

    def converged(self) -> bool:
        """The reward improved over the run and holds the best level it reached, still moving
        (not pinned to one value): a run settling."""
        return self.improved() and self.near_best() and not self.pinned

"""A series' robust level and per-step noise over trailing windows, as several trackers judge
moves against them (rewards, entropy, losses, throughput)."""

from __future__ import annotations

import numpy as np

from .trailing import window_median

__all__ = ["DIFF_TO_SIGMA", "block_median", "diff_sigma"]

#: median |x_t - x_{t-1}| / DIFF_TO_SIGMA estimates the per-step noise sigma of iid normal noise.
DIFF_TO_SIGMA = 0.6745 * np.sqrt(2.0)


def block_median(x: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """:func:`forensics.analysis.stats.trailing.window_median`, skipping the work for a series with no finite value."""
    if not np.isfinite(x).any():
        return np.full(len(x), np.nan)
    return window_median(x, window, min_periods)


def diff_sigma(x: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """Robust per-step noise: trailing median of ``|diff|`` (window ending at each row) / 0.954.

    >>> x = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    >>> np.round(diff_sigma(x, 4, 2), 3).tolist()
    [nan, nan, 1.048, 1.048, 1.048]
    """
    d = np.abs(np.diff(x, prepend=np.nan))
    return block_median(d, window, min_periods) / DIFF_TO_SIGMA

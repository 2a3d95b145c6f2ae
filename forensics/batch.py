"""Batches: consecutive rows of one stream, held as columns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Batch"]


@dataclass
class Batch:
    """Consecutive rows of a stream as numpy columns under canonical names.

    ``columns`` are float64 with NaN where a value is missing *or* non-finite; ``missing`` holds,
    for columns that have gaps, a mask of the rows where the key was absent or null, so a logged
    NaN (a real non-finite value) can be told from a value that was never logged. ``text`` holds
    string columns. ``rows`` are global row indexes (0-based, counting kept rows only) and
    ``lines`` the source line (or record) numbers, for error messages.
    """

    steps: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, np.ndarray] = field(default_factory=dict)
    row0: int = 0
    lines: np.ndarray | None = None
    stream: str = "step"

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def rows(self) -> np.ndarray:
        return np.arange(self.row0, self.row0 + len(self.steps), dtype=np.int64)

    def has(self, name: str) -> bool:
        """Whether the column has at least one value logged in this batch."""
        col = self.columns.get(name)
        if col is None:
            return False
        miss = self.missing.get(name)
        return bool(len(col)) and (miss is None or not bool(miss.all()))

    def col(self, name: str) -> np.ndarray:
        """The column, or all-NaN when this batch does not carry it."""
        col = self.columns.get(name)
        return col if col is not None else np.full(len(self.steps), np.nan)

    def logged(self, name: str) -> np.ndarray:
        """Mask of rows where the key had a value (finite or not)."""
        if name not in self.columns:
            return np.zeros(len(self.steps), dtype=bool)
        miss = self.missing.get(name)
        return np.ones(len(self.steps), dtype=bool) if miss is None else ~miss

    def nonfinite(self, name: str) -> np.ndarray:
        """Mask of rows where a NaN or an infinity was logged (not merely missing)."""
        return self.logged(name) & ~np.isfinite(self.col(name))

    def take(self, mask: np.ndarray) -> Batch:
        """Rows where ``mask`` is true (used by the step policy); ``row0`` is left to the caller."""
        return Batch(
            steps=self.steps[mask],
            columns={k: v[mask] for k, v in self.columns.items()},
            missing={k: v[mask] for k, v in self.missing.items()},
            text={k: v[mask] for k, v in self.text.items()},
            row0=self.row0,
            lines=None if self.lines is None else self.lines[mask],
            stream=self.stream,
        )

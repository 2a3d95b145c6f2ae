"""Canonical batches: a source's raw batches under canonical names and units, with exact steps.

:class:`Canonicalizer` renames one source's keys to canonical names (:mod:`forensics.schema`) as
they appear, applies the unit transforms, and takes the step column apart (rows without an
integer step are set aside, counted in the read report). Its :class:`Batch` is what the
trackers, ``convert`` and ``watch`` read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..schema import TRANSFORMS, ColumnMapping, resolve_columns
from .readers import RawBatch, ReadReport

__all__ = ["Batch", "Canonicalizer"]


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


class Canonicalizer:
    """Renames one source's keys to canonical names as keys appear, applies unit transforms."""

    def __init__(self, stream: str = "step") -> None:
        self.stream = stream
        self.mapping = ColumnMapping()
        self.step_from_rows: bool | None = None
        self.next_row_step = 0

    def __call__(self, raw: RawBatch, report: ReadReport) -> tuple[Batch, np.ndarray]:
        keys = [*raw.numeric, *raw.text]
        self.mapping = resolve_columns(keys, self.mapping, self.stream)
        m = self.mapping
        columns: dict[str, np.ndarray] = {}
        missing: dict[str, np.ndarray] = {}
        for key, values in raw.numeric.items():
            name = m.target(key)
            if key in m.transforms:
                values = TRANSFORMS[m.transforms[key]](values)
            columns[name] = values
            if key in raw.missing:
                missing[name] = raw.missing[key]
        text = {m.target(k): v for k, v in raw.text.items()}
        n = len(raw)
        if self.step_from_rows is None:
            self.step_from_rows = "step" not in columns
            if self.step_from_rows:
                report.notes.append("no step column: rows are numbered 0, 1, 2, ... in file order")
        keep = np.ones(n, dtype=bool)
        if self.step_from_rows:
            steps = np.arange(self.next_row_step, self.next_row_step + n, dtype=np.int64)
            self.next_row_step += n
        else:
            raw_steps = columns.pop("step", np.full(n, np.nan))
            missing.pop("step", None)
            ok = np.isfinite(raw_steps) & (raw_steps == np.floor(raw_steps))
            for i in np.flatnonzero(~ok)[:50]:
                report.skip(int(raw.lines[i]), "row has no integer step", "row has no step")
            extra = int((~ok).sum()) - min(int((~ok).sum()), 50)
            if extra:
                report.skipped["row has no step"] += extra
            keep &= ok
            steps = np.where(ok, raw_steps, 0).astype(np.int64)
        batch = Batch(steps=steps, columns=columns, missing=missing, text=text, lines=raw.lines)
        return batch, keep

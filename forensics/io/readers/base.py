"""What every reader produces: raw batches under source keys, and a report of what it read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...errors import StrictModeError
from ...records import record

__all__ = ["RawBatch", "ReadReport", "RowIssue", "Source", "ValueIssue"]

#: How many individual row issues a report keeps verbatim; the rest are only counted.
MAX_ISSUES_KEPT = 200


@record(frozen=True)
class RowIssue:
    """A row that could not be used: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@record(frozen=True)
class ValueIssue:
    """One value set aside (read as missing) in a row that was kept: where, which key, why."""

    path: str
    line: int
    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key}: {self.reason}"


@record
class ReadReport:
    """Counts of rows read, kept and skipped (with reasons) for one input.

    ``rows_read`` counts every row of the input, the skipped ones included: ``rows_kept +
    rows_skipped == rows_read``. A value that does not fit its column (text in a numeric column)
    does not cost its row: it is *set aside* (read as missing), counted per key in
    ``values_set_aside`` and located in ``value_issues``.
    """

    path: str
    format: str = ""
    rows_read: int = 0
    rows_kept: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    issues: list[RowIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the trainer's configuration as the log prints it (dotted keys), for the run context
    run_config: dict[str, Any] = field(default_factory=dict)
    #: where in the input ``run_config`` was read
    run_config_origin: str = ""
    #: for a file ``forensics convert`` wrote: the format and the keys of the log it came from,
    #: so the run context reads the same as from the original
    converted_from: dict[str, Any] = field(default_factory=dict)
    values_set_aside: Counter[str] = field(default_factory=Counter)
    value_issues: list[ValueIssue] = field(default_factory=list)
    #: ``--strict``: a row skipped for a bad or missing step is fatal (see :meth:`bad_step`)
    strict: bool = False

    def bad_step(self, line: int, reason: str, category: str) -> None:
        """Skip a row whose step is missing or not an integer; fatal under ``--strict``."""
        if self.strict:
            raise StrictModeError(reason, path=self.path, line=line)
        self.skip(line, reason, category)

    def skip(self, line: int, reason: str, category: str | None = None) -> None:
        self.skipped[category or reason] += 1
        if len(self.issues) < MAX_ISSUES_KEPT:
            self.issues.append(RowIssue(self.path, line, reason))

    def set_aside(self, line: int, key: str, reason: str) -> None:
        """Count one value of ``key`` on ``line`` that was read as missing, and why."""
        self.values_set_aside[key] += 1
        if len(self.value_issues) < MAX_ISSUES_KEPT:
            self.value_issues.append(ValueIssue(self.path, line, key, reason))

    def note_values_set_aside(self) -> None:
        """Keep one note that sums up the values set aside (replaced as the count grows)."""
        if not self.values_set_aside:
            return
        prefix = "values set aside: "
        total = sum(self.values_set_aside.values())
        keys = ", ".join(f"{k} ({n})" for k, n in sorted(self.values_set_aside.items())[:8])
        more = ", ..." if len(self.values_set_aside) > 8 else ""
        first = self.value_issues[0] if self.value_issues else None
        text = (f"{prefix}{total} value(s) that do not fit their column read as missing, rows kept: "
                f"{keys}{more}" + (f" (first: line {first.line}: {first.key}: {first.reason})" if first else ""))
        for i, note in enumerate(self.notes):
            if note.startswith(prefix):
                self.notes[i] = text
                return
        self.notes.append(text)

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "rows_skipped": self.rows_skipped,
            "skipped_by_reason": dict(sorted(self.skipped.items())),
            "issues": [{"line": i.line, "reason": i.reason} for i in self.issues],
            "issues_truncated": self.rows_skipped > len(self.issues),
            "notes": list(self.notes),
            **({"run_config": {"origin": self.run_config_origin, "values": self.run_config}}
               if self.run_config else {}),
            **({"converted_from": {k: v for k, v in self.converted_from.items() if k != "keys"}}
               if self.converted_from else {}),
            "values_set_aside": sum(self.values_set_aside.values()),
            "values_set_aside_by_key": dict(sorted(self.values_set_aside.items())),
            "value_issues": [{"line": i.line, "key": i.key, "reason": i.reason} for i in self.value_issues],
        }


@record
class RawBatch:
    """Consecutive rows under their source keys.

    ``numeric`` columns hold the values as read: float64 (NaN for a logged NaN), int64 for
    columns of integers (exact: steps above 2**53 stay distinct), bool for booleans, or object
    (Python numbers) for integers beyond int64 or booleans mixed with numbers; the canonical layer
    turns them into float64 metrics and an int64 step. ``missing`` masks the rows where a key was
    absent or null (only for columns that have such rows; the value under the mask is
    meaningless). ``text`` holds non-numeric columns as object arrays; ``lines`` the 1-based
    source line of each row. ``stray`` lists, per numeric column, the rows whose value was not a
    number (``(row index, value)``; those rows are marked missing): the canonical layer parses
    numeric strings (``"nan"``, ``"1e-3"``) and sets the rest aside, located.
    """

    numeric: dict[str, np.ndarray]
    missing: dict[str, np.ndarray]
    text: dict[str, np.ndarray]
    lines: np.ndarray
    stray: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)

    def take(self, mask: np.ndarray) -> RawBatch:
        """The rows where ``mask`` is true."""
        index = np.flatnonzero(mask)
        remap = {int(old): new for new, old in enumerate(index)} if self.stray else {}
        stray = {k: [(remap[i], v) for i, v in vals if i in remap] for k, vals in self.stray.items()}
        return RawBatch({k: v[mask] for k, v in self.numeric.items()},
                        {k: v[mask] for k, v in self.missing.items()},
                        {k: v[mask] for k, v in self.text.items()}, self.lines[mask],
                        {k: v for k, v in stray.items() if v})

    def __len__(self) -> int:
        return len(self.lines)


class Source(Protocol):
    """A readable input: yields raw batches and fills its report as it goes. A source that
    parses ahead on threads of its own while its batches are analysed says so with a true
    ``reads_ahead`` attribute (absent: it does not)."""

    report: ReadReport

    def batches(self, batch_rows: int) -> Iterator[RawBatch]: ...


@record(frozen=True)
class Format:
    """A readable format: a content sniffer and a factory.

    ``detect(path, head)`` gets the path and the first bytes of the file (decompressed for
    ``.gz``); ``open(path, strict)`` returns a :class:`Source`.
    """

    name: str
    detect: Callable[[Path, bytes], bool]
    open: Callable[[Path, bool], Source]
    description: str = ""

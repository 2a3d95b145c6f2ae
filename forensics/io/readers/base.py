"""What every reader produces: raw batches under source keys, and a report of what it read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["RawBatch", "ReadReport", "RowIssue", "Source"]

#: How many individual row issues a report keeps verbatim; the rest are only counted.
MAX_ISSUES_KEPT = 200


@dataclass(frozen=True)
class RowIssue:
    """A row that could not be used: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ReadReport:
    """Counts of rows read, kept and skipped (with reasons) for one input."""

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

    def skip(self, line: int, reason: str, category: str | None = None) -> None:
        self.skipped[category or reason] += 1
        if len(self.issues) < MAX_ISSUES_KEPT:
            self.issues.append(RowIssue(self.path, line, reason))

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
        }


@dataclass
class RawBatch:
    """Consecutive rows under their source keys.

    ``numeric`` columns are float64 (NaN for missing or non-finite); ``missing`` masks the rows
    where a key was absent or null (only for columns that have such rows); ``text`` holds
    non-numeric columns as object arrays; ``lines`` the 1-based source line of each row.
    """

    numeric: dict[str, np.ndarray]
    missing: dict[str, np.ndarray]
    text: dict[str, np.ndarray]
    lines: np.ndarray

    def __len__(self) -> int:
        return len(self.lines)


class Source(Protocol):
    """A readable input: yields raw batches and fills its report as it goes."""

    report: ReadReport

    def batches(self, batch_rows: int) -> Iterator[RawBatch]: ...


@dataclass(frozen=True)
class Format:
    """A readable format: a content sniffer and a factory.

    ``detect(path, head)`` gets the path and the first bytes of the file (decompressed for
    ``.gz``); ``open(path, strict)`` returns a :class:`Source`.
    """

    name: str
    detect: Callable[[Path, bytes], bool]
    open: Callable[[Path, bool], Source]
    description: str = ""

"""Shared plumbing for adapters: a row source over a line parser, number parsing, step merging.

A text format is a :class:`LineParser`: it takes one decoded line at a time and returns the rows
that became complete. The same parser serves an offline scan (:class:`LineSource` reads the whole
file) and a live one (``forensics watch`` feeds it the lines appended since the last poll).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...errors import InputError, StrictModeError
from ..canonical import parse_number, step_value
from ..inputs import bounded_lines, truncation
from ..inputs import open_binary as _open_binary
from ..limits import MAX_LINE_BYTES
from ..readers.arrow import budget_groups, rows_to_raw
from ..readers.base import RawBatch, ReadReport
from ..readers.jsonl import parse_json_object

__all__ = [
    "ANSI",
    "ApartRows",
    "LineParser",
    "LineSource",
    "RowSource",
    "Rows",
    "first_object",
    "fmt_value",
    "merge_same_step",
    "parse_number",
    "step_value",
]

#: ANSI colour escapes (Ray colours its actor prefixes).
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

Row = tuple[int, dict[str, Any]]
Rows = list[Row]

class LineParser:
    """Turns lines into rows. Subclasses implement :meth:`line`; :meth:`flush` ends the stream.

    ``report`` gets the skips (with line numbers) and, at :meth:`finish_notes`, the notes.
    """

    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        self.report = report
        self.strict = strict

    def line(self, lineno: int, text: str) -> Rows:
        raise NotImplementedError

    def flush(self) -> Rows:
        """Rows still held back (a block waiting for its last line); called at end of input."""
        return []

    def finish_notes(self) -> None:
        """Add the summary notes to the report (ignored lines, precision, ...)."""

    def json_object(self, lineno: int, text: str) -> dict[str, Any] | None:
        """The JSON object on a line; ``None`` for a blank line or (counted by :meth:`bad`) a
        line that is not one."""
        s = text.strip()
        if not s:
            return None
        obj, reason = parse_json_object(s)
        if obj is None:
            self.bad(lineno, reason)
        return obj

    def step(self, lineno: int, text: str) -> int | None:
        """The step printed on a line as an exact integer; ``None`` (counted by :meth:`bad`)
        when it is beyond int64."""
        step, why = step_value(text)
        if step is None:
            self.bad(lineno, why, "step is not an integer")
        return step

    def bad(self, lineno: int, reason: str, category: str = "malformed line") -> None:
        """Count a row-like line that could not be used; fatal under ``strict``."""
        if self.strict:
            raise StrictModeError(reason, path=self.report.path, line=lineno)
        self.report.rows_read += 1
        self.report.skip(lineno, reason, category)


class JsonlLines(LineParser):
    """Generic JSON lines as they are appended, one object per line (the canonical step stream,
    RLDK-style rows): what ``forensics watch`` parses a growing JSONL log with."""

    def line(self, lineno: int, text: str) -> Rows:
        obj = self.json_object(lineno, text)
        return [] if obj is None else [(lineno, obj)]


def open_binary(path: Path) -> IO[bytes]:
    """Open a log for reading bytes (gzip recognised by content; see :mod:`forensics.io.inputs`)."""
    return _open_binary(path)


#: What :func:`iter_lines` yields for a line longer than ``MAX_LINE_BYTES`` (skipped unread).
TOO_LONG = f"line longer than {MAX_LINE_BYTES} bytes (skipped unread)"


def iter_lines(path: Path, report: ReadReport | None = None) -> Iterator[tuple[int, str | None]]:
    """``(1-based line number, text)`` of a text file, undecodable bytes replaced; ``None`` for
    a line longer than ``MAX_LINE_BYTES``. A gzip file cut short yields its complete lines and
    (with ``report``) a note says so."""
    with open_binary(path) as fh:
        try:
            for i, raw in enumerate(bounded_lines(fh), 1):
                yield i, None if raw is None else raw.decode("utf-8", errors="replace")
        except (OSError, EOFError) as exc:
            raise InputError(f"read failed: {exc}", path=str(path)) from None
        why = truncation(fh)
    if why and report is not None:
        report.notes.append(f"{why}: every complete line before the cut was read")


def first_object(head: bytes, lines: int = 8) -> dict[str, Any] | None:
    """The first JSON object among the first whole lines of a detection head (a comment, a
    blank or a malformed first line is passed over), or ``None``."""
    for line in head.split(b"\n")[:lines]:
        s = line.strip()
        if s.startswith(b"{"):
            obj, _ = parse_json_object(s)
            if obj is not None:
                return obj
    return None


def to_raw(rows: Rows) -> RawBatch:
    return rows_to_raw([r for _, r in rows], np.array([ln for ln, _ in rows], dtype=np.int64))


class RowSource:
    """A :class:`~forensics.io.readers.Source` over an iterator of ``(line, row)`` pairs.

    Subclasses implement :meth:`rows`; ``rows_read``/``rows_kept`` are counted here.
    """

    format_name = ""

    def __init__(self, path: Path, strict: bool = False) -> None:
        self.path = Path(path)
        self.strict = strict
        self.report = ReadReport(str(path), format=self.format_name)

    def rows(self) -> Iterator[Row]:
        raise NotImplementedError

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        for group in budget_groups(self.rows(), max(batch_rows, 1), lambda r: r[1].keys()):
            yield self._emit(group)

    def _emit(self, buf: Rows) -> RawBatch:
        self.report.rows_read += len(buf)
        self.report.rows_kept += len(buf)
        return to_raw(buf)


class LineSource(RowSource):
    """A text file read line by line through a :class:`LineParser`."""

    parser_class: type[LineParser] = LineParser

    def make_parser(self) -> LineParser:
        return self.parser_class(self.report, self.strict)

    def rows(self) -> Iterator[Row]:
        parser = self.make_parser()
        for lineno, text in iter_lines(self.path, self.report):
            if text is None:
                parser.bad(lineno, TOO_LONG, "line too long")
                continue
            yield from parser.line(lineno, text)
        yield from parser.flush()
        parser.finish_notes()


def merge_same_step(rows: Iterable[Row], step_key: str = "step",
                    shared: tuple[str, ...] = ("epoch",)) -> Iterator[Row]:
    """Merge consecutive rows of one step whose keys do not collide (train + eval rows).

    Keys in ``shared`` may appear in both; the first row's value wins. A row whose keys collide
    with the held row starts a new row, so a genuinely repeated step stays visible as a replay.
    """
    held: Row | None = None
    for line, row in rows:
        if held is not None and row.get(step_key) is not None and \
                held[1].get(step_key) == row.get(step_key):
            overlap = (set(held[1]) & set(row)) - {step_key, *shared}
            if not overlap:
                for k, v in row.items():
                    held[1].setdefault(k, v)
                continue
        if held is not None:
            yield held
        held = (line, dict(row))
    if held is not None:
        yield held


class ApartRows:
    """Rows that are not training rows (validation, evaluation): they join the training row of
    the same step when one follows, and are otherwise kept out of the step stream and listed in
    the report notes (``what`` names them there)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.pending: dict[int, tuple[int, dict[str, Any]]] = {}
        self.merged = 0
        self.apart: list[tuple[int, int, dict[str, Any]]] = []

    def hold(self, lineno: int, step: int, values: dict[str, Any]) -> None:
        if step in self.pending:
            self.pending[step][1].update(values)
        else:
            self.pending[step] = (lineno, dict(values))

    def attach(self, step: int, row: dict[str, Any]) -> None:
        """Give ``row`` (a training row of ``step``) the held values of its step."""
        for s in [s for s in self.pending if s < step]:  # their training row will not come
            line, vals = self.pending.pop(s)
            self.apart.append((line, s, vals))
        if step in self.pending:
            _, vals = self.pending.pop(step)
            for k, v in vals.items():
                row.setdefault(k, v)
            self.merged += 1

    def notes(self, report: ReadReport) -> None:
        for s, (line, vals) in sorted(self.pending.items()):
            self.apart.append((line, s, vals))
        self.pending.clear()
        if self.merged:
            report.notes.append(f"{self.merged} {self.what} merged into the training row of the same "
                                "step, as their own columns (never into training metrics)")
        if self.apart:
            shown = "; ".join(
                f"line {line} step {s}: " + ", ".join(f"{k}={fmt_value(v)}" for k, v in list(vals.items())[:4])
                for line, s, vals in self.apart[:5])
            report.notes.append(f"{len(self.apart)} {self.what} kept out of the training step stream "
                                f"({shown}{'; ...' if len(self.apart) > 5 else ''})")


def fmt_value(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)

"""Shared plumbing for adapters: a row source over a line parser, number parsing, step merging.

A text format is a :class:`LineParser`: it takes one decoded line at a time and returns the rows
that became complete. The same parser serves an offline scan (:class:`LineSource` reads the whole
file) and a live one (``forensics watch`` feeds it the lines appended since the last poll).
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...errors import InputError, StrictModeError
from ..readers.arrow import rows_to_raw
from ..readers.base import RawBatch, ReadReport
from ..readers.jsonl import parse_json_object

__all__ = ["ANSI", "ApartRows", "LineParser", "LineSource", "RowSource", "Rows", "merge_same_step", "parse_number"]

#: ANSI colour escapes (Ray colours its actor prefixes).
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

Row = tuple[int, dict[str, Any]]
Rows = list[Row]

_NUMPY_WRAP = re.compile(r"^(?:np|numpy)\.(?:float|int|uint|bool_?)\d*\((?P<v>.*)\)$")
_TORCH_WRAP = re.compile(r"^tensor\((?P<v>[^,()]*)(?:,.*)?\)$")
_SPECIAL = {"nan": math.nan, "+nan": math.nan, "-nan": math.nan, "inf": math.inf, "+inf": math.inf,
            "-inf": -math.inf, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
            "true": 1.0, "false": 0.0}


def parse_number(text: str) -> float | None:
    """A printed number as a float: plain, ``nan``/``inf``, or wrapped as ``np.float64(x)``.

    >>> parse_number("np.float64(0.0123)"), parse_number("0.000"), parse_number("nan")
    (0.0123, 0.0, nan)
    >>> parse_number("abc") is None
    True
    """
    s = text.strip()
    m = _NUMPY_WRAP.match(s) or _TORCH_WRAP.match(s)
    if m:
        s = m.group("v").strip()
    special = _SPECIAL.get(s.lower())
    if special is not None:
        return special
    try:
        return float(s)
    except ValueError:
        return None


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

    def bad(self, lineno: int, reason: str, category: str = "malformed line") -> None:
        """Count a row-like line that could not be used; fatal under ``strict``."""
        if self.strict:
            raise StrictModeError(reason, path=self.report.path, line=lineno)
        self.report.rows_read += 1
        self.report.skip(lineno, reason, category)


def open_binary(path: Path) -> IO[bytes]:
    try:
        if path.suffix == ".gz":
            fh: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]
            fh.peek(1)  # type: ignore[attr-defined]
            return fh
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(1-based line number, text)`` of a text file, undecodable bytes replaced."""
    with open_binary(path) as fh:
        try:
            for i, raw in enumerate(fh, 1):
                yield i, raw.decode("utf-8", errors="replace").rstrip("\r\n")
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"read failed: {exc}", path=str(path)) from None


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
        buf: Rows = []
        for row in self.rows():
            buf.append(row)
            if len(buf) >= batch_rows:
                yield self._emit(buf)
                buf = []
        if buf:
            yield self._emit(buf)

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
        for lineno, text in iter_lines(self.path):
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
                f"line {line} step {s}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in list(vals.items())[:4])
                for line, s, vals in self.apart[:5])
            report.notes.append(f"{len(self.apart)} {self.what} kept out of the training step stream "
                                f"({shown}{'; ...' if len(self.apart) > 5 else ''})")


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)

"""A CSV table read block by block through ``pyarrow.csv``, with the row-by-row reader's result.

The file is cut into blocks of whole records (:func:`~forensics.io.csv_dialect.record_ends`:
quoted line ends stay inside their record), so memory stays bounded and every record keeps its
line. Each block is parsed by ``pyarrow.csv`` with the step columns as text (steps are parsed
exactly, never through float64); a column pyarrow types as numbers is taken as it is, and only a
column it leaves as text gets the odd-cell parse (``np.float64(...)``, ``tensor(...)``, ``true``,
cells with spaces): numbers where :func:`~forensics.io.canonical.parse_number` finds one, the
rest set aside by the canonical layer (a column without a number is text). A block pyarrow
cannot take whole (a row of the wrong width, invalid UTF-8) is read by Python's :mod:`csv`
module, the reference: the same rows, values and skips either way.

What cannot be a complete table is said, never dropped silently: a quote never closed (its line
is skipped with the reason and reading resumes on the next line), a record longer than
``MAX_LINE_BYTES``, and a last line with no line end (the file cut mid-write: its last cell is
read as missing, located).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..records import record
from .canonical import parse_number
from .csv_dialect import Dialect, csv_records, record_ends
from .limits import CELL_BUDGET, MAX_LINE_BYTES
from .readers.arrow import budget_groups, rows_to_raw
from .readers.base import RawBatch

__all__ = ["BLOCK_BYTES", "Block", "CsvBlocks", "Parsed", "blocks"]

#: Bytes read at a time (whole records are parsed; the rest is carried to the next block).
BLOCK_BYTES = 8 << 20

UNTERMINATED = ("unterminated quote: the quoted field opened on this line is never closed (the line is "
                "skipped; reading resumes on the next line)")
TOO_LONG = (f"record longer than {MAX_LINE_BYTES} bytes (a quote not closed?): the line is skipped; "
            "reading resumes on the next line")
CUT = "the last cell of a final line with no line end (the file was cut mid-write?)"

_INTEGER = re.compile(r"^[+-]?\d{1,30}$")

Bad = Callable[[int, str, str], None]


@record(frozen=True)
class Block:
    """Whole records: ``data`` (its first byte starts a record), the line of its first record,
    its line ends (``newlines``) and whether it is the end of the file."""

    data: bytes
    line: int
    newlines: int
    final: bool
    delimiter: str

    @property
    def cut_last(self) -> bool:
        """Whether it ends the file with a record that has no line end."""
        return self.final and not self.data.endswith(b"\n") and \
            bool(self.data[self.data.rfind(b"\n") + 1:].strip())

    def record_lines(self) -> np.ndarray:
        """The line where each record starts (a final record with no line end included)."""
        if b'"' not in self.data:
            return self.line + np.arange(self.newlines + self.cut_last, dtype=np.int64)
        ends, _ = record_ends(self.data, self.delimiter)
        starts = np.concatenate([[0], ends + 1])
        if not self.cut_last:
            starts = starts[:-1]
        nls = np.flatnonzero(np.frombuffer(self.data, dtype=np.uint8) == 10)
        return self.line + np.searchsorted(nls, starts).astype(np.int64)


def _cut(pending: bytes, delimiter: str, eof: bool) -> tuple[int, bool]:
    """``(bytes of whole records at the start of pending, whether a quoted field is open)``."""
    if b'"' not in pending:
        return (len(pending) if eof else pending.rfind(b"\n") + 1), False
    ends, open_at = record_ends(pending, delimiter)
    if eof and open_at is None:
        return len(pending), False
    return (int(ends[-1]) + 1 if len(ends) else 0), open_at is not None


def blocks(fh: IO[bytes], line: int, delimiter: str, bad: Bad) -> Iterator[Block]:
    """The blocks of ``fh`` (positioned at a record start on ``line``). An unterminated quote or
    a record past ``MAX_LINE_BYTES`` costs its first line, reported through ``bad``."""
    pending, eof, skipping = b"", False, False
    while not (eof and not pending):
        if not eof:
            chunk = fh.read(BLOCK_BYTES)
            eof = not chunk
            if skipping:  # the rest of a line too long to hold
                nl = chunk.find(b"\n")
                skipping = nl < 0 and not eof
                chunk = b"" if nl < 0 else chunk[nl + 1:]
            pending = pending + chunk if pending else chunk
            if eof and not pending:
                return
        cut, _ = _cut(pending, delimiter, eof)
        if cut == 0 and (eof or len(pending) > MAX_LINE_BYTES):
            bad(line, UNTERMINATED if eof else TOO_LONG, "unterminated quote" if eof else "line too long")
            nl = pending.find(b"\n")
            skipping = nl < 0 and not eof
            pending = b"" if nl < 0 else pending[nl + 1:]
            line += 1
            continue
        if cut:
            body = pending[:cut] if cut < len(pending) else pending
            pending = pending[cut:]
            newlines = body.count(b"\n")
            yield Block(body, line, newlines, eof and not pending, delimiter)
            line += newlines


_NULL_TEXT = pa.nulls(1, pa.string())[0]  # (pa.scalar(None) would import pandas)


def _trimmed(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Text cells without surrounding whitespace; an empty one is null."""
    col = pc.utf8_trim_whitespace(col)
    empty = pc.invert(pc.cast(pc.utf8_length(col), pa.bool_()))  # (a Python "" would import pandas)
    return pc.if_else(empty, _NULL_TEXT, col)


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap from bit ``offset``, as booleans."""
    return np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")[offset:offset + n].astype(bool)


def _nulls(arr: pa.Array) -> np.ndarray:
    validity = arr.buffers()[0]
    return np.zeros(len(arr), dtype=bool) if validity is None else ~_bits(validity, arr.offset, len(arr))


def _values(col: pa.ChunkedArray, dtype: type) -> np.ndarray:
    """An int64 or float64 column as numpy, exactly; a null is 0 or NaN. Read from the Arrow
    buffers: ``to_numpy`` would import pandas (a quarter of a second)."""
    arr = col.combine_chunks()
    out: np.ndarray = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset:]
    if arr.null_count:
        out = out.copy()
        out[_nulls(arr)] = 0 if dtype is np.int64 else math.nan
    return out


def _typed_column(raw: RawBatch, name: str, col: pa.ChunkedArray) -> None:
    """Add a column pyarrow typed (int64, float64 or bool) to ``raw``: integers exact, booleans as
    1.0/0.0, a null masked as missing."""
    if pa.types.is_integer(col.type):
        raw.numeric[name] = _values(col, np.int64)
    else:
        raw.numeric[name] = _values(pc.cast(col, pa.float64()), np.float64)
    if col.null_count:
        raw.missing[name] = _nulls(col.combine_chunks())


def _parsed(values: list[Any]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, Any]]]:
    """``(float64 values, missing, (row, text) of the cells that are not numbers)``."""
    out = np.full(len(values), math.nan)
    miss = np.ones(len(values), dtype=bool)
    stray: list[tuple[int, Any]] = []
    memo: dict[str, float | None] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        num = memo[v] if v in memo else memo.setdefault(v, parse_number(v))
        if num is None:
            stray.append((i, v))
        else:
            out[i], miss[i] = num, False
    return out, miss, stray


def _odd_column(raw: RawBatch, name: str, col: pa.ChunkedArray, is_step: bool) -> None:
    """Add a column pyarrow left as text (trimmed) to ``raw``: a step as exact int64 when every
    cell is an integer (else as text, for the canonical layer's exact parse), another column as
    numbers where it holds any (the rest stray), else as text."""
    target = pa.int64() if is_step else pa.float64()
    try:
        nums = pc.cast(col, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        nums = None
    if nums is not None:
        raw.numeric[name] = _values(nums, np.int64 if is_step else np.float64)
        if col.null_count:
            raw.missing[name] = _nulls(col.combine_chunks())
        return
    values = col.to_pylist()
    parsed = None if is_step else _parsed(values)
    if parsed is None or len(parsed[2]) == len(values) - col.null_count:
        raw.text[name] = np.array(values, dtype=object)
        return
    raw.numeric[name], miss, stray = parsed
    if miss.any():
        raw.missing[name] = miss
    if stray:
        raw.stray[name] = stray


def table_batch(table: pa.Table, lines: np.ndarray, steps: frozenset[str]) -> RawBatch:
    """A :class:`RawBatch` of a block's rows: pyarrow's numbers as they are, text columns parsed
    by :func:`_odd_column`; a column with no value in these rows is left out (as the row-by-row
    reader never saw it)."""
    raw = RawBatch({}, {}, {}, lines)
    odd: dict[str, pa.ChunkedArray] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if col.null_count == len(col):
            continue
        if pa.types.is_string(col.type):
            odd[name] = col
        else:
            _typed_column(raw, name, col)
    for name, col in odd.items():
        _odd_column(raw, name, col, name in steps)
    return raw


@record(frozen=True)
class Parsed:
    """A block, its bytes as UTF-8, the line of each record and pyarrow's table (or ``None``)."""

    block: Block
    data: bytes
    records: np.ndarray
    table: pa.Table | None


_TYPED = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_null,
          pa.types.is_string)


class CsvBlocks:
    """Reads the blocks of one CSV table (``names`` its unique column names) into raw batches.

    ``bad(line, reason, category)`` counts a skipped row; ``set_aside(line, key, reason)`` a value
    read as missing. ``arrow_blocks``/``python_blocks`` count how each block was read.
    """

    def __init__(self, dialect: Dialect, names: list[str], steps: frozenset[str], bad: Bad,
                 set_aside: Callable[[int, str, str], None]) -> None:
        self.dialect = dialect
        self.names = names
        self.steps = steps
        self.bad = bad
        self.set_aside = set_aside
        self.as_text: set[str] = set()  # columns pyarrow must leave as text (dates, odd steps)
        self.arrow_blocks = 0
        self.python_blocks = 0
        self.cut_line = 0

    def parse(self, block: Block) -> Parsed:
        """pyarrow's parse of a block (``None`` when it cannot take it whole). Safe to run in a
        worker thread: it reports nothing."""
        data = block.data if self.dialect.encoding == "utf-8" else \
            block.data.decode("latin-1").encode("utf-8")
        records = block.record_lines()
        return Parsed(block, data, records, self._arrow(data, len(records), b'"' in data))

    def batches(self, parsed: Parsed, batch_rows: int) -> Iterator[RawBatch]:
        """The raw batches of a parsed block, at most ``batch_rows`` rows each (fewer for a wide
        table: ``CELL_BUDGET``); a block pyarrow could not take is read by Python's csv module."""
        rows = max(1, min(batch_rows, CELL_BUDGET // max(len(self.names), 1)))
        block, records, table = parsed.block, parsed.records, parsed.table
        if table is None:
            self.python_blocks += 1
            yield from self._python(parsed.data, block, rows)
            return
        self.arrow_blocks += 1
        table, lines = self._nonblank(table, records)
        cut = block.cut_last and len(lines) and lines[-1] == records[-1]
        last = len(lines) - 1 if cut else -1
        for start in range(0, len(lines), rows):
            raw = table_batch(table.slice(start, rows), lines[start:start + rows], self.steps)
            if start <= last < start + rows:
                self._cut_cell(raw, last - start)
            yield raw

    def _arrow(self, data: bytes, records: int, quoted: bool) -> pa.Table | None:
        """The block as pyarrow parses it, or ``None`` when it cannot be taken whole. Steps are
        read as int64 (exact) or, once a step cell is not an integer, as text."""
        for _ in range(3):
            try:
                table, invalid = self._read(data, quoted)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
                if self.steps <= self.as_text:
                    return None
                self.as_text |= self.steps
                continue
            if invalid or table.num_rows != records:
                return None
            other = [f.name for f in table.schema if not any(ok(f.type) for ok in _TYPED)]
            if not other:
                return table
            self.as_text.update(other)  # dates, times: text as written, from now on
        return None

    def _read(self, data: bytes, quoted: bool) -> tuple[pa.Table, int]:
        """pyarrow's parse of a block and how many rows it found of the wrong width."""
        invalid = [0]

        def skip(row: Any) -> str:
            invalid[0] += 1
            return "skip"

        types = {n: pa.string() for n in self.as_text} | {n: pa.int64() for n in self.steps - self.as_text}
        table = pacsv.read_csv(pa.py_buffer(data), read_options=pacsv.ReadOptions(
            column_names=self.names, block_size=len(data) + 1, use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=self.dialect.delimiter, newlines_in_values=quoted, ignore_empty_lines=False,
                invalid_row_handler=skip),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                                 quoted_strings_can_be_null=True))
        return table, invalid[0]

    def _nonblank(self, table: pa.Table, lines: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """Text columns trimmed; rows with no value at all (a blank line, ``,,,``) dropped."""
        cols = [_trimmed(c) if pa.types.is_string(c.type) else c for c in table.columns]
        table = pa.Table.from_arrays(cols, names=table.column_names)
        if any(c.null_count == 0 for c in cols) or not cols:
            return table, lines
        keep = pc.invert(pc.is_null(cols[0]))
        for c in cols[1:]:
            keep = pc.or_(keep, pc.invert(pc.is_null(c)))
        kept = keep.combine_chunks()
        return table.filter(kept), lines[_bits(kept.buffers()[1], kept.offset, len(kept))]

    def _python(self, data: bytes, block: Block, rows: int) -> Iterator[RawBatch]:
        """The block read by Python's csv module (the reference reader), row by row."""
        text = data.decode("utf-8", errors="replace")
        width = len(self.names)
        kept: list[tuple[int, dict[str, Any]]] = []
        records = list(csv_records(io.StringIO(text, newline=""), self.dialect.delimiter, block.line))
        for k, (line, cells) in enumerate(records):
            if isinstance(cells, str):
                self.bad(line, cells, "malformed line")
                continue
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != width:
                self.bad(line, f"{len(cells)} cells, header has {width}", "malformed line")
                continue
            row = {k2: v for k2, c in zip(self.names, cells) if (v := self._cell(k2, c)) is not None}
            if block.cut_last and k == len(records) - 1:
                self._cut_row(line, row)
            if row:
                kept.append((line, row))
        for group in budget_groups(kept, rows, lambda r: r[1].keys()):
            yield rows_to_raw([r for _, r in group], np.array([ln for ln, _ in group], dtype=np.int64))

    def _cell(self, name: str, text: str) -> Any:
        s = text.strip()
        if not s:
            return None
        if name in self.steps:  # exact: an integer as it is, other text for the canonical layer
            return int(s) if _INTEGER.match(s) else s
        num = parse_number(s)
        return s if num is None else num

    def _cut_row(self, line: int, row: dict[str, Any]) -> None:
        self.cut_line = line
        if row.pop(self.names[-1], None) is not None:
            self.set_aside(line, self.names[-1], CUT)

    def _cut_cell(self, raw: RawBatch, i: int) -> None:
        """Read the last cell of row ``i`` (the file's cut last line) as missing, located."""
        name = self.names[-1]
        line = int(raw.lines[i])
        self.cut_line = line
        had = False
        if name in raw.numeric:
            miss = raw.missing.setdefault(name, np.zeros(len(raw), dtype=bool))
            had = not miss[i] or any(j == i for j, _ in raw.stray.get(name, ()))
            miss[i] = True
            if name in raw.stray:
                raw.stray[name] = [(j, v) for j, v in raw.stray[name] if j != i]
        elif name in raw.text:
            had = raw.text[name][i] is not None
            raw.text[name][i] = None
        if had:
            self.set_aside(line, name, CUT)

"""CSV the way CSV is: where records end, which delimiter and encoding, where the header is.

Quoting follows Python's :mod:`csv` module and pyarrow alike: a quote opens a quoted field only
at the start of a field (after a delimiter or a line end); inside one, ``""`` is a quote and a
lone ``"`` closes it; a quote anywhere else is a plain character. A line end inside a quoted
field does not end the record (a header may hold one too).

:func:`sniff` reads a detection head: leading blank lines and a UTF-8 BOM are passed over, the
text is UTF-8 or else Latin-1 (every byte one character; the reader notes it), the delimiter is
a tab, a comma, a semicolon or a bar, whichever splits the header and the first record alike,
and the header is a record of names, none a number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np

from ..records import record
from .canonical import parse_number
from .inputs import BOM
from .limits import MAX_LINE_BYTES

__all__ = ["Dialect", "csv_records", "record_ends", "sniff", "unique_names"]

_QUOTE, _NL, _CR = ord('"'), ord("\n"), ord("\r")
_DELIMITERS = ("\t", ",", ";", "|")


@record(frozen=True)
class Dialect:
    """How a CSV file is written. ``data_start`` is the byte offset (in the file, BOM included)
    just past the header record and ``data_line`` the 1-based line where data begins."""

    delimiter: str
    encoding: str  # "utf-8" or "latin-1"
    header: list[str]
    header_line: int
    data_start: int
    data_line: int


def _quoted_spans(buf: bytes, delim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(opens, closes)``: the byte spans of the quoted fields of ``buf`` (which starts a
    record); an unterminated one closes at ``len(buf)``."""
    quotes = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == _QUOTE).tolist()
    opens: list[int] = []
    closes: list[int] = []
    i, n = 0, len(quotes)
    while i < n:
        q = quotes[i]
        if q and buf[q - 1] not in (delim, _NL, _CR):  # a quote inside a field: a character
            i += 1
            continue
        j = i + 1
        while j + 1 < n and quotes[j + 1] == quotes[j] + 1:  # "" inside a quoted field
            j += 2
        opens.append(q)
        closes.append(quotes[j] if j < n else len(buf))
        i = j + 1
    return np.array(opens, dtype=np.int64), np.array(closes, dtype=np.int64)


def record_ends(buf: bytes, delim: str) -> tuple[np.ndarray, int | None]:
    """``(positions of the line ends that end a record, start of an unterminated quoted field or
    None)`` in ``buf``, which starts a record.

    >>> ends, open_at = record_ends(b'a,"x\\ny"\\n1,2\\n3,"4', ",")
    >>> ends.tolist(), open_at
    ([7, 11], 14)
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    nls = np.flatnonzero(arr == _NL)
    if b'"' not in buf:
        return nls, None
    opens, closes = _quoted_spans(buf, ord(delim))
    if not len(opens):
        return nls, None
    k = np.searchsorted(opens, nls) - 1
    inside = (k >= 0) & (nls < closes[np.maximum(k, 0)])
    open_at = int(opens[-1]) if closes[-1] == len(buf) else None
    return nls[~inside], open_at


def csv_records(text: io.TextIOBase | io.StringIO, delimiter: str, line0: int = 1
                ) -> Iterator[tuple[int, list[str] | str]]:
    """``(line, cells)`` of Python's CSV reader over ``text``; the line is the 1-based line of the
    record's start (``line0`` for the first). A record the reader rejects (a NUL byte, a field past
    ``MAX_LINE_BYTES``) comes as its reason."""
    csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))
    reader = csv.reader(text, delimiter=delimiter)
    start = line0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield start, f"CSV error: {exc}"
            start = line0 + reader.line_num
            continue
        yield start, cells
        start = line0 + reader.line_num


def unique_names(cells: list[str]) -> tuple[list[str], list[tuple[int, str, str]]]:
    """Column names from header cells (stripped; an empty one is ``index``), a repeated name
    made unique as ``name#2``, ``name#3``... never colliding with a name the header already has;
    and the renames as ``(1-based column, name, new name)``.

    >>> unique_names(["step", "kl", "kl", "kl#2"])
    (['step', 'kl', 'kl#3', 'kl#2'], [(3, 'kl', 'kl#3')])
    """
    names = [c.strip() or "index" for c in cells]
    taken = set(names)
    out: list[str] = []
    seen: set[str] = set()
    renamed: list[tuple[int, str, str]] = []
    for col, name in enumerate(names, 1):
        if name in seen:
            k = 2
            while f"{name}#{k}" in taken:
                k += 1
            new = f"{name}#{k}"
            taken.add(new)
            renamed.append((col, name, new))
            name = new
        seen.add(name)
        out.append(name)
    return out, renamed


def _decode(raw: bytes) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if exc.start >= len(raw) - 3 and exc.reason.startswith("unexpected end"):
            return raw[: exc.start].decode("utf-8"), "utf-8"  # the head cut inside a character
        return raw.decode("latin-1"), "latin-1"


def _is_header(cells: list[str]) -> bool:
    names = [c.strip() for c in cells]
    if len(names) < 2 or sum(1 for n in names if n) < 2:
        return False
    return all(not n or parse_number(n) is None for n in names) and \
        not any(ord(ch) < 32 and ch not in "\t\r\n" for n in names for ch in n)


def _labelled(cell: str) -> bool:
    """Whether a cell is a ``label:`` (a name ending in a colon): the first cell of every line of
    a ``key: value`` listing, never a column name or a step.

    >>> _labelled("VmPeak:"), _labelled("step"), _labelled("12:30")
    (True, False, False)
    """
    name = cell.strip()
    return len(name) > 1 and name.endswith(":") and ":" not in name[:-1] and not name[0].isdigit()


def _first_row(text: str, delim: str, header_end: int, ends: list[int]) -> tuple[list[str], bool] | None:
    """The first record after the header with a cell that is not blank, and whether it is whole
    in the head (the head may end inside it); ``None`` when the head holds none."""
    prev = header_end + 1
    for e in [*ends, None]:
        try:
            cells = next(csv.reader(io.StringIO(text[prev:e], newline=""), delimiter=delim), [])
        except csv.Error:
            return None
        if any(c.strip() for c in cells):
            return cells, e is not None
        if e is None:
            return None
        prev = e + 1
    return None


def _fits(header: list[str], row: list[str], whole: bool) -> bool:
    if not whole:  # the head ends inside the record: its last cell may be cut
        row = row[:-1]
        if len(row) > len(header) - 1:
            return False
    elif len(row) != len(header):
        return False
    return any(parse_number(c) is not None for c in row if c.strip())


def sniff(head: bytes, need_row: bool = True) -> Dialect | None:
    r"""The dialect of a CSV head, or ``None`` when it is not a header of names followed by a
    record of as many cells, at least one a number (``need_row`` false: a header is enough).

    >>> d = sniff(b'\n\nstep;"k\nl"\n\n0;0.5\n')
    >>> d.delimiter, d.header, d.header_line, d.data_line
    (';', ['step', 'k\nl'], 3, 5)
    """
    bom = len(BOM) if head.startswith(BOM) else 0
    body = head[bom:]
    if b"\x00" in body[:4096]:
        return None
    content = len(body) - len(body.lstrip(b" \t\r\n"))
    if body[content:content + 1] in (b"{", b"#", b""):
        return None
    line_start = body.rfind(b"\n", 0, content) + 1
    text, encoding = _decode(body[line_start:])
    for delim in _DELIMITERS:
        dialect = _try(text, encoding, delim, bom + line_start, body[:line_start].count(b"\n") + 1, need_row)
        if dialect is not None:
            return dialect
    return None


def _try(text: str, encoding: str, delim: str, start: int, line: int, need_row: bool) -> Dialect | None:
    """The dialect with ``delim`` when it fits ``text`` (the head from the header line on)."""
    if delim not in text.split("\n", 1)[0] and '"' not in text[:1]:
        return None
    ends = _text_record_ends(text, delim)
    if not ends:
        return None
    header_text = text[: ends[0]]
    try:
        header = next(csv.reader(io.StringIO(header_text, newline=""), delimiter=delim))
    except (csv.Error, StopIteration):
        return None
    if not _is_header(header):
        return None
    found = _first_row(text, delim, ends[0], ends[1:])
    if need_row and (found is None or not _fits(header, *found)):
        return None
    if found is not None and _labelled(header[0]) and _labelled(found[0][0]):
        return None  # "Name:<tab>value" lines (/proc/self/status, a settings dump): a listing, not a table
    header_bytes = len(header_text.encode(encoding)) + 1
    return Dialect(delim, encoding, header, line, start + header_bytes, line + header_text.count("\n") + 1)


def _text_record_ends(text: str, delim: str) -> list[int]:
    """:func:`record_ends` for text (positions in characters)."""
    if text.isascii():
        return record_ends(text.encode("ascii"), delim)[0].tolist()
    arr = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    narrow = np.where(arr < 128, arr, 0x41).astype(np.uint8).tobytes()  # one byte a character
    return record_ends(narrow, delim)[0].tolist()

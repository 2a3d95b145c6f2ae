"""Streaming JSONL reader (plain or gzip) with bounded memory and per-line error reports.

Each chunk of whole lines takes the first of three parses that accepts it:

1. **polars**, against the columns seen so far (:class:`_KnownColumns`): about half the CPU of
   pyarrow's parse. polars drops keys that are not in the schema it is given, so the parse is
   only taken when every ``key: value`` pair of the chunk is accounted for (its colons are
   counted, see :meth:`_KnownColumns.parse`); a chunk with a new key, a type that changes or a
   nested value goes on to
2. **pyarrow**, which infers the columns of the whole chunk (and teaches them to step 1);
3. **line by line**, for a chunk pyarrow rejects (a malformed line, a ``NaN`` spelled the Python
   way), so every bad line is reported with its number and reason and every good line is kept.

The fast parses only see chunks they are safe on (:mod:`forensics.io.limits`): a line with more
opening brackets than ``MAX_DEPTH`` (pyarrow overflows its stack on very deep nesting; polars stops
at its own depth limit and accepts no nested value, so only pyarrow's chunks are counted), a string
with invalid UTF-8, or a float column holding values of 2**53 or more (integers there may have
been rounded) sends the chunk line by line, where each bound is a reported reason to skip the
row. A line longer than ``MAX_LINE_BYTES`` is skipped without being held. A log whose rows keep
adding keys is read in smaller chunks, so that a chunk holds about ``CELL_BUDGET`` cells (rows x
columns) at most: the cost stays linear in the rows.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pj

from ...errors import InputError, StrictModeError
from ...records import record
from ...schema import canonical_name
from ..inputs import BOM, open_binary, truncation
from ..limits import CELL_BUDGET, MAX_DEPTH, MAX_LINE_BYTES, MAX_NUMBER_DIGITS, MAX_ROW_KEYS
from .arrow import budget_groups, frame_to_raw, rows_to_raw, table_to_raw
from .base import RawBatch, ReadReport

if TYPE_CHECKING:  # polars is imported on first use: a Parquet scan or `forensics --help` does not pay for it
    import polars as pl

__all__ = ["JsonlSource", "head_objects", "json_depth", "parse_json_object", "parse_json_value"]

#: The first chunk: small, so that a file whose rows each add a key costs little before the
#: chunk size adapts to it (later chunks aim at ``batch_rows`` rows within the cell budget).
_FIRST_CHUNK = 64 << 10
_MIN_CHUNK = 1 << 20
#: Largest chunk (about 14k rows of a 22-field log). pyarrow's parse needs a few times a chunk's
#: size while it runs, and up to ``_AHEAD + 2`` chunks are alive at once: larger chunks cost
#: memory (a million-step scan peaks about 40 MB higher with 32 MB chunks two ahead) and gain no
#: measurable speed.
_MAX_CHUNK = 8 << 20
#: Most rows in one batch handed on. Trackers pay a fixed cost per batch (10k-row batches cost a
#: million-step scan 0.7 s more than 32k-row ones), but every row of a batch is held several
#: times while it is analysed (65k-row batches peak about 35 MB higher than 32k-row ones).
_BATCH_CAP = 32768
#: pyarrow's JSON block size unless :func:`_json_blocks` chooses a smaller one.
_DEFAULT_BLOCK = 1 << 20
#: Chunks the reader thread may parse ahead of the consumer (each holds its bytes and columns):
#: one is enough to keep both the parse and the analysis busy.
_AHEAD = 1

T = TypeVar("T")


def _ahead(items: Iterator[T], depth: int) -> Iterator[T]:
    """Iterate ``items`` in a daemon thread, up to ``depth`` items ahead of the consumer.

    Exceptions in the thread are re-raised here; stopping early (an error in the consumer, a
    closed generator) stops the thread at its next item.
    """
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for it in items:
                if not put(("item", it)):
                    return
        except BaseException as exc:  # handed to the consumer, re-raised there
            put(("error", exc))
            return
        put(("done", None))

    thread = threading.Thread(target=work, name="forensics-jsonl-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN_OR_CLOSE = re.compile(rb"[\[\]{}]")


def json_depth(raw: bytes) -> int:
    """Deepest nesting of objects and lists in one JSON text (brackets in strings ignored).

    >>> json_depth(b'{"a": [1, {"b": "[[["}]}'), json_depth(b'1')
    (3, 0)
    """
    depth = deepest = 0
    for m in _OPEN_OR_CLOSE.finditer(_STRING.sub(b'""', raw)):
        if m.group() in (b"{", b"["):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


#: Digits to ``9``, what continues a number's fraction or exponent (``.``, ``e``, ``E``) to
#: ``.``, every other byte to a space: an integer of 19 digits or more is then a space (or the
#: start) and 19 nines, found by ``bytes.translate`` and a substring search at C speed (a regex
#: costs 40 ns a byte, most of the cost of parsing a line).
_NUMBER_MASK = bytes(0x39 if 0x30 <= b <= 0x39 else 0x2E if b in b".eE" else 0x20 for b in range(256))
_NINETEEN_DIGITS = b"9" * 19


def _long_integer(data: bytes) -> bool:
    """An integer of 19 digits or more: maybe beyond int64, which orjson reads as a rounded float
    (a step below -2**63 would become -2**63); Python's json reads it exactly. The digits of a
    fraction or an exponent do not count (a digit run in a string may, which costs only speed).

    >>> _long_integer(b'{"step": 12345678901234567890}'), _long_integer(b'-9223372036854775809')
    (True, True)
    >>> _long_integer(b'{"kl": 0.0012345678901234567891, "x": 1e1234567890123456789}')
    False
    """
    masked = data.translate(_NUMBER_MASK)
    return masked.startswith(_NINETEEN_DIGITS) or b" " + _NINETEEN_DIGITS in masked


#: A bare ``nan``, ``inf`` or ``infinity`` (any case, signed) where a JSON value goes.
_BARE = re.compile(rb"(?<=[:\[,])(\s*)([-+]?)(nan|inf|infinity)(?=\s*[,}\]])", re.IGNORECASE)


def _spelled(m: re.Match[bytes]) -> bytes:
    """The JSON literal Python's json reads for a bare nan or inf."""
    return m.group(1) + (b"NaN" if m.group(3).lower() == b"nan" else
                         (b"-Infinity" if m.group(2) == b"-" else b"Infinity"))


def parse_json_value(raw: bytes | str, *, strict: bool = False) -> tuple[Any, str]:
    """Parse one JSON text; ``(value, "")`` or ``(None, reason)``.

    orjson first (fast); Python's json for what it rejects, since trainers write the ``NaN``,
    ``Infinity`` and ``-Infinity`` literals it accepts. The bounds of :mod:`forensics.io.limits`
    (line length, nesting depth, digits of a number) are reasons, never crashes.

    >>> parse_json_value('[' * 2000 + ']' * 2000)[1]
    'nested deeper than 256 levels'
    >>> parse_json_value('-9223372036854775809')
    (-9223372036854775809, '')
    >>> parse_json_value('{"a": nan, "b": -inf, "c": [inf,NAN], "d": "nan"}')
    ({'a': nan, 'b': -inf, 'c': [inf, nan], 'd': 'nan'}, '')

    ``strict`` (``--strict``) reads JSON only: a bare ``nan`` (Python's print, not JSON) and a
    string holding half of a UTF-16 surrogate pair (no character) are reasons.

    >>> parse_json_value('{"a": nan}', strict=True)[1], parse_json_value('"\\\\ud800"', strict=True)[1]
    ('invalid JSON: Expecting value (column 7)', 'invalid JSON: a lone surrogate \\\\ud800 (half of a character)')
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_LINE_BYTES:
        return None, f"line longer than {MAX_LINE_BYTES} bytes"
    if data.count(b"{") + data.count(b"[") > MAX_DEPTH and json_depth(data) > MAX_DEPTH:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    if not _long_integer(data):  # orjson turns an integer beyond 64 bits into a float
        try:
            return orjson.loads(data), ""
        except orjson.JSONDecodeError:
            pass
    try:  # Python's json accepts NaN, Infinity and -Infinity, as trainers write them
        value = json.loads(data)
        if strict and (lone := _LONE_SURROGATE.search(data)) is not None and _has_surrogate(value):
            return None, f"invalid JSON: a lone surrogate {lone.group().decode()} (half of a character)"
        return value, ""
    except json.JSONDecodeError as exc:
        if not strict and _BARE.search(data) is not None:  # nan, inf as Python prints them (f-strings, str(dict))
            value, why = parse_json_value(_BARE.sub(_spelled, data))
            if not why:
                return value, ""
        return None, f"invalid JSON: {exc.msg} (column {exc.colno})"
    except UnicodeDecodeError:
        return None, "invalid JSON: not valid UTF-8"
    except ValueError:  # Python refuses to convert more digits than its int limit
        return None, f"a number longer than {MAX_NUMBER_DIGITS} digits"
    except RecursionError:
        return None, f"nested deeper than {MAX_DEPTH} levels"


#: A ``\\uD800``-``\\uDFFF`` escape: half of a UTF-16 pair, a character only with its other half.
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _has_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a string with a lone surrogate (it cannot be UTF-8)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def parse_json_object(raw: bytes | str, *, strict: bool = False) -> tuple[dict[str, Any] | None, str]:
    """Parse one JSON line into an object; return ``(object, "")`` or ``(None, reason)``
    (see :func:`parse_json_value`; an object of more than ``MAX_ROW_KEYS`` keys is a reason too).

    >>> parse_json_object('{"a": NaN}')
    ({'a': nan}, '')
    >>> parse_json_object('[1]')[1], parse_json_object('{"a": ' + '9' * 5000 + '}')[1]
    ('expected a JSON object, got list', 'a number longer than 4300 digits')
    """
    obj, reason = parse_json_value(raw, strict=strict)
    if reason:
        return None, reason
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    if len(obj) > MAX_ROW_KEYS:
        return None, f"more than {MAX_ROW_KEYS} keys in one row"
    return obj, ""


def head_objects(head: bytes, lines: int = 64) -> tuple[int, int]:
    """``(objects, others)``: how many of the first whole non-blank lines of ``head`` are JSON
    objects and how many are not (comments, malformed lines); for format detection, which asks
    whether the objects are as many as the others at least: the count stops once they are half
    the lines (the answer then holds whatever the rest are; ``others`` counts the lines not
    counted as objects).

    >>> head_objects(b'# comment\\n{"step": 1}\\n{"step": 2}\\n{"step"')
    (2, 1)
    >>> head_objects(b'{"step": 1}\\n{"step": 2}\\n# comment\\n#\\n')
    (2, 2)
    >>> head_objects(b'# a\\n# b\\n{"step": 1}\\n')
    (1, 2)
    """
    found = [s for s in (line.strip() for line in head.split(b"\n")[:-1][:lines]) if s]
    objects = 0
    for s in found:
        if s.startswith(b"{") and parse_json_object(s)[0] is not None:
            objects += 1
            if 2 * objects >= len(found):
                break
    return objects, len(found) - objects


@record
class _Chunk:
    """One chunk of whole lines, parsed by the reader thread.

    ``raw`` is the pyarrow fast path's result; when pyarrow rejected the chunk, ``body`` holds its
    bytes for the line-by-line parse (which reports bad lines, so it runs in the caller's thread).
    """

    line0: int
    size: int  # bytes consumed from the (uncompressed) stream
    raw: RawBatch | None = None
    body: bytes | None = None
    final: bool = False
    too_long: bool = False  # line ``line0`` is longer than MAX_LINE_BYTES: skipped unread


_COLON, _NEWLINE = ord(":"), ord("\n")
#: Most keys the polars fast path parses against (see :class:`_KnownColumns`).
_MAX_SCHEMA = 1024
_EXACT = 2.0**53
#: Bytes still to parse for which polars is imported (unless it is already). polars' parse
#: saves 0.7-3.9 ms of CPU a megabyte against pyarrow's (a log of long floats, a log of short
#: ones), its import costs 0.16 s: a file of known size imports it at its second chunk when at
#: least this much is left (a 69 MB log spent a quarter of its read importing polars for its last
#: 5 MB when the rule was "after 64 MB"); a stream of unknown size (gzip) once this much is read.
_POLARS_WORTH = 128 << 20


@functools.lru_cache(maxsize=4096)
def _is_step_key(name: str) -> bool:
    hit = canonical_name(name)
    return hit is not None and hit[0] == "step"


def _exact_floats(columns: Any) -> bool:  # (name, column) pairs
    """Whether every float column that holds the step keeps values below 2**53 in size: integer
    steps there were not rounded on the way into float64 (pyarrow and polars widen an integer
    column holding one float or one huge integer to float64). Other columns are metrics, read as
    float64 anyway. A column is polars' only when polars parsed the chunk: it is not imported
    for pyarrow's columns (a small log never needs it)."""
    pl = sys.modules.get("polars")
    for name, col in columns:
        if pl is not None and isinstance(col, pl.Series):
            if col.dtype == pl.Float64 and _is_step_key(name) and col.len() > col.null_count():
                lo, hi = col.min(), col.max()
                if (lo is not None and float(lo) <= -_EXACT) or (hi is not None and float(hi) >= _EXACT):  # type: ignore[arg-type]
                    return False
        elif pa.types.is_floating(col.type) and col.null_count < len(col) and _is_step_key(name):
            import pyarrow.compute as pc  # imported here: a small scan never needs it

            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if (lo is not None and lo <= -_EXACT) or (hi is not None and hi >= _EXACT):
                return False
    return True


def _valid_names(fields: Any) -> bool:
    """Whether every (nested) field name is valid UTF-8."""
    try:
        for f in fields:
            _ = f.name
            t = f.type
            if pa.types.is_struct(t) and not _valid_names([t.field(i) for i in range(t.num_fields)]):
                return False
            if (pa.types.is_list(t) or pa.types.is_large_list(t)) and not _valid_names([t.value_field]):
                return False
    except UnicodeDecodeError:
        return False
    return True


def _valid_strings(table: pa.Table) -> bool:
    """Whether the table's keys and strings are valid UTF-8 (pyarrow's JSON parse does not
    check; the line-by-line parse reports such a line)."""
    if not _valid_names(table.schema):
        return False
    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            try:
                col.validate(full=True)
            except pa.ArrowInvalid:
                return False
    return True


def _within(marks: np.ndarray, bounds: np.ndarray, limit: int) -> bool:
    """Whether no line (between ``bounds``) holds more than ``limit`` of the offsets ``marks``."""
    return len(marks) <= limit or int(np.diff(np.searchsorted(marks, bounds)).max()) <= limit


def _opened(arr: np.ndarray, nl: np.ndarray, count: _ByteCounter) -> tuple[int, int]:
    r"""``(brackets, starts)``: the opening brackets (``{`` and ``[``) of the chunk ``arr``
    (newlines at ``nl``) and its lines that start with ``{``, by two byte counts and the bytes
    after the newlines (numpy's compare-and-count costs a third of ``bytes.count``, which
    counting ``{``, ``[`` and ``\n{`` made a tenth of a million-row read).

    >>> arr = np.frombuffer(b'{"a": 1}\n{"b": [1]}\n', np.uint8)
    >>> _opened(arr, np.flatnonzero(arr == 10), _ByteCounter())
    (3, 2)
    """
    brackets = count(arr, 0x7B) + count(arr, 0x5B)
    after = nl[:-1] + 1 if len(nl) and nl[-1] == len(arr) - 1 else nl + 1
    starts = int(np.count_nonzero(arr[after] == 0x7B)) + int(len(arr) > 0 and arr[0] == 0x7B)
    return brackets, starts


def _few_brackets(arr: np.ndarray, nl: np.ndarray, count: _ByteCounter,
                  opened: tuple[int, int] | None = None) -> bool:
    r"""A sufficient test that no line of the chunk ``arr`` (newlines at ``nl``) holds more than
    ``MAX_DEPTH`` opening brackets: a line that starts with ``{`` holds one at least, so no line
    holds more than all the brackets less one for each other such line (``opened``: the
    chunk's :func:`_opened`, when counted already).

    >>> c = _ByteCounter()
    >>> flat, deep = np.frombuffer(b'{"a": 1}\n{"b": [1]}\n', np.uint8), np.frombuffer(b"[" * 300, np.uint8)
    >>> _few_brackets(flat, np.flatnonzero(flat == 10), c), _few_brackets(deep, np.flatnonzero(deep == 10), c)
    (True, False)
    """
    brackets, starts = opened or _opened(arr, nl, count)
    return brackets - max(starts - 1, 0) <= MAX_DEPTH


def _longest_line(nl: np.ndarray, size: int) -> int:
    """Bytes of the longest line in a chunk of ``size`` bytes with newlines at ``nl``, each line
    with its newline (a last line without one counted as if it had it).

    >>> _longest_line(np.array([3, 5]), 6), _longest_line(np.array([3, 5]), 11), _longest_line(np.array([], int), 4)
    (4, 6, 5)
    """
    if not len(nl):
        return size + 1
    tail = size - int(nl[-1]) if nl[-1] != size - 1 else 0
    return max(int(np.diff(nl, prepend=-1).max()), tail)


def _shallow(arr: np.ndarray, nl: np.ndarray, count: _ByteCounter, longest: int,
             opened: tuple[int, int] | None = None) -> bool:
    """Whether no line of the chunk ``arr`` (newlines at ``nl``, the longest line ``longest``
    bytes) holds more opening brackets than ``MAX_DEPTH`` (so no line nests deeper: pyarrow
    overflows its stack on very deep nesting) or more colons than ``MAX_ROW_KEYS`` (so no row has
    more keys): the fast parses are safe on it. Lines too short to hold that many cost nothing,
    and the lines are only cut apart when the quick counts cannot decide. ``opened``: the
    chunk's :func:`_opened`, when counted already."""
    deep = longest > 2 * MAX_DEPTH and not _few_brackets(arr, nl, count, opened)
    wide = longest > 4 * MAX_ROW_KEYS  # a key takes four bytes at least ("":0,)
    if not (deep or wide):
        return True
    n = len(arr)
    bounds = np.concatenate([[-1], nl, [n]]) if not len(nl) or nl[-1] != n - 1 else np.concatenate([[-1], nl])
    if deep and not _within(np.flatnonzero((arr | 0x20) == 0x7B), bounds, MAX_DEPTH):
        return False  # "{" and "[" (0x7B, 0x5B) and nothing else
    return not wide or _within(np.flatnonzero(arr == 0x3A), bounds, MAX_ROW_KEYS)


def _json_blocks(size: int, longest: int, whole: bool = False) -> pj.ReadOptions:
    """pyarrow's JSON read options for a chunk of ``size`` bytes whose longest line has
    ``longest``: two blocks at least, which its threads parse side by side (a 630 kB chunk in
    one block, its default 1 MB: 3.0 ms; in 256 kB blocks: 1.9 ms), but none under 64 kB nor
    over the default, and none a line does not fit in (it would straddle two: the default then,
    as before); one block when ``whole`` (see :func:`_typed_values`).

    >>> [_json_blocks(630_000, 700, whole).block_size for whole in (False, True)]
    [315000, 630001]
    """
    if whole:
        return pj.ReadOptions(block_size=size + 1)
    block = min(max(size // 2, _FIRST_CHUNK), _DEFAULT_BLOCK)
    return pj.ReadOptions(block_size=block if block > longest else _DEFAULT_BLOCK)


def _typed_values(arr: np.ndarray, opened: tuple[int, int], count: _ByteCounter) -> bool:
    r"""Whether the chunk ``arr`` (its :func:`_opened` counts) may hold a list, an object or a
    boolean as a value: more opening brackets than lines that start with ``{``, or a colon
    followed (after at most one space) by ``t``, ``f`` or more white space.

    pyarrow's JSON reader (26.0) can crash the process (SIGSEGV) when a column holds numbers in
    one block of a parse and such a value in another (a 17-line chunk of 10 kB rows, its step a
    number, an integer beyond int64, a float and a list, did in blocks of half its size), and a
    parse of one block refuses such a column instead (``ArrowInvalid``): such a chunk is parsed
    as one block. Numbers of every kind, strings and nulls across blocks crashed none of 800
    generated chunks; with lists, objects or booleans 2 of 150 crashed. The colons' test costs
    about 1 ms a megabyte, a colon inside a string at worst a parse of one block.

    >>> c = _ByteCounter()
    >>> flat, typed = (np.frombuffer(b, np.uint8) for b in (b'{"a": 1.5, "b": null}\n', b'{"a":true}\n'))
    >>> _typed_values(flat, (1, 1), c), _typed_values(typed, (1, 1), c), _typed_values(flat, (2, 1), c)
    (False, True, True)
    """
    if opened[0] != opened[1]:
        return True
    at = count.positions(arr, _COLON)
    if not len(at):
        return False
    end = len(arr) - 1
    first = arr[np.minimum(at + 1, end)]
    value = np.where(first == 0x20, arr[np.minimum(at + 2, end)], first)  # after one space
    return bool(_TYPED_START[value].any())


#: The bytes that start a boolean, or white space that hides what a value starts with.
_TYPED_START = np.zeros(256, dtype=bool)
_TYPED_START[list(b"tf \t\r\n")] = True


class _ByteCounter:
    """Counts one byte value in a buffer: numpy's compare-and-count (about 3x ``bytes.count``),
    into a scratch array kept between chunks (a fresh one per call costs page faults)."""

    def __init__(self) -> None:
        self._scratch = np.empty(0, dtype=bool)

    def __call__(self, data: bytes | memoryview | bytearray | np.ndarray, byte: int, end: int | None = None) -> int:
        arr = np.frombuffer(data, dtype=np.uint8, count=-1 if end is None else end)
        if len(self._scratch) < len(arr):
            self._scratch = np.empty(len(arr), dtype=bool)
        out = self._scratch[: len(arr)]
        np.equal(arr, byte, out=out)
        return int(np.count_nonzero(out))

    def positions(self, arr: np.ndarray, byte: int) -> np.ndarray:
        """Offsets of ``byte`` in the uint8 array ``arr``."""
        if len(self._scratch) < len(arr):
            self._scratch = np.empty(len(arr), dtype=bool)
        out = self._scratch[: len(arr)]
        np.equal(arr, byte, out=out)
        return np.flatnonzero(out)


def _plain_size(fh: IO[bytes]) -> int | None:
    """The size of an uncompressed file (None for gzip, whose size is known at its end only)."""
    if hasattr(fh, "gunzip"):
        return None
    try:
        return os.fstat(fh.fileno()).st_size
    except (OSError, ValueError, AttributeError):  # not a file (a test's buffer)
        return None


class _KnownColumns:
    """The flat columns of a file seen so far, as a polars schema, and the fast parse against it.

    pyarrow's parse of a chunk teaches the columns (:meth:`learn`); later chunks are parsed by
    polars against them (:meth:`parse`). Integers are read as floats (the trackers' type), so an
    int-then-float column needs no new schema. A nested value or a list anywhere in the file
    leaves it to pyarrow for good (``usable`` is False), and so does a schema of more than
    ``_MAX_SCHEMA`` keys. Integers are read as Int64 (exact) until a float shows up in the column.
    """

    def __init__(self, count: _ByteCounter, total: int | None = None) -> None:
        self.count = count
        self.total = total  # the file's size, when known (not gzip)
        self.schema: dict[str, str] = {}  # key -> polars type name
        self.usable = True
        self.version = 0  # bumped on every change: frames of two versions are not concatenated
        self.seen = 0  # bytes offered to :meth:`parse`

    def learn(self, table: pa.Table) -> None:
        """Add ``table``'s columns to the schema: polars' type names (``Int64``...), turned into
        its types by :meth:`parse`, so a file read in one chunk never imports polars."""
        if len(self.schema) + table.num_columns > _MAX_SCHEMA:
            self.usable = False  # rows that keep adding keys: a schema parse would cost rows x keys
            return
        for f in table.schema:
            t = f.type
            if pa.types.is_integer(t):
                dtype = "Int64"  # exact (steps); a float later widens it to Float64
            elif pa.types.is_floating(t) or pa.types.is_null(t):
                dtype = "Float64"
            elif pa.types.is_boolean(t):
                dtype = "Boolean"
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                dtype = "String"
            else:
                self.usable = False
                return
            old = self.schema.get(f.name)
            # a new key, or a known one that turned out numeric: a number column never becomes
            # text here (a metric logged once as the string "nan" would be lost for the rest of
            # the file); a chunk where it holds text goes to the other parses, as text there
            if old is None or (old != dtype and dtype == "Float64" and not pa.types.is_null(t)) or (
                    old == "Boolean" and dtype == "Int64"):
                self.schema[f.name] = dtype
                self.version += 1

    def parse(self, body: memoryview) -> pl.DataFrame | None:
        """polars' parse of the chunk ``body`` when it holds every ``key: value`` pair of it.

        polars silently drops a key its schema does not name. Every pair is one colon outside
        strings, so the parse is complete when the chunk's colons are all accounted for: one per
        non-null value (plus those in its key), those inside string values, and those of
        ``key: null`` pairs. Anything else (a new key, a colon in an odd place) sends the chunk
        to pyarrow: the check can refuse a good chunk, never accept one that lost a value.
        """
        if not (self.usable and self.schema):
            return None
        left = self.seen if self.total is None else self.total - self.seen
        self.seen += len(body)
        if "polars" not in sys.modules and left < _POLARS_WORTH:
            return None  # a small file, or its end: importing polars costs more than it saves
        import polars as pl

        data = bytes(body)  # polars reads bytes, not a view
        try:
            frame = pl.read_ndjson(data, schema={k: getattr(pl, t) for k, t in self.schema.items()})
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException, ValueError, OverflowError):
            return None  # a value of another type, NaN literals, bad lines: pyarrow decides
        if not _exact_floats((c.name, c) for c in frame.get_columns()):
            return None
        accounted = 0
        for col in frame.get_columns():
            present = col.len() - col.null_count()
            accounted += present * (1 + col.name.count(":"))
            if present and col.dtype == pl.String:
                # polars writes an object or a list found in a string column as its JSON text;
                # the other parses flatten objects into columns: leave such a chunk to them
                if bool(col.str.contains(r"^\s*[\[{]").any()):
                    return None
                accounted += int(col.str.count_matches(":", literal=True).sum() or 0)
        colons = self.count(data, _COLON)
        if accounted != colons:
            accounted += data.count(b":null") + data.count(b": null")
            if accounted != colons:
                return None
        return frame


def _frames_to_raw(frames: list[pl.DataFrame], lines: np.ndarray) -> RawBatch:
    """One raw batch of frames parsed against one schema; keys absent from all rows dropped."""
    import polars as pl

    frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    n = frame.height
    return frame_to_raw(frame.select([c.name for c in frame.get_columns() if c.null_count() < n]),
                        lines)


def _join(pending: list[tuple[Any, np.ndarray]], size: int) -> Iterator[_Chunk]:
    """One batch of the parsed chunks ``pending`` (several when a key changes type between them).

    ``pending`` holds polars frames of one schema, or pyarrow tables (see ``JsonlSource._chunks``).
    """
    pending = [(item, ln) for item, ln in pending if len(ln)]  # a chunk of blank lines holds no row
    if not pending:
        return
    pl = sys.modules.get("polars")  # imported by the chunks it parsed, if any

    lines = np.concatenate([ln for _, ln in pending]) if len(pending) > 1 else pending[0][1]
    if pl is not None and isinstance(pending[0][0], pl.DataFrame):
        yield _Chunk(int(lines[0]), size, raw=_frames_to_raw([f for f, _ in pending], lines))
        return
    try:
        table = pa.concat_tables([t for t, _ in pending], promote_options="permissive")
        parts = [(table, lines)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        parts = pending  # as parsed: each chunk's columns are consistent
    for i, (table, ln) in enumerate(parts):
        yield _Chunk(int(ln[0]) if len(ln) else 0, size if i == 0 else 0,
                     raw=table_to_raw(table, ln))


class JsonlSource:
    """Rows of a JSONL file (``.jsonl``, ``.json`` lines, or gzip), in chunks of whole lines."""

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="jsonl")
        self.bytes_read = 0  # uncompressed bytes consumed so far (for progress display)
        #: whether the chunks are parsed on a reader thread of their own (a core kept busy while
        #: the batches are analysed; see :func:`forensics.analysis.engine._tracker_pool`)
        self.reads_ahead = False

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        """Batches of about ``batch_rows`` rows.

        Reading and pyarrow's parse (which releases the GIL) run in a reader thread, at most
        ``_AHEAD`` chunks ahead, so the trackers analyse one chunk while the next is parsed: on
        a multi-core machine the scan then costs about the larger of the two, not their sum. A
        file of one chunk at most (``_MAX_CHUNK``) is read in the caller's thread: its one batch
        has nothing to overlap with, and the hand-off cost a small scan half a millisecond.
        Everything that touches the read report stays in this (the caller's) thread.
        """
        with open_binary(self.path) as fh:
            items = self._chunks(fh, batch_rows)
            size = _plain_size(fh)
            if size is None or size > _MAX_CHUNK:  # a file of one batch has nothing to overlap
                items = _ahead(items, _AHEAD)
                self.reads_ahead = True
            for item in items:
                self.bytes_read += item.size
                if item.too_long:
                    self._bad(item.line0, f"line longer than {MAX_LINE_BYTES} bytes (skipped unread)",
                              "line too long")
                    continue
                if item.body is not None:
                    for raw in self._parse_slow(item.body, item.line0, batch_rows, final=item.final):
                        self.report.rows_kept += len(raw)
                        yield raw
                elif item.raw is not None and len(item.raw):
                    self.report.rows_read += len(item.raw)
                    self.report.rows_kept += len(item.raw)
                    yield item.raw
            why = truncation(fh)
        if why:
            self.report.notes.append(f"{why}: every complete line before the cut was read")

    def _bad(self, line: int, reason: str, category: str) -> None:
        if self.strict:
            raise StrictModeError(reason, path=str(self.path), line=line)
        self.report.rows_read += 1
        self.report.skip(line, reason, category)

    def _chunks(self, fh: IO[bytes], batch_rows: int) -> Iterator[_Chunk]:
        """Parsed batches of about ``batch_rows`` rows (runs in the reader thread; pure: no report).

        The file is parsed in chunks of at most ``_MAX_CHUNK`` bytes (a parse needs a few times a
        chunk's size while it runs) and the parsed chunks are joined into batches of about
        ``batch_rows`` rows (at most ``_BATCH_CAP``, and about ``CELL_BUDGET`` cells): the
        trackers pay a fixed cost per batch. Only chunks of one parse (and one polars schema)
        are joined.
        """
        batch_rows = max(min(batch_rows, _BATCH_CAP), 1)
        count = _ByteCounter()
        known = _KnownColumns(count, _plain_size(fh))
        chunk = min(_FIRST_CHUNK, _MIN_CHUNK)
        line0 = 1  # 1-based number of the first line in the current chunk
        rest = b""
        size = 0  # bytes read since the last batch was handed on
        pending: list[tuple[Any, np.ndarray]] = []
        pending_kind = -1
        n_pending = pending_cols = 0
        buf = bytearray()
        start = True
        skipping = False  # inside a line longer than MAX_LINE_BYTES
        while True:
            # read after the carried partial line into one buffer, kept from chunk to chunk (the
            # parses copy what they keep): no ``rest + block`` copy, no fresh pages per chunk
            if len(buf) < len(rest) + chunk:
                buf = bytearray(len(rest) + chunk)
            buf[: len(rest)] = rest
            try:
                got = fh.readinto(memoryview(buf)[len(rest) : len(rest) + chunk]) or 0  # type: ignore[attr-defined]
            except (OSError, EOFError) as exc:
                raise InputError(f"read failed: {exc}", path=str(self.path)) from None
            if start and got:
                start = False
                if bytes(buf[:3]) == BOM:  # a UTF-8 byte order mark is not part of the first line
                    buf[: got - 3] = buf[3:got]
                    got -= 3
                    size += 3
            eof = not got
            size += got
            end = len(rest) + got
            if skipping:  # drop the rest of an over-long line
                at = buf.find(b"\n", 0, end)
                rest = b"" if at < 0 else bytes(buf[at + 1 : end])
                if at >= 0:
                    skipping = False
                    line0 += 1
                if eof:
                    break
                continue
            if eof:
                cut = end
            else:
                cut = buf.rfind(b"\n", 0, end) + 1
                if cut == 0:  # no line end yet: carry it all (a line longer than the chunk)
                    if end > MAX_LINE_BYTES:
                        yield from _join(pending, size)
                        pending, n_pending, pending_cols, size = [], 0, 0, 0
                        yield _Chunk(line0, 0, too_long=True)
                        skipping, rest = True, b""
                        continue
                    rest, chunk = bytes(buf[:end]), min(chunk * 2, MAX_LINE_BYTES)
                    continue
            body = memoryview(buf)[:cut]
            arr = np.frombuffer(buf, dtype=np.uint8, count=cut)
            n_newlines = count(arr, _NEWLINE)
            rest = bytes(buf[cut:end])
            if cut:
                parsed = self._parse_fast(body, arr, line0, n_newlines, known, count)
                if parsed is None:  # line by line, in the caller's thread, after what is pending
                    yield from _join(pending, size)
                    yield _Chunk(line0, 0, body=bytes(body), final=eof)
                    pending, n_pending, pending_cols, size = [], 0, 0, 0
                else:
                    kind, item, lines = parsed
                    ncols = item.width if kind >= 0 else item.num_columns
                    if kind != pending_kind or (n_pending + len(lines)) * (pending_cols + ncols) > CELL_BUDGET:
                        yield from _join(pending, size)
                        pending, n_pending, pending_cols, size, pending_kind = [], 0, 0, 0, kind
                    pending.append((item, lines))
                    n_pending += len(lines)
                    pending_cols += ncols
                    # aim the next chunk at about batch_rows rows, within the memory cap and the
                    # cell budget (rows that keep adding keys get small chunks)
                    per_row = max(cut // max(len(lines), 1), 1)
                    rows = min(batch_rows, max(CELL_BUDGET // max(ncols, 1), 64))
                    floor = _MIN_CHUNK if rows == batch_rows else _FIRST_CHUNK
                    chunk = int(min(max(per_row * rows, floor), _MAX_CHUNK))
                    if n_pending >= batch_rows or n_pending * pending_cols >= CELL_BUDGET:
                        yield from _join(pending, size)
                        pending, n_pending, pending_cols, size = [], 0, 0, 0
                line0 += n_newlines
            if eof:
                break
        yield from _join(pending, size)

    def _parse_fast(self, body: memoryview, arr: np.ndarray, line0: int, n_newlines: int,
                    known: _KnownColumns, count: _ByteCounter) -> tuple[int, Any, np.ndarray] | None:
        """``(kind, parsed, line of each row)``: a polars frame (``kind`` is the schema version)
        or a pyarrow table (``kind`` -1); None when both reject the chunk or its rows do not match
        its lines. ``arr``: the chunk's bytes as a numpy array.

        polars is safe on any chunk: its parse stops at its own depth limit, and a chunk it
        accepts holds no nested value (its colons all belong to the schema's flat columns, see
        :meth:`_KnownColumns.parse`), so no line is deeper or wider than the bounds. pyarrow
        only sees a chunk proven shallow first (:func:`_shallow`): the proof's byte counts, a
        tenth of a million-row read, are paid only for the chunks polars did not take."""
        n_lines = n_newlines + (0 if body[-1:] == b"\n" else 1)
        frame = known.parse(body)
        if frame is not None:
            kind, parsed, n_rows = known.version, frame, frame.height
        else:
            nl = count.positions(arr, _NEWLINE)
            longest = _longest_line(nl, len(arr))
            opened = _opened(arr, nl, count)
            if not _shallow(arr, nl, count, longest, opened):
                return None
            try:
                # pyarrow's own threads stay on (single-threaded, the parse, ~5 CPU-s per million
                # rows, becomes the bottleneck even with the trackers running alongside), and a
                # small chunk is cut into blocks small enough for both of them, unless it may
                # hold values that crash a parse of several blocks
                whole = len(body) > _FIRST_CHUNK and _typed_values(arr, opened, count)  # (else one block)
                parsed = pj.read_json(pa.BufferReader(pa.py_buffer(body)),
                                      read_options=_json_blocks(len(body), longest, whole))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            if not (_valid_strings(parsed) and _exact_floats(zip(parsed.column_names, parsed.columns))):
                return None
            kind, n_rows = -1, parsed.num_rows
            known.learn(parsed)
        if n_rows == n_lines:  # one object per line, no blank lines: the usual case
            return kind, parsed, np.arange(line0, line0 + n_lines, dtype=np.int64)
        data = bytes(body)
        lines = self._nonblank_lines(data, line0)
        if n_rows == len(lines) and b"}{" not in data.replace(b" ", b""):
            return kind, parsed, lines
        return None

    @staticmethod
    def _nonblank_lines(body: bytes, line0: int) -> np.ndarray:
        parts = body.split(b"\n")
        if body.endswith(b"\n"):
            parts = parts[:-1]
        return np.array([line0 + i for i, p in enumerate(parts) if p.strip()], dtype=np.int64)

    def _parse_slow(self, body: bytes, line0: int, batch_rows: int, *, final: bool) -> Iterator[RawBatch]:
        parts = body.split(b"\n")
        if body.endswith(b"\n"):
            parts = parts[:-1]
        rows: list[tuple[int, dict[str, Any]]] = []
        last = len(parts) - 1
        for i, part in enumerate(parts):
            stripped = part.strip()
            if not stripped:
                continue
            obj, reason = parse_json_object(stripped, strict=self.strict)
            if obj is None:
                truncated = final and i == last and not body.endswith(b"\n")
                if truncated:
                    reason = ("truncated final line (no newline at end of file: the writer "
                              "was probably stopped mid-write)")
                self._bad(line0 + i, reason, "truncated final line" if truncated else "malformed line")
                continue
            self.report.rows_read += 1
            rows.append((line0 + i, obj))
        for group in budget_groups(rows, max(batch_rows, 1), lambda r: r[1].keys()):
            yield rows_to_raw([r for _, r in group], np.array([ln for ln, _ in group], dtype=np.int64))

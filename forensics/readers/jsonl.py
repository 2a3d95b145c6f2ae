"""Streaming JSONL reader (plain or gzip) with bounded memory and per-line error reports.

Fast path: each chunk of whole lines goes to pyarrow's JSON parser. A chunk it rejects (a
malformed line, a type that changes, a ``NaN`` spelled the Python way) is parsed again line by
line, so every bad line is reported with its number and reason and every good line is kept.
"""

from __future__ import annotations

import gzip
import json
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pj

from ..errors import InputError, StrictModeError
from .arrow import rows_to_raw, table_to_raw
from .base import RawBatch, ReadReport

__all__ = ["JsonlSource", "parse_json_object"]

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


def _open(path: Path) -> IO[bytes]:
    try:
        if path.suffix == ".gz":
            fh: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]
            fh.peek(1)  # type: ignore[attr-defined]  # fail now on a non-gzip file
            return fh
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None


def parse_json_object(raw: bytes | str) -> tuple[dict[str, Any] | None, str]:
    """Parse one JSON line into an object; return ``(object, "")`` or ``(None, reason)``.

    orjson first (fast); Python's json for what it rejects, since trainers write the ``NaN``,
    ``Infinity`` and ``-Infinity`` literals it accepts.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # Python's json accepts NaN, Infinity and -Infinity, as trainers write them
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not valid UTF-8"
            col = f" (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
            return None, f"invalid JSON: {msg}{col}"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    return obj, ""


@dataclass
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


def _join(pending: list[tuple[pa.Table, np.ndarray]], size: int) -> Iterator[_Chunk]:
    """One batch of the parsed chunks ``pending`` (several when a key changes type between them)."""
    if not pending:
        return
    try:
        table = pa.concat_tables([t for t, _ in pending], promote_options="permissive")
        parts = [(table, np.concatenate([lines for _, lines in pending]))]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        parts = pending  # as parsed: each chunk's columns are consistent
    for i, (table, lines) in enumerate(parts):
        yield _Chunk(int(lines[0]) if len(lines) else 0, size if i == 0 else 0,
                     raw=table_to_raw(table, lines))


class JsonlSource:
    """Rows of a JSONL file (``.jsonl``, ``.json`` lines, or ``.gz``), in chunks of whole lines."""

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="jsonl")
        self.bytes_read = 0  # uncompressed bytes consumed so far (for progress display)

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        """Batches of about ``batch_rows`` rows.

        Reading and pyarrow's parse (which releases the GIL) run in a reader thread, at most
        ``_AHEAD`` chunks ahead, so the trackers analyse one chunk while the next is parsed: on
        a multi-core machine the scan then costs about the larger of the two, not their sum.
        Everything that touches the read report stays in this (the caller's) thread.
        """
        with _open(self.path) as fh:
            for item in _ahead(self._chunks(fh, batch_rows), _AHEAD):
                self.bytes_read += item.size
                raw = item.raw
                if item.body is not None:
                    raw = self._parse_slow(item.body, item.line0, final=item.final)
                elif raw is not None:
                    self.report.rows_read += len(raw)
                if raw is not None and len(raw):
                    self.report.rows_kept += len(raw)
                    yield raw

    def _chunks(self, fh: IO[bytes], batch_rows: int) -> Iterator[_Chunk]:
        """Parsed batches of about ``batch_rows`` rows (runs in the reader thread; pure: no report).

        The file is parsed in chunks of at most ``_MAX_CHUNK`` bytes (pyarrow's parse needs a few
        times a chunk's size while it runs) and the parsed tables are joined into batches of about
        ``batch_rows`` rows (at most ``_BATCH_CAP``): the trackers pay a fixed cost per batch.
        """
        batch_rows = max(min(batch_rows, _BATCH_CAP), 1)
        chunk = _MIN_CHUNK
        line0 = 1  # 1-based number of the first line in the current chunk
        rest = b""
        size = 0  # bytes read since the last batch was handed on
        pending: list[tuple[pa.Table, np.ndarray]] = []
        n_pending = 0
        while True:
            # read after the carried partial line into one buffer: no ``rest + block`` copy of
            # the chunk, and the body below is a view of it, not a second copy
            buf = bytearray(len(rest) + chunk)
            buf[: len(rest)] = rest
            try:
                got = fh.readinto(memoryview(buf)[len(rest):])  # type: ignore[attr-defined]
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(f"read failed: {exc}", path=str(self.path)) from None
            eof = not got
            size += got or 0
            end = len(rest) + (got or 0)
            if eof:
                cut = end
            else:
                cut = buf.rfind(b"\n", 0, end) + 1
                if cut == 0:  # no line end yet: carry it all (a line longer than the chunk)
                    rest, chunk = bytes(buf[:end]), chunk * 2
                    continue
            body = memoryview(buf)[:cut]
            n_newlines = buf.count(b"\n", 0, cut)
            rest = bytes(buf[cut:end])
            if cut:
                parsed = self._parse_fast(body, line0, n_newlines)
                if parsed is None:  # line by line, in the caller's thread, after what is pending
                    yield from _join(pending, size)
                    yield _Chunk(line0, 0, body=bytes(body), final=eof)
                    pending, n_pending, size = [], 0, 0
                else:
                    pending.append(parsed)
                    n_pending += len(parsed[1])
                    # aim the next chunk at about batch_rows rows, within the memory cap
                    per_row = max(cut // max(len(parsed[1]), 1), 1)
                    chunk = int(min(max(per_row * batch_rows, _MIN_CHUNK), _MAX_CHUNK))
                    if n_pending >= batch_rows:
                        yield from _join(pending, size)
                        pending, n_pending, size = [], 0, 0
                line0 += n_newlines
            if eof:
                break
        yield from _join(pending, size)

    def _parse_fast(self, body: memoryview, line0: int,
                    n_newlines: int) -> tuple[pa.Table, np.ndarray] | None:
        """pyarrow's parse of a chunk and the line number of each row; None when pyarrow rejects
        the chunk or its rows do not match the lines."""
        n_lines = n_newlines + (0 if body[-1:] == b"\n" else 1)
        try:
            # pyarrow's own threads stay on: single-threaded, the parse (~5 CPU-s per million
            # rows) becomes the bottleneck even with the trackers running alongside
            table = pj.read_json(pa.BufferReader(pa.py_buffer(body)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows == n_lines:  # one object per line, no blank lines: the usual case
            return table, np.arange(line0, line0 + n_lines, dtype=np.int64)
        data = bytes(body)
        lines = self._nonblank_lines(data, line0)
        if table.num_rows == len(lines) and b"}{" not in data.replace(b" ", b""):
            return table, lines
        return None

    @staticmethod
    def _nonblank_lines(body: bytes, line0: int) -> np.ndarray:
        parts = body.split(b"\n")
        if body.endswith(b"\n"):
            parts = parts[:-1]
        return np.array([line0 + i for i, p in enumerate(parts) if p.strip()], dtype=np.int64)

    def _parse_slow(self, body: bytes, line0: int, *, final: bool) -> RawBatch | None:
        parts = body.split(b"\n")
        if body.endswith(b"\n"):
            parts = parts[:-1]
        rows: list[dict[str, Any]] = []
        lines: list[int] = []
        last = len(parts) - 1
        for i, part in enumerate(parts):
            stripped = part.strip()
            if not stripped:
                continue
            self.report.rows_read += 1
            obj, reason = parse_json_object(stripped)
            if obj is None:
                truncated = final and i == last and not body.endswith(b"\n")
                if truncated:
                    reason = ("truncated final line (no newline at end of file: the writer "
                              "was probably stopped mid-write)")
                if self.strict:
                    raise StrictModeError(reason, path=str(self.path), line=line0 + i)
                self.report.skip(line0 + i, reason,
                                 "truncated final line" if truncated else "malformed line")
                continue
            rows.append(obj)
            lines.append(line0 + i)
        if not rows:
            return None
        return rows_to_raw(rows, np.array(lines, dtype=np.int64))

"""Streaming JSONL reader (plain or gzip) with bounded memory and per-line error reports.

Fast path: each chunk of whole lines goes to pyarrow's JSON parser. A chunk it rejects (a
malformed line, a type that changes, a ``NaN`` spelled the Python way) is parsed again line by
line, so every bad line is reported with its number and reason and every good line is kept.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pj

from ..errors import InputError, StrictModeError
from .arrow import rows_to_raw, table_to_raw
from .base import RawBatch, ReadReport

__all__ = ["JsonlSource"]

_MIN_CHUNK = 1 << 20
_MAX_CHUNK = 32 << 20


def _open(path: Path) -> IO[bytes]:
    try:
        if path.suffix == ".gz":
            fh: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]
            fh.peek(1)  # type: ignore[attr-defined]  # fail now on a non-gzip file
            return fh
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """Parse one line; return (object, '') or (None, reason)."""
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


class JsonlSource:
    """Rows of a JSONL file (``.jsonl``, ``.json`` lines, or ``.gz``), in chunks of whole lines."""

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="jsonl")
        self.bytes_read = 0  # uncompressed bytes consumed so far (for progress display)

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        chunk = _MIN_CHUNK
        line0 = 1  # 1-based number of the first line in the current chunk
        rest = b""
        with _open(self.path) as fh:
            while True:
                try:
                    block = fh.read(chunk)
                except (OSError, EOFError, gzip.BadGzipFile) as exc:
                    raise InputError(f"read failed: {exc}", path=str(self.path)) from None
                eof = not block
                self.bytes_read += len(block)
                data = rest + block
                if eof:
                    body, rest = data, b""
                else:
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        rest = data
                        continue
                    body, rest = data[: cut + 1], data[cut + 1 :]
                if body:
                    raw = self._parse_chunk(body, line0, final=eof)
                    line0 += body.count(b"\n")
                    if raw is not None and len(raw):
                        self.report.rows_kept += len(raw)
                        # aim the next chunk at about batch_rows rows
                        per_row = max(len(body) // max(len(raw), 1), 1)
                        chunk = int(min(max(per_row * batch_rows, _MIN_CHUNK), _MAX_CHUNK))
                        yield raw
                if eof:
                    break

    def _parse_chunk(self, body: bytes, line0: int, *, final: bool) -> RawBatch | None:
        n_lines = body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
        table = None
        try:
            table = pj.read_json(io.BytesIO(body))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
        if table is not None:
            if table.num_rows == n_lines:  # one object per line, no blank lines: the usual case
                self.report.rows_read += n_lines
                return table_to_raw(table, np.arange(line0, line0 + n_lines, dtype=np.int64))
            lines = self._nonblank_lines(body, line0)
            if table.num_rows == len(lines) and b"}{" not in body.replace(b" ", b""):
                self.report.rows_read += len(lines)
                return table_to_raw(table, lines)
        # a line pyarrow rejects, or rows that do not match lines: parse line by line
        return self._parse_slow(body, line0, final=final)

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
            obj, reason = _parse_line(stripped)
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

"""Opening inputs: gzip by content, truncated gzip, pipes and stdin, the detection head, lines
of bounded length.

* :func:`open_binary` opens a file for reading; gzip is recognised by its magic bytes (a ``.gz``
  name is not needed, and a ``.gz`` file that is not gzip is an error). A gzip stream that ends
  early (the writer was killed) yields every byte up to the cut and sets ``truncated`` on the
  reader (see :func:`truncation`), instead of failing.
* :func:`local_path` makes a non-seekable input (``-`` for stdin, a pipe, a process substitution
  ``<(cat f)``, a FIFO) readable like a file: it is read once, to the end, into a private
  temporary file, so format detection and the reader see the same bytes and nothing is lost.
  At most :data:`MAX_STREAM_BYTES` (1 GiB; ``--max-bytes``) are read from one stream: past it
  the read stops with an :class:`~forensics.errors.InputError` (exit 3).
* :func:`read_head` gives the first bytes for format detection: 64 KiB, extended (up to
  :data:`~forensics.io.limits.MAX_HEAD_BYTES`) until one whole line is in, without a UTF-8 BOM.
* :func:`bounded_lines` iterates the lines of a binary stream, skipping (not holding) a line
  longer than :data:`~forensics.io.limits.MAX_LINE_BYTES`.
"""

from __future__ import annotations

import atexit
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import weakref
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import InputError
from .limits import MAX_HEAD_BYTES, MAX_LINE_BYTES

__all__ = [
    "BOM",
    "HEAD_BYTES",
    "MAX_STREAM_BYTES",
    "STDIN",
    "GzipFeed",
    "bounded_lines",
    "compressed_offset",
    "is_stream",
    "local_path",
    "open_binary",
    "read_head",
    "read_raw_head",
    "set_stream_limit",
    "truncation",
]

HEAD_BYTES = 64 * 1024
BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
#: The path that means standard input.
STDIN = "-"


class GzipFeed:
    """Decompresses gzip bytes as they come (several members too): what :func:`open_binary`
    reads a file with, and what ``forensics watch`` feeds a growing file's new bytes to.

    ``broken`` says why decompression stopped (a corrupt member, bytes after the end that are
    not gzip); every byte decompressed before that point has been returned. ``in_member`` is
    True while a member is open (its end marker not yet seen).

    >>> import gzip
    >>> data = gzip.compress(b"a\\n") + gzip.compress(b"b\\n")
    >>> feed = GzipFeed()
    >>> feed.feed(data[:9]) + feed.feed(data[9:]), feed.in_member, feed.broken
    (b'a\\nb\\n', False, '')
    """

    def __init__(self) -> None:
        self.dec = zlib.decompressobj(31)
        self.in_member = False
        self.broken = ""

    def feed(self, chunk: bytes) -> bytes:
        out = b""
        while chunk and not self.broken:
            try:
                out += self.dec.decompress(chunk)
            except zlib.error as exc:
                self.broken = f"corrupt gzip data ({exc})"
                break
            self.in_member = not self.dec.eof
            if not self.dec.eof:
                break
            chunk = self.dec.unused_data
            self.dec = zlib.decompressobj(31)
            if chunk and not chunk.startswith(GZIP_MAGIC[: len(chunk)]):
                self.broken = "bytes after the end of the gzip stream that are not gzip: ignored"
        return out


class _Gunzip(io.RawIOBase):
    """Decompresses a gzip stream (several members too), tolerating a cut end.

    ``truncated`` is set when the compressed stream ends inside a member or a member is corrupt:
    the bytes decompressed before that point have all been returned.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.feed = GzipFeed()
        self.pending = memoryview(b"")
        self.done = False
        self.truncated = ""
        self.consumed = 0  # compressed bytes read so far (progress, see compressed_offset)

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while not len(self.pending) and not self.done:
            chunk = self.raw.read(1 << 16)
            self.consumed += len(chunk)
            if not chunk:
                if self.feed.in_member:
                    self.truncated = "the gzip stream ends before its end marker (cut off mid-write)"
                self.done = True
                return
            out = self.feed.feed(chunk)
            if self.feed.broken:
                self.truncated = self.feed.broken
                self.done = True
            self.pending = memoryview(out)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        self._fill()
        n = min(len(b), len(self.pending))
        b[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


class _GzipFile(io.BufferedReader):
    """A buffered :class:`_Gunzip` (``readline``, iteration, ``peek``)."""

    gunzip: _Gunzip


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing gzip (recognised by content)."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None
    try:
        magic = fh.read(2)
        fh.seek(0)
    except OSError as exc:
        fh.close()
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None
    if magic == GZIP_MAGIC:
        gz = _Gunzip(fh)
        out = _GzipFile(gz, buffer_size=1 << 16)
        out.gunzip = gz
        _OPEN_GZIP[str(path)] = gz
        return out
    if path.suffix == ".gz" and magic:
        fh.close()
        raise InputError("named .gz but not gzip (no gzip header)", path=str(path))
    return fh


#: The gzip stream of each path opened last by :func:`open_binary`, while it is alive.
_OPEN_GZIP: weakref.WeakValueDictionary[str, _Gunzip] = weakref.WeakValueDictionary()


def compressed_offset(path: Path) -> int | None:
    """Compressed bytes read so far from ``path``, a gzip file opened by :func:`open_binary` and
    still open (the latest such opening); None when there is none. The reading thread moves it
    on; a progress display reads it (a gzip file's rows are not known before it is read).

    >>> import gzip, tempfile
    >>> p = Path(tempfile.mkdtemp()) / "log.jsonl.gz"
    >>> _ = p.write_bytes(gzip.compress(b'{"step": 1}\\n' * 1000))
    >>> with open_binary(p) as fh:
    ...     _ = fh.read()
    ...     compressed_offset(p) == p.stat().st_size
    True
    """
    gz = _OPEN_GZIP.get(str(path))
    return None if gz is None or gz.closed else gz.consumed


def truncation(fh: IO[bytes]) -> str:
    """Why a gzip stream opened by :func:`open_binary` stopped early ("" when it did not)."""
    gz = getattr(fh, "gunzip", None)
    return gz.truncated if gz is not None else ""


def is_stream(path: Path) -> bool:
    """Whether ``path`` is standard input or a non-seekable file (a pipe, a FIFO, a device)."""
    if str(path) == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_SPOOLED: dict[str, Path] = {}
_SPOOL_DIR: list[str] = []


def _spool_dir() -> Path:
    if not _SPOOL_DIR:
        d = tempfile.mkdtemp(prefix="forensics-stream-")
        _SPOOL_DIR.append(d)
        atexit.register(shutil.rmtree, d, True)
    return Path(_SPOOL_DIR[0])


#: Most bytes read from one stream (stdin, a pipe, a FIFO, a device) by default: ``--max-bytes``
#: (:func:`set_stream_limit`) changes it. ``scan /dev/zero`` stops there with exit 3.
MAX_STREAM_BYTES = 1 << 30
_STREAM_LIMIT = [MAX_STREAM_BYTES]


def set_stream_limit(limit: int | None) -> None:
    """The most bytes read from one stream (None: :data:`MAX_STREAM_BYTES`)."""
    _STREAM_LIMIT[0] = MAX_STREAM_BYTES if limit is None else int(limit)


def _copy_bounded(src: IO[bytes], out: IO[bytes], key: str) -> None:
    limit, copied = _STREAM_LIMIT[0], 0
    while block := src.read(1 << 20):
        copied += len(block)
        if copied > limit:
            raise InputError(f"the stream holds more than {limit:,} bytes (the limit for a pipe, FIFO or "
                             "device; --max-bytes raises it): stopped", path=key)
        out.write(block)


def local_path(path: Path, *, consume: bool = False) -> Path:
    """``path`` itself, or for a stream (stdin, pipe, FIFO) a temporary copy of all it held.

    A stream can be read only once: it is copied to the end the first time it is asked for,
    and later calls (format detection, then the reader) get the same copy, until a call with
    ``consume`` (the reader's) hands the copy over: the next read of the path reads the stream
    again (a FIFO written anew).
    """
    if not is_stream(path):
        return path
    key = str(path)
    if key in _SPOOLED:
        return _SPOOLED.pop(key) if consume else _SPOOLED[key]
    name = "stdin" if key == STDIN else (path.name or "stream")
    dest = _spool_dir() / f"{len(_SPOOLED)}-{name}"
    try:
        src: IO[bytes] = sys.stdin.buffer if key == STDIN else open(path, "rb")
        try:
            with open(dest, "wb") as out:
                _copy_bounded(src, out, key)
        finally:
            if key != STDIN:
                src.close()
    except OSError as exc:
        dest.unlink(missing_ok=True)
        raise InputError(f"cannot read: {exc.strerror or exc}", path=key) from None
    except InputError:
        dest.unlink(missing_ok=True)
        raise
    if not consume:
        _SPOOLED[key] = dest
    return dest


#: Runs of more blank lines than this are squeezed in the detection head (a sniffer's ``^\s*``
#: over a run of blank lines costs the square of its length).
_BLANK_RUN = re.compile(rb"(?:[ \t\r]*\n){65,}")
#: Two line ends with nothing but blanks between them: a run of blank lines needs one (searched
#: from line end to line end, where ``_BLANK_RUN`` tries every space of a JSON line).
_BLANK_PAIR = re.compile(rb"\n[ \t\r]*\n")


def _head(path: Path, squeeze: bool) -> bytes:
    """64 KiB of ``path`` (decompressed, without a UTF-8 BOM), or more (up to ``MAX_HEAD_BYTES``)
    until the first line that is not blank is whole; ``squeeze``: leading blank lines read past
    (up to ``MAX_LINE_BYTES``) and runs of more than 64 blank lines cut to 64."""
    with open_binary(path) as fh:
        try:
            head = fh.read(HEAD_BYTES)
            blank = 0
            while squeeze and head and not head.strip() and blank < MAX_LINE_BYTES:  # only blank lines so far
                more = fh.read(HEAD_BYTES)
                if not more:
                    break
                blank += len(head)
                head = head[-64:] + more
            while b"\n" not in head.lstrip() and len(head) < MAX_HEAD_BYTES:
                more = fh.read(HEAD_BYTES)
                if not more:
                    break
                head += more
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None
    head = head[len(BOM):] if head.startswith(BOM) else head
    return _BLANK_RUN.sub(b"\n" * 64, head) if squeeze and _BLANK_PAIR.search(head) else head


def read_raw_head(path: Path) -> bytes:
    """The file's first bytes as they are (blank lines kept, so offsets after the BOM hold): a
    reader that goes on from an offset in the head (the CSV reader) needs this one."""
    return _head(path, squeeze=False)


def read_head(path: Path) -> bytes:
    """The first bytes of a file for format detection: the head a sniffer sees holds content
    (leading blank lines read past, a run of more than 64 blank lines squeezed to 64)."""
    return _head(path, squeeze=True)


def bounded_lines(fh: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """The lines of ``fh`` without their line end; ``None`` for a line longer than ``limit``
    bytes (read past, never held whole). A BOM at the start of the stream is dropped."""
    first = True
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if first:
            first = False
            if line.startswith(BOM):
                line = line[len(BOM):]
        if len(line) > limit and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # skip the rest of the long line
                line = fh.readline(1 << 20)
            yield None
            continue
        yield line.rstrip(b"\n").rstrip(b"\r")

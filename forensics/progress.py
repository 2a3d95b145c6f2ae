"""Progress on long work, for people at a terminal: a scan of a large file, a fleet of runs.

Percent and ETA come from the size of the inputs: a Parquet file's row count is in its footer; a
line-oriented log's rows are its size over the mean length of its first lines; a gzip file's
rows are not known before it is read, so its bar counts the compressed bytes read so far
(:func:`forensics.io.inputs.compressed_offset`) against the file's size. The bar (click's) goes
to stderr, only when stderr is a terminal; ``-q`` turns it off. It never changes what a command
prints on stdout or what it writes. It reaches 100% only when the scan has read everything: an
interrupted scan (Ctrl-C, exit 130) leaves it where it was.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import click

__all__ = ["PROGRESS_BYTES", "FleetProgress", "estimate_rows", "scan_progress"]

#: Inputs at least this large (all files of a scan together) get a progress bar.
PROGRESS_BYTES = 32 << 20
#: A gzip file counts as this many times its size towards :data:`PROGRESS_BYTES` (a log's text
#: compresses about 3-6x: a 10 MB .jsonl.gz is read as long as a 40 MB .jsonl).
GZIP_WEIGHT = 4
#: Bytes read from the start of a line-oriented file to measure its mean line length.
_SAMPLE_BYTES = 1 << 20


def estimate_rows(path: Path) -> int | None:
    """Rows in ``path``: exact for Parquet (its footer), estimated for a line-oriented text log
    (size over the mean line length of the first megabyte); None when unknown (compressed files,
    folders).

    >>> import tempfile, os
    >>> p = Path(tempfile.mkdtemp()) / "steps.jsonl"
    >>> _ = p.write_text('{"step": 1}\\n' * 1000)
    >>> estimate_rows(p)
    1000
    """
    try:
        if not path.is_file() or path.suffix == ".gz":
            return None
        with open(path, "rb") as fh:
            head = fh.read(_SAMPLE_BYTES)
        if head.startswith(b"PAR1"):
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        lines = head.count(b"\n")
        if not lines:
            return None
        return max(1, round(path.stat().st_size * lines / len(head)))
    except Exception:  # an estimate only: a file it cannot read gets no percent
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def scan_progress(files: Iterable[Path], *, enabled: bool = True, stream: TextIO | None = None,
                  min_bytes: int = PROGRESS_BYTES, offset: Callable[[Path], int | None] | None = None
                  ) -> tuple[Callable[[int], None] | None, Callable[..., None]]:
    """``(tick, done)`` for a scan of ``files``: ``tick(rows)`` after each batch, ``done()`` when
    the scan has read everything (the bar shows 100%), ``done(finished=False)`` when it stopped
    early (an interrupt, an error: the bar stays where it was). ``tick`` is None (no bar) when
    disabled, not at a terminal, when the files are small (under ``min_bytes`` together, a gzip
    file counting :data:`GZIP_WEIGHT` times its size) or their rows unknown.

    Gzip inputs are measured in compressed bytes read (their rows are unknown), as ``offset(path)``
    tells them (:func:`forensics.io.inputs.compressed_offset`; without it they get no bar): the
    bar then follows the gzip files alone (a plain file beside them, such as a sample stream, is
    read too, but not counted)."""
    stream = stream if stream is not None else sys.stderr
    files = list(files)
    if not enabled or not _tty(stream):
        return None, lambda finished=True: None
    gzipped = [p for p in files if p.is_file() and _is_gzip(p)]
    if sum(_size(p) for p in files) + (GZIP_WEIGHT - 1) * sum(_size(p) for p in gzipped) < min_bytes:
        return None, lambda finished=True: None
    if gzipped:
        if offset is None:
            return None, lambda finished=True: None
        read = offset
        return _bar(sum(_size(p) for p in gzipped), files[0].name, stream,
                    lambda _rows: sum(read(p) or 0 for p in gzipped))
    estimates = [estimate_rows(p) for p in files]
    if any(e is None for e in estimates):
        return None, lambda finished=True: None
    rows = [0]

    def count(n: int) -> int:
        rows[0] += n
        return rows[0]

    return _bar(sum(e for e in estimates if e is not None), files[0].name, stream, count)


def _bar(total: int, name: str, stream: TextIO, position: Callable[[int], int]
         ) -> tuple[Callable[[int], None], Callable[..., None]]:
    """A bar of length ``total`` moved to ``position(rows)`` after each batch, below 100% until
    ``done()`` (an estimate can fall short, a gzip file's last bytes are read before its last
    rows are analysed)."""
    bar = click.progressbar(length=total, label=f"scanning {name}", file=stream,
                            show_eta=True, show_percent=True, width=30)
    bar.__enter__()
    state = {"shown": 0}

    def tick(n: int) -> None:
        at = min(position(n), total - 1)
        if at > state["shown"]:
            bar.update(at - state["shown"])
            state["shown"] = at

    def done(finished: bool = True) -> None:
        if finished:
            bar.update(total - state["shown"])
        bar.__exit__(None, None, None)

    return tick, done


class FleetProgress:
    """Runs done and failed, with the ETA, while a fleet is scanned (stderr, at a terminal)."""

    def __init__(self, runs: int, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        stream = stream if stream is not None else sys.stderr
        self.done = self.failed = 0
        self._bar: Any = None
        if enabled and runs and _tty(stream):
            self._bar = click.progressbar(length=runs, label="scanning runs", file=stream,
                                          show_eta=True, show_percent=True, width=30,
                                          item_show_func=lambda _: self.status())
            self._bar.__enter__()

    def status(self) -> str:
        return f"{self.done} done, {self.failed} failed"

    def __call__(self, row: dict[str, Any]) -> None:
        """One run finished (its fleet row)."""
        self.done += 1
        self.failed += bool(row.get("error"))
        if self._bar is not None:
            self._bar.update(1, row.get("run"))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

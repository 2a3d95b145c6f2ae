"""Progress on long work, for people at a terminal: a scan of a large file, a fleet of runs.

Percent and ETA come from the size of the inputs: a Parquet file's row count is in its footer; a
line-oriented log's rows are its size over the mean length of its first lines. The bar (click's)
goes to stderr, only when stderr is a terminal; ``-q`` turns it off. It never changes what a
command prints on stdout or what it writes.
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


def scan_progress(files: Iterable[Path], *, enabled: bool = True, stream: TextIO | None = None,
                  min_bytes: int = PROGRESS_BYTES
                  ) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """``(tick, done)`` for a scan of ``files``: ``tick(rows)`` after each batch, ``done()`` at
    the end. ``tick`` is None (no bar) when disabled, not at a terminal, when the files are small
    or their rows unknown."""
    stream = stream if stream is not None else sys.stderr
    files = list(files)
    if not enabled or not _tty(stream) or sum(_size(p) for p in files) < min_bytes:
        return None, lambda: None
    estimates = [estimate_rows(p) for p in files]
    if any(e is None for e in estimates):
        return None, lambda: None
    total = sum(e for e in estimates if e is not None)
    bar = click.progressbar(length=total, label=f"scanning {files[0].name}", file=stream,
                            show_eta=True, show_percent=True, width=30)
    bar.__enter__()
    state = {"rows": 0}

    def tick(n: int) -> None:
        # an estimate can fall short: stay below 100% until the scan says it is done
        step = min(n, max(total - 1 - state["rows"], 0))
        state["rows"] += step
        if step:
            bar.update(step)

    def done() -> None:
        bar.update(total - state["rows"])
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

"""Which reader opens a file: the format registry, detection from content, and opening.

Formats are tried in order: the framework adapters (:mod:`forensics.io.adapters`, most specific
first), then the generic JSONL and Parquet readers (:mod:`forensics.io.readers`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FormatError, InputError, UsageError
from .adapters import ADAPTERS
from .readers import Format, JsonlSource, ParquetPartsSource, ParquetSource, Source

__all__ = ["FORMATS", "HEAD_BYTES", "detect_format", "open_source"]

HEAD_BYTES = 64 * 1024


def _is_parquet(path: Path, head: bytes) -> bool:
    return head.startswith(b"PAR1")


def _is_parquet_parts(path: Path, head: bytes) -> bool:
    return path.is_dir() and any(path.glob("part-*.parquet"))


def _is_jsonl(path: Path, head: bytes) -> bool:
    text = head.lstrip()
    return text.startswith(b"{") and (b"\n" in text or len(head) < HEAD_BYTES)


_GENERIC = [
    Format("parquet-parts", _is_parquet_parts, lambda p, s: ParquetPartsSource(p, strict=s),
           "a folder of Parquet parts left by a writer that did not close (steps.parquet.parts)"),
    Format("parquet", _is_parquet, lambda p, s: ParquetSource(p, strict=s),
           "Parquet, one row per step (canonical or aliased column names)"),
    Format("jsonl", _is_jsonl, lambda p, s: JsonlSource(p, strict=s),
           "JSON lines (optionally .gz), one object per step"),
]


def _formats() -> list[Format]:
    return [*ADAPTERS, *_GENERIC]


class _Formats:
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(_formats())

    def names(self) -> list[str]:
        return [f.name for f in _formats()]


FORMATS = _Formats()


def _head(path: Path) -> bytes:
    import gzip

    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read(HEAD_BYTES)
        with open(path, "rb") as fh:
            return fh.read(HEAD_BYTES)
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read: {getattr(exc, 'strerror', None) or exc}",
                         path=str(path)) from None


def detect_format(path: Path) -> str:
    """Name of the first registered format whose sniffer accepts the file."""
    if not path.exists():
        raise InputError("no such file or directory", path=str(path))
    if path.is_dir():
        # a folder is one input only for a format that says so (TensorBoard event files)
        for fmt in _formats():
            if fmt.detect(path, b""):
                return fmt.name
        raise InputError("is a directory; give a file", path=str(path))
    head = _head(path)
    if not head.strip():
        raise FormatError("file is empty", path=str(path))
    for fmt in _formats():
        if fmt.detect(path, head):
            return fmt.name
    raise FormatError("unrecognised content (supported: " + ", ".join(FORMATS.names()) + ")",
                      path=str(path))


def open_source(path: Path, fmt: str | None = None, *, strict: bool = False) -> Source:
    """Open ``path`` with the named format, or the detected one."""
    name = fmt or detect_format(path)
    for f in _formats():
        if f.name == name:
            if not path.exists():
                raise InputError("no such file or directory", path=str(path))
            return f.open(path, strict)
    raise UsageError(f"unknown format {name!r}; known: " + ", ".join(FORMATS.names()))

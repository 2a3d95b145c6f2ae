"""Which reader opens a file: the format registry, detection from content, and opening.

Formats are tried in order: the framework adapters (:mod:`forensics.io.adapters`, most specific
first), then the generic JSONL and Parquet readers (:mod:`forensics.io.readers`). Detection reads
a buffered head (:func:`forensics.io.inputs.read_head`: decompressed, without a BOM, holding at
least the first whole line); a stream (``-``, a pipe) is first copied once to a temporary file
(:func:`forensics.io.inputs.local_path`), so nothing it held is lost to detection. A text file
that no format recognises from its head is read on, in blocks, up to :data:`LATE_SCAN_BYTES`,
for the consoles whose first metric line can come late (megabytes of model loading and dataset
warnings before a Trainer's first ``{'loss': ...}`` dict).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FormatError, InputError, UsageError, did_you_mean
from .adapters import ADAPTERS, kv_console
from .inputs import HEAD_BYTES, STDIN, local_path, open_binary, read_head
from .readers import Format, JsonlSource, ParquetPartsSource, ParquetSource, Source
from .readers.jsonl import head_objects
from .readers.parquet import parquet_files

__all__ = ["BATCH_CELLS", "FORMATS", "HEAD_BYTES", "LATE_SCAN_BYTES", "batch_rows_for", "detect_format", "detect_head",
           "open_source"]

#: How far detection reads a text file for a console whose first metric line comes late.
LATE_SCAN_BYTES = 64 << 20
#: The consoles detected from any block of lines (their sniffers do not need the file's start).
_LATE_CONSOLES = ("openrlhf-console", "deepspeed-chat", "verl-console", "hf-console", "kv-console")


def _is_parquet(path: Path, head: bytes) -> bool:
    return head.startswith(b"PAR1")


def _is_parquet_parts(path: Path, head: bytes) -> bool:
    return path.is_dir() and bool(parquet_files(path, limit=1))


def _is_jsonl(path: Path, head: bytes) -> bool:
    """JSON lines: the head's lines are mostly objects (a comment, a malformed or a blank line
    among them is the reader's to report), or its first line is one object longer than the head."""
    text = head.lstrip()
    if not text.startswith((b"{", b"#", b"//")) and b"\n{" not in text[:4096]:
        return False
    objects, others = head_objects(head)
    if objects:
        return objects >= others
    return text.startswith(b"{")  # broken lines (each reported by the reader), or one long line


_GENERIC = [
    Format("parquet-parts", _is_parquet_parts, lambda p, s: ParquetPartsSource(p, strict=s),
           "a folder of Parquet parts left by a writer that did not close (steps.parquet.parts)"),
    Format("parquet", _is_parquet, lambda p, s: ParquetSource(p, strict=s),
           "Parquet, one row per step (canonical or aliased column names)"),
    Format("jsonl", _is_jsonl, lambda p, s: JsonlSource(p, strict=s),
           "JSON lines (optionally .gz), one object per step"),
]


#: The reader of last resort: name: value pairs on a custom loop's console (after every other).
_LAST = [Format("kv-console", kv_console.detect, lambda p, s: kv_console.KVConsoleSource(p, s),
                "a custom loop's console: lines of 'name: value' or 'name=value' pairs (the reader of "
                "last resort; a step/iteration pair or an (i/N) counter gives the step)")]


def _formats() -> list[Format]:
    return [*ADAPTERS, *_GENERIC, *_LAST]


class _Formats:
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(_formats())

    def names(self) -> list[str]:
        return [f.name for f in _formats()]


FORMATS = _Formats()


def detect_format(path: Path) -> str:
    """Name of the first registered format whose sniffer accepts the file."""
    shown = str(path)
    if shown != STDIN and not path.exists():
        raise InputError("no such file or directory", path=shown)
    path = local_path(path)
    if path.is_dir():
        # a folder is one input only for a format that says so (TensorBoard event files)
        for fmt in _formats():
            if fmt.detect(path, b""):
                return fmt.name
        raise InputError("is a directory; give a file", path=str(path))
    head = read_head(path)
    if not head.strip():
        raise FormatError("file is empty", path=shown)
    if _is_parquet(path, head):  # Parquet's magic: no text sniffer needs to read the bytes
        return "parquet"
    for fmt in _formats():
        if fmt.detect(path, head):
            return fmt.name
    late = _detect_late(path, head)
    if late is not None:
        return late
    raise FormatError("unrecognised content (supported: " + ", ".join(FORMATS.names()) + ")",
                      path=shown)


def _detect_late(path: Path, head: bytes) -> str | None:
    """The console format of a text file whose metric lines start past its head, or ``None``."""
    if b"\0" in head:
        return None
    consoles = [f for f in _formats() if f.name in _LATE_CONSOLES]
    carry = b""
    with open_binary(path) as fh:
        fh.read(len(head))
        read = len(head)
        while read < LATE_SCAN_BYTES:
            block = fh.read(HEAD_BYTES)
            if not block:
                return None
            read += len(block)
            cut = block.rfind(b"\n") + 1
            if not cut:  # inside a long line (the scan bound holds its size)
                carry += block
                continue
            lines, carry = carry + block[:cut], block[cut:]
            for fmt in consoles:
                if fmt.detect(path, lines):
                    return fmt.name
    return None


def detect_head(path: Path, head: bytes) -> str | None:
    """Name of the first format whose sniffer accepts ``head`` (the first bytes of a stream,
    decompressed, without a BOM), or ``None``."""
    for fmt in _formats():
        if fmt.name != "parquet-parts" and fmt.detect(path, head):
            return fmt.name
    return None


def _select_run(source: Source, run: str, shown: str, fmt: str) -> None:
    select = getattr(source, "select_run", None)
    if select is None:
        raise UsageError(f"--run {run!r}: {shown} is a {fmt} log, which holds one run; --run picks a run "
                         "of a file that holds several (a W&B chart export)")
    select(run)


def open_source(path: Path, fmt: str | None = None, *, strict: bool = False, run: str | None = None) -> Source:
    """Open ``path`` with the named format, or the detected one; ``run`` names the run to read
    in a file that holds several (a W&B chart export; ``--run``).

    ``path`` may be ``-`` (standard input) or a pipe: it is read once, to the end (see
    :func:`forensics.io.inputs.local_path`); the report names it as given.
    """
    name = fmt or detect_format(path)
    for f in _formats():
        if f.name == name:
            shown = str(path)
            if shown != STDIN and not path.exists():
                raise InputError("no such file or directory", path=shown)
            local = local_path(path, consume=True)
            source = f.open(local, strict)
            source.report.strict = strict
            if run is not None:
                _select_run(source, run, shown, name)
            if local != path:
                source.report.path = shown
                source.report.notes.append("read from a stream (stdin or a pipe): copied once, to its end, "
                                           "before reading")
            return source
    raise UsageError(f"unknown format {name!r}{did_you_mean(name, FORMATS.names())}; known: "
                     + ", ".join(FORMATS.names()))


#: Most values (rows x columns) in one batch of the step stream. A 20-metric log keeps the full
#: ``batch_rows``; a 200-metric one (veRL) gets about 10,000 rows a batch: a batch is held
#: several times while it is analysed, and 65,536 rows of 200 columns peaked near 500 MB.
BATCH_CELLS = 1 << 21


def _row_width(path: Path) -> int | None:
    """Columns of a Parquet file (its schema) or keys of a JSON-lines log's first row (None:
    another format, or unknown)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        if head.startswith(b"PAR1"):
            import pyarrow.parquet as pq

            return len(pq.read_schema(path).names)
        if head.lstrip().startswith(b"{"):
            return head.lstrip().split(b"\n", 1)[0].count(b'":') or None
    except Exception:  # an estimate only: the reader reports what is wrong with the file
        return None
    return None


def batch_rows_for(path: Path, batch_rows: int) -> int:
    r"""``batch_rows``, fewer for a wide log (at most :data:`BATCH_CELLS` values a batch).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "steps.jsonl"
    >>> _ = p.write_text("{" + ", ".join(f'"m{i}": 1' for i in range(256)) + "}\n")
    >>> batch_rows_for(p, 65_536), batch_rows_for(p, 100)
    (8192, 100)
    """
    width = _row_width(path)
    return batch_rows if not width else min(batch_rows, max(1024, BATCH_CELLS // width))

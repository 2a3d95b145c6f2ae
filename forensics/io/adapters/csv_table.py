"""Plain CSV or TSV: a header of key names, one row per step (``step,kl,reward``).

What a spreadsheet, ``pandas.DataFrame.to_csv`` or a hand-rolled logger writes. The dialect is
sniffed (:mod:`forensics.io.csv_dialect`): a tab, comma, semicolon or bar delimiter, quoting as
Python's csv module and pyarrow do it (a line end inside a quoted field, the header's too),
leading blank lines, a UTF-8 BOM, UTF-8 or else Latin-1 (noted). Cells are numbers (``nan``,
``1e-3``, ``np.float64(...)``, ``tensor(...)`` too) or text, an empty cell is a missing value;
the table is read block by block through ``pyarrow.csv`` (:mod:`forensics.io.csv_blocks`). The
step is the column a canonical name or alias says is one (``step``, ``global_step``; ``--map
iteration=step`` for another name), parsed exactly (``1.0`` is 1; ``1.5`` or a step beyond int64
is a skipped row with its reason); a table without one has its rows numbered 0, 1, 2... (noted).
A pandas index column (an empty header cell) is named ``index``; a repeated header name gets
``#2``, ``#3``... (never a name the header already has) and a note. A row with more or fewer
cells than the header is skipped with its line; so is the line of a quote never closed. Detected
after every framework format (the W&B exports are CSV too) and only when the header is names,
not numbers, and the next record has as many cells with at least one number.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import FormatError, InputError, StrictModeError
from ...schema import canonical_name
from ..csv_dialect import Dialect, sniff, unique_names
from ..inputs import BOM, open_binary, read_raw_head, truncation
from ..readers.base import RawBatch, ReadReport

if TYPE_CHECKING:  # pyarrow's CSV reader (and pyarrow.compute) are imported when a CSV is read
    from concurrent.futures import Future  # with the pool (and logging): not at every start

    from ..csv_blocks import Block, CsvBlocks, Parsed

__all__ = ["CsvTableSource", "detect"]

_DELIMITER_NAMES = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "bar"}


def detect(path: Path, head: bytes) -> bool:
    r"""A header of names (none a number) and a record of as many cells, at least one a number.

    >>> detect(Path("m.csv"), b"step,kl,reward\n0,0.01,0.5\n")
    True
    >>> detect(Path("m.tsv"), b"step\tkl\n1\t0.02\n"), detect(Path("x"), b'{"step": 1, "kl": 2}\n')
    (True, False)
    """
    return sniff(head) is not None


#: Blocks parsed ahead, in as many worker threads (pyarrow releases the GIL while it parses).
AHEAD = 2


def _ahead(parse: Callable[[Block], Parsed], items: Iterator[Block]) -> Iterator[Parsed]:
    """``parse`` of each block, in order, the next :data:`AHEAD` parsed in worker threads while
    this one is converted and analysed: memory stays bounded by a few blocks."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(AHEAD, thread_name_prefix="forensics-csv") as pool:
        pending: deque[Future[Parsed]] = deque()
        for block in items:
            pending.append(pool.submit(parse, block))
            if len(pending) > AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _is_step(name: str) -> bool:
    hit = canonical_name(name)
    return hit is not None and hit[0] == "step"


class CsvTableSource:
    """A :class:`~forensics.io.readers.Source` over a CSV or TSV table."""

    format_name = "csv"

    def __init__(self, path: Path, strict: bool = False) -> None:
        self.path = Path(path)
        self.strict = strict
        self.report = ReadReport(str(path), format=self.format_name)
        self.reader: CsvBlocks | None = None  # how the blocks were read, once read
        self.reads_ahead = True  # blocks are parsed on worker threads (:func:`_ahead`)

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        dialect = sniff(read_raw_head(self.path), need_row=False)
        if dialect is None:
            raise FormatError("not a CSV table: no header of names (none a number) on its first line",
                              path=str(self.path))
        from ..csv_blocks import CsvBlocks, blocks

        names, renamed = unique_names(dialect.header)
        self.reader = reader = CsvBlocks(dialect, names, frozenset(n for n in names if _is_step(n)), self._bad,
                                         self._set_aside)
        with open_binary(self.path) as fh:
            try:
                skip = dialect.data_start + (len(BOM) if fh.read(len(BOM)) == BOM else 0) - len(BOM)
                if len(fh.read(skip)) == skip:
                    for parsed in _ahead(reader.parse, blocks(fh, dialect.data_line, dialect.delimiter, self._bad)):
                        for raw in reader.batches(parsed, batch_rows):
                            self.report.rows_read += len(raw)
                            self.report.rows_kept += len(raw)
                            yield raw
            except (OSError, EOFError) as exc:
                raise InputError(f"read failed: {exc}", path=str(self.path)) from None
            why = truncation(fh)
        self._notes(dialect, names, renamed, reader, why)

    def _notes(self, dialect: Dialect, names: list[str], renamed: list[tuple[int, str, str]],
               reader: CsvBlocks, cut: str) -> None:
        notes = self.report.notes
        kind = "TSV" if dialect.delimiter == "\t" else "CSV"
        notes.append(f"{kind} table: {len(names)} column(s) from its header"
                     + (f" (line {dialect.header_line}, after blank lines)" if dialect.header_line > 1 else "")
                     + ("" if dialect.delimiter in "\t," else f"; {_DELIMITER_NAMES[dialect.delimiter]}-separated"))
        if dialect.encoding == "latin-1":
            notes.append("not valid UTF-8: read as Latin-1 (ISO-8859-1), one character a byte")
        if renamed:
            notes.append("repeated header name(s): " + "; ".join(
                f"column {col} {old!r} read as {new!r}" for col, old, new in renamed[:8])
                + ("; ..." if len(renamed) > 8 else ""))
        if reader.cut_line:
            notes.append(f"the file ends without a line end: line {reader.cut_line} may have been cut "
                         f"mid-write; its last cell ({names[-1]}) is read as missing")
        if cut:
            notes.append(f"{cut}: every complete record before the cut was read")

    def _bad(self, line: int, reason: str, category: str) -> None:
        if self.strict:
            raise StrictModeError(reason, path=str(self.path), line=line)
        self.report.rows_read += 1
        self.report.skip(line, reason, category)

    def _set_aside(self, line: int, key: str, reason: str) -> None:
        self.report.set_aside(line, key, reason)
        self.report.note_values_set_aside()

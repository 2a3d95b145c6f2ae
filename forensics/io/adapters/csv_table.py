"""Plain CSV or TSV: a header of key names, one row per step (``step,kl,reward``).

What a spreadsheet, ``pandas.DataFrame.to_csv`` or a hand-rolled logger writes. The delimiter is
the header's (a tab or a comma); cells are numbers (``nan``, ``1e-3``, ``np.float64(...)`` too)
or text, an empty cell is a missing value. The step is the column a canonical name or alias says
is one (``step``, ``global_step``; ``--map iteration=step`` for another name); a table without one
has its rows numbered 0, 1, 2... (noted). A pandas index column (an empty header cell) is named
``index``; a repeated header name gets ``#2``, ``#3``... and a note. A row with more or fewer
cells than the header is skipped with its line. Detected after every framework format (the W&B
exports are CSV too) and only when the header is names, not numbers, and the next record has as
many cells with at least one number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import StrictModeError
from ._common import Row, RowSource, parse_number
from .wandb import _csv_rows

__all__ = ["CsvTableSource", "detect"]


def _delimiter(line: str) -> str | None:
    if "\t" in line:
        return "\t"
    return "," if "," in line else None


def _records(text: str, delimiter: str) -> list[list[str]]:
    lines = text.splitlines()[:2]
    try:
        return list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    except csv.Error:
        return []


def detect(path: Path, head: bytes) -> bool:
    r"""A header of names (none a number, none a JSON or dict opener) and a record of as many
    cells, at least one a number.

    >>> detect(Path("m.csv"), b"step,kl,reward\n0,0.01,0.5\n")
    True
    >>> detect(Path("m.tsv"), b"step\tkl\n1\t0.02\n"), detect(Path("x"), b'{"step": 1, "kl": 2}\n')
    (True, False)
    """
    if head.lstrip()[:1] in (b"{", b"[", b"#") or b"\x00" in head[:4096]:
        return False
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    line = text.split("\n", 1)[0].rstrip("\r")
    if "\ufffd" in line or any(ord(c) < 32 and c != "\t" for c in line):
        return False
    delimiter = _delimiter(line)
    if delimiter is None:
        return False
    records = _records(text, delimiter)
    if len(records) < 2:
        return False
    header, row = records[0], records[1]
    if len(header) < 2 or len(row) != len(header):
        return False
    names = [h.strip() for h in header]
    if any(n and (parse_number(n) is not None or n[0] in "{['\"(") for n in names) or sum(1 for n in names if n) < 2:
        return False
    return any(parse_number(c) is not None for c in row if c.strip())


def _cell(text: str) -> Any:
    s = text.strip()
    if not s:
        return None
    num = parse_number(s)
    return s if num is None else num


class CsvTableSource(RowSource):
    format_name = "csv"

    def rows(self) -> Iterator[Row]:
        from ..inputs import read_head

        first = read_head(self.path).decode("utf-8", errors="replace").split("\n", 1)[0]
        delimiter = _delimiter(first) or ","
        it = _csv_rows(self.path, delimiter)
        header: list[str] | None = None
        for line, cells in it:
            if isinstance(cells, str):
                self._bad(line, cells)
                continue
            if header is None:
                header = self._header(cells)
                continue
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                self._bad(line, f"{len(cells)} cells, header has {len(header)}")
                continue
            row = {k: v for k, c in zip(header, cells) if (v := _cell(c)) is not None}
            if row:
                yield line, row
        self.report.notes.append(f"{'TSV' if delimiter == chr(9) else 'CSV'} table: "
                                 f"{len(header or [])} column(s) from its header")

    def _header(self, cells: list[str]) -> list[str]:
        out: list[str] = []
        seen: dict[str, int] = {}
        repeated = []
        for c in cells:
            name = c.strip() or "index"
            if name in seen:
                seen[name] += 1
                repeated.append(name)
                name = f"{name}#{seen[name]}"
            else:
                seen[name] = 1
            out.append(name)
        if repeated:
            self.report.notes.append("repeated header name(s) " + ", ".join(sorted(set(repeated)))
                                     + ": later columns named name#2, name#3, ...")
        return out

    def _bad(self, line: int, reason: str) -> None:
        if self.strict:
            raise StrictModeError(reason, path=str(self.path), line=line)
        self.report.rows_read += 1
        self.report.skip(line, reason, "malformed line")

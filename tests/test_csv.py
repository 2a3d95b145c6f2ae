"""CSV and TSV tables (and the W&B CSV exports): read through pyarrow block by block with the
row-by-row reader's values, exact steps, the dialects real files use, and nothing lost silently."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from forensics.analysis.engine import scan_path
from forensics.io import csv_blocks
from forensics.io.adapters.csv_table import CsvTableSource
from forensics.io.canonical import Canonicalizer
from forensics.io.formats import detect_format, open_source

BIG = 2**62


def read(path: Path, batch_rows: int = 65536) -> tuple[list[int], dict[str, dict[int, Any]], Any]:
    """``(kept steps, {column: {line: value}}, report)`` of a file as the scan sees it."""
    src = open_source(path)
    canon = Canonicalizer()
    steps: list[int] = []
    cols: dict[str, dict[int, Any]] = {}
    for raw in src.batches(batch_rows):
        batch, keep = canon(raw, src.report)
        lines = batch.lines[keep].tolist()
        steps += batch.steps[keep].tolist()
        for name, values in batch.columns.items():
            miss = batch.missing.get(name)
            for i in np.flatnonzero(keep).tolist():
                v = None if miss is not None and miss[i] else float(values[i])
                cols.setdefault(name, {})[int(batch.lines[i])] = "nan" if v != v else v
        for name, values in batch.text.items():
            cols.setdefault(name, {}).update(
                (ln, t) for ln, t in zip(lines, values[keep].tolist(), strict=True) if t is not None)
    return steps, cols, src.report


def write(path: Path, rows: list[list[Any]], delimiter: str = ",") -> Path:
    with open(path, "w", newline="") as fh:
        csv.writer(fh, delimiter=delimiter, lineterminator="\n").writerows(rows)
    return path


# --- exact steps -------------------------------------------------------------------------------

@pytest.mark.parametrize("name,header,delimiter", [
    ("m.csv", ["step", "kl", "reward"], ","),
    ("m.tsv", ["step", "kl", "reward"], "\t"),
    ("chart.csv", ["Step", "run-a - kl", "run-a - reward"], ","),
    ("history.csv", ["_step", "_runtime", "kl"], ","),
])
def test_steps_near_2_62_stay_exact_in_every_csv_reader(tmp_path: Path, name: str, header: list[str],
                                                        delimiter: str) -> None:
    rows = [[BIG + i, 0.01 * i, 0.5] for i in range(300)]
    p = write(tmp_path / name, [header, *rows], delimiter)
    steps, _, rep = read(p)
    assert steps == [BIG + i for i in range(300)], "steps read through float64 collapse together"
    assert rep.rows_skipped == 0


@pytest.mark.parametrize("name,header", [
    ("m.csv", ["step", "kl"]), ("chart.csv", ["Step", "run-a - kl"]), ("history.csv", ["_step", "_runtime"]),
])
def test_decimal_steps_are_exact_integers_or_skipped_with_their_reason(tmp_path: Path, name: str,
                                                                        header: list[str]) -> None:
    cells = ["1.0", "1.5", f"{BIG + 1}.0", str(2**63 - 1), str(2**63), "1e30", "7"]
    p = write(tmp_path / name, [header, *[[c, 0.5] for c in cells]])
    steps, _, rep = read(p)
    assert steps == [1, BIG + 1, 2**63 - 1, 7]
    reasons = {i.line: i.reason.split(": ")[-1] for i in rep.issues}  # W&B names the column first
    assert reasons == {3: "step 1.5 is not an integer", 6: f"step {2**63} is beyond int64",
                       7: "step 1e30 is beyond int64"}
    assert rep.skipped == {"step is not an integer": 3}


def test_a_step_column_of_decimals_read_through_pyarrow_stays_exact(tmp_path: Path) -> None:
    p = write(tmp_path / "m.csv", [["step", "kl"], *[[f"{BIG + i}.0", 0.1] for i in range(50)]])
    steps, _, rep = read(p)
    assert steps == [BIG + i for i in range(50)] and rep.rows_kept == 50


# --- dialects real files use ------------------------------------------------------------------

def _table(n: int = 5) -> str:
    return "".join(f"{s},{0.1 * s:.1f},{s % 2}\n" for s in range(n))


@pytest.mark.parametrize("label,data,first_line", [
    ("a blank second line", ("step,kl,x\n\n" + _table()).encode(), 3),
    ("a quoted newline in the header", ('step,"k\nl",x\n' + _table()).encode(), 3),
    ("a BOM", ("\ufeffstep,kl,x\n" + _table()).encode(), 2),
    ("64 KiB of leading blank lines", ("\n" * 65536 + "step,kl,x\n" + _table()).encode(), 65538),
    ("names starting with ( [ and a quote", ('(step),[kl],"""x"""\n' + _table()).encode(), 2),
    ("semicolons", ("step;kl;x\n" + _table().replace(",", ";")).encode(), 2),
])
def test_valid_csvs_are_recognised_and_read(tmp_path: Path, label: str, data: bytes, first_line: int) -> None:
    p = tmp_path / "m.csv"
    p.write_bytes(data)
    assert detect_format(p) == "csv", label
    _, cols, rep = read(p)
    assert rep.rows_kept == 5 and rep.rows_skipped == 0, label
    assert min(min(c) for c in cols.values()) == first_line, label


def test_a_latin1_header_is_read_with_a_note(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_bytes(("step,récompense,kl\n" + _table()).encode("latin-1"))
    assert detect_format(p) == "csv"
    _, cols, rep = read(p)
    assert cols["récompense"] == {2 + s: float(f"{0.1 * s:.1f}") for s in range(5)}
    assert any("Latin-1" in n for n in rep.notes)


def test_four_thousand_columns(tmp_path: Path) -> None:
    names = ["step", *[f"m{i}" for i in range(3999)]]
    p = write(tmp_path / "wide.csv", [names, *[[s, *[0.123456789 + i for i in range(3999)]] for s in range(3)]])
    assert detect_format(p) == "csv"
    steps, cols, rep = read(p)
    assert rep.rows_skipped == 0
    assert steps == [0, 1, 2] and len(cols) == 3999 and cols["m3998"] == {2: 3998.123456789, 3: 3998.123456789,
                                                                              4: 3998.123456789}


def test_repeated_header_names_never_collide(tmp_path: Path) -> None:
    p = write(tmp_path / "m.csv", [["step", "kl", "kl", "kl#2"], *[[s, 1.0, 2.0, 3.0] for s in range(4)]])
    _, cols, rep = read(p)
    assert {k: set(v.values()) for k, v in cols.items() if k.startswith("kl")} == \
        {"kl": {1.0}, "kl#3": {2.0}, "kl#2": {3.0}}
    assert any("column 3 'kl' read as 'kl#3'" in n for n in rep.notes)


# --- nothing lost silently --------------------------------------------------------------------

def test_an_unterminated_quote_costs_its_line_only(tmp_path: Path) -> None:
    lines = ["step,kl,note"] + [f"{s},0.5,ok" for s in range(300)]
    lines[151] = '150,0.5,"never closed'
    p = tmp_path / "m.csv"
    p.write_text("\n".join(lines) + "\n")
    steps, _, rep = read(p)
    assert len(steps) == 299 and 150 not in steps and steps[-1] == 299
    assert rep.rows_read == 300 and rep.skipped == {"unterminated quote": 1}
    assert rep.issues[0].line == 152 and "never closed" in rep.issues[0].reason


def test_a_file_cut_inside_its_last_cell_says_so(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("step,kl,reward\n" + "".join(f"{s},0.1,95.5\n" for s in range(9)) + "9,0.1,9")
    steps, cols, rep = read(p)
    assert steps == list(range(10))
    assert cols["reward_mean"][11] is None and cols["kl"][11] == 0.1  # the cut cell, not 9.0
    assert [(i.line, i.key) for i in rep.value_issues] == [(11, "reward")]
    assert any("ends without a line end: line 11" in n for n in rep.notes)


def test_a_record_longer_than_the_line_limit_is_skipped_and_reading_goes_on(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_blocks, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(csv_blocks, "BLOCK_BYTES", 256)
    p = tmp_path / "m.csv"
    p.write_text("step,kl,note\n0,0.1,ok\n1,0.2," + "z" * 5000 + "\n2,0.3,ok\n")
    steps, _, rep = read(p)
    assert steps == [0, 2] and rep.skipped == {"line too long": 1} and rep.issues[0].line == 3


def test_rows_of_the_wrong_width_are_located_beside_quoted_newlines(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text('step,kl,note\n0,0.1,"a\nb"\n1,0.2\n2,0.3,"c\n\nd"\n3,0.4,x,y\n4,0.5,z\n')
    steps, cols, rep = read(p)
    assert steps == [0, 2, 4] and cols["note"] == {2: "a\nb", 5: "c\n\nd", 9: "z"}
    assert [(i.line, i.reason) for i in rep.issues] == [(4, "2 cells, header has 3"), (8, "4 cells, header has 3")]


# --- pyarrow's speed, the row-by-row reader's values ------------------------------------------

ODD = ["0.5", "-3", "np.float64(0.25)", '"tensor(0.1, device=\'cuda:0\')"', '"1.5"', " 2.5 ", "nan", "inf",
       "true", "", "  ", "abc", "1_000", "NaN", "N/A", "null", "2024-01-01", '"a,b"', '"x\ny"', "1e-3"]


def _old_reader(text: str) -> dict[str, dict[int, Any]]:
    """What the row-by-row reader made of a table (Python's csv module, ``parse_number`` per
    cell), as ``{column: {line: value}}``: the reference."""
    from forensics.io.canonical import parse_number

    records = list(csv.reader(io.StringIO(text, newline="")))
    header, out, line = records[0], {}, 2
    for cells in records[1:]:
        for name, c in zip(header[1:], cells[1:], strict=True):
            s = c.strip()
            if s:
                v = parse_number(s)
                out.setdefault(name, {})[line] = s if v is None else ("nan" if v != v else v)
        line += 1 + sum(c.count("\n") for c in cells)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_odd_cells_read_as_the_row_by_row_reader_did(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    pure = [f"{rng.gauss(0, 1):.6f}" for _ in range(60)]
    rows = [f"{s},{pure[s]},{rng.choice(ODD)},{rng.choice(ODD[:10])}" for s in range(60)]
    text = "step,kl,odd,num\n" + "\n".join(rows) + "\n"
    p = tmp_path / "m.csv"
    p.write_text(text)
    want = _old_reader(text)
    for batch_rows in (7, 65536):
        _, cols, rep = read(p, batch_rows)
        got = {"kl": cols["kl"], "odd": {**cols.get("odd", {})}, "num": cols.get("num", {})}
        for name in ("odd", "num"):  # values set aside are missing here, listed in the report
            for issue in rep.value_issues:
                if issue.key == name:
                    got[name][issue.line] = want[name][issue.line]
            got[name] = {k: v for k, v in got[name].items() if v is not None}
        assert got == {k: want.get(k, {}) for k in ("kl", "odd", "num")}


def test_a_clean_table_is_parsed_by_pyarrow_and_blocks_change_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(0)
    rows = [["step", "kl", "note"]] + [[s, round(rng.gauss(0, 1), 6), rng.choice(["a", "b,c", "d\ne"])]
                                       for s in range(500)]
    p = write(tmp_path / "m.csv", rows)
    src = CsvTableSource(p)
    whole = [len(r) for r in src.batches(100)]
    assert sum(whole) == 500 and src.reader.python_blocks == 0 and src.reader.arrow_blocks == 1
    ref = read(p)
    monkeypatch.setattr(csv_blocks, "BLOCK_BYTES", 97)  # records cut across many blocks
    small = read(p)
    assert small[0] == ref[0] and small[1] == ref[1]


def test_scan_of_a_csv_reports_what_it_read(tmp_path: Path) -> None:
    p = write(tmp_path / "m.csv", [["step", "kl", "reward"], *[[s, 0.01, 0.5] for s in range(50)], [50, 1.0]])
    a = scan_path(p)
    r = a.inputs[0]
    assert a.steps["rows"] == 50 and r.rows_read == 51 and r.issues[0].line == 52


def test_a_listing_of_label_value_lines_is_not_a_table(tmp_path: Path) -> None:
    """``/proc/self/status`` (``Name:<tab>forensics``, ``VmPeak:<tab>  1368456 kB`` ...) was read
    as a two-column TSV; a listing whose lines open with ``label:`` is no table of steps. A real
    table whose first column is a time of day still is one."""
    from forensics.errors import FormatError

    listing = tmp_path / "status"
    listing.write_text("Name:\tpython\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\nPid:\t4242\n"
                       "VmPeak:\t 1368456 kB\nThreads:\t3\n")
    with pytest.raises(FormatError):
        detect_format(listing)
    table = tmp_path / "t.tsv"
    table.write_text("time\tstep\tkl\n12:30\t1\t0.01\n12:31\t2\t0.02\n")
    assert detect_format(table) == "csv"

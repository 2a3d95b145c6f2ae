"""Readers: odd rows, bad lines with file/line/reason, truncated tails, gz, Parquet, memory."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from forensics import InputError, StrictModeError, scan_path
from forensics.config import Config
from forensics.io.formats import open_source

from .conftest import healthy_rows, write_jsonl


def read_all(path: Path, batch_rows: int = 1000, strict: bool = False):
    src = open_source(path, strict=strict)
    batches = list(src.batches(batch_rows))
    return src, batches


def test_mixed_rows_late_keys_null_nan_infinity(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text(
        '{"step": 0, "kl": 1}\n'
        '{"step": 1, "kl": 0.5, "late": 3}\n'
        '{"step": 2, "kl": null, "grad_norm": NaN}\n'
        '{"step": 3, "kl": Infinity, "grad_norm": -Infinity}\n'
        '\n'
        '{"step": 4, "kl": 2, "note": "hello"}\n'
    )
    src, batches = read_all(p)
    assert src.report.rows_read == 5 and src.report.rows_skipped == 0
    raw = batches[0]
    assert raw.lines.tolist() == [1, 2, 3, 4, 6]
    kl = raw.numeric["kl"]
    assert kl[0] == 1.0 and np.isnan(kl[2]) and np.isinf(kl[3])
    assert raw.missing["kl"].tolist() == [False, False, True, False, False]
    assert np.isnan(raw.numeric["grad_norm"][2]) and not raw.missing["grad_norm"][2]
    assert raw.missing["late"].tolist() == [True, False, True, True, True]
    assert raw.text["note"][4] == "hello"


def test_malformed_lines_reported_and_scan_goes_on(tmp_path: Path) -> None:
    lines = [json.dumps(r) for r in healthy_rows(50)]
    lines[9] = '{"step": 9, "kl": 0.05,'          # broken JSON
    lines[19] = '[1, 2, 3]'                        # not an object
    lines[29] = '{"step": 29}{"step": 30}'         # two objects on one line
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    a = scan_path(p)
    rep = a.inputs[0]
    assert rep.rows_read == 50 and rep.rows_kept == 47 and rep.rows_skipped == 3
    assert [i.line for i in rep.issues] == [10, 20, 30]
    assert "invalid JSON" in rep.issues[0].reason
    assert "expected a JSON object" in rep.issues[1].reason
    assert any(f.rule == "stream.rows_skipped" for f in a.findings)
    with pytest.raises(StrictModeError, match=r":10: invalid JSON"):
        scan_path(p, config=Config(strict=True))


@pytest.mark.parametrize("bad", ['"step": "oops", ', '"step": NaN, ', ""])
def test_strict_makes_a_bad_or_missing_step_fatal(tmp_path: Path, bad: str) -> None:
    """A row whose step is text, NaN or missing is skipped and counted, and under --strict it is
    fatal (exit 3) with its line, as a malformed line is."""
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 0, "kl": 0.1}\n{' + bad + '"kl": 0.2}\n{"step": 2, "kl": 0.1}\n')
    rep = scan_path(p).inputs[0]
    assert (rep.rows_read, rep.rows_skipped) == (3, 1) and rep.issues[0].line == 2
    with pytest.raises(StrictModeError, match=r"s\.jsonl:2: "):
        scan_path(p, config=Config(strict=True))


def test_truncated_final_line(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", healthy_rows(40))
    with open(p, "a") as fh:
        fh.write('{"step": 40, "kl": 0.0')  # killed mid-write, no newline
    a = scan_path(p)
    rep = a.inputs[0]
    assert rep.rows_kept == 40 and rep.skipped == {"truncated final line": 1}
    assert rep.issues[0].line == 41 and "truncated final line" in rep.issues[0].reason


def test_final_line_without_newline_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 0, "kl": 1}\n{"step": 1, "kl": 2}')
    assert scan_path(p).steps["rows"] == 2


def test_gzip_and_parquet_give_same_analysis(tmp_path: Path) -> None:
    rows = healthy_rows(300, seed=3)
    plain = write_jsonl(tmp_path / "steps.jsonl", rows)
    gz = tmp_path / "steps.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    pqf = tmp_path / "steps.parquet"
    pq.write_table(pa.Table.from_pylist(rows), pqf, row_group_size=64)
    a, b, c = (scan_path(x).to_dict() for x in (plain, gz, pqf))
    for d in (a, b, c):
        d.pop("inputs")
        d.pop("column_mapping")
    assert a == b == c


def test_chunking_keeps_line_numbers(tmp_path: Path) -> None:
    rows = healthy_rows(3000)
    lines = [json.dumps(r) for r in rows]
    lines[2500] = "oops"
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    src, batches = read_all(p, batch_rows=100)
    assert len(batches) > 1
    assert src.report.issues[0].line == 2501
    got = np.concatenate([b.lines for b in batches])
    assert got.tolist() == [i + 1 for i in range(3000) if i != 2500]


def test_empty_and_garbage_inputs(tmp_path: Path) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        scan_path(empty)
    junk = tmp_path / "j.jsonl"
    junk.write_text('{"a": \n{"b": \n')
    with pytest.raises(InputError, match="no usable rows"):
        scan_path(junk)
    bad_pq = tmp_path / "x.parquet"
    bad_pq.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputError, match="Parquet"):
        scan_path(bad_pq)
    with pytest.raises(InputError, match="directory"):
        scan_path(tmp_path / "nothing_here")


def test_rows_without_step_are_skipped(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 0, "kl": 1}\n{"kl": 2}\n{"step": 1.5, "kl": 3}\n{"step": 2, "kl": 1}\n')
    a = scan_path(p)
    assert a.steps["rows"] == 2
    assert a.inputs[0].skipped == {"row has no step": 1, "step is not an integer": 1}
    assert [(i.line, i.reason) for i in a.inputs[0].issues] == [(2, "row has no step"),
                                                                 (3, "step 1.5 is not an integer")]


def test_no_step_column_numbers_rows(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"kl": 1}\n{"kl": 2}\n')
    a = scan_path(p)
    assert a.steps["first"] == 0 and a.steps["last"] == 1
    assert "no step column" in a.inputs[0].notes[0]


def test_unknown_columns_carried_through(tmp_path: Path) -> None:
    rows = [{"step": i, "kl": 0.1, "my_metric": i * 2.0, "grad_norm_policy": 1.0} for i in range(5)]
    a = scan_path(write_jsonl(tmp_path / "s.jsonl", rows))
    frame = a.metrics_frame()
    assert frame["my_metric"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert "grad_norm" in frame and "grad_norm_policy" not in frame
    mapping = a.mappings[str(tmp_path / "s.jsonl")]
    assert mapping.unmapped == ["my_metric"] and mapping.mapping["grad_norm_policy"] == "grad_norm"


def test_metrics_store_spills_and_reads_back() -> None:
    from forensics.analysis.store import MetricsStore

    store = MetricsStore(spill_rows=100)
    rng = np.random.default_rng(0)
    ref = []
    for start in range(0, 1000, 70):
        steps = np.arange(start, min(start + 70, 1000))
        cols = {"a": rng.normal(size=len(steps))}
        if start >= 500:
            cols["late"] = np.ones(len(steps))
        store.append(steps, cols)
        ref.append(cols["a"].astype(np.float32))
    assert store._files  # spilled to disk
    frame = store.frame()
    assert frame["step"].tolist() == list(range(1000))
    np.testing.assert_array_equal(frame["a"], np.concatenate(ref))
    assert np.isnan(frame["late"][:490]).all() and (frame["late"][560:] == 1).all()
    assert sum(len(p["step"]) for p in store.parts(["a"])) == 1000


def _rows_by_line(batches) -> dict[int, dict[str, object]]:
    """Every row's present values by line: numbers as floats (NaN kept), text as str."""
    out: dict[int, dict[str, object]] = {}
    for raw in batches:
        for i, line in enumerate(raw.lines.tolist()):
            row: dict[str, object] = {}
            for k, v in raw.numeric.items():
                if not (k in raw.missing and raw.missing[k][i]):
                    row[k] = "nan" if np.isnan(v[i]) else float(v[i])
            for k, v in raw.text.items():
                if v[i] is not None:
                    row[k] = str(v[i])
            for k, vals in raw.stray.items():  # a value that is not a number in a numeric column
                for j, v in vals:
                    if j == i:
                        row[k] = str(v)
            out[int(line)] = row
    return out


def test_fast_parses_lose_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """polars (against the columns seen so far), pyarrow and the line-by-line parse give the same
    values for every row, whatever the chunk holds: keys that appear late or rarely, nulls, ints
    then floats, colons and ``: null`` inside strings and keys, booleans, nested objects, a key
    that turns from number to text, NaN literals, blank and malformed lines."""
    from forensics.io.readers import jsonl

    monkeypatch.setattr(jsonl, "_MIN_CHUNK", 2048)
    monkeypatch.setattr(jsonl, "_POLARS_WORTH", 0)  # polars parses from the first chunk it may
    monkeypatch.setattr(jsonl, "_MAX_CHUNK", 4096)
    accepted: list[int] = []
    parse = jsonl._KnownColumns.parse

    def counting(self, data):
        frame = parse(self, data)
        accepted.append(frame is not None)
        return frame

    monkeypatch.setattr(jsonl._KnownColumns, "parse", counting)
    rng = np.random.default_rng(7)
    lines = []
    for i in range(3000):
        row: dict[str, object] = {"step": i, "kl": float(rng.normal()), "n": i % 7}
        if i % 97 == 5:
            row["eval/score"] = round(float(rng.normal()), 3)  # rare key
        if i > 1500:
            row["late"] = i if i % 2 else i + 0.5  # late key, int and float
        if i % 11 == 0:
            row["kl"] = None
        if 600 < i < 700:
            row["note"] = f"at {i}: null or not"  # colons and ': null' inside a string
        if 800 < i < 820:
            row["ratio:x"] = 1.5  # a colon in a key
        if 900 < i < 910:
            row["flag"] = bool(i % 2)
        if 1200 < i < 1210:
            row["nested"] = {"a": i, "b": None}
        if 2000 < i < 2100:
            row["n"] = "seven" if i % 3 == 0 else i % 7  # number, then text
        if i == 2200:
            row["ghost"] = None  # a new key that is only ever null
        lines.append(json.dumps(row))
    lines[2300] = lines[2300].replace('"kl": ', '"kl": NaN, "x": ', 1)
    lines[2400] = '{"step": 2400, "kl": '  # malformed
    lines[2500] = ""
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    src, batches = read_all(p, batch_rows=200)
    assert any(accepted) and not all(accepted)  # both fast parses were used
    got = _rows_by_line(batches)

    expected: dict[int, dict[str, object]] = {}
    from forensics.io.readers.arrow import rows_to_raw
    from forensics.io.readers.jsonl import parse_json_object

    for n, text in enumerate(lines, start=1):
        obj, _ = parse_json_object(text) if text else (None, "")
        if obj is not None:
            expected.update(_rows_by_line([rows_to_raw([obj], np.array([n]))]))
    assert src.report.issues[0].line == 2401 and src.report.rows_skipped == 1
    assert set(got) == set(expected)
    def norm(row: dict[str, object]) -> dict[str, object]:
        # a number in a column that is text in its batch (a key that turned into text) comes back
        # as the number's text
        out: dict[str, object] = {}
        for k, v in row.items():
            try:
                out[k] = v if v == "nan" else float(v)  # type: ignore[arg-type]
            except ValueError:
                out[k] = v
        return out

    for line, row in expected.items():
        assert norm(got[line]) == norm(row), (line, got[line], row)


def test_object_in_a_text_column_is_flattened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """polars would read an object under a key it knows as text as that object's JSON text; the
    chunk goes to the other parses, which flatten it into ``key/field`` columns."""
    from forensics.io.readers import jsonl

    monkeypatch.setattr(jsonl, "_MIN_CHUNK", 2048)
    monkeypatch.setattr(jsonl, "_POLARS_WORTH", 0)  # polars parses from the first chunk it may
    monkeypatch.setattr(jsonl, "_MAX_CHUNK", 4096)
    rows = []
    for i in range(400):
        row: dict[str, object] = {"step": i, "kl": 0.1}
        if 100 < i < 200:
            row["note"] = f"at {i}"
        if i == 300:
            row["note"] = {"inner": 1.5}
        rows.append(json.dumps(row))
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(rows) + "\n")
    _, batches = read_all(p, 50)
    assert _rows_by_line(batches)[301] == {"step": 300.0, "kl": 0.1, "note/inner": 1.5}


def test_a_number_column_stays_numeric_after_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metric logged once as the string "nan" is text in that chunk only: the rows after it
    are numbers again."""
    from forensics.io.readers import jsonl

    monkeypatch.setattr(jsonl, "_MIN_CHUNK", 2048)
    monkeypatch.setattr(jsonl, "_POLARS_WORTH", 0)  # polars parses from the first chunk it may
    monkeypatch.setattr(jsonl, "_MAX_CHUNK", 4096)
    rows = [{"step": i, "loss": 0.5 + i / 1000} for i in range(800)]
    for i in range(200, 500):
        rows[i]["loss"] = "nan"  # whole chunks of text
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, batches = read_all(p, 50)
    got = _rows_by_line(batches)
    assert got[800] == {"step": 799.0, "loss": 0.5 + 799 / 1000}
    assert got[1]["loss"] == 0.5 and got[401]["loss"] == "nan"


# --- hostile input (issue 11): nothing lost, bounded parsing, streams ---------------------------

def test_a_bad_value_is_set_aside_not_its_column(tmp_path: Path) -> None:
    rows = [{"step": i, "reward_mean": 0.5 + i / 1e4, "kl": 0.05} for i in range(3000)]
    rows[2000]["reward_mean"] = "oops"
    rows[2001]["reward_mean"] = "nan"
    rows[2002]["reward_mean"] = "tensor(0.25, device='cuda:0')"
    rows[2003]["reward_mean"] = [1, 2]
    p = write_jsonl(tmp_path / "s.jsonl", rows)
    a = scan_path(p)
    rep = a.inputs[0]
    assert rep.rows_read == rep.rows_kept == 3000 and rep.rows_skipped == 0
    assert rep.values_set_aside == {"reward_mean": 2}
    assert [(i.line, i.key) for i in rep.value_issues] == [(2001, "reward_mean"), (2004, "reward_mean")]
    assert "'oops' is not a number" in rep.value_issues[0].reason
    assert any(n.startswith("values set aside: 2 value(s)") for n in rep.notes)
    col = a.to_pandas(["reward_mean"])["reward_mean"]
    assert col.notna().sum() == 2997 and col.loc[2002] == 0.25 and np.isnan(col.loc[2001])


def test_late_canonical_key_never_overwrites_its_alias(tmp_path: Path) -> None:
    rows = [{"step": i, "grad_norm_policy": 1.0, "kl": 0.05} for i in range(1000)]
    for r in rows[800:]:
        r["grad_norm"] = 50.0
    p = write_jsonl(tmp_path / "s.jsonl", rows)
    for batch in (100, 65536):
        a = scan_path(p, config=Config(batch_rows=batch))
        m = a.mappings[str(p)]
        assert m.mapping["grad_norm_policy"] == "grad_norm" and "grad_norm" in m.shadowed
        frame = a.to_pandas(["grad_norm", "shadowed/grad_norm"])
        assert (frame["grad_norm"] == 1.0).all()  # the first source keeps its column
        assert frame["shadowed/grad_norm"].notna().sum() == 200
        assert any("grad_norm (first at line 801)" in n for n in a.inputs[0].notes)
        assert not any(f.rule.startswith("grad.") and f.severity.value == "critical" for f in a.findings)


@pytest.mark.parametrize("base", [2**53 - 2, 2**62, 2**63 - 10, -(2**63)])
def test_steps_are_exact_int64(tmp_path: Path, base: int) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", [{"step": base + i, "kl": 0.05} for i in range(6)])
    a = scan_path(p)
    assert a.steps["rows"] == 6 and a.steps["first"] == base and a.steps["last"] == base + 5
    assert a.steps["replays"] == []


def test_odd_steps_are_located_skips(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 0, "kl": 1}\n{"step": true, "kl": 1}\n{"step": "oops", "kl": 1}\n'
                 '{"step": 9223372036854775808, "kl": 1}\n{"step": NaN, "kl": 1}\n{"step": "7", "kl": 1}\n'
                 '{"step": 8, "kl": 1}\n')
    a = scan_path(p)
    rep = a.inputs[0]
    assert a.steps["rows"] == 3 and rep.rows_read == 7 and rep.skipped == {"step is not an integer": 4}
    assert [i.line for i in rep.issues] == [2, 3, 4, 5]
    assert "boolean" in rep.issues[0].reason and "beyond int64" in rep.issues[2].reason


@pytest.mark.parametrize("head", ["bom", "comment", "malformed", "long"])
def test_detection_on_a_buffered_head(tmp_path: Path, head: str) -> None:
    lines = [json.dumps(r) for r in healthy_rows(30)]
    if head == "bom":
        lines[0] = "\ufeff" + lines[0]
    elif head == "comment":
        lines.insert(0, "# written by my trainer")
    elif head == "malformed":
        lines.insert(0, '{"step": 0, "kl": ')
    else:
        lines[0] = lines[0][:-1] + ', "blob": "' + "x" * 100_000 + '"}'
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    a = scan_path(p)
    rep = a.inputs[0]
    assert rep.format == "jsonl" and rep.rows_kept == 30
    assert rep.rows_skipped == (1 if head in ("comment", "malformed") else 0)


def test_bounded_parsing_reasons(tmp_path: Path) -> None:
    lines = [json.dumps(r) for r in healthy_rows(40)]
    lines[5] = '{"step": 5, "x": ' + '{"a":' * 20000 + "1" + "}" * 20000 + "}"  # pyarrow: SIGSEGV
    lines[6] = '{"step": 6, "x": ' + "9" * 5000 + "}"  # past Python's 4,300-digit int limit
    lines[7] = '{"step": 7, "x": "\xff"}'
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep = scan_path(p).inputs[0]
    assert rep.rows_read == 40 and rep.rows_kept == 38
    reasons = {i.line: i.reason for i in rep.issues}
    assert "nested deeper than 256 levels" in reasons[6] and "longer than 4300 digits" in reasons[7]


def test_truncated_gzip_keeps_every_complete_row(tmp_path: Path) -> None:
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in healthy_rows(2000)).encode(), mtime=0)
    p = tmp_path / "s.jsonl.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    a = scan_path(p)
    rep = a.inputs[0]
    assert 1000 < rep.rows_kept < 2000 and rep.rows_kept + rep.rows_skipped == rep.rows_read
    assert any("ends before its end marker" in n for n in rep.notes)


def test_a_pipe_is_read_once_to_the_end(tmp_path: Path) -> None:
    import os
    import threading

    data = "".join(json.dumps(r) + "\n" for r in healthy_rows(3000)).encode()
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as fh:
            fh.write(data)

    t = threading.Thread(target=write)
    t.start()
    a = scan_path(f"/dev/fd/{r}")
    t.join()
    os.close(r)
    assert a.steps["rows"] == 3000 and a.steps["first"] == 0  # nothing lost to format detection


def test_parquet_decimal_string_and_dictionary_columns(tmp_path: Path) -> None:
    import decimal

    n = 50
    table = pa.table({
        "step": pa.array(range(n), pa.int64()),
        "reward_mean": pa.array([decimal.Decimal("0.125")] * n, pa.decimal128(10, 3)),
        "kl": pa.array(["0.05"] * (n - 1) + ["oops"]),
        "grad_norm": pa.array([1.0, 2.0] * (n // 2)).dictionary_encode(),
    })
    p = tmp_path / "steps.parquet"
    pq.write_table(table, p)
    a = scan_path(p)
    frame = a.to_pandas(["reward_mean", "kl", "grad_norm"])
    assert (frame["reward_mean"] == 0.125).all() and frame["kl"].notna().sum() == n - 1
    assert set(frame["grad_norm"]) == {1.0, 2.0}
    rep = a.inputs[0]
    assert rep.values_set_aside == {"kl": 1} and any("decimal" in note for note in rep.notes)


def test_partitioned_parquet_dataset_is_one_stream(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    n = 120
    table = pa.table({"step": pa.array(range(n), pa.int64()), "kl": pa.array([0.05] * n),
                      "epoch": pa.array([i // 10 for i in range(n)], pa.int64())})
    ds.write_dataset(table, tmp_path / "steps", format="parquet", partitioning=["epoch"], partitioning_flavor="hive")
    a = scan_path(tmp_path / "steps")
    assert a.inputs[0].format == "parquet-parts" and a.steps["rows"] == n and a.steps["replays"] == []
    assert a.to_pandas(["epoch"])["epoch"].tolist() == [i // 10 for i in range(n)]  # epoch=10 after epoch=9


def _cells(path: Path) -> int:
    """Work a read costs: cells (rows x columns) of the raw and canonical batches."""
    from forensics.io.canonical import Canonicalizer

    src = open_source(path)
    canon = Canonicalizer()
    cells = 0
    for raw in src.batches(65536):
        cells += len(raw) * (len(raw.numeric) + len(raw.text))
        batch, _ = canon(raw, src.report)
        cells += len(batch) * (len(batch.columns) + len(batch.text))
    assert src.report.rows_read == src.report.rows_kept
    return cells


def test_rows_that_each_add_a_key_cost_linear_work(tmp_path: Path) -> None:
    """Counted work, not time: 10x the rows cost about 10x the cells (rows x keys would be 100x)."""
    def write(n: int) -> Path:
        return write_jsonl(tmp_path / f"k{n}.jsonl", [{"step": i, "kl": 0.05, f"k{i}": 1.0} for i in range(n)])

    small, large = _cells(write(2_000)), _cells(write(20_000))
    assert large / small < 15


def test_a_log_adding_a_key_per_row_keeps_a_capped_metrics_table_and_says_so(tmp_path: Path) -> None:
    """The per-step table (metrics.csv) holds at most MAX_COLUMNS columns, never rows x keys; the
    rest are counted in a note, and the trackers still read every row."""
    from forensics.analysis.store import MAX_COLUMNS

    n = MAX_COLUMNS + 200
    a = scan_path(write_jsonl(tmp_path / "k.jsonl", [{"step": i, "kl": 0.05, f"k{i}": 1.0} for i in range(n)]))
    assert len(a.metrics.names) <= MAX_COLUMNS + 1 and "kl" in a.metrics.names
    assert a.metrics.dropped_count >= 200
    assert any("left out of the per-step table" in note for note in a.inputs[0].notes)


def test_one_huge_step_does_not_round_the_others(tmp_path: Path) -> None:
    """pyarrow reads a column holding 2**64 as float64, which would round steps near 2**60 into
    collisions: such a chunk is read line by line, exactly."""
    rows = [{"step": 2**60 + i, "kl": 0.05} for i in range(50)]
    rows[25]["step"] = 2**64
    a = scan_path(write_jsonl(tmp_path / "s.jsonl", rows))
    rep = a.inputs[0]
    assert a.steps["rows"] == 49 and a.steps["replays"] == [] and rep.skipped == {"step is not an integer": 1}
    assert "beyond int64" in rep.issues[0].reason and rep.issues[0].line == 26


def test_sample_stream_from_a_partitioned_dataset(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    steps = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(40))
    n = 400
    samples = pa.table({"step": pa.array([i // 10 for i in range(n)], pa.int64()),
                        "length": pa.array([100.0 + i % 7 for i in range(n)]),
                        "reward": pa.array([0.5] * n)})
    ds.write_dataset(samples, tmp_path / "samples_ds", format="parquet", partitioning=["step"],
                     partitioning_flavor="hive")
    a = scan_path(steps, samples=tmp_path / "samples_ds")
    assert a.steps["sample_rows"] == n
    rep = next(r for r in a.inputs if r.path.endswith("samples_ds"))
    assert rep.format == "parquet-parts" and rep.rows_read == rep.rows_kept == n


def test_lines_too_deep_in_a_chunk_polars_parses_are_found_and_reported(tmp_path: Path) -> None:
    """polars takes the chunks after the first without the bracket counts (its parse stops at
    its own depth limit, and a chunk it accepts holds no nested value): lines nested deeper than
    MAX_DEPTH in such a chunk, under a known key or a key the schema lacks, below and beyond
    polars' limit, still send the chunk line by line, where each is reported and every other
    row kept."""
    import polars  # noqa: F401  (imported: the reader then parses every later chunk with it)

    from forensics.io.limits import MAX_DEPTH

    def deep(n: int) -> str:
        return "[" * n + "0" + "]" * n

    rows = [json.dumps({"step": i, "kl": 0.05, "loss": 1.0 + i * 1e-4}) for i in range(6_000)]
    bad = {2_500: '{"step": 2500, "kl": ' + deep(MAX_DEPTH + 1) + "}",
           3_000: '{"step": 3000, "kl": 0.05, "extra": ' + deep(300) + "}",
           3_500: '{"step": 3500, "kl": 0.05, "extra": ' + deep(5_000) + "}"}
    for i, line in bad.items():
        rows[i] = line
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(rows) + "\n")
    src = open_source(path)
    steps = np.concatenate([raw.numeric["step"] for raw in src.batches(65536)])
    rep = src.report
    assert rep.rows_read == 6_000 and rep.rows_kept == 6_000 - 3 == len(steps)
    assert sorted(i.line for i in rep.issues) == [2_501, 3_001, 3_501]
    assert all("deep" in i.reason or "nest" in i.reason for i in rep.issues), [i.reason for i in rep.issues]
    assert not set(steps.tolist()) & {2_500, 3_000, 3_500}


DEPTHS, KEYS = st.sampled_from([0, 1, 5, 128, 255, 256, 257, 300]), st.sampled_from([0, 3, 16383, 16384])


@given(st.lists(st.tuples(DEPTHS, KEYS, st.integers(0, 700), st.booleans()), min_size=1, max_size=8),
       st.booleans())
@example([(257, 0, 0, False), (0, 0, 0, True), (0, 0, 0, True)], False)  # one line too deep, by one
@example([(256, 0, 0, True), (0, 0, 0, True), (0, 0, 0, True)], True)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_the_depth_and_width_bounds_see_every_line(lines: list[tuple[int, int, int, bool]],
                                                   last_newline: bool) -> None:
    """The JSONL reader's quick test that a chunk is safe for the fast parses (no line nests more
    than MAX_DEPTH brackets deep or has more than MAX_ROW_KEYS keys) answers as counting line by
    line does, whatever the lines' lengths and their order."""
    from forensics.io.limits import MAX_DEPTH, MAX_ROW_KEYS
    from forensics.io.readers.jsonl import _ByteCounter, _longest_line, _shallow

    texts = []
    for depth, keys, padding, wrapped in lines:
        value = "[" * depth + "0" * padding + "]" * depth
        pairs = "".join(f'"{i}":0,' for i in range(keys))
        texts.append("{" + pairs + '"v":' + value + "}" if wrapped else value)
    body = "\n".join(texts) + ("\n" if last_newline else "")
    arr = np.frombuffer(body.encode(), dtype=np.uint8)
    expected = all(t.count("{") + t.count("[") <= MAX_DEPTH and t.count(":") <= MAX_ROW_KEYS for t in texts)
    nl = np.flatnonzero(arr == 10)
    assert _shallow(arr, nl, _ByteCounter(), _longest_line(nl, len(arr))) == expected


def _type_changing_chunk(last: str) -> bytes:
    """17 wide rows whose step is a number, then an integer beyond int64, a float and ``last``
    (a list, a boolean): pyarrow 26's JSON reader crashes the process (SIGSEGV) parsing it in
    blocks of half its size."""
    rows = []
    for i in range(17):
        step = {5: "9223372036854775808", 8: "11.5", 16: last}.get(i, str(i + 3))
        head = '{"step": ' + step + ', "kl": 0.05, "pad": "'
        rows.append(head + "x" * (10_000 - len(head) - 2) + '"}')
    return ("\n".join(rows) + "\n").encode()


TYPE_CHANGE_CHILD = r"""
import sys
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.json as pj
from forensics.io.readers import jsonl
body = Path(sys.argv[1]).read_bytes()
if sys.argv[2] == "halves":  # how the reader cut such a chunk before: blocks of half its size
    try:
        pj.read_json(pa.BufferReader(body), read_options=pj.ReadOptions(block_size=max(len(body) // 2, 65536)))
    except pa.ArrowInvalid:
        pass
else:  # the reader's own fast parse of the chunk
    count = jsonl._ByteCounter()
    arr = np.frombuffer(body, np.uint8)
    got = jsonl.JsonlSource(Path(sys.argv[1]))._parse_fast(memoryview(body), arr, 1, count(arr, 10),
                                                           jsonl._KnownColumns(count, len(body)), count)
    print("declined" if got is None else "parsed")
"""


@pytest.mark.parametrize("last", ["[1]", "true"])
def test_a_chunk_whose_column_changes_type_does_not_crash_the_parse(tmp_path: Path, last: str) -> None:
    """A column that holds numbers and then a list (an object, a boolean) can crash pyarrow's
    JSON reader in a parse of several blocks: a chunk that may hold such a value is parsed as
    one block, where pyarrow refuses the column, and the lines are read one by one. Run in
    child processes: a crash is an exit code."""
    import subprocess
    import sys

    path = tmp_path / "steps.jsonl"
    path.write_bytes(_type_changing_chunk(last))

    def child(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", TYPE_CHANGE_CHILD, str(path), mode],
                              capture_output=True, text=True, timeout=120)

    halves = child("halves")
    if halves.returncode == 0:
        print("this pyarrow no longer crashes on the chunk in halves")  # the guard then only costs speed
    else:
        assert halves.returncode < 0  # killed by a signal: the hazard the reader avoids
    own = child("reader")
    assert own.returncode == 0 and own.stdout.strip() == "declined", own.stderr
    a = scan_path(path)
    rep = a.inputs[0]
    assert rep.rows_read == 17 and rep.rows_kept + rep.rows_skipped == 17 and a.steps["rows"] >= 13

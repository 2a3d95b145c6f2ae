"""Hostile input, round two (issue 22): each defect found by the fuzz suite, pinned by a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.io.readers.base import ReadReport

from .fuzz import round_two
from .fuzz.round_two import _wandb

FMT = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
WANDB_FILE = next((FMT / "wandb_offline" / "wandb").glob("offline-run-*/*.wandb"))


def _scan(*argv: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["scan", *argv, "-q"], catch_exceptions=False)
    return res.exit_code, res.output


def _history(step: int, **values: str) -> bytes:
    return round_two._history(step, values)


def test_jsonl_row_then_many_blank_lines_is_one_row(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    log.write_text('{"step": 1, "kl": 0.1}\n{"step": 2, "kl": 0.2}\n' + "\n" * 20_000 + '{"step": 3, "kl": 0.3}\n'
                   + "\n" * 70_000)
    from forensics.io.readers.jsonl import JsonlSource

    src = JsonlSource(log)
    rows = sum(len(b.lines) for b in src.batches(1000))
    assert rows == 3 and src.report.rows_read == 3


def test_jsonl_row_with_too_many_keys_is_a_skipped_row(tmp_path: Path) -> None:
    from forensics.io.limits import MAX_ROW_KEYS
    from forensics.io.readers.jsonl import JsonlSource

    wide = json.dumps({"step": 2, **{f"k{i}": i for i in range(MAX_ROW_KEYS + 1)}})
    log = tmp_path / "steps.jsonl"
    log.write_text('{"step": 1, "kl": 0.1}\n' + wide + '\n{"step": 3, "kl": 0.3}\n')
    src = JsonlSource(log)
    lines = [int(x) for b in src.batches(1000) for x in b.lines]
    assert lines == [1, 3]
    assert src.report.rows_skipped == 1 and f"more than {MAX_ROW_KEYS} keys" in src.report.issues[0].reason


def test_wandb_value_nested_deep_is_a_skipped_record(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    run = tmp_path / "wandb" / "offline-run-20250101_000000-deep"
    run.mkdir(parents=True)
    deep = "[" * 2000 + "]" * 2000
    (run / "run-deep.wandb").write_bytes(_wandb([_history(1, kl="0.1"), _history(2, kl=deep),
                                                 _history(3, kl="0.3")]))
    code, out = _scan(str(run), "-o", str(tmp_path / "out"))
    assert code == 0, out
    report = json.loads((tmp_path / "out" / "analysis.json").read_text())["inputs"][0]
    assert (report["rows_read"], report["rows_kept"], report["rows_skipped"]) == (3, 2, 1)
    assert "nested deeper" in json.dumps(report)


def test_wandb_corrupt_chunk_loses_one_record(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from forensics.io.adapters.wandb_offline import BLOCK, CHUNK, HEADER, read_records

    src = WANDB_FILE.read_bytes()
    whole = [n for n, _ in read_records(WANDB_FILE, ReadReport("x"))]
    # the first chunk that starts in the middle of the second block: flip a byte of its data
    pos, starts = HEADER.size, []
    while pos < len(src) - CHUNK.size:
        if BLOCK - pos % BLOCK < CHUNK.size:
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = CHUNK.unpack_from(src, pos)
        if kind == 0:
            break
        starts.append((pos, length))
        pos += CHUNK.size + length
    at, length = next((p, n) for p, n in starts if p > BLOCK + BLOCK // 2 and n > 8 and src[p + 6] == 1)
    broken = bytearray(src)
    broken[at + CHUNK.size + 4] ^= 0xFF
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(bytes(broken))
    report = ReadReport(str(bad))
    got = [n for n, _ in read_records(bad, report)]
    assert report.rows_skipped == 1
    assert len(got) + report.rows_skipped == len(whole)


def test_wandb_framing_helper_round_trips(tmp_path: Path) -> None:
    from forensics.io.adapters.wandb_offline import read_records

    p = tmp_path / "a.wandb"
    payloads = [bytes([i]) * (300 + i) for i in range(250)]  # crosses blocks
    p.write_bytes(_wandb(payloads))
    assert [d for _, d in read_records(p, ReadReport("x"))] == payloads


# --- outputs never touch inputs (item 7) -------------------------------------------------------

def _log(path: Path, n: int = 60) -> Path:
    rows = [{"step": i, "kl": 0.01 * (1 + (i > 40) * 50), "reward_mean": 0.1 * i, "loss": 1.0 / i}
            for i in range(1, n + 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("link", [False, True])
def test_watch_alerts_never_append_to_the_watched_log(tmp_path: Path, link: bool) -> None:
    log = _log(tmp_path / "steps.jsonl")
    before = log.read_bytes()
    alerts = tmp_path / "alias.jsonl"
    if link:
        alerts.hardlink_to(log)
    res = CliRunner().invoke(main, ["watch", str(log), "--once", "--jsonl", str(alerts if link else log)])
    assert res.exit_code == 2, res.output
    assert "refusing to write" in res.output and log.read_bytes() == before


def test_diff_output_never_replaces_an_input(tmp_path: Path) -> None:
    a, b = _log(tmp_path / "a.jsonl"), _log(tmp_path / "b.jsonl", 50)
    before = a.read_bytes()
    for out in (a, b):
        res = CliRunner().invoke(main, ["diff", str(a), str(b), "-o", str(out), "-q"])
        assert res.exit_code == 2, res.output
    assert a.read_bytes() == before
    res = CliRunner().invoke(main, ["diff", str(a), str(b), "-o", str(tmp_path / "d.txt"), "-q"])
    assert res.exit_code in (0, 1) and (tmp_path / "d.txt").is_file()


def test_export_into_a_path_through_a_file_is_a_usage_error(tmp_path: Path) -> None:
    log = _log(tmp_path / "steps.jsonl")
    assert _scan(str(log), "-o", str(tmp_path / "rep"))[0] == 0
    (tmp_path / "file").write_text("x")
    for target in ("tensorboard", "wandb-offline"):
        if target == "wandb-offline":
            pytest.importorskip("wandb")
        res = CliRunner().invoke(main, ["export", str(tmp_path / "rep"), "--to", target, "-o",
                                        str(tmp_path / "file" / "x")])
        assert res.exit_code == 2 and "not a folder" in res.output, res.output
        assert "internal error" not in res.output


# --- fleet never hides a run, never loops (items 3 and 6) ---------------------------------------

def _fleet(*argv: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["fleet", *argv, "-q", "--no-html", "--workers", "1"])
    return res.exit_code, res.output


def test_fleet_discovery_follows_no_link_loop_and_lists_each_file_once(tmp_path: Path) -> None:
    from forensics.fleet import find_runs

    root = tmp_path / "runs"
    root.mkdir()
    _log(root / "a.jsonl")
    (root / "loop").symlink_to(".")
    (root / "up").symlink_to("..")
    (root / "b.jsonl").symlink_to("a.jsonl")  # the same real file
    (tmp_path / "outside.jsonl").write_text('{"step": 1, "kl": 0.1}\n')
    (root / "out.jsonl").symlink_to(tmp_path / "outside.jsonl")  # a link out of the root
    assert [r.name for r in find_runs([root])] == ["a.jsonl"]


def test_fleet_fifo_and_unreadable_logs_are_rows_and_fail_the_gate(tmp_path: Path) -> None:
    import os

    root = tmp_path / "runs"
    (root / "good").mkdir(parents=True)
    _log(root / "good" / "steps.jsonl")
    (root / "piped").mkdir()
    os.mkfifo(root / "piped" / "steps.jsonl")  # would block the fleet forever
    (root / "garbage.jsonl").write_bytes(b"\x00\x01\x02 not a log at all\n" * 5)
    policy = tmp_path / "p.toml"
    policy.write_text('fail_on = "critical"\n')
    code, out = _fleet(str(root), "-o", str(tmp_path / "f"), "--policy", str(policy))
    rows = {r["run"]: r for r in json.loads((tmp_path / "f" / "fleet.json").read_text())["runs"]}
    assert set(rows) == {"good", "piped", "garbage.jsonl"}, out
    assert "FIFO" in rows["piped"]["error"] and rows["garbage.jsonl"]["error"]
    assert rows["good"]["error"] is None
    assert code == 1  # an unreadable run fails the gate


def test_fleet_output_name_colliding_with_a_run_is_refused_before_any_scan(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "fleet.csv").mkdir(parents=True)
    _log(root / "fleet.csv" / "steps.jsonl")
    _log(root / "other.jsonl")
    code, out = _fleet(str(root), "-o", str(tmp_path / "f"))
    assert code == 2 and "fleet.csv" in out
    assert not (tmp_path / "f" / "other.jsonl").exists()  # nothing scanned
    code, out = _fleet(str(root), "-o", str(root))  # the reports among the runs
    assert code == 2 and "refusing" in out


# --- exit codes as the README says (item 8) -----------------------------------------------------

def test_report_and_export_of_a_folder_without_analysis_exit_3(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for argv in (["report", str(tmp_path / "empty")],
                 ["export", str(tmp_path / "empty"), "--to", "tensorboard", "-o", str(tmp_path / "tb")]):
        res = CliRunner().invoke(main, argv)
        assert res.exit_code == 3 and "no analysis.json" in res.output, res.output
    log = _log(tmp_path / "steps.jsonl")
    assert CliRunner().invoke(main, ["report", str(log)]).exit_code == 2  # a log where an analysis goes: usage


# --- bounded reads (item 3) ---------------------------------------------------------------------

def test_a_device_is_read_up_to_max_bytes_then_exit_3(tmp_path: Path) -> None:
    code, out = _scan("/dev/zero", "--max-bytes", "3000000", "-o", str(tmp_path / "o"))
    assert code == 3 and "more than 3,000,000 bytes" in out and "--max-bytes" in out
    from forensics.io import inputs

    assert inputs._STREAM_LIMIT[0] == 3_000_000
    _scan("/dev/null", "-o", str(tmp_path / "o"))  # the next command gets the default again
    assert inputs._STREAM_LIMIT[0] == inputs.MAX_STREAM_BYTES


# --- exact steps (item 4, JSONL) ----------------------------------------------------------------

@pytest.mark.parametrize("at", [2, 4000])  # the first chunk (pyarrow) and a later one (polars)
def test_jsonl_step_below_int64_is_a_skipped_row(tmp_path: Path, at: int) -> None:
    from forensics.analysis.engine import scan_path

    rows = [f'{{"step": {i}, "kl": 0.1}}' for i in range(1, 6001)]
    rows[at - 1] = '{"step": -9223372036854775809, "kl": 0.2}'
    log = tmp_path / "steps.jsonl"
    log.write_text("\n".join(rows) + "\n")

    a = scan_path(log)
    r = a.inputs[0]
    assert (r.rows_read, r.rows_skipped) == (6000, 1)
    assert r.issues[0].line == at and "beyond int64" in r.issues[0].reason
    assert a.steps["replays"] == []


def test_jsonl_with_bare_nan_and_inf_values_is_read(tmp_path: Path) -> None:
    rows = [f'{{"step": {i}, "kl": {"nan" if i % 3 else 0.01}, "loss": {"-inf" if i % 2 else 1.5}, '
            f'"reward_mean": {0.01 * i}}}' for i in range(1, 301)]
    log = tmp_path / "steps.jsonl"
    log.write_text("\n".join(rows) + "\n")
    code, out = _scan(str(log), "-o", str(tmp_path / "o"))
    assert code == 0, out
    report = json.loads((tmp_path / "o" / "analysis.json").read_text())["inputs"][0]
    assert report["format"] == "jsonl" and (report["rows_read"], report["rows_kept"]) == (300, 300)


# --- the seeded slice of the round-two fuzz families ----------------------------------------------

def test_fuzz_round_two_slice_has_no_failures() -> None:
    import random

    from .fuzz import round_two
    from .fuzz.harness import FAILURES, run_cases

    cases = list(round_two.generate(random.Random(22), len(round_two.FAMILIES)))
    assert {c.name.split("#")[0] for c in cases} == {m(random.Random(0)).name for m, _ in round_two.FAMILIES}
    results = list(run_cases(cases, workers=2, timeout=120))
    bad = [(r.outcome, r.case.name, r.detail) for r in results if r.outcome in FAILURES]
    assert bad == []


@pytest.mark.parametrize("name", ["trainer_state.json", "state.json"])
def test_trainer_state_whose_log_history_starts_beyond_the_head(tmp_path: Path, name: str) -> None:
    from forensics.analysis.engine import scan_path

    history = [{"step": i, "loss": 1.0 / i, "learning_rate": 1e-5, "epoch": i / 100} for i in range(1, 201)]
    path = tmp_path / name
    path.write_text(json.dumps({"best_model_checkpoint": "x" * 300_000, "log_history": history,
                                "global_step": 200}, indent=2))
    a = scan_path(path)
    assert a.inputs[0].format == "hf-trainer-state" and a.steps["rows"] == 200


def test_tensorboard_tag_past_max_key_bytes_is_a_skipped_record(tmp_path: Path) -> None:
    from forensics.analysis.engine import scan_path
    from forensics.io.adapters.tensorboard import encode_event, tfrecord
    from forensics.io.limits import MAX_KEY_BYTES

    events = [encode_event(1.0, 0, file_version="brain.Event:2")]
    events += [encode_event(float(i), i, {"train/loss": 1.0 / i, "train/kl": 0.01}) for i in range(1, 51)]
    events[20] = encode_event(20.0, 20, {"x" * (MAX_KEY_BYTES + 1): 1.0})
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(tfrecord(e) for e in events))
    r = scan_path(path).inputs[0]
    assert r.rows_skipped == 1 and f"over the {MAX_KEY_BYTES}-byte bound" in r.issues[0].reason


@pytest.mark.parametrize("lead, tail", [(70_000, 0), (0, 70_000), (100, 100)])
def test_blank_line_runs_are_read_past_in_linear_time(tmp_path: Path, lead: int, tail: int) -> None:
    from forensics.io.formats import detect_format
    from forensics.io.inputs import read_head

    log = tmp_path / "steps.jsonl"
    log.write_text("\n" * lead + "".join(f'{{"step": {i}, "kl": 0.1}}\n' for i in range(1, 51)) + "\n" * tail)
    head = read_head(log)
    assert b'{"step": 1,' in head and b"\n" * 65 not in head
    assert detect_format(log) == "jsonl"  # 64 KiB of leading blank lines was "file is empty"


def test_fleet_table_never_replaces_an_input_or_a_link(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    log = _log(root / "a.jsonl")
    before = log.read_bytes()
    out = tmp_path / "f"
    out.mkdir()
    (out / "fleet.csv").symlink_to(log)
    code, text = _fleet(str(root), "-o", str(out))
    assert code == 2 and "refusing to write" in text
    assert log.read_bytes() == before and not (out / "a.jsonl").exists()  # refused before any scan


@pytest.mark.parametrize("target", ["tensorboard", "wandb-offline"])
def test_export_into_a_folder_it_cannot_write_is_a_usage_error(tmp_path: Path, target: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Root ignores a folder's mode, so the refusal is simulated where the export proves the folder
    writable: the export stops with exit 2 and writes nothing anywhere (W&B would fall back to its
    default folder)."""
    from click.testing import CliRunner

    from forensics.cli import main
    from forensics.report import export

    from .conftest import RLDK

    scanned = tmp_path / "r"
    assert CliRunner().invoke(main, ["scan", str(RLDK), "-o", str(scanned), "-q"]).exit_code == 0

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(export.tempfile, "mkstemp", refuse)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["export", str(scanned), "--to", target, "-o", str(tmp_path / "ro")])
    assert res.exit_code == 2 and "cannot write into" in res.output, res.output
    assert not (tmp_path / "wandb").exists() and not list((tmp_path / "ro").iterdir())

"""Run discovery (:mod:`forensics.io.locate`): a folder means the same to scan, watch and fleet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.errors import InputError
from forensics.fleet.discover import find_runs
from forensics.io.locate import is_run_folder, locate
from forensics.live.watch import Watcher

from .conftest import FIXTURES, healthy_rows

FMT = FIXTURES / "formats"


def _verl_folder(root: Path) -> Path:
    root.mkdir()
    shutil.copy(FMT / "verl_v05_console.log", root / "train.log")
    return root


def test_a_folder_holding_only_a_verl_train_log_is_scanned_by_scan_watch_and_fleet(tmp_path: Path) -> None:
    """``forensics scan DIR`` exited 3 ("no training log") where ``forensics fleet DIR`` scanned it."""
    run = _verl_folder(tmp_path / "run")
    assert locate(run).steps == run / "train.log"
    res = CliRunner().invoke(main, ["scan", str(run), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    saved = json.loads((tmp_path / "out" / "analysis.json").read_text())
    alone = scan_path(run / "train.log").to_dict()
    assert saved["steps"]["rows"] == alone["steps"]["rows"] > 0
    assert [f["rule"] for f in saved["findings"]] == [f["rule"] for f in alone["findings"]]
    assert "read train.log, the one log in the folder" in saved["inputs"][0]["notes"]

    w = Watcher(run, echo=lambda s: None)
    w.run(once=True)
    assert w.path == run / "train.log" and w.scan.rows == alone["steps"]["rows"]

    runs = find_runs([run])
    assert [Path(r.path) for r in runs] == [run / "train.log"] and not runs[0].error


def test_a_folder_of_several_logs_names_them_and_points_to_fleet(tmp_path: Path) -> None:
    run = _verl_folder(tmp_path / "run")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in healthy_rows(20)))
    (run / "notes.txt").write_text("not a log\n")
    with pytest.raises(InputError, match=r"2 logs \(metrics.jsonl, train.log\).*forensics fleet"):
        locate(run)
    res = CliRunner().invoke(main, ["scan", str(run), "-o", str(tmp_path / "out")])
    assert res.exit_code == 3 and "2 logs" in res.output
    assert sorted(Path(r.path).name for r in find_runs([run])) == ["metrics.jsonl", "train.log"]


def test_a_trainer_output_dir_is_one_run_to_fleet_and_scan(tmp_path: Path) -> None:
    """Only checkpoint-*/trainer_state.json: scan reads the newest checkpoint's; fleet made each
    checkpoint a run of its own before it asked io."""
    out = tmp_path / "sweep" / "out"
    for n in (5, 10):
        (out / f"checkpoint-{n}").mkdir(parents=True)
        shutil.copy(FMT / "trl_grpo_trainer_state.json", out / f"checkpoint-{n}" / "trainer_state.json")
    assert is_run_folder(out)
    assert locate(out).steps == out / "checkpoint-10" / "trainer_state.json"
    runs = find_runs([tmp_path / "sweep"])
    assert [(r.name, Path(r.path)) for r in runs] == [("out", out)]


def test_a_callback_folder_is_one_run_and_its_notes_say_what_was_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "runs" / "ppo_healthy_s0", out / "forensics")
    found = locate(out)
    assert found.steps.parent == out / "forensics" and found.meta == out / "forensics" / "run.json"
    assert "the forensics trainer callback" in found.notes[0]
    assert [Path(r.path) for r in find_runs([tmp_path])] == [out]


def test_the_cli_locates_a_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.io.locate as where

    calls: list[Path] = []
    real = where.locate

    def counted(path: Path | str) -> where.RunFiles:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(where, "locate", counted)
    import forensics.analysis.engine as engine

    monkeypatch.setattr(engine, "locate", counted)
    run = _verl_folder(tmp_path / "run")
    res = CliRunner().invoke(main, ["scan", str(run), "-o", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 0, res.output
    assert calls == [run]


def test_a_report_folder_is_no_run(tmp_path: Path) -> None:
    """A scan's own output holds CSVs a format reads: scanning it again is refused, not read as logs."""
    res = CliRunner().invoke(main, ["scan", str(FIXTURES / "runs" / "ppo_lr_high"), "-o", str(tmp_path / "rep"), "-q"])
    assert res.exit_code == 0, res.output
    with pytest.raises(InputError, match="a report folder"):
        locate(tmp_path / "rep")
    assert find_runs([tmp_path / "rep"]) == []  # fleet skips a report folder too


def _parquet(path: Path, first: int, n: int = 5) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"step": list(range(first, first + n)), "kl": [0.05] * n}), path)


def test_parquet_runs_grouped_in_folders_are_runs_and_nested_parts_are_one_log(tmp_path: Path) -> None:
    """A folder of folders of Parquet runs (each its steps.parquet) is no run of its own, however
    deep the runs sit; Parquet parts in plain sub-folders (no steps.* or run.json below) are one."""
    sweep = tmp_path / "sweep"
    for i in range(3):
        _parquet(sweep / "parquet" / f"run_{i}" / "steps.parquet", 0)
    (sweep / "csv").mkdir()
    (sweep / "csv" / "run_9.csv").write_text("step,kl\n0,0.05\n1,0.06\n")
    assert not is_run_folder(sweep) and not is_run_folder(sweep / "parquet")
    names = sorted(r.name for r in find_runs([sweep]))
    assert names == ["csv/run_9.csv", "parquet/run_0", "parquet/run_1", "parquet/run_2"]
    parts = tmp_path / "steps"
    for k in range(4):
        _parquet(parts / str(k // 2) / f"{k}.parquet", 5 * k)
    assert is_run_folder(parts) and locate(parts).steps == parts
    assert scan_path(parts).to_dict()["steps"]["rows"] == 20

"""`forensics fleet`: runs found under paths, scanned on a local pool or Ray, one table worst first."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.fleet import find_runs, row_from_analysis, run_fleet, sort_rows
from forensics.fleet.discover import Run
from forensics.progress import FleetProgress, scan_progress

from .conftest import FIXTURES, healthy_rows, write_jsonl

RUNS = FIXTURES / "runs"
FORMATS = FIXTURES / "formats"
HAS_RAY = importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet-local")
    run_fleet([RUNS], out, workers=2)
    return out


def _rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "fleet.csv").read_text())))


def test_fixture_runs_make_one_table_worst_first(local_fleet: Path) -> None:
    rows = _rows(local_fleet)
    assert sorted(r["run"] for r in rows) == sorted(p.name for p in RUNS.iterdir() if p.is_dir())
    assert len(rows) == 19
    health = [float(r["health"]) for r in rows]
    assert health == sorted(health)  # worst first (none unreadable, no policy)
    data = json.loads((local_fleet / "fleet.json").read_text())
    assert [r["run"] for r in data["runs"]] == [r["run"] for r in rows]
    for r in data["runs"]:
        assert r["error"] is None and r["rows"] == 240 and r["format"] == "jsonl"
        assert r["algorithm"] in ("ppo", "grpo")
        assert (local_fleet / r["report"]).is_file()  # each run's report.html, linked
        assert (local_fleet / r["run"] / "analysis.json").is_file()
    # the faults are the worst runs, the healthy ones the best
    assert "healthy" not in rows[0]["run"]
    assert "healthy" in rows[-1]["run"]
    nan = next(r for r in data["runs"] if r["run"] == "ppo_nan_overflow")
    assert nan["first_domino_rule"] == "grad.nonfinite" and nan["findings"]["critical"] > 0
    counts = {c["rule"]: c["runs"] for c in data["rules"]}
    assert counts["grad.nonfinite"] >= 1
    assert all(counts[rule] == sum(rule in r["rules"] for r in data["runs"]) for rule in counts)
    html = (local_fleet / "fleet.html").read_text()
    assert 'href="ppo_nan_overflow/report.html"' in html and "Rules that fired" in html
    assert "<script src" not in html and "http" not in html.split("<script>")[0]  # self-contained


def test_a_run_row_is_its_scan(local_fleet: Path) -> None:
    d = json.loads((local_fleet / "fleet.json").read_text())
    row = next(r for r in d["runs"] if r["run"] == "ppo_lr_high")
    run = Run("ppo_lr_high", str(RUNS / "ppo_lr_high"))
    fresh = json.loads(json.dumps(scan_path(run.path).to_dict(), default=str))
    assert row_from_analysis(run, fresh, report="ppo_lr_high/report.html") == row


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'rl-forensics[ray]')")
def test_ray_engine_gives_the_same_table(local_fleet: Path, tmp_path: Path) -> None:
    run_fleet([RUNS], tmp_path, engine="ray", workers=2)
    for name in ("fleet.csv", "fleet.json", "fleet.html"):
        assert (tmp_path / name).read_bytes() == (local_fleet / name).read_bytes(), name
    a = json.loads((local_fleet / "ppo_lr_high" / "summary.json").read_text())
    assert json.loads((tmp_path / "ppo_lr_high" / "summary.json").read_text()) == a


def _mixed_tree(root: Path) -> Path:
    """Runs of every kind, a broken one, and files that are not runs."""
    shutil.copytree(RUNS / "ppo_healthy_s0", root / "sweep" / "seed0")
    shutil.copytree(RUNS / "ppo_lr_high", root / "sweep" / "lr<b>high&")
    broken = root / "sweep" / "broken"
    broken.mkdir()
    (broken / "steps.jsonl").write_text('{"step": 0, "kl": \n{"oops"\n')
    hf = root / "hf" / "out"
    (hf / "checkpoint-10").mkdir(parents=True)
    shutil.copy(FORMATS / "trl_grpo_trainer_state.json", hf / "trainer_state.json")
    shutil.copy(FORMATS / "trl_grpo_trainer_state.json", hf / "checkpoint-10" / "trainer_state.json")
    (root / "logs").mkdir()
    shutil.copy(FORMATS / "verl_v05_console.log", root / "logs" / "verl.log")
    write_jsonl(root / "logs" / "plain.jsonl", healthy_rows(120, seed=3))
    (root / "logs" / "config.json").write_text(json.dumps({"lr": 1e-6, "batch": 8}, indent=2))
    (root / "logs" / "notes.txt").write_text("not a log\n")
    (root / "old-report").mkdir()
    (root / "old-report" / "analysis.json").write_text("{}")
    return root


def test_discovery_finds_every_kind_of_run(tmp_path: Path) -> None:
    root = _mixed_tree(tmp_path / "tree")
    runs = find_runs([root], exclude=[root / "out"])
    assert [r.name for r in runs] == ["hf/out", "logs/plain.jsonl", "logs/verl.log", "sweep/broken",
                                      "sweep/lr<b>high&", "sweep/seed0"]
    assert runs[0].path.endswith("hf/out")  # one run, read as scan reads the folder (not each checkpoint)
    assert find_runs([root / "sweep" / "seed0"])[0].name == "seed0"  # a run given by name
    two = find_runs([root / "sweep", root / "logs"])
    assert "sweep/seed0" in [r.name for r in two] and "logs/verl.log" in [r.name for r in two]


def test_unreadable_runs_are_rows_not_crashes_and_the_gate_decides_the_exit(tmp_path: Path) -> None:
    root = _mixed_tree(tmp_path / "tree")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["fleet", str(root), "-o", str(out), "--workers", "2"])
    assert res.exit_code == 0, res.output
    assert "6 runs scanned (local): 1 could not be read" in res.output
    data = json.loads((out / "fleet.json").read_text())
    first = data["runs"][0]  # unreadable first
    assert first["run"] == "sweep/broken" and "no usable rows" in first["error"]
    assert first["report"] is None and data["totals"]["unreadable"] == 1
    assert {r["format"] for r in data["runs"][1:]} == {"hf-trainer-state", "jsonl", "verl-console"}
    html = (out / "fleet.html").read_text()
    assert "lr&lt;b&gt;high&amp;" in html and "lr<b>high" not in html  # escaped
    assert 'href="sweep/lr%3Cb%3Ehigh%26/report.html"' in html
    # with a policy, a failing or unreadable run fails the fleet
    res = CliRunner().invoke(main, ["fleet", str(root / "sweep"), "-o", str(tmp_path / "gated"),
                                    "--policy", "examples/gate-policy.toml", "-q"])
    assert res.exit_code == 1, res.output
    gates = {r["run"]: r["gate"] for r in json.loads((tmp_path / "gated" / "fleet.json").read_text())["runs"]}
    assert gates == {"broken": "error", "lr<b>high&": "failed", "seed0": "passed"}
    assert res.output == ""  # -q: nothing on success (the exit code tells the gate's verdict)
    res = CliRunner().invoke(main, ["fleet", str(root / "sweep" / "seed0"), "-o", str(tmp_path / "ok"),
                                    "--policy", "examples/gate-policy.toml", "--no-html"])
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "ok" / "fleet.json").read_text())["runs"][0]
    assert row["report"] == "seed0/analysis.json" and not (tmp_path / "ok" / "seed0" / "report.html").exists()


def test_no_runs_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(main, ["fleet", str(tmp_path / "empty"), "-o", str(tmp_path / "out")])
    assert res.exit_code == 3 and "no runs found" in res.output
    res = CliRunner().invoke(main, ["fleet", str(tmp_path / "missing"), "-o", str(tmp_path / "out")])
    assert res.exit_code == 3 and "no such file" in res.output
    res = CliRunner().invoke(main, ["fleet", str(RUNS / "ppo_lr_high"), "-o", str(tmp_path / "o"),
                                    "--policy", str(tmp_path / "nope.toml")])
    assert res.exit_code == 3  # an absent policy file is an absent input


def test_sorting_puts_errors_then_gate_failures_then_low_health_first() -> None:
    base = {"findings": {"critical": 0, "warning": 0, "info": 0}, "error": None, "gate": None}
    rows = [dict(base, run="b", health=0.9), dict(base, run="a", health=0.4),
            dict(base, run="c", health=None, error="boom"), dict(base, run="d", health=0.95, gate="failed"),
            dict(base, run="e", health=0.4, findings={"critical": 2, "warning": 0, "info": 0})]
    assert [r["run"] for r in sort_rows(rows)] == ["c", "d", "e", "a", "b"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_fleet_progress_shows_done_failed_and_eta() -> None:
    stream = _Tty()
    progress = FleetProgress(3, stream=stream)
    for row in ({"run": "a", "error": None}, {"run": "b", "error": "boom"}, {"run": "c", "error": None}):
        progress(row)
    progress.close()
    text = stream.getvalue()
    assert "scanning runs" in text and "3 done, 1 failed" in text and "100%" in text
    quiet = _Tty()
    FleetProgress(3, stream=quiet, enabled=False)({"run": "a", "error": None})
    plain = io.StringIO()  # not a terminal: nothing
    FleetProgress(3, stream=plain)({"run": "a", "error": None})
    assert quiet.getvalue() == plain.getvalue() == ""


def test_scan_progress_percent_and_eta_from_the_file_size(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(2000))
    stream = _Tty()
    tick, done = scan_progress([log], stream=stream, min_bytes=0)
    assert tick is not None
    scan_path(log, progress=tick)
    done()
    text = stream.getvalue()
    assert "scanning steps.jsonl" in text and "100%" in text and "%" in text.split("100%")[0]
    assert scan_progress([log], stream=io.StringIO(), min_bytes=0)[0] is None  # not a terminal
    assert scan_progress([log], stream=_Tty(), min_bytes=0, enabled=False)[0] is None  # -q
    assert scan_progress([log], stream=_Tty())[0] is None  # small: no bar

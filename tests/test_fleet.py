"""`forensics fleet`: runs found under paths, scanned on a local pool or Ray, one table worst first."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
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
    assert re.search(r"6 runs scanned \(local, [12] workers, at most \d+ MB each\): 1 could not be read", res.output)
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
    # not one run readable: the fleet judged nothing (exit 3), its table still written
    res = CliRunner().invoke(main, ["fleet", str(root / "sweep" / "broken"), "-o", str(tmp_path / "none"), "-q"])
    assert res.exit_code == 3 and "not one of the 1 run(s) could be read" in res.output, res.output
    assert (tmp_path / "none" / "fleet.json").is_file()
    res = CliRunner().invoke(main, ["fleet", str(root / "sweep" / "seed0"), "-o", str(tmp_path / "ok"),
                                    "--policy", "examples/gate-policy.toml", "--reports", "none"])
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


# --- issue 24 item 5, issue 25 item 2: the common options, one plotly.js, warm lean workers ---

def test_the_runs_pages_share_one_plotly_js_written_once_into_the_fleet_folder(local_fleet: Path,
                                                                               tmp_path: Path) -> None:
    lib = "plotly-basic.min.js"
    assert [p.relative_to(local_fleet) for p in local_fleet.rglob(lib)] == [Path(lib)]
    page = (local_fleet / "ppo_lr_high" / "report.html").read_text()
    assert '<script src="../plotly-basic.min.js"></script>' in page and len(page) < 500_000  # not inlined
    # a run named two folders deep refers two folders up
    shutil.copytree(RUNS / "ppo_lr_high", tmp_path / "runs" / "sweep" / "a")
    shutil.copytree(RUNS / "ppo_kl_off", tmp_path / "runs" / "sweep" / "b")
    run_fleet([tmp_path / "runs"], tmp_path / "out", workers=1)
    assert '<script src="../../plotly-basic.min.js">' in (tmp_path / "out" / "sweep" / "a" / "report.html").read_text()
    assert len(list((tmp_path / "out").rglob("plotly-basic.min.js"))) == 1


def test_reports_none_writes_no_page_and_all_writes_both(tmp_path: Path) -> None:
    for name in ("ppo_lr_high", "grpo_healthy_s0"):
        shutil.copytree(RUNS / name, tmp_path / "runs" / name)
    res = run_fleet([tmp_path / "runs"], tmp_path / "none", workers=1, reports="none")
    assert sorted(p.name for p in (tmp_path / "none").rglob("*.html")) == ["fleet.html"]
    assert not list((tmp_path / "none").rglob("plotly-basic.min.js")) and not list((tmp_path / "none").rglob("*.md"))
    assert {r["report"] for r in res.rows} == {"ppo_lr_high/analysis.json", "grpo_healthy_s0/analysis.json"}
    run_fleet([tmp_path / "runs"], tmp_path / "all", workers=1, reports="all")
    assert (tmp_path / "all" / "ppo_lr_high" / "report.md").is_file()
    assert (tmp_path / "all" / "ppo_lr_high" / "report.html").is_file()
    inline = run_fleet([tmp_path / "runs"], tmp_path / "inline", workers=1, reports="html", plotly_js="inline")
    assert not list((tmp_path / "inline").rglob("plotly-basic.min.js")) and inline.unreadable == 0


def test_local_workers_are_reused_across_runs(tmp_path: Path) -> None:
    runs = [Run(f"r{i:02d}", str(RUNS / "grpo_healthy_s0")) for i in range(20)]
    res = run_fleet([RUNS], tmp_path / "out", workers=2, reports="none", runs=runs)
    assert len(res.rows) == 20 and res.unreadable == 0
    assert 1 <= len(res.workers) <= 2  # two processes, started once, scanned all 20 runs
    assert all(w.peak_rss > 10 * 2**20 and w.cpu_s > 0 for w in res.workers.values())


def test_a_workers_peak_memory_is_its_own_not_its_starters() -> None:
    """A spawned worker's peak memory is its own: Linux keeps ``ru_maxrss`` across exec, so a
    worker started by a driver holding 300 MB read 300 MB (the local pool's workers were reported
    at the driver's peak); ``peak_rss`` reads the worker's own high-water mark."""
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor

    from forensics.fleet.engines import peak_rss

    if not sys.platform.startswith("linux"):
        pytest.skip("VmHWM is Linux's")
    held = bytearray(300 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # resident, not merely reserved
    assert peak_rss() > 300 * 2**20
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(peak_rss).result() < 150 * 2**20
    del held


def test_a_worker_is_lean_pyarrow_never_loads_pandas(tmp_path: Path) -> None:
    """What a worker runs (warm_worker, then scan_run) on a Parquet run leaves pandas unloaded,
    as the command line does (forensics.io.lean)."""
    import subprocess
    import sys

    from bench.shapes import step_chunks, write_parquet

    write_parquet(tmp_path / "run" / "steps.parquet", step_chunks(300, 20, False, seed=1))
    code = ("import sys; from forensics.fleet.engines import work; from forensics.fleet.scan import RunTask; "
            "from forensics.fleet.discover import Run; "
            f"d = work(RunTask(Run('run', {str(tmp_path / 'run')!r}), {str(tmp_path / 'out')!r}, reports='none')); "
            "assert d.row['error'] is None, d.row; print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False", out.stderr


def _option(command: str, name: str) -> dict[str, object]:
    opt = next(p for p in main.commands[command].params if name in p.opts)
    return {"opts": opt.opts, "help": getattr(opt, "help", None), "type": repr(opt.type), "multiple": opt.multiple}


def test_fleet_takes_the_common_options_as_scan_declares_them() -> None:
    for name in ("--config", "--input-format", "--map", "--kl-target", "--kl-unit", "--strict"):
        assert _option("fleet", name) == _option("scan", name), name
    for command in ("gate", "watch"):
        assert _option(command, "--map") == _option("scan", "--map")
    fleet_js = next(p for p in main.commands["fleet"].params if "--plotly-js" in p.opts)
    assert fleet_js.default == "shared" and list(fleet_js.type.choices) == ["shared", "file", "inline"]


def test_fleet_common_options_reach_every_run(tmp_path: Path) -> None:
    rows = healthy_rows(200, seed=4)
    for r in rows:
        r["gnorm"] = r.pop("grad_norm")
    (tmp_path / "runs").mkdir()
    write_jsonl(tmp_path / "runs" / "a.jsonl", rows)
    write_jsonl(tmp_path / "runs" / "b.jsonl", rows)
    args = ["fleet", str(tmp_path / "runs"), "-o", str(tmp_path / "out"), "-q", "--workers", "1",
            "--map", "gnorm=grad_norm", "--kl-target", "6.0", "--input-format", "jsonl", "--reports", "none"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and res.output == "", res.output
    d = json.loads((tmp_path / "out" / "a.jsonl" / "analysis.json").read_text())
    mapping = next(iter(d["column_mapping"].values()))["mapping"]
    assert mapping["gnorm"] == "grad_norm" and d["run"]["kl_target"] == 6.0
    res = CliRunner().invoke(main, [*args[:-6], "--input-format", "tensorboard", "-o", str(tmp_path / "tb")])
    rows_tb = json.loads((tmp_path / "tb" / "fleet.json").read_text())["runs"]
    # every run read as the format given, and so not one readable: exit 3
    assert res.exit_code == 3 and all(r["error"] for r in rows_tb)


WANDB = FORMATS / "wandb_chart_export.csv"


def test_a_multi_run_wandb_export_is_a_fleet_row_per_run(tmp_path: Path) -> None:
    shutil.copy(WANDB, tmp_path / "export.csv")
    runs = find_runs([tmp_path])
    assert [(r.name, r.member) for r in runs] == [("export.csv/grpo-qwen-7b", "grpo-qwen-7b"),
                                                  ("export.csv/baseline", "baseline")]
    res = run_fleet([tmp_path], tmp_path / "out", workers=1, reports="none")
    assert res.unreadable == 0
    a, b = (json.loads((tmp_path / "out" / r.name / "analysis.json").read_text()) for r in runs)
    assert a["steps"] != b["steps"] or a["findings"] != b["findings"]  # two runs, not one twice


def test_scan_run_picks_one_run_of_an_export_and_names_the_others(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["scan", str(WANDB), "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "the export holds 2 runs ('grpo-qwen-7b', 'baseline'): read 'grpo-qwen-7b' only (the first)" \
        in " ".join(res.output.split())
    res = CliRunner().invoke(main, ["scan", str(WANDB), "--run", "baseline", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    notes = json.loads((tmp_path / "b" / "analysis.json").read_text())["inputs"][0]["notes"]
    assert any("read 'baseline' only" in n for n in notes), notes
    res = CliRunner().invoke(main, ["scan", str(WANDB), "--run", "basline", "-o", str(tmp_path / "c")])
    assert res.exit_code == 2
    assert "did you mean 'baseline'" in res.output and "'grpo-qwen-7b', 'baseline'" in res.output
    res = CliRunner().invoke(main, ["scan", str(RUNS / "ppo_lr_high"), "--run", "x", "-o", str(tmp_path / "d")])
    assert res.exit_code == 2 and "holds one run" in res.output


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'rl-forensics[ray]')")
def test_quiet_ray_fleet_prints_nothing(tmp_path: Path) -> None:
    """-q on Ray: not a byte on stdout or stderr (Ray's start-up banner and logs held back)."""
    import subprocess
    import sys

    shutil.copytree(RUNS / "ppo_lr_high", tmp_path / "runs" / "a")
    out = subprocess.run([sys.executable, "-m", "forensics", "fleet", str(tmp_path / "runs"), "-o",
                          str(tmp_path / "out"), "-q", "--engine", "ray", "--workers", "1", "--reports", "none"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")

"""Saved analyses are checked against their schema before report, gate or diff reads them.

A damaged analysis.json is exit 3 with the file and the first offending path; a valid one, as
every scan writes it, passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.report.files import to_json
from forensics.verdicts.saved import analysis_problem, load_analysis

from .conftest import FIXTURES, RLDK, healthy_rows, write_jsonl
from .fuzz.configs import mutated
from .synth import grad_explosion


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("saved")
    log = write_jsonl(base / "steps.jsonl", grad_explosion())
    assert run("scan", str(log), "-o", str(base / "r"), "-q").exit_code == 0
    return json.loads((base / "r" / "analysis.json").read_text())


#: (path, new value or "DEL", the problem reported): the issue's damaged shapes and relatives.
DAMAGED = [
    (("findings", 0, "severity"), "DEL", "findings[0].severity missing"),
    (("findings", 0, "onset_step"), "DEL", "findings[0].onset_step missing"),
    (("findings",), "oops", "findings: expected a list, got a string ('oops')"),
    (("findings", 0), 5, "findings[0]: expected an object, got a number (5)"),
    (("findings", 0, "severity"), "fatal", "findings[0].severity: expected one of 'info', 'warning', 'critical', "
                                           "got a string ('fatal')"),
    (("findings", 0, "first_step"), "10", "findings[0].first_step: expected a 64-bit integer, got a string ('10')"),
    (("findings", 0, "last_step"), -5, "first_step"),
    (("findings", 0, "evidence"), [1], "findings[0].evidence: expected an object, got a list"),
    (("health",), "DEL", "health missing"),
    (("health", "overall"), "0.9", "health.overall: expected a finite number from 0 to 1 or null, got a string"),
    (("health", "stability"), 1.5, "health.stability: expected a finite number from 0 to 1 or null"),
    (("health", "areas"), ["kl"], "health.areas: expected an object, got a list"),
    (("health", "areas", "kl"), "high", "health.areas.kl"),
    (("run",), "x", "run: expected an object, got a string"),
    (("run", "kl_target"), "6", "run.kl_target"),
    (("inputs",), {"a": 1}, "inputs: expected a list, got an object"),
    (("inputs", 0, "rows_read"), "240", "inputs[0].rows_read: expected an integer >= 0"),
    (("inputs", 0, "path"), "DEL", "inputs[0].path missing"),
    (("plots",), [1], "plots: expected an object, got a list"),
    (("plots", "series", "grad_norm", "y"), [1.0], "plots.series.grad_norm: lists of different lengths"),
    (("plots", "series", "grad_norm", "x", 0), 10**30, "plots.series.grad_norm.x[0]: expected a 64-bit integer"),
    (("steps",), 5, "steps: expected an object"),
    (("timeline", "events", 0, "rule"), "DEL", "timeline.events[0].rule missing"),
    (("timeline", "first_domino"), [1], "timeline.first_domino"),
    (("trackers", "grad_norms", "notes"), "x", "trackers.grad_norms.notes: expected a list"),
    (("findings_by_severity", "critical"), -1, "findings_by_severity.critical"),
    (("schema_version",), "DEL", "schema_version missing"),
    (("schema_version",), "2.0", "schema_version '2.0' is not one this forensics reads (1.x)"),
    (("windows",), "x", "windows: expected a list"),
    (("recommendations", "priorities", "immediate"), [1], "recommendations.priorities.immediate[0]"),
    (("params", "kl_schedule", "band_low"), "x", "params.kl_schedule.band_low"),
    (("column_mapping",), 5, "column_mapping: expected an object"),
]


@pytest.mark.parametrize(("path", "value", "problem"), DAMAGED, ids=[".".join(map(str, d[0])) for d in DAMAGED])
def test_a_damaged_analysis_names_its_first_offending_path(saved: dict, path: tuple, value: object,
                                                           problem: str) -> None:
    found = analysis_problem(mutated(saved, path, value))
    assert found is not None and problem in found, found


@pytest.mark.parametrize("command", ["report", "gate", "diff"])
def test_report_gate_and_diff_refuse_a_damaged_analysis_with_exit_3(saved: dict, tmp_path: Path,
                                                                     command: str) -> None:
    good, bad = tmp_path / "good" / "analysis.json", tmp_path / "bad" / "analysis.json"
    for path, data in ((good, saved), (bad, mutated(saved, ("findings", 0, "severity"), "DEL"))):
        path.parent.mkdir()
        path.write_text(json.dumps(data))
    policy = tmp_path / "p.toml"
    policy.write_text('fail_on = "critical"\n')
    args = {"report": ("report", str(bad), "-o", str(tmp_path / "html")),
            "gate": ("gate", str(bad), "--policy", str(policy)),
            "diff": ("diff", str(good), str(bad))}[command]
    res = run(*args)
    assert res.exit_code == 3, res.output
    assert f"{bad}: this analysis.json is invalid: findings[0].severity missing" in res.output
    assert not (tmp_path / "html").exists()


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "analysis is not valid JSON"),
    (b"[]", "expected a JSON object, got a list"),
    (b'{"schema_version": "1.0", "findings": []', "analysis is not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "analysis cannot be parsed: nested too deep"),
    (b'{"schema_version": "1.0", "findings": [], "health": {"overall": ' + b"1" * 5000 + b"}}",
     "analysis cannot be parsed: ValueError"),
    (b'{"schema_version": "1.0", "findings": [], "health": {"overall": NaN}}', "health.overall"),
    (b'{"schema_version": "1.0\xff"}', "analysis is not UTF-8 text"),
])
def test_an_unreadable_analysis_is_exit_3(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "analysis.json"
    path.write_bytes(content)
    res = run("report", str(path), "-o", str(tmp_path / "html"))
    assert res.exit_code == 3, res.output
    assert expected in res.output and str(path) in res.output


def test_every_analysis_a_scan_writes_is_valid(tmp_path: Path) -> None:
    for path in (RLDK, FIXTURES / "runs" / "ppo_lr_high", FIXTURES / "runs" / "grpo_length_reward",
                 FIXTURES / "formats" / "tensorboard_restart", FIXTURES / "formats" / "trl_dpo_trainer_state.json"):
        data = json.loads(to_json(scan_path(path).to_dict()))
        assert analysis_problem(data) is None, path
    out = tmp_path / "a.json"
    out.write_text(to_json(scan_path(RLDK).to_dict()))
    assert load_analysis(out)["schema_version"] == "1.0"


def test_a_newer_minor_version_and_unknown_keys_are_read(saved: dict) -> None:
    assert analysis_problem({**saved, "schema_version": "1.7", "something_new": {"x": [1]}}) is None


def test_diff_reads_a_saved_analysis_without_metrics_csv(tmp_path: Path) -> None:
    """Without metrics.csv diff takes the per-step series from the plots section."""
    for name, seed in (("a", 0), ("b", 1)):
        log = write_jsonl(tmp_path / f"{name}.jsonl", healthy_rows(200, seed=seed))
        assert run("scan", str(log), "-o", str(tmp_path / name), "-q").exit_code == 0
        (tmp_path / name / "metrics.csv").unlink()
    res = run("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json")
    assert res.exit_code in (0, 1), res.output
    assert json.loads(res.output)["series_source"] == {"a": "plots (downsampled)", "b": "plots (downsampled)"}

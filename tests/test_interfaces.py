"""Issue 14: interfaces that fit users' habits. One section per item of the issue."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from forensics import scan_frame, scan_path
from forensics.analysis.findings import Severity
from forensics.cli import INPUT_FORMATS, main
from forensics.errors import ConfigError
from forensics.live.transformers import ForensicsCallback, meta_from_args
from forensics.live.watch import Watcher
from forensics.report import write_reports

from .conftest import FIXTURES, RLDK, healthy_rows, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
FMT = FIXTURES / "formats"
TRL = FIXTURES / "trl"
WANDB_RUN = next((FMT / "wandb_offline" / "wandb").glob("offline-run-*"))


def run(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env=env)


def own_names(rows: list[dict]) -> list[dict]:
    """The healthy rows under a user's own key names (nothing forensics knows)."""
    names = {"step": "tick", "kl": "policy/kl_est", "reward_mean": "my_reward",
             "grad_norm": "g_norm2", "entropy": "ent_tok"}
    return [{names[k]: v for k, v in r.items() if k in names} for r in rows]


def spiky(n: int = 400) -> list[dict]:
    """A KL spike at row 300 after which the KL stays 10x out of its band to the end: damage
    (critical), where the spike alone, recovered, would be an event."""
    rows = healthy_rows(n, seed=3)
    for r in rows[300:305]:
        r["kl"] *= 20.0
    for r in rows[305:]:
        r["kl"] *= 10.0
    return rows


# --- 1. your own key names --------------------------------------------------------------------

def test_own_key_names_from_config_and_map(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "mine.jsonl", own_names(spiky()))
    # without a map: nothing is checked (not "0 findings, healthy") and the gate fails it
    plain = scan_path(log)
    assert plain.coverage["checked"] is False
    assert run("gate", str(log)).exit_code == 1
    cfg = tmp_path / "f.toml"
    cfg.write_text('[columns]\ntick = "step"\n"policy/kl_est" = "kl"\n'
                   'my_reward = { name = "reward_mean" }\n')
    res = run("scan", str(log), "--config", str(cfg), "--map", "g_norm2=grad_norm", "--map", "ent_tok=entropy",
              "-o", str(tmp_path / "rep"), "-v")
    assert res.exit_code == 0, res.output
    assert "policy/kl_est -> kl  (mapped by " in res.output
    assert "g_norm2 -> grad_norm  (mapped by --map)" in res.output
    d = json.loads((tmp_path / "rep" / "analysis.json").read_text())
    mapping = d["column_mapping"][str(log)]
    assert mapping["mapping"]["tick"] == "step" and mapping["mapping"]["g_norm2"] == "grad_norm"
    assert mapping["user_mapped"] == {"ent_tok": "--map", "g_norm2": "--map", "tick": f"{cfg}: [columns]",
                                      "my_reward": f"{cfg}: [columns]",
                                      "policy/kl_est": f"{cfg}: [columns]"}
    assert d["steps"]["rows"] == 400 and d["steps"]["first"] == 0
    assert any(f["rule"] == "kl.spike" and 300 <= f["onset_step"] <= 305 for f in d["findings"])
    assert d["coverage"]["checked"] is True


def test_user_map_wins_over_an_alias_and_converts_units(tmp_path: Path) -> None:
    rows = [{"step": i, "kl": 0.05, "my_kl": 0.1 + 0.001 * i, "clip_pct": 12.0} for i in range(60)]
    log = write_jsonl(tmp_path / "s.jsonl", rows)
    a = scan_path(log, maps=["my_kl=kl:sequence", "clip_pct=clip_frac:percent"])
    m = a.mappings[str(log)]
    assert m.mapping["my_kl"] == "kl_seq" and m.mapping["clip_pct"] == "clip_frac"
    assert m.transforms["clip_pct"] == "times_0.01"
    assert a.to_pandas(["clip_frac"])["clip_frac"].iloc[0] == pytest.approx(0.12)
    # a map onto a name the log already has: the user's key feeds it, the log's own is carried
    b = scan_path(log, columns={"my_kl": "kl"})
    mb = b.mappings[str(log)]
    assert mb.mapping["my_kl"] == "kl" and "kl" in mb.shadowed
    assert any("your column map gives to my_kl" in n for n in b.inputs[0].notes)


@pytest.mark.parametrize("bad", ["kl", "kl=", "x=not_a_metric", "x=kl:furlongs"])
def test_bad_map_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    log = write_jsonl(tmp_path / "s.jsonl", healthy_rows(20))
    res = CliRunner().invoke(main, ["scan", str(log), "--map", bad, "-o", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_bad_columns_table_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "f.toml"
    cfg.write_text('[columns]\na = "kl"\nb = "kl"\n')
    from forensics.config import load_config

    with pytest.raises(ConfigError, match=r"f.toml: \[columns\]: b and a both map to kl"):
        load_config(cfg)


# --- 2. more inputs ---------------------------------------------------------------------------

def trl_output_dir(tmp_path: Path, run_name: str = "grpo_lr_jump") -> Path:
    out = tmp_path / "out"
    for n in (50, 120):
        (out / f"checkpoint-{n}").mkdir(parents=True)
    state = json.loads((TRL / run_name / "trainer_state.json").read_text())
    early = dict(state, log_history=state["log_history"][:50], global_step=50)
    (out / "checkpoint-50" / "trainer_state.json").write_text(json.dumps(early))
    shutil.copy(TRL / run_name / "trainer_state.json", out / "checkpoint-120" / "trainer_state.json")
    shutil.copytree(FMT / "tensorboard_restart", out / "runs")
    return out


def test_trl_output_dir_reads_the_newest_trainer_state_over_tensorboard(tmp_path: Path) -> None:
    out = trl_output_dir(tmp_path)
    a = scan_path(out)
    r = a.inputs[0]
    assert r.format == "hf-trainer-state" and r.path.endswith("checkpoint-120/trainer_state.json")
    assert a.steps["rows"] == 120
    assert any("not read: TensorBoard event files" in n for n in r.notes)
    assert any(f.rule == "hyperparams.lr_change" for f in a.findings)  # the lr x30 of grpo_lr_jump
    shutil.copy(out / "checkpoint-120" / "trainer_state.json", out / "trainer_state.json")  # the root one, newer
    assert scan_path(out).inputs[0].path == str(out / "trainer_state.json")


def test_csv_and_tsv_with_a_step_column(tmp_path: Path) -> None:
    rows = spiky()
    for sep, name in ((",", "m.csv"), ("\t", "m.tsv")):
        p = tmp_path / name
        with open(p, "w", newline="") as fh:
            w = csv.writer(fh, delimiter=sep)
            w.writerow(["step", "kl", "reward", "grad_norm", "note"])
            for r in rows:
                w.writerow([r["step"], r["kl"], r["reward_mean"], r["grad_norm"], "ok"])
            w.writerow([999, 1.0])  # short row: skipped with its line
        a = scan_path(p)
        assert a.inputs[0].format == "csv" and a.steps["rows"] == 400
        assert a.inputs[0].rows_skipped == 1 and a.inputs[0].issues[0].line == 402
        assert a.mappings[str(p)].mapping["reward"] == "reward_mean"
        assert any(f.rule == "kl.spike" for f in a.findings)


def rldk_events(path: Path) -> Path:
    """The RLDK fixture run as RLDK's EventWriter writes it: one line per metric and step."""
    lines = []
    for i, line in enumerate(RLDK.read_text().splitlines()[:300]):
        row = json.loads(line)
        step = row.pop("step")
        for name, value in row.items():
            lines.append(json.dumps({"time": f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z", "step": step,
                                     "name": name, "value": value, "run_id": "run-1"}))
    lines.insert(5, json.dumps({"time": "2025-01-01T00:00:00Z", "step": 0, "name": "kl", "value": 9.0,
                                "run_id": "run-2"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rldk_events_are_pivoted_into_steps(tmp_path: Path) -> None:
    p = rldk_events(tmp_path / "events.jsonl")
    a = scan_path(p)
    r = a.inputs[0]
    assert r.format == "rldk-events"
    assert a.steps["rows"] == 300 and r.skipped == {"another run": 1}
    wide = scan_path(RLDK)
    assert a.to_pandas(["kl"])["kl"].iloc[:300].tolist() == wide.to_pandas(["kl"])["kl"].iloc[:300].tolist()
    assert "timestamp" in a.mappings[str(p)].mapping.values()
    # a growing event file is followed by watch (a line-oriented format)
    w = Watcher(p, echo=lambda s: None)
    w.poll(final=True)
    assert w.scan.rows == 300


def test_wandb_run_folder_with_the_package(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    for path in (WANDB_RUN, WANDB_RUN.parent, WANDB_RUN.parent.parent):
        a = scan_path(path)
        assert a.inputs[0].format == "wandb-offline" and a.inputs[0].path.endswith(".wandb")
        assert a.steps["rows"] == 120 and (a.steps["first"], a.steps["last"]) == (1, 120)
    ref = scan_path(TRL / "grpo_lr_jump" / "trainer_state.json")
    np.testing.assert_allclose(a.to_pandas(["learning_rate"])["learning_rate"],
                               ref.to_pandas(["learning_rate"])["learning_rate"])
    assert any(f.rule == "hyperparams.lr_change" for f in a.findings)


def test_wandb_run_folder_without_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.io.adapters import wandb_offline

    monkeypatch.setattr(wandb_offline, "_record_class", lambda: None)
    a = scan_path(WANDB_RUN)
    r = a.inputs[0]
    assert r.format == "wandb-offline" and r.path.endswith("files/output.log")
    assert any("install the wandb package" in n for n in r.notes)
    assert a.steps["rows"] == 120
    # a run with only its summary: one row, said so
    only = tmp_path / "wandb" / "run-20250101_000000-abc" / "files"
    only.mkdir(parents=True)
    (only / "wandb-summary.json").write_text(json.dumps({"_step": 7, "train/global_step": 70, "train/loss": 0.5,
                                                         "_wandb": {"runtime": 3}}))
    b = scan_path(tmp_path)
    assert b.steps["first"] == 70 and any("last values" in n for n in b.inputs[0].notes)


def test_wandb_history_records_survive_a_cut_and_a_bad_checksum(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    src = next(WANDB_RUN.glob("*.wandb")).read_bytes()
    run_dir = tmp_path / "run-20250101_000000-cut"
    run_dir.mkdir()
    broken = bytearray(src[: len(src) * 2 // 3])
    broken[40000] ^= 0xFF  # a flipped byte inside the second block
    (run_dir / "run-cut.wandb").write_bytes(bytes(broken))
    a = scan_path(run_dir)
    r = a.inputs[0]
    assert 0 < a.steps["rows"] < 120
    assert r.skipped.get("corrupt record", 0) >= 1
    assert any("ends inside a record" in n for n in r.notes)


def test_report_on_a_log_suggests_scan(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(20))
    res = CliRunner().invoke(main, ["report", str(log)])
    assert res.exit_code == 2
    assert "jsonl log, not a saved analysis" in res.output and f"forensics scan {log}" in res.output
    assert "JSON" not in res.output.split("jsonl")[0]  # no raw JSON decoder error


# --- 3. one CLI vocabulary ------------------------------------------------------------------

def test_input_format_choices_are_the_registered_formats() -> None:
    from forensics.io.formats import FORMATS

    assert list(INPUT_FORMATS) == FORMATS.names()


def test_help_lists_choices_and_one_vocabulary() -> None:
    for cmd in ("scan", "gate", "diff", "convert", "watch"):
        out = run(cmd, "--help").output
        assert "--input-format" in out and "hf-trainer-state" in out, cmd
        assert "--out " not in out  # the old spelling works but is not shown
    for cmd in ("scan", "gate", "diff", "convert", "report", "rules"):
        assert re.search(r"-o, --output", run(cmd, "--help").output), cmd
    assert "[text|json|markdown]" in run("rules", "--help").output
    assert "[text|json|junit|github]" in run("gate", "--help").output


def test_input_format_spellings(tmp_path: Path) -> None:
    log = FMT / "verl_v05_console.log"
    for opt in ("--input-format", "--from"):
        res = run("scan", str(log), opt, "verl-console", "-q", "-o", str(tmp_path / opt.strip("-")))
        assert res.exit_code == 0 and res.output == ""
    old = CliRunner().invoke(main, ["scan", str(log), "--format", "verl-console", "-q", "-o", str(tmp_path / "o")])
    assert old.exit_code == 0 and "deprecated" in old.output and "--input-format verl-console" in old.output
    clash = CliRunner().invoke(main, ["gate", str(log), "--format", "verl-console"])
    assert clash.exit_code == 2 and "is an input format" in clash.output and "--input-format" in clash.output
    bad = CliRunner().invoke(main, ["scan", str(log), "--input-format", "nope"])
    assert bad.exit_code == 2 and "hf-trainer-state" in bad.output


def test_rules_formats_and_output(tmp_path: Path) -> None:
    as_json = json.loads(run("rules", "--format", "json", "--metrics").output)
    assert {m["name"] for m in as_json} >= {"kl", "reward_mean"}
    assert json.loads(run("rules", "--json", "--metrics").output) == as_json  # the old spelling
    page = run("rules", "--format", "markdown", "--metrics").output
    assert page.startswith("# Metrics and the keys read") and "\n| name | stream |" in page  # docs/metrics.md
    assert json.loads(run("rules", "--format", "json").output)["rules"]
    assert run("rules", "--markdown").output == (ROOT / "docs" / "rules.md").read_text()
    out = tmp_path / "rules.md"
    assert run("rules", "--format", "markdown", "-o", str(out)).exit_code == 0
    assert out.read_text() == (ROOT / "docs" / "rules.md").read_text()
    assert CliRunner().invoke(main, ["rules", "--json", "--markdown"]).exit_code == 2


def test_quiet_verbose_and_colour(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "s.jsonl", spiky())
    assert run("scan", str(log), "-q", "-o", str(tmp_path / "a")).output == ""
    assert run("gate", str(log), "-q").output == ""
    assert run("convert", str(log), "-q", "-o", str(tmp_path / "c.parquet")).output == ""
    v = run("scan", str(log), "-v", "-o", str(tmp_path / "b")).output
    assert "column mapping:" in v and "tracker plan:" in v and "not run: none of its metrics is logged" in v
    assert "\x1b[" not in v  # not a terminal: no colour
    from forensics.report.terminal import render_summary

    a = scan_path(log)
    assert "\x1b[31m" in render_summary(a, colour=True) and "\x1b[" not in render_summary(a)
    from forensics import cli

    assert cli.colour_on() is False  # pytest's stdout is not a terminal
    os.environ["NO_COLOR"] = "1"
    try:
        assert cli.colour_on() is False
    finally:
        del os.environ["NO_COLOR"]


def test_closed_pipe_ends_quietly() -> None:
    cmd = f"{sys.executable} -m forensics rules | head -2"
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stderr == "" and res.stdout == "\n== hyperparams ==\n"


def test_output_option_everywhere(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "s.jsonl", spiky())
    assert run("gate", str(log), "-o", str(tmp_path / "g.xml"), "--format", "junit").exit_code == 1
    ET.parse(tmp_path / "g.xml")
    run("diff", str(log), str(log), "-o", str(tmp_path / "d.json"), "--format", "json")
    assert "regression" in json.loads((tmp_path / "d.json").read_text())
    assert run("scan", str(log), "--out", str(tmp_path / "old"), "-q").exit_code == 0  # the old spelling
    assert (tmp_path / "old" / "analysis.json").is_file()


# --- 4. outputs you can trust ---------------------------------------------------------------

def test_scan_owns_its_output_folder(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "my-notes.txt").write_text("mine")
    (out / "extra.csv").write_text("mine too")
    long = write_jsonl(tmp_path / "long.jsonl", spiky())
    assert run("scan", str(long), "-o", str(out), "-q").exit_code == 0
    assert (out / "windows.csv").is_file() and (out / "recommendations.yaml").is_file()
    short = write_jsonl(tmp_path / "short.jsonl", [{"step": i, "step_time": 1.0} for i in range(3)])
    assert run("scan", str(short), "-o", str(out), "-q").exit_code == 0
    names = {p.name for p in out.iterdir()}
    assert "windows.csv" not in names  # the earlier scan's, not written again: removed
    assert {"my-notes.txt", "extra.csv", "analysis.json", ".forensics-files.json"} <= names
    assert not [n for n in names if n.startswith(".forensics-") and n != ".forensics-files.json"]  # no temp left
    assert json.loads((out / "analysis.json").read_text())["steps"]["rows"] == 3
    manifest = json.loads((out / ".forensics-files.json").read_text())
    assert set(manifest["files"]) == names - {"my-notes.txt", "extra.csv", ".forensics-files.json", ".forensics"}


def test_a_folder_from_before_manifests_is_cleaned_of_scan_files_only(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    write_reports(scan_path(write_jsonl(tmp_path / "long.jsonl", spiky())), str(out))  # a str path
    (out / ".forensics-files.json").unlink()
    (out / "notes.md").write_text("mine")
    write_reports(scan_path(write_jsonl(tmp_path / "s.jsonl", [{"step": i, "step_time": 1.0} for i in range(3)])),
                  out)
    names = {p.name for p in out.iterdir()}
    assert "windows.csv" not in names and "notes.md" in names


# --- 5. CI ----------------------------------------------------------------------------------

def test_gate_default_policy(tmp_path: Path) -> None:
    healthy = write_jsonl(tmp_path / "h.jsonl", healthy_rows(300))
    res = run("gate", str(healthy))
    assert res.exit_code == 0 and "default policy: fail on a critical finding" in res.output
    crit = write_jsonl(tmp_path / "c.jsonl", [dict(r, grad_norm=float("nan")) if 200 <= i < 203 else r
                                              for i, r in enumerate(healthy_rows(300))])
    res = run("gate", str(crit))
    assert res.exit_code == 1 and "grad.nonfinite" in res.output
    unknown = write_jsonl(tmp_path / "u.jsonl", own_names(healthy_rows(50)))
    assert run("gate", str(unknown)).exit_code == 1


def test_junit_marks_rules_that_could_not_run_as_skipped(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if not k.startswith("advantage_")} for r in spiky()]
    log = write_jsonl(tmp_path / "s.jsonl", rows)  # no advantage stats, no samples, no KL target
    xml = run("gate", str(log), "--format", "junit").output
    suite = ET.fromstring(xml).find("testsuite[@name='forensics.rules']")
    assert suite is not None
    skipped = {c.get("name"): c.find("skipped").get("message") for c in suite.findall("testcase")
               if c.find("skipped") is not None}
    assert int(suite.get("skipped")) == len(skipped) > 0
    assert "none of its metrics is logged" in skipped["adv.bias"]
    assert "no KL target" in skipped["kl.off_target"]
    assert "generation.repetition" in skipped
    assert "kl.spike" not in skipped and "grad.spike" not in skipped


def test_github_annotations_stay_within_what_github_shows() -> None:
    from forensics.verdicts.gate import GITHUB_MAX_ERRORS, default_policy, evaluate, render_github

    findings = [{"rule": "grad.explode", "severity": "critical", "first_step": i, "last_step": i, "onset_step": i,
                 "message": f"m{i}", "remedy": "r", "tracker": "grad_norms"} for i in range(15)]
    findings += [{"rule": "kl.spike", "severity": "warning", "first_step": i, "last_step": i, "onset_step": i,
                  "message": "w", "remedy": "r", "tracker": "kl_schedule"} for i in range(15)]
    d = {"findings": findings, "health": {"overall": 0.1, "areas": {}}}
    lines = render_github(evaluate(d, default_policy())).splitlines()
    errors = [x for x in lines if x.startswith("::error")]
    assert len(errors) == GITHUB_MAX_ERRORS == 10 and "6 more failure(s)" in errors[-1]
    notices = [x for x in lines if x.startswith("::notice")]
    assert len(notices) == 1 and "15 finding(s) below the failing severity" in notices[0]
    assert not [x for x in lines if x.startswith("::warning")]


# --- 6. live --------------------------------------------------------------------------------

def test_watch_escalation_jsonl_and_fail_on(tmp_path: Path) -> None:
    """A KL far out of its band is a warning while it is young and escalates to critical once it
    has stayed out long enough to be damage (analysis.diagnosis.consequence)."""
    rows = healthy_rows(400, seed=3)
    for r in rows[300:302]:
        r["kl"] *= 6.0
    for r in rows[302:]:
        r["kl"] *= 60.0
    p = write_jsonl(tmp_path / "steps.jsonl", rows[:330])
    alerts = tmp_path / "alerts.jsonl"
    out: list[str] = []
    w = Watcher(p, echo=out.append, min_severity=Severity.WARNING, jsonl=alerts, batch_rows=1)
    w.poll()
    first = [json.loads(x) for x in alerts.read_text().splitlines() if '"kl.excessive"' in x]
    assert [(a["event"], a["severity"]) for a in first] == [("new", "warning")]
    n_first = len(alerts.read_text().splitlines())
    with open(p, "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows[330:]))
    w.poll()
    excessive = [json.loads(x) for x in alerts.read_text().splitlines() if '"kl.excessive"' in x]
    assert excessive[-1]["event"] == "escalated" and excessive[-1]["severity"] == "critical"
    assert excessive[-1]["previous_severity"] == "warning"
    assert any("escalated" in line and "was warning" in line for line in out)
    onsets = [json.loads(x)["first_step"] for x in alerts.read_text().splitlines()]
    second_poll = onsets[n_first:]
    assert second_poll == sorted(second_poll)  # one poll's alerts in step order
    res = CliRunner().invoke(main, ["watch", str(p), "--once", "--fail-on", "critical", "-q"])
    assert res.exit_code == 1 and "reached --fail-on critical" in res.output
    assert CliRunner().invoke(main, ["watch", str(write_jsonl(tmp_path / "h.jsonl", healthy_rows(100))),
                                     "--once", "--fail-on", "critical"]).exit_code == 0


def test_watch_reads_run_json_as_scan_does(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write_jsonl(folder / "steps.jsonl", spiky())
    (folder / "run.json").write_text(json.dumps({"algorithm": "ppo", "kl_target": 6.0, "kl_target_unit": "sequence"}))
    w = Watcher(folder, echo=lambda s: None)
    w.run(once=True)
    assert w.path == folder / "steps.jsonl"
    assert w.scan.meta.kl_target == 6.0 and w.scan.meta.algorithm == "ppo"
    assert scan_path(folder).meta.kl_target == 6.0
    other = tmp_path / "meta.json"
    other.write_text(json.dumps({"kl_target": 3.0}))
    w2 = Watcher(folder / "steps.jsonl", echo=lambda s: None, meta_path=other)
    assert w2.scan.meta.kl_target == 3.0


# --- 7. back into the trainer and the dashboards ----------------------------------------------

def test_settings_from_training_arguments() -> None:
    class GRPOConfig(SimpleNamespace):
        pass

    class DPOConfig(SimpleNamespace):
        pass

    class PPOConfig(SimpleNamespace):
        pass

    g = meta_from_args(GRPOConfig(beta=0.04, epsilon=0.2, num_generations=8, max_completion_length=256,
                                  learning_rate=1e-6, max_grad_norm=1.0))
    assert (g.algorithm, g.kl_coef_init, g.clip_range, g.group_size, g.max_length) == ("grpo", 0.04, 0.2, 8, 256)
    d = meta_from_args(DPOConfig(beta=0.1, learning_rate=5e-7))
    assert (d.algorithm, d.beta, d.kl_coef_init, d.learning_rate) == ("dpo", 0.1, None, 5e-7)
    p = meta_from_args(PPOConfig(kl_coef=0.05, cliprange=0.2, response_length=53, beta=None))
    assert (p.algorithm, p.kl_coef_init, p.clip_range, p.max_length) == ("ppo", 0.05, 0.2, 53)


class FakeTrainer:
    """What TRL's GRPOTrainer writes with ``log_completions=True``: after each logged step, the
    table ``<output_dir>/completions/completions_<step>.parquet`` (written after ``on_log``)."""

    def __init__(self, output_dir: Path) -> None:
        self.callbacks: list = []
        self.folder = output_dir / "completions"

    def add_callback(self, cb: object) -> None:
        self.callbacks.append(cb)

    def log_completions(self, step: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.folder.mkdir(parents=True, exist_ok=True)
        table = {"step": [step] * 4, "prompt": [[{"role": "user", "content": f"p{step}-{i}"}] for i in range(4)],
                 "completion": [[{"role": "assistant", "content": "<think>x</think> 42" * (1 + i)}] for i in range(4)],
                 "accuracy": [1.0, 0.0, 1.0, 0.0], "format": [0.5, 0.5, 0.0, 0.5], "advantage": [0.8, -0.8, 0.4, -0.4]}
        pq.write_table(pa.table(table), self.folder / f"completions_{step:05d}.parquet")


def drive(cb: ForensicsCallback, args: SimpleNamespace, rows: list[dict], trainer: FakeTrainer | None = None,
          save_every: int = 0) -> SimpleNamespace:
    """The Trainer's call protocol: on_log, then (TRL) the completions table, then a save when
    the step's saving interval or a callback asks for one (``control.should_save``)."""
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    control = SimpleNamespace(should_training_stop=False, should_save=False)
    cb.on_train_begin(args, state, control)
    for i, r in enumerate(rows):
        state.global_step = i + 1
        control.should_save = bool(save_every) and (i + 1) % save_every == 0
        logs = {"loss": 0.1, "grad_norm": r["grad_norm"], "learning_rate": 1e-6, "kl": r["kl"],
                "reward": r["reward_mean"], "entropy": r["entropy"], "epoch": i / len(rows),
                "rewards/accuracy/mean": 0.5, "rewards/format/mean": 0.375}
        control = cb.on_log(args, state, control, logs=logs)
        if trainer is not None:
            trainer.log_completions(i + 1)
        if control.should_save:
            (Path(args.output_dir) / f"checkpoint-{i + 1}").mkdir(parents=True, exist_ok=True)
            control = cb.on_save(args, state, control)
        if control.should_training_stop:
            break
    cb.on_train_end(args, state, control)
    return control


class GRPOConfig(SimpleNamespace):
    pass


class MyGRPOConfig(GRPOConfig):
    """A user's own config class: GRPO through its base, whatever its name."""


def test_callback_logs_stops_and_writes_samples(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = healthy_rows(400, seed=3)
    for r in rows[300:]:
        r["grad_norm"] = float("nan")
    args = MyGRPOConfig(output_dir=str(tmp_path), beta=0.04, max_grad_norm=1.0, report_to=[], log_completions=True)
    trainer = FakeTrainer(tmp_path)
    cb = ForensicsCallback.attach(trainer, stop_on_critical=True, check_every=5)
    assert trainer.callbacks == [cb]
    with caplog.at_level("INFO", logger="forensics"):
        control = drive(cb, args, rows, trainer)
    assert cb.meta.algorithm == "grpo"
    assert control.should_training_stop is True
    assert cb.stop_reason is not None and cb.stop_reason.startswith("grad.nonfinite")
    assert cb.rows < 320  # stopped near the onset, not at the end
    # the stop saved a checkpoint (with the analysis beside it), named in the log line
    assert cb.stop_checkpoint == tmp_path / f"checkpoint-{cb.rows}"
    assert (cb.stop_checkpoint / "forensics" / "analysis.json").is_file()
    stops = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and "stopping training" in r.getMessage()]
    assert len(stops) == 1 and stops[0].endswith(f"saving checkpoint {cb.stop_checkpoint}")
    samples = [json.loads(x) for x in (tmp_path / "forensics" / "samples.jsonl").read_text().splitlines()]
    # every table TRL wrote, the last one (written after the stopping step's on_log) included
    assert len(samples) == 4 * cb.rows and samples[0]["reward/accuracy"] == 1.0
    assert [s["step"] for s in samples[:5]] == [1, 1, 1, 1, 2] and samples[-1]["step"] == cb.rows
    assert samples[0]["reward"] == 1.5 and samples[0]["completion"].startswith("<think>")
    assert samples[0]["prompt"] == "p1-0" and samples[1]["advantage"] == -0.8
    a = scan_path(tmp_path)  # the output_dir: its forensics/ folder is found
    assert a.steps["sample_rows"] == len(samples)
    assert any("forensics trainer callback" in n for n in a.inputs[0].notes)


def test_callback_checkpoints_and_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = GRPOConfig(output_dir=str(tmp_path), logging_dir=str(tmp_path / "runs" / "x"), beta=0.04,
                      report_to=["tensorboard"])
    cb = ForensicsCallback(check_every=10)
    drive(cb, args, spiky(), save_every=100)
    for n in (100, 200, 300, 400):
        d = json.loads((tmp_path / f"checkpoint-{n}" / "forensics" / "analysis.json").read_text())
        assert d["steps"]["last"] == n
    with open(tmp_path / "forensics" / "checkpoints.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in table] == [100, 200, 300, 400]
    assert table[0]["first_domino_rule"] == "" and table[-1]["first_domino_rule"] in ("kl.spike", "kl.excessive")
    assert 300 <= int(table[-1]["first_domino_step"]) <= 305
    assert float(table[-1]["health_overall"]) < float(table[0]["health_overall"])
    ea = EventAccumulator(str(tmp_path / "runs" / "x" / "forensics"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    assert "forensics/health/overall" in ea.Tags()["scalars"]
    assert ea.Scalars("forensics/rules/kl.spike")[0].step >= 300
    assert b"kl.spike" in ea.Tensors("forensics/summary")[0].tensor_proto.string_val[0]


def test_export_to_tensorboard_and_wandb(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = write_jsonl(tmp_path / "s.jsonl", spiky())
    assert run("scan", str(log), "-o", str(tmp_path / "rep"), "-q").exit_code == 0
    assert run("export", str(tmp_path / "rep"), "--to", "tensorboard", str(tmp_path / "tb"), "-q").exit_code == 0
    ea = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    d = json.loads((tmp_path / "rep" / "analysis.json").read_text())
    assert ea.Scalars("forensics/health/overall")[0].value == pytest.approx(d["health"]["overall"], rel=1e-6)
    assert ea.Scalars("forensics/findings/warning")[0].value == d["findings_by_severity"]["warning"]
    bad = CliRunner().invoke(main, ["export", str(log), "--to", "tensorboard", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "forensics scan" in bad.output
    # -o/--output as in every other command; no folder, or two different ones, is a usage error
    assert run("export", str(tmp_path / "rep"), "--to", "tensorboard", "-o", str(tmp_path / "tb2"),
               "-q").exit_code == 0 and any((tmp_path / "tb2").iterdir())
    for args in ([], ["-o", str(tmp_path / "a"), str(tmp_path / "b")]):
        res = CliRunner().invoke(main, ["export", str(tmp_path / "rep"), "--to", "tensorboard", *args])
        assert res.exit_code == 2, res.output
    pytest.importorskip("wandb")
    res = run("export", str(tmp_path / "rep"), "--to", "wandb-offline", str(tmp_path / "wb"))
    assert res.exit_code == 0, res.output
    from forensics.io.adapters.wandb_offline import _record_class, read_records
    from forensics.io.readers.base import ReadReport

    wb = next((tmp_path / "wb" / "wandb").glob("offline-run-*/*.wandb"))
    kinds, keys = [], set()
    for _, data in read_records(wb, ReadReport(str(wb))):
        rec = _record_class()()
        rec.ParseFromString(data)
        kinds.append(rec.WhichOneof("record_type"))
        for item in list(rec.summary.update) + list(rec.history.item):
            keys.add(item.key or "/".join(item.nested_key))
    assert any(k.startswith("forensics/findings/") for k in keys) and "forensics/health/overall" in keys


# --- 8. Python API --------------------------------------------------------------------------

def test_python_api(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "s.jsonl", own_names(spiky()))
    a = scan_path(log, kl_target=0.05, kl_unit="token", strict=True, batch_rows=64,
                  columns={"tick": "step", "policy/kl_est": "kl", "my_reward": "reward_mean"},
                  maps=["g_norm2=grad_norm"])
    assert a.meta.kl_target == 0.05 and a.context["kl_target"]["from"] == "config or command line"
    df = a.to_pandas(["kl", "reward_mean"])
    assert list(df.columns) == ["kl", "reward_mean"] and df.index.name == "step" and len(df) == 400
    with pytest.raises(KeyError, match="no per-step column 'nope'"):
        a.to_pandas(["nope"])
    f = a.findings_frame()
    assert f["severity"].cat.ordered and list(f["severity"].cat.categories) == ["info", "warning", "critical"]
    assert f.sort_values("severity")["severity"].iloc[-1] == "critical" or (f["severity"] <= "warning").all()
    html = a._repr_html_()
    assert "<table>" in html and "kl.spike" in html and "<script" not in html
    import pandas as pd

    frame = pd.DataFrame(own_names(spiky())).set_index("tick")
    b = scan_frame(frame, columns={"tick": "step", "policy/kl_est": "kl"})
    assert b.steps["rows"] == 400 and any(x.rule == "kl.spike" for x in b.findings)
    paths = write_reports(b, str(tmp_path / "rep"))
    assert paths["analysis"].is_file()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def documented() -> str:
    """The README and every hand-written docs page (docs/rules.md is generated from the code and
    checked against it in tests/test_cli.py). A ```python block is a complete program; a fragment
    of the reader's own loop is marked ```py and not run."""
    pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "rules.md")]
    return "\n".join(p.read_text() for p in pages)


def test_documented_python_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(documented())
    assert len(blocks) >= 2
    shutil.copytree(FIXTURES / "runs" / "ppo_lr_high", tmp_path / "runs" / "my-run")
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        if "import torch" in block:
            pytest.importorskip("torch")
        exec(compile(block, "documented example", "exec"), {"__name__": "__docs__"})
    assert (tmp_path / "runs" / "my-ppo" / "steps.jsonl").is_file()


def _docs_sandbox(root: Path) -> None:
    """The files the documented shell examples name, made from the fixtures."""
    runs = FIXTURES / "runs"
    shutil.copy(runs / "ppo_healthy_s0" / "steps.jsonl", root / "events.jsonl")
    shutil.copytree(runs / "ppo_healthy_s0", root / "runs" / "my-run")
    shutil.copytree(FIXTURES / "trl" / "grpo_healthy_s0", root / "trl-output")
    (w,) = (FIXTURES / "formats" / "wandb_offline" / "wandb").iterdir()
    shutil.copytree(w, root / "wandb" / "run-20250101_000000-abc")
    for name in ("steps.jsonl", "samples.jsonl"):
        shutil.copy(runs / "grpo_length_reward" / name, root / name)
    rows = [{"iteration": r["step"], "gnorm": r.get("grad_norm"), "kl": r.get("kl")}
            for r in map(json.loads, (runs / "ppo_healthy_s0" / "steps.jsonl").read_text().splitlines())]
    with open(root / "my_log.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["iteration", "gnorm", "kl"])
        writer.writeheader()
        writer.writerows(rows)
    for folder, names in (("sweeps", ("ppo_healthy_s1", "grpo_healthy_s1")), ("nightly", ("ppo_healthy_s2",))):
        for name in names:
            shutil.copytree(runs / name, root / folder / name)
    shutil.copytree(ROOT / "examples", root / "examples")


def test_documented_shell_and_toml_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `forensics ...` line of the README's and the docs' bash blocks runs as written (exit 0) in a folder
    holding the files it names, with forensics.toml made of their TOML blocks (a block whose
    first line is ``# file: NAME`` is the whole file NAME instead); the make
    targets are CI's and the benchmarks', and a Ray cluster address needs a cluster."""
    text = documented()
    _docs_sandbox(tmp_path)
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    for block in blocks:  # a whole file of its own: "# file: NAME" on its first line
        if block.startswith("# file: "):
            (tmp_path / block.split("\n", 1)[0].removeprefix("# file: ").strip()).write_text(block)
    (tmp_path / "forensics.toml").write_text("\n".join(b for b in blocks if not b.startswith("# file: ")))
    monkeypatch.chdir(tmp_path)
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
             for ln in block.splitlines()]
    # a Ray address needs a cluster; a webhook is posted to a local server in tests/test_notify.py
    commands = [ln for ln in lines if ln.startswith("forensics ") and "--address" not in ln
                and "--notify" not in ln]
    assert len(commands) >= 15
    ran = 0
    for cmd in commands:
        argv = cmd.split()[1:]
        if "wandb-offline" in argv:
            pytest.importorskip("wandb")
        res = CliRunner().invoke(main, argv)
        assert res.exit_code == 0, (cmd, res.output[-2000:])
        ran += 1
    assert ran == len(commands)


# --- 9. packaging ---------------------------------------------------------------------------

def test_packaging_supported_pythons_and_torch_range() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["optional-dependencies"]["torch"] == ["torch>=2.1"]
    lowest = tuple(int(x) for x in meta["requires-python"].removeprefix(">=").split("."))
    assert lowest == (3, 11)
    assert f"Programming Language :: Python :: {lowest[0]}.{lowest[1]}" in meta["classifiers"]
    assert sys.version_info[:2] >= lowest
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()  # the CPU build, installed explicitly

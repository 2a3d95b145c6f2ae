"""The detection-quality scorer on hand-made labels with known answers; corpora scored apart and
together; the labelled TRL corpus (fixtures/trl) is well formed and every run scans.

No test here asserts how well the TRL corpus is detected: the rules are calibrated against it
elsewhere (``make eval`` prints the figures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main as cli_main
from forensics.errors import InputError
from forensics.verdicts.evaluation import (
    LabelledRun,
    evaluate,
    evaluate_corpora,
    load_runs,
    render_table,
)

from .conftest import FIXTURES, RLDK, VERL

TRL = FIXTURES / "trl"


def alarm(rule: str, onset: int, severity: str = "warning") -> dict:
    return {"rule": rule, "severity": severity, "onset_step": onset, "first_step": onset,
            "last_step": onset + 3}


def test_scores_known_cases() -> None:
    runs = [
        LabelledRun("healthy-1", None, None, [], 50, 500, [alarm("kl.spike", 100),
                                                          alarm("x.info", 10, "info")]),
        LabelledRun("healthy-2", None, None, [], 50, 500, []),
        LabelledRun("spike", "lr_high", 200, ["grad.explode", "kl.spike"], 40, 300,
                    [alarm("kl.spike", 205), alarm("grad.explode", 210), alarm("adv.bias", 150),
                     alarm("grad.imbalance", 230)]),
        LabelledRun("missed", "kl_off", 100, ["kl.runaway"], 50, 300,
                    [alarm("kl.runaway", 400)]),
    ]
    q = evaluate(runs)
    assert q.faults == 2 and q.detected == 1
    # healthy steps: 1000 from healthy runs + the pre-window parts of the faulty runs
    assert q.healthy_steps == 1000 + 190 + 87
    assert q.false_alarms == 2  # kl.spike in healthy-1, adv.bias before the window
    assert q.rules["kl.spike"].tp == 1 and q.rules["kl.spike"].fp == 1
    assert q.rules["kl.spike"].precision == pytest.approx(0.5)
    assert q.rules["grad.explode"].recall == 1.0 and q.rules["kl.runaway"].recall == 0.0
    assert q.rules["grad.explode"].delays == [10]
    spike = next(r for r in q.runs if r["name"] == "spike")
    assert spike["first_rule"] == "kl.spike" and spike["primary_first"] is False
    assert spike["other"] == ["grad.imbalance"]
    assert 0 < q.nab < 100
    table = render_table(q)
    assert "MISSED" in table and "FALSE ALARMS" in table


def test_nab_perfect_and_null() -> None:
    perfect = evaluate([LabelledRun("a", "f", 100, ["r"], 40, 200, [alarm("r", 90)])])
    assert perfect.nab == 100.0  # detection at the left edge of the window: t0 - 0.25 b
    null = evaluate([LabelledRun("a", "f", 100, ["r"], 40, 200, [])])
    assert null.nab == 0.0


# ------------------------------------------------------------------ corpora, scanned per corpus

def _corpus(root: Path, runs: list[Path]) -> Path:
    root.mkdir()
    for run in runs:
        shutil.copytree(run, root / run.name)
    return root


def test_a_labelled_run_is_read_as_scan_reads_its_folder(tmp_path: Path) -> None:
    """The step stream, else the trainer's own file: io's locate, not a rule of the evaluation's own."""
    from forensics.io.locate import locate

    assert locate(FIXTURES / "runs" / "ppo_lr_high").steps.name == "steps.jsonl"
    trl = tmp_path / "trl_run"
    trl.mkdir()
    (trl / "manifest.json").write_text("{}")
    (trl / "trainer_state.json").write_text('{"log_history": []}')
    assert locate(trl).steps == trl / "trainer_state.json"
    (trl / "trainer_state.json").unlink()
    with pytest.raises(InputError, match=r"no training log"):
        locate(trl)


def test_corpora_are_scored_apart_and_together(tmp_path: Path) -> None:
    ref = _corpus(tmp_path / "ref", [FIXTURES / "runs" / n for n in ("ppo_healthy_s0", "ppo_lr_high")])
    trl_runs = sorted(p for p in TRL.iterdir() if p.is_dir())[:2]
    trl = _corpus(tmp_path / "trl", trl_runs)
    text, figures = evaluate_corpora({"reference": ref, "trl": trl, "gone": tmp_path / "nope"},
                                     real_logs=tmp_path / "no-real-logs")
    ref_q, trl_q, all_q = figures["corpora"]["reference"], figures["corpora"]["trl"], figures["all"]
    assert [r["name"] for r in ref_q["runs"]] == ["ppo_healthy_s0", "ppo_lr_high"]
    assert [r["name"] for r in trl_q["runs"]] == [p.name for p in trl_runs]
    assert [r["name"] for r in all_q["runs"]][:2] == ["reference/ppo_healthy_s0", "reference/ppo_lr_high"]
    assert [r["name"] for r in all_q["runs"]][2:] == [f"trl/{p.name}" for p in trl_runs]
    # the union's counts are the sums of the parts
    assert all_q["faults"] == ref_q["faults"] + trl_q["faults"]
    assert all_q["healthy_steps"] == ref_q["healthy_steps"] + trl_q["healthy_steps"]
    assert all_q["false_alarms"] == ref_q["false_alarms"] + trl_q["false_alarms"]
    assert ref_q["faults"] == 1 and ref_q["detected"] == 1  # ppo_lr_high: found on the reference corpus
    for header in ("== reference (", "== trl (", "== all corpora (reference + trl): 4 labelled runs"):
        assert header in text
    assert "== gone: " in text and "not found, skipped" in text
    assert "== real logs: " in text and figures["real_logs"] is None


def test_real_logs_get_one_line_each_without_a_score(tmp_path: Path) -> None:
    logs = tmp_path / "real-logs"
    logs.mkdir()
    shutil.copy(RLDK, logs / RLDK.name)
    shutil.copy(VERL, logs / VERL.name)
    (logs / "FORMATS.md").write_text("# not a log\n")
    (logs / "broken.jsonl").write_text("this is not json\n")
    text, figures = evaluate_corpora({}, real_logs=logs)
    entries = {e["name"]: e for e in figures["real_logs"]["logs"]}
    assert set(entries) == {RLDK.name, VERL.name, "broken.jsonl"}  # documentation is skipped
    rldk = entries[RLDK.name]
    # its one KL spike recovered with nothing else moving: information, no alarm
    assert rldk["rows"] == 1000 and rldk["alarm_rules"] == []
    assert rldk["findings_by_severity"]["info"] > 0
    assert "error" in entries["broken.jsonl"]
    assert "UNREADABLE" in text and f"{RLDK.name}" in text and "1000 rows" in text
    assert "precision" not in text  # no labels, no table


# ------------------------------------------------------------------ the TRL corpus itself

TRL_ALGORITHMS = {"grpo", "rloo", "ppo", "dpo", "kto", "orpo"}


def _trl_manifests() -> list[tuple[Path, dict]]:
    return load_runs(TRL)


def test_trl_corpus_is_complete_and_small() -> None:
    manifests = [m for _, m in _trl_manifests()]
    healthy = {}
    for m in manifests:
        if m["fault"] is None:
            healthy.setdefault(m["algorithm"], set()).add(m["seed"])
    for algo in ("grpo", "rloo", "ppo", "dpo"):
        assert len(healthy.get(algo, ())) >= 2, f"{algo}: fewer than two healthy seeds"
    assert {"kto", "orpo"} & set(healthy)
    faults = {m["fault"] for m in manifests if m["fault"]}
    assert faults >= {"lr_high", "lr_low", "length_reward", "kl_off_hackable_reward",
                      "max_length_small", "beta_tiny"}
    assert {"reward_scale", "reward_sign"} & faults
    size = sum(p.stat().st_size for p in TRL.rglob("*") if p.is_file())
    assert size < 10 * 2**20, f"fixtures/trl is {size / 2**20:.1f} MB"


@pytest.mark.parametrize("folder", sorted(p for p in TRL.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_trl_run_has_a_valid_manifest_and_scans(folder: Path, tmp_path: Path) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    assert m["name"] == folder.name
    assert m["algorithm"] in TRL_ALGORITHMS and isinstance(m["seed"], int)
    assert m["trainer"] == "trl" and m["trl_version"]
    assert isinstance(m["horizon_steps"], int) and m["horizon_steps"] > 0
    assert isinstance(m["notes"], str) and len(m["notes"]) > 40
    assert isinstance(m["config"].get("learning_rate"), float)
    assert m["observed"], "no observed numbers"
    if m["fault"] is None:
        assert m["onset_step"] is None and m["expected_rules"] == []
    else:
        assert isinstance(m["onset_step"], int) and m["onset_step"] >= 1
        assert m["expected_rules"] and all(isinstance(r, str) and "." in r for r in m["expected_rules"])
    # only what a user keeps: no weights, checkpoints, optimizer state or pickled arguments; the
    # model's config.json (its size) as save_model writes it
    assert {p.name for p in folder.iterdir()} <= {"manifest.json", "trainer_state.json", "console.log", "config.json"}
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    state = folder / "trainer_state.json"
    steps = [r for r in json.loads(state.read_text())["log_history"] if "train_runtime" not in r]
    assert m["onset_step"] is None or m["onset_step"] <= steps[-1]["step"]
    res = CliRunner().invoke(cli_main, ["scan", str(state), "-o", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert f"{len(steps)} rows read" in res.output

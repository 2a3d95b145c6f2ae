"""Detection quality on the labelled corpus recorded by the reference trainer (fixtures/runs).

Healthy runs must have no warning or critical finding; every injected fault must be found by one
of its expected rules within its horizon. The table (`make eval`) is printed with -s.
"""

from __future__ import annotations

import pytest

from forensics.verdicts.evaluation import LabelledRun, Quality, evaluate, load_runs, render_table, scan_runs

from .conftest import FIXTURES

RUNS = FIXTURES / "runs"


@pytest.fixture(scope="module")
def quality() -> Quality:
    return evaluate(scan_runs(RUNS))


def test_corpus_is_complete() -> None:
    manifests = [m for _, m in load_runs(RUNS)]
    healthy = [m for m in manifests if m["fault"] is None]
    assert len(healthy) >= 4
    assert {m["algorithm"] for m in healthy} >= {"ppo", "grpo"}
    assert len([m for m in manifests if m["fault"]]) >= 10


def test_healthy_runs_are_clean(quality: Quality) -> None:
    dirty = [r for r in quality.runs if r["fault"] is None and r["false_alarms"]]
    assert not dirty, render_table(quality)


def test_every_fault_is_detected_within_its_horizon(quality: Quality) -> None:
    missed = [r["name"] for r in quality.runs if r["fault"] is not None and not r["detected"]]
    assert not missed, render_table(quality)
    print("\n" + render_table(quality))


def test_no_alarm_before_onset(quality: Quality) -> None:
    early = {r["name"]: r["false_alarms"] for r in quality.runs
             if r["fault"] is not None and r["false_alarms"]}
    assert not early, render_table(quality)


# --- the corpus written by a real trainer (Hugging Face TRL, fixtures/trl) ----------------------

TRL = FIXTURES / "trl"
#: Faults of the TRL corpus that what TRL logs cannot show to any rule here, and why. The test
#: fails if one of them starts being detected (then remove it) or another fault is missed.
TRL_BLIND = {
    "ppo_length_reward": "TRL's PPO logs no response length; the growth shows only in sums",
    "ppo_reward_scale": "a reward 100x too large shows only as levels (value loss ~1,000, scores "
                        "in the tens) that no rule judges: reward scales differ between tasks",
}


@pytest.fixture(scope="module")
def trl_quality() -> Quality:
    return evaluate(scan_runs(TRL))


def test_trl_healthy_runs_are_clean_and_nothing_alarms_early(trl_quality: Quality) -> None:
    dirty = {r["name"]: r["false_alarms"] for r in trl_quality.runs if r["false_alarms"]}
    assert not dirty, render_table(trl_quality)


def test_trl_faults_are_found_near_their_onset(trl_quality: Quality) -> None:
    missed = {r["name"] for r in trl_quality.runs if r["fault"] is not None and not r["detected"]}
    assert missed == set(TRL_BLIND), render_table(trl_quality)


@pytest.mark.parametrize(("run", "rule"), [
    ("grpo_lr_high", "kl.excessive"), ("ppo_lr_high", "trust_region.exceeded"),
    ("grpo_lr_low", "hyperparams.lr_out_of_range"), ("grpo_reward_sign", "reward.sign_flip"),
    ("dpo_beta_tiny", "pref.not_learning"), ("dpo_lr_high", "hyperparams.lr_out_of_range"),
    ("dpo_overfit", "hyperparams.lr_out_of_range"),
    ("rloo_lr_high", "length.collapse"), ("grpo_lr_high", "signal.dead_groups"),
    ("grpo_max_len_small", "length.truncation"), ("grpo_lr_jump", "hyperparams.lr_change"),
])
def test_each_new_rule_fires_on_real_trainer_data(trl_quality: Quality, run: str, rule: str) -> None:
    rec = next(r for r in trl_quality.runs if r["name"] == run)
    assert rule in rec["detected_by"], render_table(trl_quality)


# --- real trainers' logs from public repositories (fixtures/real/labels.json) --------------------

REAL_CORPUS = FIXTURES / "real"
#: Labelled real logs this version cannot read yet, with the reason; the test fails when one of
#: them becomes readable (then remove it) or another becomes unreadable.
REAL_UNREADABLE: dict[str, str] = {}


@pytest.fixture(scope="module")
def real_runs() -> list[LabelledRun]:
    from forensics.verdicts.evaluation import corpus_available, labelled_logs_root

    if not corpus_available(REAL_CORPUS):
        pytest.skip(f"the real-log corpus is not here ({labelled_logs_root(REAL_CORPUS)}): it is "
                    "read from ../shared/real-logs/calibration beside the repository")
    return scan_runs(REAL_CORPUS)


@pytest.fixture(scope="module")
def real_quality(real_runs: list[LabelledRun]) -> Quality:
    return evaluate(real_runs)


def test_real_corpus_labels_every_log_once() -> None:
    import json

    labels = json.loads((REAL_CORPUS / "labels.json").read_text())
    files = [e["file"] for e in labels["runs"]]
    assert len(files) == len(set(files)) == 42  # LABELS.md sets 1 and 2
    for e in labels["runs"]:
        if e["fault"] not in (None, "unlabelled"):
            assert e["expected_rules"] and e["onset_row"] >= 1 and e["horizon_rows"] >= 1, e
        assert e.get("gate") in (None, "pass", "fail"), e


def test_real_healthy_logs_raise_no_alarm(real_quality: Quality) -> None:
    dirty = {r["name"]: r["false_alarms"] for r in real_quality.runs
             if r["fault"] is None and r["false_alarms"]}
    assert not dirty, render_table(real_quality)


def test_real_faults_are_found_near_their_onset_and_nothing_alarms_early(real_quality: Quality) -> None:
    unreadable = {r["name"] for r in real_quality.runs if r.get("error")}
    assert unreadable == set(REAL_UNREADABLE), render_table(real_quality)
    missed = {r["name"] for r in real_quality.runs
              if r["fault"] is not None and not r["detected"] and not r.get("error")}
    early = {r["name"]: r["false_alarms"] for r in real_quality.runs if r["fault"] and r["false_alarms"]}
    assert not missed and not early, render_table(real_quality)
    print("\n" + render_table(real_quality))


def test_the_default_gate_fails_exactly_the_runs_labelled_failing(real_quality: Quality) -> None:
    """LABELS.md set 2 says which runs a gate fails (damage that persists to the end of the log);
    every healthy run of both sets passes."""
    wrong = {r["name"]: (r["gate"], r["gate_expected"]) for r in real_quality.runs
             if r.get("gate_expected") and r["gate"] != r["gate_expected"]}
    assert not wrong, render_table(real_quality)
    assert sum(1 for r in real_quality.runs if r.get("gate_expected")) >= 30


def _corpora_findings() -> list[tuple[str, dict]]:
    out = []
    for root in (RUNS, TRL, REAL_CORPUS):
        from forensics.verdicts.evaluation import corpus_available

        if corpus_available(root):
            out += [(f"{root.name}/{r.name}", f) for r in scan_runs(root) for f in r.findings]
    return out


def test_every_critical_finding_names_its_consequence() -> None:
    """Only the consequence pass makes a finding critical, from damage it names: in the evidence
    (``consequence``) and in the message, on every run of every corpus."""
    criticals = [(name, f) for name, f in _corpora_findings() if f["severity"] == "critical"]
    assert len(criticals) >= 20
    for name, f in criticals:
        consequence = f["evidence"].get("consequence")
        assert consequence and consequence in f["message"], (name, f["rule"], f["message"])
        assert f["evidence"].get("severity_from") in ("warning", "info"), (name, f["rule"])


@pytest.mark.parametrize(("log", "rule", "severity"), [
    # item 7 of the verdicts issue: a broken run fails the default gate (critical)
    ("trl_grpo_qwen0.5b_patch2prod_alltruncated-saturated.txt", "length.truncation", "critical"),
    ("trl_grpo_qwen0.5b_olympiadzh_truncation-correctnessfloor.txt", "length.truncation", "critical"),
    ("trl_grpo_qwen3b-lora_hotpotqa_klblowup.log", "kl.excessive", "critical"),
    ("trl_dapo_qwen2.5vl-3b_aokvqa_lengthcollapse-deadgroups.md", "length.collapse", "critical"),
    ("trl_dpo_gams9b-translation_refmismatch-lossaboveln2.log", "pref.reference_mismatch", "critical"),
    # set 2: damage named at its depth, and the events and drifts that are not damage
    ("verl_gpg_qwen2-7b-gsm8k-math_lengthblowup-repetition.log", "length.truncation", "critical"),
    ("verl_gpg_qwen2-7b-gsm8k-math_lengthblowup-repetition.log", "entropy.collapse", "info"),
    ("verl_opd_qwen2.5-3b-retool-tokenkl_lengthdrift.log", "length.truncation", "warning"),
    ("verl_opd_qwen2.5-3b-retool-tokenkl_lengthblowup-toolcollapse.log", "length.truncation", "critical"),
    ("verl_opd_qwen2.5-3b-retool-klcoef0.05_lengthcollapse.log", "kl.excessive", "critical"),
    ("tinker_grpo_llama3.2-1b-leetcode_proxyhack-restarts.jsonl", "reward.proxy_gain", "critical"),
    ("trl_grpo_qwen3.5-9b-lora-gsm8k_truncation-deadgroups.log", "length.truncation", "critical"),
    ("trl_grpo_qwen3.5-9b-lora-gsm8k_truncation-deadgroups.log", "kl.spike", "info"),
    ("verl_grpo_deepseek7b-gsm8k_healthy-gradspikes.log", "grad.spike", "info"),
    ("verl_grpo_deepseek7b-gsm8k_healthy-gradspikes.log", "entropy.collapse", "info"),
    ("verl_ppo_deepseek7b-gsm8k_healthy-gradspikes.log", "grad.spike", "info"),
    ("rldk_grpo_synthetic-seed1_healthy-klspike.jsonl", "kl.spike", "info"),
    # a warm-up that outlasted a completed run is a warning, not critical
    ("trl_dpo_gams9b-translation_warmup-longer-than-run.log", "hyperparams.lr_warmup_unfinished", "warning"),
])
def test_real_severity_follows_consequence(real_runs: list[LabelledRun], log: str, rule: str,
                                           severity: str) -> None:
    run = next(r for r in real_runs if r.name == log)
    found = [f for f in run.findings if f["rule"] == rule]
    assert found and found[0]["severity"] == severity, [(f["rule"], f["severity"]) for f in run.findings]


def test_the_default_gate_fails_a_broken_real_run_and_passes_a_healthy_one(real_runs: list[LabelledRun]) -> None:
    """No policy file: a run whose responses are all cut at the cap, for the whole run, fails the
    gate (exit 1); a healthy real run passes it (exit 0)."""
    from click.testing import CliRunner

    from forensics.cli import main
    from forensics.verdicts.evaluation import labelled_logs_root

    logs = labelled_logs_root(REAL_CORPUS)
    broken = CliRunner().invoke(main, ["gate", str(logs / "trl_grpo_qwen0.5b_patch2prod_alltruncated-saturated.txt")])
    healthy = CliRunner().invoke(main, ["gate", str(logs / "trl_grpo_qwen3b-lora_hotpotqa-v3_healthy.log")])
    assert (broken.exit_code, healthy.exit_code) == (1, 0), (broken.output, healthy.output)


def test_a_healthy_real_run_speaks_with_one_voice(real_runs: list[LabelledRun]) -> None:
    """A run the trackers call healthy gets no window alert, no config change and no cost of
    waste: the window check follows the trackers' priors, advice comes from warning or critical
    findings only, waste from damage only (veRL's LoRA GRPO run once got 8 window alerts and a
    learning-rate patch from a policy loss of 1e-9 the losses tracker sets aside)."""
    from forensics.analysis.engine import scan_path
    from forensics.verdicts.evaluation import labelled_logs_root

    logs = labelled_logs_root(REAL_CORPUS)
    loud = {}
    for run in real_runs:
        if run.fault is not None or run.error:
            continue
        d = scan_path(logs / run.name).to_dict()
        alerts = [w["window"] for w in d.get("windows") or [] if w["status"] == "alert"]
        rec = d["recommendations"]
        wasted = (d.get("cost") or {}).get("after") or []
        if alerts or rec["config_patch"] or rec["priorities"]["immediate"] or rec["priorities"]["short_term"] or wasted:
            loud[run.name] = (alerts, rec["config_patch"], wasted)
    assert not loud

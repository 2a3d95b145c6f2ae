"""Detection quality on the labelled corpus recorded by the reference trainer (fixtures/runs).

Healthy runs must have no warning or critical finding; every injected fault must be found by one
of its expected rules within its horizon. The table (`make eval`) is printed with -s.
"""

from __future__ import annotations

import pytest

from forensics.verdicts.evaluation import Quality, evaluate, load_runs, render_table, scan_runs

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
    ("grpo_lr_high", "kl.excessive"), ("ppo_lr_high", "policy.trust_region"),
    ("grpo_lr_low", "lr.out_of_range"), ("grpo_reward_sign", "reward.sign_flip"),
    ("dpo_beta_tiny", "pref.not_learning"), ("dpo_lr_high", "pref.likelihood_displacement"),
    ("rloo_lr_high", "length.collapse"), ("grpo_lr_high", "group.no_signal"),
    ("grpo_max_len_small", "length.truncation"), ("grpo_lr_jump", "lr.change"),
])
def test_each_new_rule_fires_on_real_trainer_data(trl_quality: Quality, run: str, rule: str) -> None:
    rec = next(r for r in trl_quality.runs if r["name"] == run)
    assert rule in rec["detected_by"], render_table(trl_quality)

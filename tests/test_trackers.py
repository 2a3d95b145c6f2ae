"""Tracker behaviour on realistic synthetic runs: what must fire, and what must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics import RunMeta, scan_path
from forensics.config import Config

from . import synth
from .conftest import healthy_rows, write_jsonl


def findings(tmp_path: Path, rows: list[dict], meta: RunMeta | None = None,
             samples: list[dict] | None = None, **params: dict) -> list:
    p = write_jsonl(tmp_path / "steps.jsonl", rows)
    s = write_jsonl(tmp_path / "samples.jsonl", samples) if samples else None
    cfg = Config(run=meta or RunMeta(), trackers=params)
    return scan_path(p, samples=s, config=cfg).findings


def rules(fs: list, min_sev: str = "warning") -> set[str]:
    order = {"info": 0, "warning": 1, "critical": 2}
    return {f.rule for f in fs if order[f.severity.value] >= order[min_sev]}


@pytest.mark.parametrize("seed", range(6))
def test_healthy_runs_are_clean(tmp_path: Path, seed: int) -> None:
    assert rules(findings(tmp_path, healthy_rows(500, seed=seed))) == set()


def test_no_kl_column_no_kl_findings(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k not in ("kl", "kl_coef")} for r in healthy_rows(200)]
    fs = findings(tmp_path, rows)
    assert not any(f.rule.startswith("kl") for f in fs)


def test_fixed_coefficient_is_not_stuck(tmp_path: Path) -> None:
    rows = synth.kl_spike()
    fs = findings(tmp_path, rows, RunMeta(kl_target=0.01))  # KL far above a target, beta fixed
    assert "kl_ctl.stuck" not in rules(fs)
    assert "kl_ctl.wrong_direction" not in rules(fs)
    assert "kl.runaway" not in rules(fs)  # high but not rising


def test_ziegler_controller_conforms(tmp_path: Path) -> None:
    meta = RunMeta(kl_target=6.0, kl_target_unit="sequence", kl_controller="adaptive",
                   kl_horizon=10000, kl_batch_size=512)
    fs = findings(tmp_path, synth.ziegler(), meta)
    assert not rules(fs) & {"kl_ctl.law_mismatch", "kl_ctl.wrong_direction", "kl_ctl.stuck"}


def test_wrong_sign_controller_is_critical(tmp_path: Path) -> None:
    meta = RunMeta(kl_target=6.0, kl_target_unit="sequence", kl_controller="adaptive",
                   kl_horizon=10000, kl_batch_size=512)
    fs = findings(tmp_path, synth.ziegler(sign=-1.0), meta)
    wrong = [f for f in fs if f.rule == "kl_ctl.wrong_direction"]
    assert wrong and wrong[0].severity.value == "critical"
    assert "kl_ctl.law_mismatch" in rules(fs)


def test_law_mismatch_with_other_horizon(tmp_path: Path) -> None:
    meta = RunMeta(kl_target=6.0, kl_target_unit="sequence", kl_controller="adaptive",
                   kl_horizon=1000, kl_batch_size=512)  # the run used H = 10000
    fs = findings(tmp_path, synth.ziegler(), meta)
    assert "kl_ctl.law_mismatch" in rules(fs)


def test_kl_target_in_other_unit_skips_band(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", healthy_rows(100))
    a = scan_path(p, config=Config(run=RunMeta(kl_target=6.0, kl_target_unit="sequence")))
    kl = next(r for r in a.results if r.name == "kl_schedule")
    assert any("band checks skipped" in n for n in kl.notes)


def test_kl_runaway_against_target(tmp_path: Path) -> None:
    rows = healthy_rows(400)
    for i, r in enumerate(rows[200:]):
        r["kl"] = 0.05 * (1 + 0.03 * i)  # penalty off: KL climbs steadily
    fs = findings(tmp_path, rows, RunMeta(kl_target=0.05))
    run = [f for f in fs if f.rule == "kl.runaway"]
    assert run and 200 <= run[0].onset_step <= 240
    assert run[0].severity.value == "critical"  # reached > 4x target


def test_kl_runaway_without_target_uses_baseline(tmp_path: Path) -> None:
    rows = healthy_rows(400)
    for i, r in enumerate(rows[200:]):
        r["kl"] = 0.05 * (1 + 0.03 * i)
    fs = findings(tmp_path, rows)
    run = [f for f in fs if f.rule == "kl.runaway"]
    # without a target the tracker warns; the KL still climbing when the log ends is the damage
    assert run and "tracker_severity" not in run[0].evidence
    assert run[0].severity.value == "critical" and run[0].evidence["consequence"].startswith("the KL left")
    assert run[0].evidence["reference"] == "level 100 rows earlier"


def test_vanishing_gradients(tmp_path: Path) -> None:
    rows = healthy_rows(300)
    for r in rows[150:]:
        r["grad_norm"] *= 1e-3
    fs = [f for f in findings(tmp_path, rows) if f.rule == "grad.vanish"]
    assert len(fs) == 1 and 150 <= fs[0].onset_step <= 165


def test_clip_saturation_needs_clip_value(tmp_path: Path) -> None:
    rows = healthy_rows(300)
    for r in rows[100:]:
        r["grad_norm"] *= 2.0  # above max_grad_norm=1.0 most of the time
    assert "grad.clip_saturation" not in rules(findings(tmp_path, rows))
    fs = findings(tmp_path, rows, RunMeta(max_grad_norm=1.0))
    assert "grad.clip_saturation" in rules(fs)


def test_imbalance(tmp_path: Path) -> None:
    rows = healthy_rows(200)
    for r in rows[100:]:
        r["grad_norm_value"] *= 500
    fs = [f for f in findings(tmp_path, rows) if f.rule == "grad.imbalance"]
    assert len(fs) == 1 and fs[0].onset_step == 100


def test_whitening_declared_and_broken(tmp_path: Path) -> None:
    rows = healthy_rows(200)
    for r in rows[120:]:
        r["advantage_std"] = 0.3
    fs = findings(tmp_path, rows, RunMeta(advantage_normalization=True))
    f = [f for f in fs if f.rule == "adv.not_normalized"]
    assert len(f) == 1 and f[0].onset_step == 120


def test_length_hacking_from_samples(tmp_path: Path) -> None:
    steps = [{"step": s, "kl": 0.05} for s in range(120)]
    fs = findings(tmp_path, steps, samples=synth.length_hacking_samples())
    f = [f for f in fs if f.rule == "length.reward_correlation"]
    assert len(f) == 1 and 60 <= f[0].onset_step <= 90
    assert f[0].evidence["spearman"] > 0.3


def test_length_growth_while_reward_stalls(tmp_path: Path) -> None:
    rows = healthy_rows(400)
    for i, r in enumerate(rows):
        r["reward_mean"] = 0.5 + (r["reward_mean"] - 0.2 - 0.4 * i / 400) * 0.5
    for i, r in enumerate(rows[200:]):
        r["response_length_mean"] = 200 * (1 + 0.01 * i)
    fs = [f for f in findings(tmp_path, rows) if f.rule == "length.growth"]
    assert len(fs) == 1 and 200 <= fs[0].onset_step <= 260


def test_evidence_names_thresholds(tmp_path: Path) -> None:
    f = next(f for f in findings(tmp_path, synth.kl_spike()) if f.rule == "kl.spike")
    assert f.evidence["threshold_z"] == 6.0 and f.evidence["peak_ratio"] > 2
    assert f.remedy and f.explanation
    assert f.evidence["source_keys"] == {"kl": "kl"}


def test_grpo_loss_is_not_a_progress_signal(tmp_path: Path) -> None:
    """GRPO's loss is zero-mean noise plus beta * KL: it rises as the policy learns."""
    import numpy as np

    rng = np.random.default_rng(3)
    rows = healthy_rows(300)
    for i, r in enumerate(rows):
        r["loss"] = float(rng.normal(0, 0.003) + 0.04 * 0.3 * min(i, 150) / 150)
    rows[120]["loss"] = 0.05
    grpo = findings(tmp_path, rows, RunMeta(algorithm="grpo"))
    assert not any(f.rule.startswith("loss.") for f in grpo)
    # PPO's policy loss (the surrogate) is not a progress signal either; a preference loss is
    ppo = findings(tmp_path, rows, RunMeta(algorithm="ppo"))
    assert not any(f.rule.startswith("loss.") for f in ppo)
    dpo = findings(tmp_path, rows, RunMeta(algorithm="dpo"))
    assert any(f.rule == "loss.spike" and f.onset_step == 120 for f in dpo)

"""Configuration changes: jumps of the learning rate, KL coefficient, clip range and batch size are
findings with their values before and after, severity by factor, and causes in the timeline."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from forensics.analysis.engine import scan_path

from .conftest import FIXTURES, healthy_rows, write_jsonl
from .test_training_health import scan


def changes(a: Any) -> list[tuple[str, str, int, float, float]]:
    """The changes, each with the tracker's own alarm (a change by a factor of 10 or more in the
    risky direction is its 'critical'); the finding itself is at most a warning, as only damage
    makes a finding critical (analysis.diagnosis.consequence)."""
    out = [f for f in a.findings if f.tracker == "hyperparams" and f.rule != "hyperparams.lr_out_of_range"]
    assert all(f.severity.value != "critical" for f in out)
    return [(f.rule, alarm(f), f.onset_step, f.evidence["before"], f.evidence["after"]) for f in out]


def alarm(f: Any) -> str:
    """A finding's severity as its tracker judged it (before the consequence pass)."""
    return str(f.evidence.get("tracker_severity", f.severity.value))


def lr_rows(values: np.ndarray, **extra: np.ndarray) -> list[dict[str, Any]]:
    rows = [{"step": i, "learning_rate": float(v), "loss": 1.0} for i, v in enumerate(values)]
    for name, col in extra.items():
        for r, v in zip(rows, col):
            r[name] = float(v)
    return rows


def test_learning_rate_x30_is_critical_with_its_values() -> None:
    lr = np.where(np.arange(240) < 100, 1e-3, 3e-2)
    a = scan(lr_rows(lr), trackers=("hyperparams",))
    assert changes(a) == [("hyperparams.lr_change", "critical", 100, 0.001, 0.03)]
    f = next(f for f in a.findings if f.rule == "hyperparams.lr_change")
    assert f.message == "learning rate x30 at step 100: 0.001 -> 0.03"
    # 0.03 is also far above any rate used to fine-tune a language model (a prior)
    out = next(f for f in a.findings if f.rule == "hyperparams.lr_out_of_range")
    assert alarm(out) == "critical" and out.severity.value == "warning" and out.onset_step == 100
    assert (f.first_step, f.last_step) == (100, 100)
    assert f.evidence["factor"] == 30.0 and f.evidence["previous_step"] == 99


@pytest.mark.parametrize(("factor", "severity"), [(2.0, "info"), (3.0, "warning"), (10.0, "critical"),
                                                  (0.5, "info"), (0.1, "info"), (0.01, "warning")])
def test_severity_follows_the_factor(factor: float, severity: str) -> None:
    lr = np.where(np.arange(200) < 80, 1e-4, 1e-4 * factor)
    assert [c[1] for c in changes(scan(lr_rows(lr), trackers=("hyperparams",)))] == [severity]


def test_schedules_are_not_changes() -> None:
    steps = np.arange(2000)
    warmup = np.minimum(steps / 100, 1.0) * 1e-5  # linear warmup from 0
    cosine = 1e-5 * (0.5 + 0.5 * np.cos(np.pi * steps / 2000))  # decays to ~0 at the end
    both = np.where(steps < 100, warmup, cosine)
    for lr in (warmup, cosine, both):
        assert changes(scan(lr_rows(lr), trackers=("hyperparams",))) == []
    step_decay = 1e-4 * 0.1 ** (steps // 800)  # a step schedule: cuts x10 are changes, but info
    a = scan(lr_rows(step_decay), trackers=("hyperparams",))
    assert [(c[0], c[1], c[2]) for c in changes(a)] == [("hyperparams.lr_change", "info", 800)]
    # the two cuts are one finding that lists both (recurrences of a rule are grouped)
    assert [(e["onset_step"], e["severity"]) for e in a.findings[0].episodes] == [(800, "info"), (1600, "info")]


def test_kl_coefficient_clip_range_and_batch_size() -> None:
    n = 300
    i = np.arange(n)
    beta = np.where(i < 150, 0.05, 0.0)  # KL penalty switched off: the risky direction
    clip = np.where(i < 200, 0.2, 0.8)  # clip range x4
    batch = np.where(i < 250, 512, 64)  # batch /8
    rows = lr_rows(np.full(n, 1e-5), kl_coef=beta, clip_range=clip, batch_size=batch)
    got = changes(scan(rows, trackers=("hyperparams",)))
    assert got == [("hyperparams.kl_coef_change", "critical", 150, 0.05, 0.0),
                   ("hyperparams.clip_change", "warning", 200, 0.2, 0.8),
                   ("hyperparams.batch_size_change", "warning", 250, 512.0, 64.0)]
    on = lr_rows(np.full(n, 1e-5), kl_coef=np.where(i < 150, 0.0, 0.05))  # switched on: info
    assert [c[:2] for c in changes(scan(on, trackers=("hyperparams",)))] == [("hyperparams.kl_coef_change", "info")]


def test_adaptive_controller_moves_are_not_changes() -> None:
    rng = np.random.default_rng(0)
    beta = 0.1 * np.exp(np.cumsum(rng.uniform(-0.02, 0.02, 500)))  # proportional controller steps
    assert changes(scan(lr_rows(np.full(500, 1e-5), kl_coef=beta), trackers=("hyperparams",))) == []


def test_batch_invariance() -> None:
    rng = np.random.default_rng(3)
    lr = np.where(np.arange(600) < 300, 1e-5, 1e-4)
    lr[450:] = 1e-6
    rows = lr_rows(lr, kl_coef=np.where(np.arange(600) < 500, 0.1, 0.02))
    base = [f.to_dict() for f in scan(rows, trackers=("hyperparams",)).findings]
    for sizes in (1, 7, rng.integers(1, 50, 100).tolist()):
        assert [f.to_dict() for f in scan(rows, sizes=sizes, trackers=("hyperparams",)).findings] == base
    # two learning-rate changes (one finding listing both episodes) and one KL coefficient change
    assert len(base) == 2 and len(base[0]["episodes"]) == 2


def test_fixture_faults_are_found_and_healthy_runs_have_none() -> None:
    found = {}
    for run in sorted((FIXTURES / "runs").iterdir()):
        found[run.name] = [(f.rule, alarm(f), f.onset_step)
                           for f in scan_path(run, trackers=["hyperparams"]).findings]
    assert found["ppo_lr_high"] == [("hyperparams.lr_change", "critical", 100)]
    assert found["ppo_lr_tiny"] == [("hyperparams.lr_change", "warning", 40)]
    assert found["ppo_kl_off"] == [("hyperparams.kl_coef_change", "critical", 100)]
    assert ("hyperparams.lr_change", "critical", 100) in found["ppo_grad_explosion"]
    assert all(not v for k, v in found.items() if "healthy" in k)


def test_change_is_in_findings_csv_and_first_domino(tmp_path: Path) -> None:
    rows = healthy_rows(400)
    for r in rows:
        r["learning_rate"] = 1e-6 if r["step"] < 200 else 3e-5
    for r in rows[205:212]:
        r["grad_norm"] *= 30
    from forensics.report.files import write_reports

    paths = write_reports(scan_path(write_jsonl(tmp_path / "steps.jsonl", rows)), tmp_path / "out")
    with open(paths["findings"], newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    row = next(r for r in table if r["rule"] == "hyperparams.lr_change")
    assert row["severity"] == "warning" and row["onset_step"] == "200"  # a cause: no damage of its own
    assert row["message"] == "learning rate x30 at step 200: 1e-06 -> 3e-05"
    import json

    d = json.loads(paths["analysis"].read_text())
    assert d["timeline"]["first_domino"]["rule"] == "hyperparams.lr_change"


def _noisy(a: Any) -> list[str]:
    return [f.evidence["parameter"] for f in a.findings if f.rule == "hyperparams.schedule_noisy"]


@pytest.mark.parametrize("kind", ["gauss", "jitter", "interleaved"])
def test_a_noisy_schedule_is_one_finding_whatever_the_length(kind: str) -> None:
    """A learning rate and KL coefficient logged with noise (the gauss bench: standard normal
    values; a rate jittering by up to 2x; two param groups' rates on alternate rows) are one
    finding each, whose episodes do not grow with the log: no change per row, and the noisy
    rate's stretches above the usual range are one episode."""
    counts = []
    for n in (1_000, 6_000):
        rng = np.random.default_rng(1)
        if kind == "gauss":
            lr, beta = (np.round(rng.normal(0, 1, n), 6) for _ in range(2))
        elif kind == "jitter":
            lr, beta = 3e-5 * np.exp(rng.uniform(-0.7, 0.7, n)), 0.05 * np.exp(rng.uniform(-0.7, 0.7, n))
        else:
            lr, beta = np.where(np.arange(n) % 2, 2e-3, 1e-5), np.where(np.arange(n) % 2, 0.1, 0.0)
        a = scan(lr_rows(lr, kl_coef=beta), trackers=None)
        assert sorted(_noisy(a)) == ["kl_coef", "learning_rate"], kind
        ours = [f for f in a.findings if f.tracker == "hyperparams"]
        assert not [f.rule for f in ours if f.rule.endswith("_change")]
        episodes = {f.rule: len(f.episodes) if f.episodes else 1 for f in ours}
        assert all(k <= 2 for k in episodes.values()), episodes
        counts.append(sum(len(f.episodes) if f.episodes else 1 for f in a.findings))
    assert counts[1] <= counts[0] + 2, counts


def test_schedules_and_controllers_are_not_noise() -> None:
    """What changes every row by design is no noise: a warm-up then a cosine decay (in float32),
    a linear decay to zero, step decay, a constant rate whose last float32 digit jitters, an
    adaptive KL controller's small moves both ways, a cyclic (triangular) rate, and a schedule
    logged every tenth row."""
    n = 3000
    s = np.arange(n)
    cosine = np.where(s < 100, s / 100, 0.5 + 0.5 * np.cos(np.pi * (s - 100) / (n - 100))) * 1e-5
    rng = np.random.default_rng(2)
    schedules = {
        "warm-up and cosine": cosine.astype(np.float32),
        "linear decay": np.linspace(1e-5, 0.0, n),
        "step decay": 1e-4 * 0.5 ** (s // 300),
        "constant, float32": (1e-5 * (1 + rng.normal(0, 1e-7, n))).astype(np.float32),
        "triangular": 1e-5 + 9e-5 * np.abs((s % 200) / 100 - 1),
        "every tenth row": np.where(s % 10 == 0, cosine, np.nan),
    }
    beta = 0.1 * np.exp(np.cumsum(rng.uniform(-0.02, 0.02, n)))  # a proportional controller
    for name, lr in schedules.items():
        a = scan(lr_rows(lr, kl_coef=beta), trackers=("hyperparams",))
        assert _noisy(a) == [], name

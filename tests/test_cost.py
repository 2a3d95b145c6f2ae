"""The cost of waste: compute spent after the first critical finding and after learning stopped,
in GPU-hours (and money with a price), from the log's wall clock or the GPU-hours given."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main

from .conftest import write_jsonl
from .synth import grad_explosion


def clocked(tmp_path: Path, step_seconds: float = 36.0) -> Path:
    """300 steps of 36 s (3 h in all); the gradient explodes from step 180 on (critical)."""
    rows = grad_explosion()
    for r in rows:
        r["timestamp"] = 1.7e9 + r["step"] * step_seconds
    return write_jsonl(tmp_path / "steps.jsonl", rows)


def critical_after(a: dict) -> dict:
    return next(x for x in a["cost"]["after"] if x["after"] == "first critical finding")


def test_gpu_hours_and_money_after_the_first_critical_finding(tmp_path: Path) -> None:
    a = scan_path(clocked(tmp_path), gpus=8, gpu_price=2.5).to_dict()
    cost = a["cost"]
    assert cost["time_source"] == "timestamp" and cost["basis"] == "wall clock x gpus"
    # timestamps are kept in float64 (in float32, epoch seconds stood still for two minutes)
    tol = 0.5 / 3600
    assert cost["total"]["wall_clock_hours"] == pytest.approx(299 * 36 / 3600, abs=tol)
    after = critical_after(a)
    first_crit = min(f["onset_step"] for f in a["findings"] if f["severity"] == "critical")
    assert after["step"] == first_crit
    hours = (299 - first_crit) * 36 / 3600
    assert after["wall_clock_hours"] == pytest.approx(hours, abs=tol)
    assert after["gpu_hours"] == pytest.approx(8 * hours, abs=8 * tol)
    assert after["money"] == pytest.approx(2.5 * after["gpu_hours"], rel=1e-3)


def test_step_times_serve_when_there_are_no_timestamps(tmp_path: Path) -> None:
    rows = grad_explosion()
    for r in rows:
        r["step_time"] = 10.0
    a = scan_path(write_jsonl(tmp_path / "steps.jsonl", rows), gpus=2).to_dict()
    after = critical_after(a)
    assert a["cost"]["time_source"] == "sum of step_time"
    assert after["gpu_hours"] == pytest.approx(2 * (300 - after["step"]) * 10 / 3600, rel=1e-3)


def test_gpu_hours_given_are_shared_out_by_steps_without_a_clock(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", grad_explosion())
    assert "cost" not in scan_path(log).to_dict()  # no clock, nothing given: no claim made
    a = scan_path(log, gpu_hours=100.0).to_dict()
    after = critical_after(a)
    assert a["cost"]["time_source"] is None and after["wall_clock_hours"] is None
    assert after["gpu_hours"] == pytest.approx(100.0 * (300 - after["step"]) / 300, rel=1e-3)


def test_learning_stopped_counts_from_damage_not_from_a_plateau(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    flat = np.minimum(np.arange(900) / 100, 1.0) * 0.5  # rises for 100 steps, then a long plateau
    rows = [{"step": i, "reward_mean": float(v + rng.normal(0, 0.03)), "timestamp": 1.7e9 + 60.0 * i}
            for i, v in enumerate(flat)]
    a = scan_path(write_jsonl(tmp_path / "steps.jsonl", rows), gpus=4, gpu_price=2.0).to_dict()
    # a plateau after a climb is information (the run converged): no waste is priced from it
    assert [f["severity"] for f in a["findings"] if f["rule"] == "reward.stagnation"] in ([], ["info"])
    assert a["cost"]["after"] == []
    # every response scoring 0 from step 300 on: the reward pinned at its floor, damage
    for r in rows[300:]:
        r.update(reward_mean=0.0, reward_std=0.0, frac_reward_zero_std=1.0)
    for r in rows[:300]:
        r.update(reward_std=0.3, frac_reward_zero_std=0.1)
    a = scan_path(write_jsonl(tmp_path / "floor.jsonl", rows), gpus=4, gpu_price=2.0).to_dict()
    (stopped,) = [x for x in a["cost"]["after"] if x["after"] == "learning stopped"]
    onset = min(f["onset_step"] for f in a["findings"] if f["rule"] == stopped["rule"])
    assert stopped["rule"] in ("signal.reward_floor", "signal.dead_groups") and stopped["step"] == onset
    assert 300 <= onset <= 320
    assert stopped["gpu_hours"] == pytest.approx(4 * (899 - onset) / 60, abs=4 * 130 / 3600)
    assert stopped["share"] == pytest.approx((899 - onset) / 899, abs=0.01)


def test_the_summary_and_reports_state_the_cost(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["scan", str(clocked(tmp_path)), "--gpus", "8", "--gpu-price", "2.5",
                                    "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "compute: 23.9 GPU-hours, 2.99 h wall clock" in res.output, res.output
    assert "after first critical finding (" in res.output and "at 2.5 per GPU-hour" in res.output
    assert "Cost of waste" in (out / "report.md").read_text()
    assert 'id="cost"' in (out / "report.html").read_text()
    assert json.loads((out / "analysis.json").read_text())["cost"]["gpus"] == 8


def test_cost_options_are_checked_like_run_values(tmp_path: Path) -> None:
    log = clocked(tmp_path)
    res = CliRunner().invoke(main, ["scan", str(log), "--gpus", "0", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "is not a finite number > 0" in res.output
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\ngpus = 4\ngpu_price = 3.0\n")
    a = scan_path(log, config_path=cfg).to_dict()
    assert critical_after(a)["money"] == pytest.approx(3.0 * critical_after(a)["gpu_hours"], rel=1e-3)

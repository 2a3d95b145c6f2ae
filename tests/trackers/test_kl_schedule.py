"""kl_schedule: the KL's level, spikes, drift and sign, and the adaptive controller's conduct."""

from __future__ import annotations

import numpy as np

from forensics.config import RunMeta

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite

ADAPTIVE = RunMeta(kl_target=6.0, kl_target_unit="sequence", kl_controller="adaptive",
                   kl_horizon=10000, kl_batch_size=512)


def kl_run() -> Stream:
    """A five-fold KL spike at 150 and a negative KL from 250 (sampling differs from scoring)."""
    rows = healthy_rows(400, seed=1)
    for r in rows[150:154]:
        r["kl"] *= 6.0
    for r in rows[250:300]:
        r["kl"] = -0.05 + 0.005 * np.sin(r["step"])
    return Stream(rows)


def stuck_controller() -> Stream:
    """An adaptive controller whose coefficient never moves while the KL sits twice its target."""
    rng = np.random.default_rng(7)
    rows = [{"step": s, "kl_seq": float(12 * np.exp(rng.normal(0, 0.05))), "kl_coef": 0.2}
            for s in range(200)]
    return Stream(rows, meta=ADAPTIVE)


def oscillating() -> Stream:
    """The KL swings across the target's band every few updates."""
    rng = np.random.default_rng(8)
    rows = [{"step": s, "kl_seq": float((2.0 if (s // 4) % 2 else 12.0) * np.exp(rng.normal(0, 0.05))),
             "kl_coef": 0.2 * (1 + 0.01 * (s % 8))} for s in range(200)]
    return Stream(rows, meta=ADAPTIVE)


class TestKLSchedule(TrackerSuite):
    NAME = "kl_schedule"
    stream = staticmethod(kl_run)
    GOLDEN = (
        ("kl.negative", "warning", 250, 250, 302),
        ("kl.spike", "info", 150, 150, 153),
    )
    FIRES = (("kl.excessive", "trl/grpo_lr_high"), ("kl.spike", kl_run),
             ("kl.runaway", "runs/ppo_entropy_collapse"), ("kl.negative", kl_run),
             ("kl.off_target", "runs/ppo_kl_off"), ("kl.drift", "runs/grpo_length_reward"),
             ("kl.volatile", "trl/grpo_length_reward"),
             ("kl_ctl.wrong_direction", "runs/ppo_kl_wrong_sign"), ("kl_ctl.stuck", stuck_controller),
             ("kl_ctl.saturated", "runs/ppo_entropy_collapse"),
             ("kl_ctl.law_mismatch", "runs/ppo_kl_wrong_sign"), ("kl_ctl.overshoot", "runs/ppo_kl_off"),
             ("kl_ctl.oscillation", oscillating), ("kl.update_stalled", "runs/ppo_lr_tiny"),
             ("kl_ctl.runaway", "runs/ppo_kl_off"))

"""length_bias: length rewarded within steps, length growth, growth coupled with the reward,
truncation at the cap, length collapse."""

from __future__ import annotations

from .. import synth
from ..conftest import healthy_rows
from .common import Stream, TrackerSuite


def length_hacking() -> Stream:
    """Responses rewarded for their length from step 60, and truncation growing from step 150."""
    rows = healthy_rows(300, seed=5)
    for i, r in enumerate(rows[150:]):
        r["truncation_rate"] = min(0.6, 0.01 + 0.01 * i)
    return Stream(rows, synth.length_hacking_samples(steps=120, per_step=16, at=60))


class TestLengthBias(TrackerSuite):
    NAME = "length_bias"
    stream = staticmethod(length_hacking)
    GOLDEN = (
        ("length.truncation", "critical", 155, 155, 299),
        ("length.reward_correlation", "warning", 64, 64, 119),
    )
    FIRES = (("length.reward_correlation", length_hacking), ("length.growth", "runs/ppo_grad_explosion"),
             ("length.coupled_growth", "runs/grpo_length_reward"), ("length.truncation", length_hacking),
             ("length.collapse", "trl/rloo_lr_high"))

"""signal: groups with no reward spread (no learning signal), the reward pinned at its floor."""

from __future__ import annotations

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite


def dead_groups() -> Stream:
    """From step 150 nearly every group's rewards tie, and the reward stops improving."""
    rows = healthy_rows(300, seed=12)
    for r in rows:
        r.update(frac_reward_zero_std=0.05, reward_std=0.3)
    for r in rows[150:]:
        r.update(frac_reward_zero_std=0.97, reward_std=0.01, reward_mean=0.3)
    return Stream(rows)


class TestSignal(TrackerSuite):
    NAME = "signal"
    stream = staticmethod(dead_groups)
    GOLDEN = (
        ("signal.dead_groups", "critical", 150, 150, 299),
    )
    FIRES = (("signal.dead_groups", dead_groups), ("signal.reward_floor", "trl/rloo_lr_high"))

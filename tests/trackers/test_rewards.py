"""rewards: the reward's trend, stagnation, decline and a component's sign flip."""

from __future__ import annotations

from .common import TrackerSuite, health_run


class TestRewards(TrackerSuite):
    NAME = "rewards"
    stream = staticmethod(health_run)
    GOLDEN = (
        ("reward.stagnation", "warning", 0, 0, 699),
        ("reward.decline", "warning", 544, 544, 699),
        ("reward.trend", "info", 211, 211, 223),
    )
    FIRES = (("reward.trend", health_run), ("reward.stagnation", health_run),
             ("reward.sign_flip", "trl/grpo_reward_sign"), ("reward.decline", health_run))

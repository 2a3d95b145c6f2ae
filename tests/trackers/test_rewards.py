"""rewards: the reward's trend, stagnation, decline and a component's sign flip."""

from __future__ import annotations

import numpy as np

from .common import Stream, TrackerSuite, analyse, health_run


class TestRewards(TrackerSuite):
    NAME = "rewards"
    stream = staticmethod(health_run)
    GOLDEN = (
        ("reward.decline", "critical", 544, 544, 699),
        ("reward.stagnation", "warning", 0, 0, 699),
        ("reward.trend", "info", 211, 211, 223),
    )
    FIRES = (("reward.trend", health_run), ("reward.stagnation", health_run),
             ("reward.sign_flip", "trl/grpo_reward_sign"), ("reward.decline", health_run))


def proxy_run() -> Stream:
    """The reward climbs from 0.2 to 0.8 on a format term while the correctness term stays near
    0.005 (a proxy gain, as the Tinker LeetCode run of LABELS.md #40 shows)."""
    rng = np.random.default_rng(40)
    n = 200
    t = np.arange(n) / (n - 1)
    fmt = 0.2 + 0.6 * np.clip((t - 0.2) / 0.6, 0, 1) + rng.normal(0, 0.02, n)
    correct = np.abs(0.004 + rng.normal(0, 0.002, n))
    return Stream([{"step": i, "reward_mean": float(f + c), "reward/format_reward": float(f),
                    "reward/correctness_reward": float(c)} for i, (f, c) in enumerate(zip(fmt, correct))])


def real_gain_run() -> Stream:
    """The same run where correctness rises with the total (and a format term pinned at 0, as
    the Unsloth GSM8K reward set logs): learning the task, no finding."""
    rng = np.random.default_rng(39)
    n = 200
    t = np.arange(n) / (n - 1)
    correct = 0.2 + 1.0 * t + rng.normal(0, 0.05, n)
    return Stream([{"step": i, "reward_mean": float(c + 0.1), "reward/correctness_reward_func": float(c),
                    "reward/strict_format_reward_func": 0.0} for i, c in enumerate(correct)])


TestRewards.FIRES = (*TestRewards.FIRES, ("reward.proxy_gain", proxy_run))


def test_a_proxy_gain_is_found_where_the_reward_rises_and_a_task_gain_is_not() -> None:
    a = analyse("rewards", proxy_run())
    (f,) = [f for f in a.findings if f.rule == "reward.proxy_gain"]
    assert f.severity.value == "critical" and "correctness_reward" in f.message
    assert 40 <= f.onset_step <= 80  # the format term starts climbing at row 40
    assert f.evidence["consequence"] == "the reward rises while the task's correctness stays at its floor"
    assert not [f for f in analyse("rewards", real_gain_run()).findings if f.rule == "reward.proxy_gain"]
    # batch invariance
    assert [g.to_dict() for g in analyse("rewards", proxy_run(), sizes=[7, 1, 33]).findings
            if g.rule == "reward.proxy_gain"] == [f.to_dict()]

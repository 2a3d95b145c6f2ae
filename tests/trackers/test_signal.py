"""signal: groups with no reward spread (no learning signal), the reward pinned at its floor."""

from __future__ import annotations

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite, analyse, fed, golden


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


def stretches() -> Stream:
    """Three stretches without signal (frac 0.97) among healthy rows: the first while the reward
    still climbs, the others on a flat reward; a batch tie (reward std 0) in between."""
    rows = healthy_rows(900, seed=5)
    for i, r in enumerate(rows):
        r.update(frac_reward_zero_std=0.05, reward_std=0.3)
        if 100 <= i < 200:  # the reward climbs through the first stretch and past its end
            r.update(reward_mean=0.1 + 0.01 * (i - 100), **({"frac_reward_zero_std": 0.97} if i < 160 else {}))
        elif 400 <= i < 470 or 700 <= i < 800:
            r.update(frac_reward_zero_std=0.96, reward_mean=0.4)
    return Stream(rows)


def test_stretches_are_judged_alike_in_any_batches_and_their_rows_are_forgotten() -> None:
    """Each stretch without signal is summed up when it closes; the rows kept are those a stretch
    may still cover (a healthy row is forgotten 2 * dead_m rows on), so memory does not grow
    with the run; the findings are those of a single batch."""
    s = stretches()
    whole, small = analyse("signal", s), analyse("signal", s, sizes=[7, 1, 33, 64])
    assert golden(whole) == golden(small)
    findings = [f for f in whole.findings if f.rule == "signal.dead_groups"]
    assert len(findings) == 1 and len(findings[0].episodes) == 3
    # stretches that closed before the log ended (the groups came back) are no damage: warnings
    assert [e["severity"] for e in findings[0].episodes] == ["warning", "warning", "warning"]
    # after the run: the two closed stretches summed up, the rows of the open one (from 700) kept
    tracker = fed("signal", s).trackers[0]
    assert len(tracker.stretches) == 2 and sum(len(st) for st, _ in tracker.reward_parts) == 900 - 700
    healthy = Stream([r | {"frac_reward_zero_std": 0.05} for r in healthy_rows(900, seed=5)])
    tracker = fed("signal", healthy).trackers[0]
    assert 0 < sum(len(st) for st, _ in tracker.reward_parts) <= 2 * tracker.p.dead_m

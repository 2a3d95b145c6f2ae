"""entropy: collapse (reward not improving), a low entropy while the reward improves, blow-up."""

from __future__ import annotations

import numpy as np

from .common import Stream, TrackerSuite


def collapse(improving: bool = False) -> Stream:
    """The entropy falls to a fortieth from step 200 (the reward flat, or rising)."""
    rng = np.random.default_rng(2)
    n = 500
    h = 2.0 * np.exp(-np.maximum(np.arange(n) - 200, 0) / 40.0) + 0.05
    rows = [{"step": i, "entropy": float(v * np.exp(rng.normal(0, 0.02))),
             "reward_mean": float((0.1 + 0.002 * i if improving else 0.5) + rng.normal(0, 0.03))}
            for i, v in enumerate(h)]
    return Stream(rows)


def low() -> Stream:
    return collapse(improving=True)


class TestEntropy(TrackerSuite):
    NAME = "entropy"
    stream = staticmethod(collapse)
    GOLDEN = (
        ("entropy.collapse", "critical", 260, 260, 499),
    )
    FIRES = (("entropy.collapse", collapse), ("entropy.low", low),
             ("entropy.blowup", "trl/grpo_kl_off_hack"))


def test_the_rewards_gain_is_computed_only_while_the_entropy_is_low(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The reward's gain (two moving medians of the reward) only tells a collapse from a low
    entropy that pays: batches where the entropy is not low, and no episode is in the making,
    skip it, and the findings are those of a scan that computes it everywhere."""
    import forensics.analysis.trackers.entropy as entropy

    from .common import analyse, golden

    calls = []
    sigma = entropy.diff_sigma
    monkeypatch.setattr(entropy, "diff_sigma", lambda *a: (calls.append(1), sigma(*a))[1])
    rng = np.random.default_rng(4)
    steady = Stream([{"step": i, "entropy": float(1.5 + rng.normal(0, 0.02)),
                      "reward_mean": float(0.5 + rng.normal(0, 0.03))} for i in range(500)])
    assert golden(analyse("entropy", steady, [50] * 10)) == [] and calls == []
    assert golden(analyse("entropy", collapse(), [50] * 10)) == [("entropy.collapse", "critical", 260, 260, 499)]
    assert 0 < len(calls) < 10  # from the batch where the entropy first ran low

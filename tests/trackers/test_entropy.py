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

"""advantages: biased, unnormalised, drifting, exploding and heavy-tailed advantages."""

from __future__ import annotations

import numpy as np

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite


def advantages() -> Stream:
    """The advantage std grows twenty-fold from step 200; the largest advantage passes 10 at 120."""
    rows = healthy_rows(300, seed=4)
    for r in rows:
        r.update(advantage_min=-2.5, advantage_max=2.5)
    for r in rows[120:126]:
        r["advantage_max"] = 40.0
    for r in rows[200:]:
        r["advantage_std"] *= 20
    return Stream(rows)


def heavy_tails() -> Stream:
    """Per-response advantages, a few of them huge from step 60: kurtosis and skew explode."""
    rng = np.random.default_rng(9)
    samples = []
    for s in range(120):
        a = rng.normal(0, 1, 16)
        if s >= 60:
            a[0] = 25.0
        samples += [{"step": s, "advantage": float(v)} for v in a]
    return Stream([{"step": s, "kl": 0.05} for s in range(120)], samples)


class TestAdvantages(TrackerSuite):
    NAME = "advantages"
    stream = staticmethod(advantages)
    GOLDEN = (
        ("adv.blowup", "warning", 120, 120, 127),
        ("adv.not_normalized", "warning", 200, 200, 299),
        ("adv.scale_drift", "warning", 200, 200, 299),
    )
    FIRES = (("adv.bias", "runs/grpo_biased_baseline"), ("adv.not_normalized", "runs/ppo_adv_norm_off"),
             ("adv.scale_drift", advantages), ("adv.blowup", advantages), ("adv.heavy_tail", heavy_tails))

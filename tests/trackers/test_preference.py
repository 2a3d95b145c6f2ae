"""preference: over-optimised, margin blow-up, likelihood displacement, a reference that is not
the policy's start, and no preference learnt."""

from __future__ import annotations

import math

import numpy as np

from forensics.config import RunMeta

from .common import Stream, TrackerSuite

DPO = RunMeta(algorithm="dpo")


def _rows(n: int, cols: dict[str, np.ndarray]) -> list[dict[str, float]]:
    return [{"step": s + 1, **{k: float(v[s]) for k, v in cols.items()}} for s in range(n)]


def over_optimised() -> Stream:
    """The pairs memorised: the loss to 0, the accuracy pinned at 1, the margin past 10 and the
    chosen responses losing likelihood."""
    rng = np.random.default_rng(13)
    n = 60
    s = np.arange(n)
    margin = 14 * np.minimum(s / 30, 1.0) + 0.2 * rng.normal(size=n)
    cols = {"loss": 0.693 * np.exp(-8 * np.minimum(s / 5, 1.0)) + np.abs(rng.normal(0, 1e-4, n)),
            "pref_margin": margin, "pref_accuracy": np.where(s > 2, 1.0, 0.5 + 0.2 * s),
            "logp_chosen": -250 - 200 * np.minimum(s / 40, 1.0), "pref_reward_chosen": -0.2 * margin}
    return Stream(_rows(n, cols), meta=DPO)


def other_reference() -> Stream:
    """From the first step the loss is far above ln 2 and the implicit rewards are not 0."""
    rng = np.random.default_rng(14)
    n = 80
    cols = {"loss": 1.2 + rng.normal(0, 0.02, n), "pref_margin": -0.8 + rng.normal(0, 0.05, n),
            "pref_accuracy": 0.3 + rng.normal(0, 0.02, n), "pref_reward_chosen": -0.5 + rng.normal(0, 0.05, n),
            "logp_chosen": -250 + rng.normal(0, 1, n)}
    return Stream(_rows(n, cols), meta=DPO)


def not_learning() -> Stream:
    """The loss stays at ln 2 and the margin at 0: no preference is learnt."""
    rng = np.random.default_rng(15)
    n = 80
    cols = {"loss": math.log(2) + rng.normal(0, 1e-4, n), "pref_margin": rng.normal(0, 1e-3, n),
            "pref_accuracy": 0.5 + rng.normal(0, 0.02, n), "pref_reward_chosen": rng.normal(0, 1e-3, n)}
    return Stream(_rows(n, cols), meta=DPO)


class TestPreference(TrackerSuite):
    NAME = "preference"
    stream = staticmethod(over_optimised)
    GOLDEN = (
        ("pref.overfit", "warning", 6, 6, 60),
        ("pref.likelihood_displacement", "warning", 13, 13, 60),
        ("pref.margin_blowup", "warning", 32, 32, 60),
    )
    FIRES = (("pref.overfit", over_optimised), ("pref.margin_blowup", over_optimised),
             ("pref.likelihood_displacement", over_optimised),
             ("pref.reference_mismatch", other_reference), ("pref.not_learning", not_learning))

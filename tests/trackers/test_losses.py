"""losses: non-finite, spiking, oscillating and diverging losses."""

from __future__ import annotations

import numpy as np

from forensics.config import RunMeta

from .common import Stream, TrackerSuite, health_run


def losses() -> Stream:
    """A PPO run's value loss: a spike at 100, a swing ten times larger from 200, a NaN at 380,
    then a climb."""
    rng = np.random.default_rng(6)
    n = 500
    x = 0.5 + rng.normal(0, 0.01, n)
    x[100] = 3.0
    x[200:350] += np.where(np.arange(150) % 2 == 0, 0.1, -0.1)
    x[400:] *= np.exp(np.arange(100) / 25)
    rows = [{"step": i, "value_loss": float(v)} for i, v in enumerate(x)]
    rows[380]["value_loss"] = float("nan")
    return Stream(rows, meta=RunMeta(algorithm="ppo"))


class TestLosses(TrackerSuite):
    NAME = "losses"
    stream = staticmethod(losses)
    GOLDEN = (
        ("loss.nonfinite", "critical", 380, 380, 380),
        ("loss.spike", "warning", 100, 100, 459),
        ("loss.oscillation", "warning", 224, 224, 375),
        ("loss.divergence", "warning", 469, 469, 499),
    )
    FIRES = (("loss.nonfinite", health_run), ("loss.spike", losses), ("loss.oscillation", losses),
             ("loss.divergence", losses))

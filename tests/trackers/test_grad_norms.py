"""grad_norms: non-finite, exploding, spiking, vanishing, unbalanced and saturated gradients."""

from __future__ import annotations

from forensics.config import RunMeta

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite


def gradients() -> Stream:
    """A spike at 100, three non-finite norms at 150, an explosion from 220 (clip value 1)."""
    rows = healthy_rows(300, seed=2)
    rows[100]["grad_norm"] *= 20
    for r in rows[150:153]:
        r["grad_norm"] = float("nan")
    for i, r in enumerate(rows[220:]):
        r["grad_norm"] *= 30.0 * (1 + 0.05 * i)
    return Stream(rows, meta=RunMeta(max_grad_norm=1.0))


class TestGradNorms(TrackerSuite):
    NAME = "grad_norms"
    stream = staticmethod(gradients)
    GOLDEN = (
        ("grad.nonfinite", "critical", 150, 150, 152),
        ("grad.explode", "critical", 220, 220, 299),
        ("grad.clip_saturation", "warning", 220, 220, 299),
        ("grad.imbalance", "warning", 220, 220, 299),
        ("grad.spike", "info", 100, 100, 100),
    )
    FIRES = (("grad.nonfinite", gradients), ("grad.explode", gradients), ("grad.spike", gradients),
             ("grad.vanish", "trl/rloo_lr_high"), ("grad.imbalance", gradients),
             ("grad.clip_saturation", gradients))

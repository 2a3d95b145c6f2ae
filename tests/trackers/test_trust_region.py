"""trust_region: updates that left the trust region (approx_kl, clip fraction)."""

from __future__ import annotations

from ..conftest import healthy_rows
from .common import Stream, TrackerSuite


def updates() -> Stream:
    """approx_kl and the clip fraction far past their bounds from step 120 to 140."""
    rows = healthy_rows(200, seed=5)
    for r in rows:
        r.update(approx_kl=0.01 + 0.001 * (r["step"] % 3), clip_frac=0.05)
    for r in rows[120:140]:
        r.update(approx_kl=0.4, clip_frac=0.45)
    return Stream(rows)


class TestTrustRegion(TrackerSuite):
    NAME = "trust_region"
    stream = staticmethod(updates)
    GOLDEN = (
        ("trust_region.exceeded", "warning", 120, 120, 141),
    )
    FIRES = (("trust_region.exceeded", updates),)

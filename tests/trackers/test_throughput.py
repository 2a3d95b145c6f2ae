"""throughput: slower steps and growing memory."""

from __future__ import annotations

from .common import TrackerSuite, health_run


class TestThroughput(TrackerSuite):
    NAME = "throughput"
    stream = staticmethod(health_run)
    GOLDEN = (
        ("throughput.degradation", "warning", 465, 465, 699),
        ("resource.memory_growth", "warning", 556, 556, 699),
    )
    FIRES = (("throughput.degradation", health_run), ("resource.memory_growth", health_run))

"""throughput: slower steps and growing memory."""

from __future__ import annotations

from .common import TrackerSuite, health_run


class TestThroughput(TrackerSuite):
    NAME = "throughput"
    stream = staticmethod(health_run)
    GOLDEN = (
        ("throughput.degradation", "warning", 465, 465, 699),
        ("throughput.memory_growth", "warning", 556, 556, 699),
    )
    FIRES = (("throughput.degradation", health_run), ("throughput.memory_growth", health_run))

"""generation: the responses' format compliance falls, their n-grams repeat."""

from __future__ import annotations

from .common import Stream, TrackerSuite


def responses() -> Stream:
    """Six responses a step; from step 40 five of them loop on one word."""
    samples = []
    for s in range(80):
        for k in range(6):
            t = (f"<think>because {k}</think><answer>{k}</answer>" if s < 40 or k == 5
                 else "loop " * 50)
            samples.append({"step": s, "completion": t, "reward": float(k + s / 100)})
    return Stream([{"step": s} for s in range(80)], samples)


class TestGeneration(TrackerSuite):
    NAME = "generation"
    stream = staticmethod(responses)
    GOLDEN = (
        ("generation.repetition", "warning", 40, 40, 79),
        ("generation.format_regression", "warning", 44, 44, 79),
    )
    FIRES = (("generation.format_regression", responses), ("generation.repetition", responses))

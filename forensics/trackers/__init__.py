"""Trackers: one class per concept, each reading canonical columns and returning findings."""

from __future__ import annotations

from .advantages import Advantages
from .base import Tracker, TrackerResult
from .grad_norms import GradNorms
from .kl_schedule import KLSchedule
from .length_bias import LengthBias

__all__ = ["TRACKERS", "Advantages", "GradNorms", "KLSchedule", "LengthBias", "Tracker",
           "TrackerResult", "all_rules"]

#: Registry in report order: name -> class.
TRACKERS: dict[str, type[Tracker]] = {
    cls.name: cls for cls in (KLSchedule, GradNorms, Advantages, LengthBias)
}


def all_rules() -> list[tuple[str, object]]:
    """``(tracker name, RuleSpec)`` for every rule, trackers in registry order."""
    from ..engine import STREAM_RULES

    out: list[tuple[str, object]] = [(name, r) for name, cls in TRACKERS.items()
                                     for r in cls.rules]
    out.extend(("stream", r) for r in STREAM_RULES)
    return out

"""Trackers: one class per concept, each reading canonical columns and returning findings."""

from __future__ import annotations

from ..findings import RuleSpec
from .advantages import Advantages
from .base import Tracker, TrackerResult
from .entropy import Entropy
from .generation import Generation
from .grad_norms import GradNorms
from .kl_schedule import KLSchedule
from .length_bias import LengthBias
from .losses import Losses
from .rewards import Rewards
from .throughput import Throughput
from .windows import Windows

__all__ = ["TRACKERS", "Advantages", "Entropy", "Generation", "GradNorms", "KLSchedule", "LengthBias",
           "Losses", "Rewards", "Throughput", "Tracker", "TrackerResult", "Windows", "all_rules"]

#: Registry in report order: name -> class.
TRACKERS: dict[str, type[Tracker]] = {
    cls.name: cls for cls in (KLSchedule, GradNorms, Advantages, LengthBias, Rewards, Losses, Entropy,
                               Throughput, Generation, Windows)
}


def all_rules() -> list[tuple[str, RuleSpec]]:
    """``(tracker name, RuleSpec)`` for every rule, trackers in registry order."""
    from ..engine import STREAM_RULES

    out: list[tuple[str, RuleSpec]] = [(name, r) for name, cls in TRACKERS.items()
                                     for r in cls.rules]
    out.extend(("stream", r) for r in STREAM_RULES)
    return out

"""Trackers: one class per concept, each reading canonical columns and returning findings."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import ConfigError
from ..findings import STREAM_RULES, RuleSpec
from .advantages import Advantages
from .base import Tracker, TrackerResult
from .entropy import Entropy
from .generation import Generation
from .grad_norms import GradNorms
from .hyperparams import Hyperparams
from .kl_schedule import KLSchedule
from .length_bias import LengthBias
from .losses import Losses
from .preference import Preference
from .rewards import Rewards
from .signal import Signal
from .throughput import Throughput
from .trust_region import TrustRegion
from .windows import Windows

__all__ = ["TRACKERS", "Advantages", "Entropy", "Generation", "GradNorms", "KLSchedule", "LengthBias",
           "Losses", "Preference", "Rewards", "Signal", "Throughput", "Tracker", "TrackerResult",
           "TrustRegion", "Windows", "all_rules", "build_params"]

#: Registry in report order: name -> class.
TRACKERS: dict[str, type[Tracker]] = {
    cls.name: cls for cls in (KLSchedule, TrustRegion, GradNorms, Advantages, LengthBias, Rewards, Signal,
                               Preference, Losses, Entropy, Throughput, Generation, Windows)
}
TRACKERS = {Hyperparams.name: Hyperparams, **TRACKERS}  # configuration changes: causes come first


def all_rules() -> list[tuple[str, RuleSpec]]:
    """``(tracker name, RuleSpec)`` for every rule, trackers in registry order."""
    out: list[tuple[str, RuleSpec]] = [(name, r) for name, cls in TRACKERS.items()
                                     for r in cls.rules]
    out.extend(("stream", r) for r in STREAM_RULES)
    return out


def build_params(tables: dict[str, dict[str, Any]], source: str | None = None) -> dict[str, Any]:
    """Every tracker's parameters, with the overrides of a config's tracker tables.

    ``tables`` maps a tracker name to ``{parameter: value}`` (a config file's ``[tracker]``
    tables). An unknown tracker or parameter, or a non-number where the default is a number, is
    a :class:`~forensics.errors.ConfigError` that names the file and the key.
    """
    where = f"{source}: " if source else ""
    for section, values in tables.items():
        if section not in TRACKERS:
            raise ConfigError(f"{where}unknown section [{section}]; known: run, scan, "
                              + ", ".join(sorted(TRACKERS)))
        known = {f.name: f for f in dataclasses.fields(TRACKERS[section].Params)}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{where}[{section}] has no parameter {key!r}; known: "
                                  + ", ".join(sorted(known)))
            default = known[key].default
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise ConfigError(f"{where}[{section}] {key} must be a number, not {value!r}")
    return {name: cls.Params(**tables.get(name, {})) for name, cls in TRACKERS.items()}

"""Trackers: one class per concept, each reading canonical columns and returning findings."""

from __future__ import annotations

import dataclasses
import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

from ...config import allowed_of, params_doc, show_value
from ...errors import ConfigError, did_you_mean
from ..findings import RuleRenamed, RuleSpec
from ..stream import STREAM_RULES
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

__all__ = ["PARAM_RELATIONS", "REGEX_GROUPS", "TRACKERS", "Advantages", "Entropy", "Generation", "GradNorms",
           "KLSchedule", "LengthBias", "Losses", "Preference", "Rewards", "Signal", "Throughput", "Tracker",
           "TrackerResult", "TrustRegion", "Windows", "all_rules", "build_params", "current_rule_id",
           "param_allowed", "param_rows", "renamed_rules", "rule_renamed_note"]

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


def renamed_rules() -> dict[str, str]:
    """Old rule id -> the rule's id now (each rule's ``formerly``): renamed so that an id's
    prefix names the module that holds the rule.

    >>> renamed_rules()["lr.change"]
    'hyperparams.lr_change'
    """
    return {old: r.id for _, r in all_rules() for old in r.formerly}


def rule_renamed_note(old: str, new: str, where: str = "") -> str:
    """The deprecation note for an old id read somewhere (``where``: the file, or empty)."""
    at = f"{where}: " if where else ""
    return f"{at}rule id {old!r} is deprecated, read as {new!r}: use {new!r} instead"


def current_rule_id(rule: str, where: str = "") -> str:
    """``rule``, or the id a renamed rule has now, with a :class:`RuleRenamed` warning naming it."""
    new = renamed_rules().get(rule)
    if new is None:
        return rule
    warnings.warn(rule_renamed_note(rule, new, where), RuleRenamed, stacklevel=2)
    return new


#: Rules between two parameters of one tracker, ``(tracker, a, op, times, b)``: each Params
#: class's ``relations`` (:data:`forensics.config.Relations`), declared beside its parameters. A
#: persistence count cannot exceed its window; a band's low edge lies below its high edge; a robust
#: baseline's window holds at least two of its blocks and the history it asks for.
PARAM_RELATIONS: tuple[tuple[str, str, str, int, str], ...] = tuple(
    (name, *rel) for name, cls in TRACKERS.items() for rel in getattr(cls.Params, "relations", ()))

#: Regular-expression parameters whose group 1 is read (each Params class's ``regex_groups``):
#: they need at least one group.
REGEX_GROUPS: tuple[tuple[str, str], ...] = tuple(
    (name, p) for name, cls in TRACKERS.items() for p in getattr(cls.Params, "regex_groups", ()))

_OPS: dict[str, Callable[[Any, Any], bool]] = {"<=": operator.le, "<": operator.lt, ">=": operator.ge}
_MIRROR = {"<=": ">=", "<": ">", ">=": "<="}


def _relation(op: str, times: int, other: str) -> str:
    return f"{op} {other}" if times == 1 else f"{op} {times} x {other}"


def param_allowed(tracker: str, name: str) -> str:
    """What parameter ``name`` of ``tracker`` accepts, in words (its range and its relations).

    >>> param_allowed("advantages", "persist_k")
    'an integer from 1 to 100000; <= persist_m'
    """
    f = {f.name: f for f in dataclasses.fields(TRACKERS[tracker].Params)}[name]
    text = allowed_of(f).describe()
    for t, a, op, times, b in PARAM_RELATIONS:
        if t == tracker and name == a:
            text += "; " + _relation(op, times, b)
        elif t == tracker and name == b:
            text += "; " + (_relation(_MIRROR[op], 1, a) if times == 1 else f"{a} {op} {times} x {b}")
    if (tracker, name) in REGEX_GROUPS:
        text += " with at least one group"
    return text


def param_rows(tracker: str) -> list[tuple[str, Any, str, str]]:
    """``(name, default, meaning, allowed)`` for every parameter of ``tracker``."""
    return [(n, d, doc, param_allowed(tracker, n)) for n, d, doc in params_doc(TRACKERS[tracker].Params)]


def build_params(tables: dict[str, dict[str, Any]], source: str | None = None) -> dict[str, Any]:
    """Every tracker's parameters, with the overrides of a config's tracker tables.

    ``tables`` maps a tracker name to ``{parameter: value}`` (a config file's ``[tracker]``
    tables). An unknown tracker or parameter, a value of the wrong type or out of its range
    (:func:`forensics.config.param`), or a broken relation (:data:`PARAM_RELATIONS`,
    :data:`REGEX_GROUPS`) is a :class:`~forensics.errors.ConfigError` that names the file, the
    key, the value and what is allowed.
    """
    where = f"{source}: " if source else ""
    checked: dict[str, dict[str, Any]] = {}
    for section, values in tables.items():
        if section not in TRACKERS:
            sections = ["run", "scan", "columns", "rules", *TRACKERS]
            raise ConfigError(f"{where}unknown section [{section}]{did_you_mean(section, sections)}; known: "
                              "run, scan, columns, rules, " + ", ".join(sorted(TRACKERS)))
        if not isinstance(values, dict):
            raise ConfigError(f"{where}[{section}] must be a table of parameter = value, "
                              f"not {show_value(values)}")
        known = {f.name: f for f in dataclasses.fields(TRACKERS[section].Params)}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{where}[{section}] has no parameter {key!r}{did_you_mean(key, known)}; known: "
                                  + ", ".join(sorted(known)))
            checked.setdefault(section, {})[key] = allowed_of(known[key]).check(value, f"{where}[{section}] {key}")
    params = {name: cls.Params(**checked.get(name, {})) for name, cls in TRACKERS.items()}
    for tracker, a, op, times, b in PARAM_RELATIONS:
        va, vb = getattr(params[tracker], a), getattr(params[tracker], b)
        if not _OPS[op](va, times * vb):
            raise ConfigError(f"{where}[{tracker}] {a} = {show_value(va)} and {b} = {show_value(vb)}: "
                              f"expected {a} {_relation(op, times, b)}")
    for tracker, name in REGEX_GROUPS:
        value = getattr(params[tracker], name)
        if re.compile(value).groups < 1:
            raise ConfigError(f"{where}[{tracker}] {name} = {show_value(value)}: expected a regular "
                              "expression with at least one group (group 1 is the part read)")
    return params

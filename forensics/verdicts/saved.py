"""A saved analysis (``analysis.json``) read back and checked against its schema.

``report``, ``gate`` and ``diff`` read analyses written earlier, perhaps by another version,
perhaps edited by hand or cut short. Each is checked here before any of them touches it: the
schema version first (the same major version as this forensics writes), then every section those
commands read, in a fixed order, so a damaged file fails with exit 3 and the *first* offending
path::

    runs/a/analysis.json: this analysis.json is invalid: findings[0].severity missing

The schema is written once, below, as a small tree of checkers (a hand-written checker rather
than JSON Schema: no dependency for the analyzer, and messages in the paths users read). Keys a
section does not name are allowed (a newer minor version may add some); a section that is
present must have the documented shape. Numbers must be finite (the writer stores NaN and
infinities as null).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis.result import SCHEMA_VERSION
from ..config import read_json, show_value
from ..errors import InputError

__all__ = ["ANALYSIS_SCHEMA", "analysis_problem", "is_saved_analysis", "load_analysis"]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({show_value(value)})"
    if isinstance(value, str):
        return f"a string ({show_value(value, 40)})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _key(path: str, key: Any) -> str:
    k = str(key)
    if k.isidentifier():
        return f"{path}.{k}" if path else k
    return f"{path}[{k!r}]"


class Node:
    """A checker: ``problem(value, path)`` is the first problem found (``None`` when valid)."""

    what = "a value"

    def problem(self, value: Any, path: str) -> str | None:
        raise NotImplementedError

    def expected(self, value: Any, path: str) -> str:
        return f"{path or 'the file'}: expected {self.what}, got {_kind(value)}"


class Anything(Node):
    def problem(self, value: Any, path: str) -> str | None:
        return None


class Str(Node):
    what = "a string"

    def problem(self, value: Any, path: str) -> str | None:
        return None if isinstance(value, str) else self.expected(value, path)


class Bool(Node):
    what = "true or false"

    def problem(self, value: Any, path: str) -> str | None:
        return None if isinstance(value, bool) else self.expected(value, path)


class Num(Node):
    """A finite number (not a boolean), an integer when ``integer``, within ``[lo, hi]``."""

    def __init__(self, lo: float | None = None, hi: float | None = None, integer: bool = False,
                 what: str | None = None) -> None:
        self.lo, self.hi, self.integer = lo, hi, integer
        noun = "an integer" if integer else "a finite number"
        if what:
            self.what = what
        elif lo is not None and hi is not None:
            self.what = f"{noun} from {lo:g} to {hi:g}"
        elif lo is not None:
            self.what = f"{noun} >= {lo:g}"
        else:
            self.what = noun

    def problem(self, value: Any, path: str) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return self.expected(value, path)
        if isinstance(value, float) and not math.isfinite(value):
            return self.expected(value, path)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return self.expected(value, path)
        return None


class OneOf(Node):
    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.what = "one of " + ", ".join(repr(c) for c in choices)

    def problem(self, value: Any, path: str) -> str | None:
        return None if isinstance(value, str) and value in self.choices else self.expected(value, path)


class Nullable(Node):
    def __init__(self, inner: Node) -> None:
        self.inner = inner
        self.what = f"{inner.what} or null"

    def problem(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        found = self.inner.problem(value, path)
        return found and (self.expected(value, path) if found == self.inner.expected(value, path) else found)


class ListOf(Node):
    def __init__(self, item: Node) -> None:
        self.item = item
        self.what = "a list"

    def problem(self, value: Any, path: str) -> str | None:
        if not isinstance(value, list):
            return self.expected(value, path)
        for i, v in enumerate(value):
            found = self.item.problem(v, f"{path}[{i}]")
            if found:
                return found
        return None


class MapOf(Node):
    """An object whose keys are names and whose values all have one shape."""

    def __init__(self, value: Node) -> None:
        self.value = value
        self.what = "an object"

    def problem(self, value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return self.expected(value, path)
        for k, v in value.items():
            found = self.value.problem(v, _key(path, k))
            if found:
                return found
        return None


class AllOf(Node):
    """Every one of ``nodes`` holds (the first problem found)."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = nodes
        self.what = nodes[0].what

    def problem(self, value: Any, path: str) -> str | None:
        return next((p for p in (n.problem(value, path) for n in self.nodes) if p), None)


class Tables(Node):
    """Any JSON value in which a list that starts with an object holds only objects (the report
    draws such a list as a table, one row per object). Walked without recursion: any depth."""

    what = "a JSON value"

    def problem(self, value: Any, path: str) -> str | None:
        stack: list[tuple[Any, str]] = [(value, path)]
        while stack:
            v, p = stack.pop()
            if isinstance(v, dict):
                stack.extend((x, _key(p, k)) for k, x in reversed(list(v.items())))
            elif isinstance(v, list):
                if v and isinstance(v[0], dict):
                    bad = next((i for i, x in enumerate(v) if not isinstance(x, dict)), None)
                    if bad is not None:
                        return (f"{p}[{bad}]: expected an object like the list's first item, "
                                f"got {_kind(v[bad])}")
                stack.extend((x, f"{p}[{i}]") for i, x in reversed(list(enumerate(v))))
        return None


class Either(Node):
    """At least one of ``nodes`` holds."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = nodes
        self.what = " or ".join(n.what for n in nodes)

    def problem(self, value: Any, path: str) -> str | None:
        problems = [n.problem(value, path) for n in self.nodes]
        return None if None in problems else self.expected(value, path)


class Obj(Node):
    """An object with ``required`` and ``optional`` keys (others are allowed: newer versions may
    add some); ``rule`` is a check across keys, run once the keys are valid."""

    what = "an object"

    def __init__(self, required: dict[str, Node] | None = None, optional: dict[str, Node] | None = None,
                 rule: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        self.required, self.optional, self.rule = required or {}, optional or {}, rule

    def problem(self, value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return self.expected(value, path)
        for k, node in self.required.items():
            if k not in value:
                return f"{_key(path, k)} missing"
            found = node.problem(value[k], _key(path, k))
            if found:
                return found
        for k, node in self.optional.items():
            if k in value:
                found = node.problem(value[k], _key(path, k))
                if found:
                    return found
        broken = self.rule(value) if self.rule else None
        return f"{path or 'the file'}: {broken}" if broken else None


def _steps_in_order(f: dict[str, Any]) -> str | None:
    if f["first_step"] > f["last_step"]:
        return f"first_step {f['first_step']} is after last_step {f['last_step']}"
    return None


def _same_length(*keys: str) -> Callable[[dict[str, Any]], str | None]:
    def rule(d: dict[str, Any]) -> str | None:
        sizes = {k: len(d[k]) for k in keys if k in d}
        if len(set(sizes.values())) > 1:
            return "lists of different lengths: " + ", ".join(f"{k} has {n}" for k, n in sizes.items())
        return None
    return rule


STR, BOOL, ANY = Str(), Bool(), Anything()
INT = Num(-(2**63), 2**63 - 1, integer=True, what="a 64-bit integer")  # steps are int64
COUNT = Num(lo=0, integer=True)
NUM = Num()
SCORE = Nullable(Num(0, 1))
SEVERITY = OneOf("info", "warning", "critical")
STRINGS = ListOf(STR)
TABLE = MapOf(ANY)

EPISODE = Obj(required={"first_step": INT, "last_step": INT, "onset_step": INT, "severity": SEVERITY},
              optional={"message": STR}, rule=_steps_in_order)
FINDING = Obj(
    required={"rule": STR, "severity": SEVERITY, "first_step": INT, "last_step": INT, "onset_step": INT,
              "message": STR},
    optional={"tracker": STR, "explanation": STR, "remedy": STR, "evidence": TABLE,
              "episodes": ListOf(EPISODE)},
    rule=_steps_in_order)

HEALTH = Obj(optional={"overall": SCORE, "stability": SCORE, "convergence": SCORE, "areas": MapOf(SCORE)})

INPUT = Obj(
    required={"path": STR, "format": Nullable(STR), "rows_read": COUNT, "rows_kept": COUNT, "rows_skipped": COUNT,
              "issues": ListOf(ANY), "notes": STRINGS},
    optional={"issues_truncated": BOOL, "skipped_by_reason": MapOf(COUNT)})

STEPS = Obj(optional={"rows": COUNT, "first": Nullable(INT), "last": Nullable(INT), "replays": ListOf(ANY)})

EVENT = Obj(required={"id": STR, "rule": STR, "severity": SEVERITY, "first_step": INT, "last_step": INT,
                      "onset_step": INT},
            optional={"message": STR}, rule=_steps_in_order)
LINK = Obj(required={"cause": STR, "effect": STR}, optional={"lag": NUM, "why": STR, "cause_rule": STR,
                                                             "effect_rule": STR})
TIMELINE = Obj(optional={
    "events": ListOf(EVENT), "links": ListOf(LINK),
    "first_domino": Nullable(Obj(required={"rule": STR, "onset_step": INT, "chain": STRINGS},
                                 optional={"id": STR, "chain_rules": STRINGS, "linked": BOOL,
                                           "severity": SEVERITY}))})

SERIES = Obj(required={"x": ListOf(INT), "y": ListOf(NUM)}, optional={"downsampled": BOOL, "n": COUNT},
             rule=_same_length("x", "y"))
PAIR = Obj(required={"x": ListOf(NUM), "y": ListOf(NUM), "step": ListOf(INT)}, rule=_same_length("x", "y", "step"))
DURATION = Nullable(Obj(required={"seconds": Nullable(NUM)}, optional={"source": Nullable(STR)}))
PLOTS = Obj(optional={"series": MapOf(SERIES), "pairs": MapOf(PAIR), "max_points": COUNT, "rows": COUNT,
                      "method": STR, "duration": DURATION})

TRACKER = Obj(optional={"name": STR, "area": STR, "active": BOOL, "score": SCORE, "findings": COUNT,
                        "notes": STRINGS, "summary": TABLE})

MAPPING = Obj(optional={"mapping": MapOf(STR), "unmapped": STRINGS, "shadowed": ListOf(ANY),
                        "notes": TABLE, "transforms": TABLE})

WINDOW = Obj(optional={"first_step": Nullable(INT), "last_step": Nullable(INT), "status": Nullable(STR),
                       "issues": Either(STR, ListOf(ANY)), "reward_direction": Nullable(STR),
                       "loss_direction": Nullable(STR), "findings": STRINGS, "loss_metric": Nullable(STR)})

# the report draws these two sections whole, a list of objects as a table
ADJUSTMENT = Obj(optional={"parameter": STR, "text": STR, "key": Nullable(STR), "source": Nullable(STR),
                           "priority": Nullable(STR), "current": Nullable(NUM), "new": Nullable(NUM),
                           "because": STRINGS, "held_back": ListOf(TABLE)})
RECOMMENDATIONS = AllOf(Obj(optional={"priorities": MapOf(ListOf(Either(STR, TABLE))),
                                      "adjustments": ListOf(ADJUSTMENT), "monitoring": ListOf(ANY),
                                      "trainer": Nullable(Obj(optional={"name": STR, "config": STR})),
                                      "config_patch": TABLE, "command_line": Nullable(STRINGS),
                                      "not_in_config": STRINGS, "if_persists": STRINGS,
                                      "if_persists_patch": TABLE, "if_persists_not_in_config": STRINGS,
                                      "root_cause": Nullable(STR), "issues": TABLE}),
                        Tables())
#: how much of the log was checked (the verdict reads it) and where the run context came from
COVERAGE = Obj(optional={"checked": BOOL, "trackers_judging": STRINGS,
                         "columns": Obj(optional={"mapped": COUNT, "unmapped": COUNT, "mapped_names": STRINGS,
                                                  "unmapped_keys": STRINGS}),
                         "trackers": MapOf(Obj(optional={"active": BOOL, "reason": STR}))})
RUN_CONTEXT = MapOf(Obj(optional={"from": STR}))
GENERATION = AllOf(Obj(optional={"examples": TABLE, "windows": ListOf(TABLE)}), Tables())

#: The analysis JSON (schema 1.x) as report, gate and diff read it.
ANALYSIS_SCHEMA = Obj(
    required={"schema_version": STR, "findings": ListOf(FINDING), "health": HEALTH},
    optional={
        "tool": Obj(optional={"name": STR, "version": STR}),
        "run": Obj(optional={"name": Nullable(STR), "algorithm": Nullable(STR), "kl_target": Nullable(NUM),
                             "kl_target_unit": Nullable(STR), "max_grad_norm": Nullable(NUM)}),
        "inputs": ListOf(INPUT),
        "column_mapping": MapOf(MAPPING),
        "steps": STEPS,
        "trackers": MapOf(TRACKER),
        "findings_by_severity": Obj(optional={"info": COUNT, "warning": COUNT, "critical": COUNT}),
        # the report draws the KL target band from these two
        "params": AllOf(MapOf(TABLE), Obj(optional={"kl_schedule": Obj(optional={"band_low": NUM,
                                                                                "band_high": NUM})})),
        "timeline": TIMELINE,
        "plots": PLOTS,
        "windows": ListOf(WINDOW),
        "recommendations": RECOMMENDATIONS,
        "generation": GENERATION,
        "coverage": COVERAGE,
        "run_context": RUN_CONTEXT,
    })


def analysis_problem(data: Any) -> str | None:
    """The first thing wrong with an analysis dict (a path and what is wrong), or ``None``.

    >>> analysis_problem({"schema_version": "1.0", "findings": [{"rule": "kl.spike"}], "health": {}})
    'findings[0].severity missing'
    >>> analysis_problem({"schema_version": "1.0", "findings": [], "health": {"areas": []}})
    'health.areas: expected an object, got a list'
    >>> analysis_problem({"schema_version": "9.0", "findings": [], "health": {}})
    "schema_version '9.0' is not one this forensics reads (1.x)"
    """
    if isinstance(data, dict) and isinstance(data.get("schema_version"), str):
        major = data["schema_version"].split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            return (f"schema_version {data['schema_version']!r} is not one this forensics reads "
                    f"({SCHEMA_VERSION.split('.')[0]}.x)")
    if not isinstance(data, dict):
        return f"expected a JSON object, got {_kind(data)}"
    return ANALYSIS_SCHEMA.problem(data, "")


#: Bytes a saved analysis.json may hold (a million-step run's is a few MB: it holds findings and
#: summaries, never the rows).
ANALYSIS_LIMIT = 256 * 2**20


def is_saved_analysis(path: Path) -> bool:
    """True for an analysis JSON file, or a report folder holding ``analysis.json``."""
    if path.is_dir():  # a report folder; a run folder (steps.*) is scanned even if it has one
        return (path / "analysis.json").is_file() and not any(path.glob("steps.*"))
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    if path.name == "analysis.json":
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    # the writer sorts keys: an analysis opens with "column_mapping" (older ones with the version)
    return head.lstrip().startswith(b"{") and (b'"column_mapping"' in head or b'"schema_version"' in head)


def load_analysis(path: Path) -> dict[str, Any]:
    """Read and check a saved ``analysis.json``: an :class:`InputError` (exit 3) naming the file
    and the first offending path when it cannot be read or does not match its schema."""
    data = read_json(path, "analysis", ANALYSIS_LIMIT)
    problem = analysis_problem(data)
    if problem:
        raise InputError(f"this analysis.json is invalid: {problem}", path=str(path))
    _current_rule_ids(data, str(path))
    return data


def _current_rule_ids(data: dict[str, Any], where: str) -> None:
    """An analysis saved before a rule was renamed: its findings take the rule's id now (so a
    diff or a gate compares like with like), with one warning per old id naming the new one."""
    from ..analysis.trackers import current_rule_id, renamed_rules

    renamed = renamed_rules()
    seen: dict[str, str] = {}
    for f in data["findings"]:
        old = f["rule"]
        if old in renamed:
            f["rule"] = seen.get(old) or seen.setdefault(old, current_rule_id(old, where))

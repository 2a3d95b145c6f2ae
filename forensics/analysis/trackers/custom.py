"""Your own rules, as data: ``[[rules]]`` tables in a config declare rules over any column.

A rule watches one column (a canonical name, or any key of the log under its own name) and fires
a finding, one per episode, where its condition holds on ``persist`` consecutive rows::

    [[rules]]
    id = "throughput_floor"          # the finding's rule id is custom.throughput_floor
    metric = "tokens_per_sec"
    kind = "below"                   # above | below | spike | drop | rise | flat
    threshold = 2000.0               # above / below: the level
    persist = 5                      # consecutive rows (default 1)
    severity = "warning"             # info | warning | critical (default warning)
    message = "Throughput under 2,000 tokens/s"
    remedy = "Check the data loader and the generation batch size"

* ``above`` / ``below``: the value is above (below) ``threshold``;
* ``spike``: the value lies more than ``z`` robust standard deviations (1.4826 x the median
  absolute deviation) from the median of the ``window`` rows before it;
* ``drop`` / ``rise``: the value (a trailing mean of ``smooth`` rows, default window / 10) fell
  (rose) by at least ``percent`` % against the same ``window`` rows earlier;
* ``flat``: it moved by less than ``percent`` % over ``window`` rows.

``and = {metric = ..., kind = ..., ...}`` adds a second condition (same keys) that must hold on
the same rows: a proxy reward that rises while a gold metric stays flat. A column logged on some
rows only (an evaluation metric) carries its last value forward. Every key is checked as the
built-in parameters are: an unknown key is a usage error naming the closest known ones.

The tables can also live in rules files of their own, named by the config's ``rules_files``
(:data:`forensics.config.RULES_FILES_DOC`); :func:`config_rules` reads both.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import field
from typing import Any, ClassVar

import numpy as np

from ...config import Allowed, Config, RunMeta, show_value
from ...errors import ConfigError, did_you_mean
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..stats.episodes import Episodes
from ..stats.trailing import History
from .base import Tracker, TrackerResult

__all__ = ["KINDS", "RULE_KEYS", "CustomRule", "CustomRules", "config_rules", "parse_rules"]

#: What a rule's condition can be.
KINDS = ("above", "below", "spike", "drop", "rise", "flat")
PREFIX = "custom."

_CONDITION: dict[str, Allowed] = {
    "metric": Allowed(str), "kind": Allowed(str, choices=KINDS),
    "threshold": Allowed(float), "z": Allowed(float, gt=0), "percent": Allowed(float, gt=0),
    "window": Allowed(int, ge=2, le=100_000), "smooth": Allowed(int, ge=1, le=100_000),
}
_RULE: dict[str, Allowed] = {
    "id": Allowed(str), **_CONDITION, "persist": Allowed(int, ge=1, le=100_000),
    "severity": Allowed(str, choices=("info", "warning", "critical")), "title": Allowed(str),
    "message": Allowed(str), "remedy": Allowed(str), "and": Allowed(dict),
}
#: Cells (rows x window) a spike condition holds at once: about 32 MB a copy, whatever the window
#: (4,096 windows of 100,000 rows held 3.3 GB a copy).
_SPIKE_CELLS = 2**22
#: What each kind needs besides metric and kind.
_NEEDS = {"above": ("threshold",), "below": ("threshold",), "spike": (), "drop": ("percent",),
          "rise": ("percent",), "flat": ("percent",)}


@record(frozen=True)
class Condition:
    """One column's condition (see the module doc)."""

    metric: str
    kind: str
    threshold: float = float("nan")
    z: float = 6.0
    percent: float = float("nan")
    window: int = 50
    smooth: int = 0

    @property
    def history(self) -> int:
        """Rows before a row that the condition reads."""
        if self.kind in ("above", "below"):
            return 0
        return self.window + (self._smooth if self.kind != "spike" else 0)

    @property
    def _smooth(self) -> int:
        return self.smooth or max(1, self.window // 10)

    def describe(self) -> str:
        if self.kind in ("above", "below"):
            return f"{self.metric} {self.kind} {self.threshold:g}"
        if self.kind == "spike":
            return f"{self.metric} spikes beyond {self.z:g} robust SD of its last {self.window} rows"
        what = {"drop": "drops by", "rise": "rises by", "flat": "moves by less than"}[self.kind]
        return f"{self.metric} {what} {self.percent:g}% over {self.window} rows"

    def evaluate(self, full: np.ndarray, n_new: int) -> tuple[np.ndarray, np.ndarray]:
        """The condition and the value it judged on the last ``n_new`` rows of ``full`` (the
        history kept, then the new rows)."""
        start = len(full) - n_new
        if self.kind in ("above", "below"):
            v = full[start:]
            with np.errstate(invalid="ignore"):
                return (v > self.threshold if self.kind == "above" else v < self.threshold), v
        if self.kind == "spike":
            return self._spike(full, start)
        return self._change(full, start)

    def _spike(self, full: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(full) - start
        z = np.full(n, np.nan)
        chunk = max(1, _SPIKE_CELLS // self.window)  # windows at a time: memory chunk x window, bounded
        for lo in range(0, n, chunk):
            rows = np.arange(start + lo, min(start + lo + chunk, len(full)))
            rows = rows[rows >= self.window]
            if not len(rows):
                continue
            win = np.lib.stride_tricks.sliding_window_view(full, self.window)[rows - self.window]
            with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing window judges nothing
                med = np.nanmedian(win, axis=1)
                mad = 1.4826 * np.nanmedian(np.abs(win - med[:, None]), axis=1)
                z[rows - start] = np.abs(full[rows] - med) / mad
        with np.errstate(invalid="ignore"):
            return z > self.z, z

    def _change(self, full: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
        k = self._smooth
        ok = np.isfinite(full)
        csum = np.concatenate([[0.0], np.cumsum(np.where(ok, full, 0.0))])
        ccnt = np.concatenate([[0], np.cumsum(ok)])
        idx = np.arange(start, len(full))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = lambda i: (csum[i + 1] - csum[np.maximum(i + 1 - k, 0)]) / (  # noqa: E731
                ccnt[i + 1] - ccnt[np.maximum(i + 1 - k, 0)])
            before = np.where(idx - self.window >= k - 1, mean(np.maximum(idx - self.window, 0)), np.nan)
            pct = 100.0 * (mean(idx) - before) / np.abs(before)
            cond = {"drop": pct <= -self.percent, "rise": pct >= self.percent,
                    "flat": np.abs(pct) < self.percent}[self.kind]
        return cond & np.isfinite(pct), pct


@record(frozen=True)
class CustomRule:
    """A rule declared in a config's ``[[rules]]``."""

    id: str
    conditions: tuple[Condition, ...]
    persist: int = 1
    severity: str = "warning"
    title: str = ""
    message: str = ""
    remedy: str = ""
    spec: RuleSpec = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        what = " and ".join(c.describe() for c in self.conditions)
        held = f" on {self.persist} consecutive rows" if self.persist > 1 else ""
        object.__setattr__(self, "spec", RuleSpec(
            self.id, Severity.parse(self.severity), self.title or what, f"Your rule: {what}{held}.",
            self.remedy or "See the rule's message (a rule of your own config).", source="config [[rules]]"))


_C, _R = Condition(metric="", kind="above"), CustomRule("", ())
#: Every key of a ``[[rules]]`` table, in words (``forensics rules --format markdown`` lists them
#: with what each allows).
RULE_KEYS = {
    "id": "the rule's name: its findings' rule id is custom.<id> (required)",
    "metric": "the column watched: a canonical name, or any key of the log under its own name (required)",
    "kind": "the condition: " + ", ".join(KINDS) + " (required)",
    "threshold": "above / below: the level",
    "z": f"spike: robust standard deviations from the median of the window rows before (default {_C.z:g})",
    "percent": "drop / rise: the least move, flat: the largest, in % over window rows",
    "window": f"spike, drop, rise, flat: rows compared (default {_C.window})",
    "smooth": "drop, rise, flat: each end is a trailing mean of this many rows (default window / 10)",
    "persist": f"consecutive rows on which the condition holds before an episode opens (default {_R.persist})",
    "severity": f"of the finding (default {_R.severity})",
    "title": "the rule's title (default: the condition in words)",
    "message": "the finding's message (default: \"Your rule <id>: \" and the condition), with its steps and peak",
    "remedy": "what to do, shown with the finding",
    "and": "a second condition (metric, kind and its keys) that must hold on the same rows",
}


def _condition(table: dict[str, Any], where: str, allowed: dict[str, Allowed]) -> dict[str, Any]:
    """The checked keys of one table (unknown keys, wrong types and missing needs refused)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(f"{where} has no key {key!r}{did_you_mean(key, allowed)}; known: "
                              + ", ".join(allowed))
        out[key] = allowed[key].check(value, f"{where} {key}")
    for key in ("metric", "kind"):
        if key not in out:
            what = "one of " + ", ".join(KINDS) if key == "kind" else "a column"
            raise ConfigError(f"{where}: {key} is required ({what})")
    for key in _NEEDS[out["kind"]]:
        if key not in out:
            raise ConfigError(f"{where}: kind = {out['kind']!r} needs {key}")
    return out


def _make_condition(c: dict[str, Any]) -> Condition:
    return Condition(**{k: v for k, v in c.items() if k in Condition.__dataclass_fields__})


def parse_rules(tables: Any, source: str = "config") -> tuple[CustomRule, ...]:
    """The ``[[rules]]`` of a config, each checked (a :class:`ConfigError` naming the file, the
    rule and the key; an unknown key names the closest known ones)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{source}: rules = {show_value(tables)}: expected [[rules]] tables")
    rules: list[CustomRule] = []
    seen: set[str] = set()  # ids so far (a set: 40,000 rules are checked in linear time)
    for i, table in enumerate(tables):
        where = f"{source}: [[rules]] #{i + 1}" + (f" ({table['id']})" if isinstance(table.get("id"), str) else "")
        c = _condition(table, where, _RULE)
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", c.get("id", "")):
            raise ConfigError(f"{where}: id = {show_value(c.get('id'))}: expected a name of lower-case "
                              "letters, digits, '_', '.' and '-' (the rule id is custom.<id>)")
        rule_id = c["id"] if c["id"].startswith(PREFIX) else PREFIX + c["id"]
        if rule_id in seen:
            raise ConfigError(f"{where}: a second rule with id {rule_id!r}")
        seen.add(rule_id)
        conds = [_make_condition(c)]
        if "and" in c:
            conds.append(_make_condition(_condition(c["and"], f"{where} and", _CONDITION)))
        rules.append(CustomRule(rule_id, tuple(conds), c.get("persist", 1), c.get("severity", "warning"),
                                c.get("title", ""), c.get("message", ""), c.get("remedy", "")))
    return tuple(rules)


def config_rules(config: Config) -> tuple[CustomRule, ...]:
    """The rules of a config and of its rules files, each file's checked by :func:`parse_rules`
    under its own name (so an error names the file the rule is in); a rule id declared in two of
    them is refused, naming both."""
    rules = list(config.rules)
    sources = (list(config.rule_sources) if len(config.rule_sources) == len(rules)
               else [config.source or "config"] * len(rules))
    out: list[CustomRule] = []
    seen: dict[str, str] = {}
    for source in dict.fromkeys(sources):
        for rule in parse_rules([t for t, s in zip(rules, sources, strict=True) if s == source], source):
            if rule.id in seen:
                raise ConfigError(f"{source}: rule {rule.id!r} is also declared in {seen[rule.id]}: "
                                  "a rule id may be declared once")
            seen[rule.id] = source
            out.append(rule)
    return tuple(out)


@record
class _Params:
    """Custom rules take their settings from ``[[rules]]``, not from a parameter table."""


class CustomRules(Tracker):
    """Runs the ``[[rules]]`` of a config over the step stream (see the module doc)."""

    name: ClassVar[str] = "custom"
    area: ClassVar[str] = "custom"
    scored: ClassVar[bool] = False
    Params: ClassVar[type] = _Params

    def __init__(self, rules: tuple[CustomRule, ...], meta: RunMeta | None = None) -> None:
        super().__init__(_Params(), meta)
        self.custom = rules
        self.requires = tuple(dict.fromkeys(c.metric for r in rules for c in r.conditions))  # type: ignore[misc]
        self._last = {m: np.nan for m in self.requires}  # the last value of each column (carried)
        self._hist = {(r.id, i): History(c.history) for r in rules for i, c in enumerate(r.conditions)}
        self._eps = {r.id: Episodes(k=r.persist, m=r.persist, mode="absmax") for r in rules}
        self._seen: set[str] = set()

    def rule(self, rule_id: str) -> RuleSpec:  # type: ignore[override]
        return next(r.spec for r in self.custom if r.id == rule_id)

    def _column(self, batch: Batch, metric: str) -> np.ndarray:
        """The column with its last value carried over the rows it was not logged on."""
        col = batch.columns.get(metric)
        if col is None:
            return np.full(len(batch), self._last[metric])
        self._seen.add(metric)
        v = np.concatenate([[self._last[metric]], col.astype(np.float64)])
        idx = np.where(np.isfinite(v), np.arange(len(v)), 0)
        v = v[np.maximum.accumulate(idx)][1:]
        self._last[metric] = v[-1] if len(v) else self._last[metric]
        return v

    def update(self, batch: Batch) -> None:
        if not (self.active or self.logs_start(batch)):
            return None
        self.active = True
        self.rows += len(batch)
        cols = {m: self._column(batch, m) for m in self.requires}
        for r in self.custom:
            cond = np.ones(len(batch), dtype=bool)
            value = None
            for i, c in enumerate(r.conditions):
                full, _ = self._hist[(r.id, i)].extend(cols[c.metric])
                held, judged = c.evaluate(full, len(batch))
                cond &= held
                value = judged if value is None else value
            self._eps[r.id].update(batch.rows, batch.steps, cond, value,
                                   {"metric_value": cols[r.conditions[0].metric]})
        return None

    def conclude(self) -> TrackerResult:
        fired: dict[str, int] = {}
        for r in self.custom:
            for ep in self._eps[r.id].finish():
                what = " and ".join(c.describe() for c in r.conditions)
                text = r.message or f"Your rule {r.id}: {what}"
                first = r.conditions[0]
                value = ep.extras.get("metric_value", float("nan"))
                judged = {"spike": f"; robust z {ep.peak:.3g}", "drop": f"; {ep.peak:+.3g}%",
                          "rise": f"; {ep.peak:+.3g}%", "flat": f"; {ep.peak:+.3g}%"}.get(first.kind, "")
                self.emit(r.id, ep, f"{text} (steps {ep.first_step}-{ep.last_step}; {first.metric} "
                          f"{value:.4g} at step {ep.peak_step}{judged})",
                          {"rule": what, "metric": first.metric, "value": value, "peak": ep.peak,
                           "peak_step": ep.peak_step, "peak_is": {"spike": "robust z", "drop": "percent",
                                                                  "rise": "percent", "flat": "percent"}
                           .get(first.kind, "value")})
                fired[r.id] = fired.get(r.id, 0) + 1
        missing = [m for m in self.requires if m not in self._seen]
        notes = [f"custom rules: {', '.join(missing)} not in the log; rules reading it judge nothing"
                 ] if missing else []
        return self.result({"rules": [r.id for r in self.custom], "episodes": fired}, notes)

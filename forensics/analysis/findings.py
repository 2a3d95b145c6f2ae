"""Findings: what a tracker reports, one per episode (a contiguous range of steps)."""

from __future__ import annotations

import math
from dataclasses import field
from enum import Enum
from typing import Any

from ..records import record

__all__ = ["NON_FINITE", "Finding", "RuleRenamed", "RuleSpec", "Severity", "clean_evidence", "group_recurrences",
           "non_finite_reason", "recurrence_key", "recurrence_message", "recurrence_rank"]


class Severity(str, Enum):
    """How urgent a finding is. Ordered: ``info < warning < critical``."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        try:
            return cls(str(value.value if isinstance(value, Severity) else value).lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r}; use info, warning or critical") from None


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class RuleRenamed(FutureWarning):
    """An old rule id was read (in a gate policy or a saved analysis): it still works, as the
    rule's new id; the message names the new id. The command line prints it as a ``warning:``
    line."""


@record(frozen=True)
class RuleSpec:
    """A rule a tracker can fire: stable id, default severity, what it means and what to do.

    ``params`` names the tracker parameters that shape the rule, so ``forensics rules`` can list
    them beside it; ``stability`` marks rules that count against the stability score;
    ``formerly`` lists the ids the rule had before (still read, with a deprecation warning, in
    gate policies and saved analyses).
    """

    id: str
    severity: Severity
    title: str
    explanation: str
    remedy: str
    params: tuple[str, ...] = ()
    source: str = ""
    stability: bool = False
    formerly: tuple[str, ...] = ()


#: The key beside a null that stood for a non-finite number: ``{"peak": null, "non_finite":
#: {"peak": "inf"}}`` (list items by index: ``"values[2]"``). Every output spells a non-finite
#: number so: null in JSON (and in the CSV's evidence column), an empty cell in a CSV table; the
#: reason is how Python prints the number (``nan``, ``inf``, ``-inf``), as messages show it.
NON_FINITE = "non_finite"


def non_finite_reason(value: float) -> str:
    """``nan``, ``inf`` or ``-inf``, as Python prints the number (and a finding's message shows it)."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value  # a numpy scalar as a Python one


def _reasons(value: Any, path: str) -> dict[str, str]:
    """The non-finite numbers in ``value`` (a list's items, by index), by path; a dict inside
    names its own (see :func:`_clean`)."""
    value = _number(value)
    if isinstance(value, float) and not math.isfinite(value):
        return {path: non_finite_reason(value)}
    if isinstance(value, (list, tuple)):
        return {k: r for i, v in enumerate(value) for k, r in _reasons(v, f"{path}[{i}]").items()}
    return {}


#: Values :func:`_clean` keeps as they are (no numpy scalar among them: those become Python ones).
_KEPT = frozenset({int, str, bool, type(None)})


def _clean(value: Any) -> Any:
    """Make evidence JSON-safe and stable: floats rounded to 6 digits, a non-finite one as None
    with its reason beside it (:data:`NON_FINITE`)."""
    kind = type(value)
    if kind is float:  # the common cases first: a scan cleans the evidence of every episode
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if kind in _KEPT:
        return value
    if kind is dict:
        return _clean_dict(value)
    if kind is list:
        return [_clean(v) for v in value]
    value = _number(value)
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):  # a dict subclass
        return _clean_dict(value)
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _clean_dict(value: dict[Any, Any]) -> dict[str, Any]:
    """:func:`_clean` of a dict: its values cleaned, the reasons of its non-finite numbers (and
    its lists' items) under :data:`NON_FINITE`, in one pass over the items."""
    out: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for k, v in value.items():
        key, kind = str(k), type(v)
        if kind is float:
            if math.isfinite(v):
                out[key] = float(f"{v:.6g}")
            else:
                out[key], reasons[key] = None, non_finite_reason(v)
        elif kind in _KEPT:
            out[key] = v
        else:
            out[key] = _clean(v)
            reasons.update(_reasons(v, key))
    if reasons:
        out[NON_FINITE] = {**(out.get(NON_FINITE) or {}), **reasons}
    return out


#: Evidence as a :class:`Finding` keeps it (floats to 6 digits, non-finite numbers as None with
#: their reasons); cleaning clean evidence changes nothing.
clean_evidence = _clean


@record(slots=True)
class Finding:
    """One detected problem over one episode.

    ``first_step``/``last_step`` bound the episode; ``onset_step`` is where its condition first
    held (it can precede ``first_step`` when a rule needs persistence to confirm). ``evidence``
    holds the observed values and the thresholds they crossed.
    """

    rule: str
    severity: Severity
    first_step: int
    last_step: int
    onset_step: int
    message: str
    remedy: str
    tracker: str
    evidence: dict[str, Any] = field(default_factory=dict)
    explanation: str = ""
    #: when the rule fired on several episodes: each one's range, onset, severity and message
    #: (``first_step``/``last_step`` then span them all and the message is the largest one's)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.evidence:  # (empty: nothing to clean; a scan makes one per episode, then fills it)
            self.evidence = _clean(self.evidence)
        if self.episodes:
            self.episodes = _clean(self.episodes)

    def sort_key(self) -> tuple[int, int, str, int]:
        return (-self.severity.rank, self.onset_step, self.rule, self.first_step)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "tracker": self.tracker,
            "first_step": int(self.first_step),
            "last_step": int(self.last_step),
            "onset_step": int(self.onset_step),
            "message": self.message,
            "explanation": self.explanation,
            "remedy": self.remedy,
            "evidence": self.evidence,
            **({"episodes": self.episodes} if self.episodes else {}),
        }

    def episode_ranges(self) -> list[tuple[int, int, int]]:
        """``(first, last, onset)`` of every episode (one for a single-episode finding)."""
        if not self.episodes:
            return [(self.first_step, self.last_step, self.onset_step)]
        return [(int(e["first_step"]), int(e["last_step"]), int(e["onset_step"])) for e in self.episodes]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            rule=d["rule"],
            severity=Severity.parse(d["severity"]),
            first_step=int(d["first_step"]),
            last_step=int(d["last_step"]),
            onset_step=int(d["onset_step"]),
            message=d["message"],
            remedy=d.get("remedy", ""),
            tracker=d.get("tracker", ""),
            evidence=d.get("evidence", {}),
            explanation=d.get("explanation", ""),
            episodes=list(d.get("episodes") or []),
        )


def recurrence_key(f: Finding) -> tuple[str, Any]:
    """The group a finding's episodes are merged into by :func:`group_recurrences`: its rule and
    the series it judged."""
    return f.rule, _clean(f.evidence.get("series"))


def recurrence_rank(f: Finding, magnitudes: dict[int, float]) -> tuple[int, float]:
    """Which of a group's findings speaks for it (:func:`group_recurrences`): the more severe,
    then the larger ``magnitude`` (keyed by ``id``; 0 when none)."""
    return f.severity.rank, magnitudes.get(id(f), 0.0)


def recurrence_message(episodes: int, largest: str) -> str:
    """The message of a finding of several ``episodes`` (:func:`group_recurrences`): their count,
    then the message of the largest, which a reader takes back with ``removeprefix`` of this
    function's text for an empty ``largest``.

    >>> recurrence_message(3, "KL 0.9 at step 40")
    '3 episodes; the largest: KL 0.9 at step 40'
    """
    return f"{episodes} episodes; the largest: {largest}"


def group_recurrences(findings: list[Finding], sizes: dict[int, int],
                      magnitudes: dict[int, float]) -> tuple[list[Finding], dict[int, int]]:
    """One finding per rule (and series): repeated episodes become one finding that lists them.

    Episodes whose ranges overlap (a rule fed by two conditions: a share and a level, the step
    and the sample stream) are first made one, which spans both and speaks for the more severe
    (then larger) one, so no finding lists nested episodes. The merged finding spans every
    episode, takes the highest severity, and its message and evidence are those of the largest
    episode (highest severity, then largest ``magnitude``); ``episodes`` keeps each episode's
    range, onset, severity and message. ``sizes`` (rows per finding, keyed by ``id``) are summed
    for the merged finding.
    """
    groups: dict[tuple[str, Any], list[Finding]] = {}
    for f in findings:  # (evidence may be a tracker's, not yet cleaned: see Tracker.emit)
        groups.setdefault(recurrence_key(f), []).append(f)
    sizes = dict(sizes)
    out: list[Finding] = []
    out_sizes: dict[int, int] = {}
    for group in groups.values():
        group = _merge_overlaps(group, sizes, magnitudes)
        if len(group) == 1:
            out.append(group[0])
            out_sizes[id(group[0])] = sizes.get(id(group[0]), 1)
            continue
        group.sort(key=lambda f: (f.onset_step, f.first_step))
        head = max(group, key=lambda f: recurrence_rank(f, magnitudes))
        merged = Finding(
            rule=head.rule, severity=head.severity, first_step=min(f.first_step for f in group),
            last_step=max(f.last_step for f in group), onset_step=group[0].onset_step,
            message=recurrence_message(len(group), head.message), remedy=head.remedy,
            tracker=head.tracker, evidence=dict(head.evidence), explanation=head.explanation)
        # made clean (Python ints and strings), so not cleaned again: a noisy run lists tens of
        # thousands of episodes
        merged.episodes = [{"first_step": int(f.first_step), "last_step": int(f.last_step),
                            "onset_step": int(f.onset_step), "severity": str(f.severity.value),
                            "message": str(f.message)} for f in group]
        out.append(merged)
        out_sizes[id(merged)] = sum(sizes.get(id(f), 1) for f in group)
    return out, out_sizes


def _merge_overlaps(group: list[Finding], sizes: dict[int, int],
                    magnitudes: dict[int, float]) -> list[Finding]:
    """The findings of one rule and series with overlapping ranges made one (see
    :func:`group_recurrences`); ``sizes`` of a merged finding: the larger of the two."""
    out: list[Finding] = []
    for f in sorted(group, key=lambda f: f.first_step):
        prev = out[-1] if out else None
        if prev is None or f.first_step > prev.last_step:
            out.append(f)
            continue
        ahead = recurrence_rank(f, magnitudes) > recurrence_rank(prev, magnitudes)
        head, other = (f, prev) if ahead else (prev, f)
        head.first_step, head.last_step = min(f.first_step, prev.first_step), max(f.last_step, prev.last_step)
        head.onset_step = min(f.onset_step, prev.onset_step)
        sizes[id(head)] = max(sizes.get(id(head), 1), sizes.get(id(other), 1))
        out[-1] = head
    return out

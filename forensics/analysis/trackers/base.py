"""The tracker protocol: declared columns, ``update`` on batches, a pure ``finish``."""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar

import numpy as np

from ...config import RunMeta
from ...io.canonical import Batch
from ...records import record
from ..findings import Finding, RuleSpec, Severity, clean_evidence, group_recurrences, recurrence_key, recurrence_rank
from ..stats.episodes import Episode

__all__ = ["Tracker", "TrackerResult", "severity_weight", "tracker_score"]

#: Weight of one finding in a tracker's score, by severity (see :func:`tracker_score`).
SEVERITY_WEIGHT = {Severity.INFO: 0.0, Severity.WARNING: 0.2, Severity.CRITICAL: 0.5}


def severity_weight(sev: Severity) -> float:
    return SEVERITY_WEIGHT[sev]


def tracker_score(findings: list[Finding], rows: int, row_counts: dict[int, int]) -> float:
    """Health in [0, 1]: ``prod(1 - w_sev * (0.5 + 0.5 * coverage))`` over the findings.

    ``w_sev`` is 0 for info, 0.2 for warning and 0.5 for critical; ``coverage`` is the share of
    the tracker's rows inside the finding's episode. A short warning costs 10 %, a warning over
    the whole run 20 %; a critical costs 25 % to 50 %. ``row_counts`` maps ``id(finding)`` to the
    number of rows its episode covers.
    """
    score = 1.0
    for f in findings:
        coverage = min(1.0, row_counts.get(id(f), 1) / max(rows, 1))
        score *= 1.0 - severity_weight(f.severity) * (0.5 + 0.5 * coverage)
    return round(score, 4)


@record
class TrackerResult:
    """What a tracker returns at the end of a stream."""

    name: str
    area: str
    active: bool
    findings: list[Finding] = field(default_factory=list)
    score: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    coverage: dict[int, int] = field(default_factory=dict)
    #: top-level sections this tracker adds to the analysis JSON (e.g. ``"windows"``)
    sections: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "area": self.area,
            "active": self.active,
            "score": self.score,
            "summary": self.summary,
            "notes": list(self.notes),
            "findings": len(self.findings),
        }


def _keep_series(f: Finding) -> None:
    """Drop a finding's evidence but its series (see :meth:`Tracker._keep_evidence_of_heads`)."""
    f.evidence = {"series": f.evidence["series"]} if "series" in f.evidence else {}


class Tracker:
    """Base class. Subclasses set the class attributes and implement ``update`` and ``conclude``
    (and ``close`` when they hold rows back until a later one arrives).

    ``requires`` lists every canonical column the tracker reads: the one statement of it (the
    schema's "read by", the coverage report, ``-v`` and ``forensics rules --metrics`` derive from
    it); ``starts_on`` the ones of which at least one must be logged for it to run (empty: any of
    ``requires``); ``streams`` says which streams it reads (``"step"``, ``"sample"``); a batch's
    ``stream`` attribute tells which one it comes from. ``update`` may return derived per-row series
    for the batch (written to the per-step CSV); it only mutates the tracker's state.

    Each ``update`` decides for itself whether a batch is its business (which stream, which
    columns, a run it declines with ``skip_reason``) and then sets ``active`` and counts the
    ``rows`` it judges: the trackers differ in that (a sample stream counts steps, not rows), so
    the base imposes no ``begin`` step; ``logs_start`` is the common test.

    The contract: ``update`` and ``close`` change the streaming state; ``finish`` only reads it.
    The base class owns the findings (``emit``) and starts them afresh on every ``finish``, so
    ``finish`` may be called at any point of the stream (``Scan.peek``), and twice gives the same
    result.
    """

    name: ClassVar[str]
    area: ClassVar[str]
    streams: ClassVar[tuple[str, ...]] = ("step",)
    requires: ClassVar[tuple[str, ...]] = ()
    starts_on: ClassVar[tuple[str, ...]] = ()
    rules: ClassVar[tuple[RuleSpec, ...]] = ()
    #: whether the tracker scores its area (False: its findings count in other areas)
    scored: ClassVar[bool] = True
    Params: ClassVar[type]

    def __init__(self, params: Any = None, meta: RunMeta | None = None) -> None:
        self.params = params if params is not None else self.Params()
        self.meta = meta if meta is not None else RunMeta()
        self.rows = 0
        self.active = False
        #: why the tracker declined a log whose metrics it reads (set where it declines one)
        self.skip_reason: str | None = None
        self._findings: list[Finding] = []
        self._coverage: dict[int, int] = {}
        self._magnitude: dict[int, float] = {}
        self._heads: dict[tuple[str, Any], tuple[tuple[int, float], list[Finding]]] = {}
        self.source_keys: dict[str, str] = {}

    # -- protocol ---------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        raise NotImplementedError

    def close(self) -> None:
        """The stream has ended: judge what waited for a later row (the responses of the last
        step, the open segment). Changes the streaming state as ``update`` does; a second call
        finds nothing left to judge."""

    def finish(self) -> TrackerResult:
        """The result of the rows seen so far: fresh findings, the streaming state only read."""
        self._findings, self._coverage, self._magnitude, self._heads = [], {}, {}, {}
        return self.conclude()

    def conclude(self) -> TrackerResult:
        """Findings, score and summary from the streaming state (``emit``, then ``result``); it
        must not change the state."""
        raise NotImplementedError

    # -- helpers for subclasses --------------------------------------------------------
    def starts(self) -> tuple[str, ...]:
        """The columns of which one must be logged for the tracker to run."""
        return self.starts_on or self.requires

    def logs_start(self, batch: Batch) -> bool:
        """Whether ``batch`` logs one of the columns the tracker starts on (reads nothing else)."""
        return any(batch.has(c) for c in self.starts())

    @classmethod
    def rule(cls, rule_id: str) -> RuleSpec:
        for r in cls.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def emit(
        self,
        rule_id: str,
        ep: Episode,
        message: str,
        evidence: dict[str, Any],
        severity: Severity | None = None,
    ) -> Finding:
        """Record a finding for an episode, with the rule's remedy and explanation.

        The evidence is kept as given until :meth:`result`, which cleans it (see
        :func:`~forensics.analysis.findings.clean_evidence`) only for the findings it returns: a
        noisy run's thousands of episodes of one rule become one finding, whose evidence is its
        largest episode's."""
        spec = self.rule(rule_id)
        ev = dict(evidence)
        severity = severity or spec.severity
        if severity is Severity.CRITICAL and self.name != "custom":
            # a tracker judges one signal: only the consequence pass, which sees them all, makes a
            # finding critical (analysis.diagnosis.consequence); the tracker's own alarm is a hint
            ev["tracker_severity"] = Severity.CRITICAL.value
            severity = Severity.WARNING
        sources = {k: v for k, v in self.source_keys.items() if k in ev.get("metrics", ())}
        if sources:
            ev["source_keys"] = sources
        ev.pop("metrics", None)
        f = Finding(
            rule=rule_id,
            severity=severity,
            first_step=ep.first_step,
            last_step=ep.last_step,
            onset_step=ep.onset_step,
            message=message,
            remedy=spec.remedy,
            tracker=self.name,
            explanation=spec.explanation,
        )
        f.evidence = ev
        self._findings.append(f)
        self._coverage[id(f)] = max(ep.n_rows, 1)
        if ep.peak == ep.peak:
            self._magnitude[id(f)] = abs(ep.peak)
        self._keep_evidence_of_heads(f)
        return f

    def _keep_evidence_of_heads(self, f: Finding) -> None:
        """Keep the evidence only of the findings that may still head their rule's group.

        :func:`~forensics.analysis.findings.group_recurrences` makes a rule's episodes (per
        series) one finding with the evidence of the one of highest rank (severity, then
        magnitude); an overlap merge keeps the higher-ranked of two. So the head is always one of
        the group's highest-ranked findings, and the others' evidence is never read: it is dropped
        as soon as a higher rank shows up (a noisy run's tens of thousands of episodes held a
        dict of evidence each until the grouping). The series, which the grouping reads, stays.
        """
        key, rank = recurrence_key(f), recurrence_rank(f, self._magnitude)
        best = self._heads.get(key)
        if best is None or rank > best[0]:
            for g in best[1] if best is not None else []:
                _keep_series(g)
            self._heads[key] = (rank, [f])
        elif rank == best[0]:
            best[1].append(f)
        else:
            _keep_series(f)

    def result(self, summary: dict[str, Any], notes: list[str] | None = None,
               series: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
               sections: dict[str, Any] | None = None) -> TrackerResult:
        """Package the findings (recurrences of a rule grouped, overlaps merged) with the
        documented score."""
        emitted = {id(f) for f in self._findings}  # their evidence not yet cleaned (see emit)
        findings, coverage = group_recurrences(self._findings, self._coverage, self._magnitude)
        for f in findings:
            if id(f) in emitted:
                f.evidence = clean_evidence(f.evidence)
        findings.sort(key=Finding.sort_key)
        score = tracker_score(findings, self.rows, coverage) if self.active and self.scored else None
        return TrackerResult(self.name, self.area, self.active, findings, score, summary,
                             series or {}, notes or [], coverage, sections or {})

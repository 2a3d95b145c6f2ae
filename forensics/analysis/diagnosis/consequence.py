"""Severity from consequence: one principle applied to every tracker's findings after the scan.

A finding is **critical** when the run is damaged or certainly will be, and **info** when a single
excursion came and went with nothing else moving. Trackers judge each signal alone; only the whole
set of findings says whether an excursion had consequences, so this pass runs once, in
``Scan.finish``, over all of them:

* **An isolated excursion is information.** A spike-type finding (``EXCURSIONS``: one bad batch
  in the gradient norm, the loss or the KL) whose single episode spans at most ``blip_rows`` rows
  (one or two updates: an excursion held for several updates moved the policy) and ended well
  before the log does
  (the signal came back: ``recover_rows`` rows of calm after it), never repeated, with no
  sustained finding of another tracker starting near it (``near_rows``), is information, and its
  message says it recovered. Optimizers absorb one bad batch; a repeated or lasting one, or one
  followed by other damage, keeps the tracker's severity.
* **A symptom that never recovered is damage.** A sustained finding of a ``DAMAGE`` rule (entropy
  or length collapsed, the reward pinned at its floor, responses cut at the cap, the KL far past
  its prior, the groups dead) whose last episode is still open when the log ends, after lasting
  ``damage_share`` of the run or more, is critical: the run is damaged, and a gate fails it.

Severity changes are recorded in the evidence (``severity_from``, ``consequence``), so a reader can
see the tracker's own verdict and why it moved; the tracker scores are recomputed after it.
"""

from __future__ import annotations

from ...records import record
from ..findings import Finding, Severity

__all__ = ["DAMAGE", "EXCURSIONS", "Consequences", "apply_consequences"]

#: Rules that report one excursion of a signal (a spike): information when isolated and recovered.
EXCURSIONS = frozenset({"grad.spike", "grad.explode", "loss.spike", "kl.spike"})
#: Rules whose sustained, unrecovered condition is damage to the run: critical.
DAMAGE = frozenset({"entropy.collapse", "length.collapse", "signal.reward_floor", "length.truncation",
                    "kl.excessive", "signal.dead_groups", "grad.vanish", "pref.not_learning"})


@record(frozen=True)
class Consequences:
    """The run's extent, in steps and rows, against which episodes are placed."""

    first_step: int
    last_step: int
    rows: int
    recover_rows: int = 5
    blip_rows: int = 2
    near_rows: int = 10
    damage_share: float = 0.2
    damage_min_rows: int = 10

    @property
    def spacing(self) -> float:
        """Steps per logged row (a log every 20 steps has 20)."""
        if self.rows <= 1:
            return 1.0
        return max((self.last_step - self.first_step) / (self.rows - 1), 1.0)

    def rows_between(self, a: int, b: int) -> float:
        return (b - a) / self.spacing


def _sustained_nearby(f: Finding, others: list[Finding], c: Consequences) -> list[str]:
    """Rules of other trackers' sustained warning-or-worse findings that start near ``f``."""
    lo = f.first_step - c.near_rows * c.spacing
    hi = f.last_step + c.near_rows * c.spacing
    out = []
    for g in others:
        if g is f or g.tracker == f.tracker or g.rule in EXCURSIONS or g.severity is Severity.INFO:
            continue
        if any(lo <= onset <= hi or first <= f.first_step <= last
               for first, last, onset in g.episode_ranges()):
            out.append(g.rule)
    return sorted(set(out))


def _downgrade(f: Finding, c: Consequences, findings: list[Finding]) -> None:
    if f.rule not in EXCURSIONS or f.episodes or f.severity is Severity.INFO:
        return
    if c.rows_between(f.first_step, f.last_step) + 1 > c.blip_rows:
        return  # several updates in a row: the policy moved, not one bad batch
    if c.rows_between(f.last_step, c.last_step) < c.recover_rows:
        return  # still under way, or too close to the end to know
    if _sustained_nearby(f, findings, c):
        return
    f.evidence["severity_from"] = f.severity.value
    f.evidence["consequence"] = "isolated: recovered, nothing else moved"
    f.severity = Severity.INFO
    f.message += (f"; it recovered by step {f.last_step} and nothing else moved "
                  "(an isolated excursion)")


def _escalate(f: Finding, c: Consequences) -> None:
    if f.rule not in DAMAGE or f.severity is not Severity.WARNING:
        return
    first, last, _ = f.episode_ranges()[-1]
    rows = c.rows_between(first, last) + 1
    if c.rows_between(last, c.last_step) >= c.recover_rows:
        return  # it ended: recovered
    if rows < max(c.damage_min_rows, c.damage_share * c.rows):
        return
    f.evidence["severity_from"] = f.severity.value
    f.evidence["consequence"] = "sustained to the end of the log: the run is damaged"
    f.severity = Severity.CRITICAL
    if f.episodes:
        f.episodes[-1]["severity"] = Severity.CRITICAL.value
    f.message += f"; still so when the log ends (step {c.last_step}): the run is damaged"


def apply_consequences(findings: list[Finding], c: Consequences) -> list[Finding]:
    """Move severities by consequence (see the module doc); return the findings changed."""
    before = {id(f): f.severity for f in findings}
    for f in findings:
        _downgrade(f, c, findings)
    for f in findings:
        _escalate(f, c)
    return [f for f in findings if f.severity is not before[id(f)]]

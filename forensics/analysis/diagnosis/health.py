"""Health scores: per area, overall, stability and convergence. All in [0, 1], 1 is healthy.

* **Area score**: each tracker's score (:func:`forensics.analysis.trackers.base.tracker_score`):
  ``prod(1 - w_sev * (0.5 + 0.5 * coverage))`` over its findings, with ``w`` = 0 (info),
  0.2 (warning), 0.5 (critical) and ``coverage`` the share of rows inside the episode.
* **Overall**: ``0.5 * min(areas) + 0.5 * mean(areas)`` over the active areas, further multiplied
  by the stream findings' factors (replayed steps, skipped rows). The worst area weighs as much as
  all the others together, so one broken area cannot hide behind healthy ones. The severity bands
  order runs: a run with a critical finding scores below 0.5, one without at 0.5 or above, so a
  fleet never ranks a broken run among the healthy ones. Below the cap, broken runs rank by how
  much of the run is damaged and how widely: ``x (1 - 0.8 * damaged share) x 0.9 ** (critical
  findings - 1)``, the damaged share being the part of the run from the first critical finding's
  onset to the end (a run broken from its first step ranks below one broken in its last tenth).
* **Checked**: the areas whose trackers ran (``areas``) and those that could not judge this log
  (``unchecked``, listed, never scored 1.0), and ``checked_share``, the share of areas judged: a
  clean score over one area of eight is not a healthy run.
* **Stability**: the same product over findings of rules marked ``stability`` (spikes,
  explosions, non-finite values, oscillation), across all trackers.
* **Convergence**: from the reward curve when one was logged: ``0.5 * (1 + rho)`` where ``rho`` is
  the Spearman correlation of reward with step, times the factors of reward and loss findings
  (stagnation, decline, divergence). ``None`` when the run logged no reward.
"""

from __future__ import annotations

from typing import Any

from ..findings import Finding, Severity
from ..trackers.base import TrackerResult, severity_weight

__all__ = ["health_scores"]

#: the reward pinned at its floor (the signal tracker's) counts with the reward's own findings
_CONVERGENCE_PREFIXES = ("reward.", "loss.", "signal.reward_floor")
#: The highest overall score of a run with a critical finding (below every run without one).
CRITICAL_CAP = 0.49


def _factor(findings: list[Finding], coverage: dict[int, int], rows: int) -> float:
    score = 1.0
    for f in findings:
        cov = min(1.0, coverage.get(id(f), 1) / max(rows, 1))
        score *= 1.0 - severity_weight(f.severity) * (0.5 + 0.5 * cov)
    return score


def _broken(overall: float, critical: list[Finding], first_step: int | None, last_step: int | None) -> float:
    """A broken run's score under the cap, lower the more of the run is damaged and the more
    damage findings it has (see the module doc)."""
    span = (last_step or 0) - (first_step or 0)
    onset = min(f.onset_step for f in critical)
    damaged = min(max(((last_step or 0) - onset) / span, 0.0), 1.0) if span > 0 else 1.0
    return min(overall, CRITICAL_CAP) * (1.0 - 0.8 * damaged) * 0.9 ** (len(critical) - 1)


def health_scores(results: list[TrackerResult], stream_findings: list[Finding],
                  rows: int, first_step: int | None = None, last_step: int | None = None) -> dict[str, Any]:
    """Compute the documented scores from the tracker results (``first_step``/``last_step``: the
    run's extent, for the damaged share of a broken run)."""
    areas: dict[str, float] = {}
    for r in results:
        if r.active and r.score is not None:
            areas[r.area] = min(areas.get(r.area, 1.0), r.score)
    coverage: dict[int, int] = {}
    for r in results:
        coverage.update(r.coverage)
    stream_factor = _factor(stream_findings, {}, rows)
    all_findings = [f for r in results for f in r.findings]
    overall = None
    if areas:
        values = list(areas.values())
        overall = (0.5 * min(values) + 0.5 * sum(values) / len(values)) * stream_factor
        critical = [f for f in [*all_findings, *stream_findings] if f.severity is Severity.CRITICAL]
        overall = round(_broken(overall, critical, first_step, last_step) if critical else max(overall, 0.5), 4)
    every = sorted({r.area for r in results if _scored(r.name)})
    unchecked = [a for a in every if a not in areas]
    stable = [f for f in all_findings if _is_stability(f, results)]
    stability = round(_factor(stable, coverage, rows), 4) if areas else None
    convergence = None
    rho = None
    for r in results:
        if "reward_step_spearman" in r.summary:
            rho = r.summary["reward_step_spearman"]
    if rho is not None and rho == rho:  # not NaN
        conv_findings = [f for f in all_findings if f.rule.startswith(_CONVERGENCE_PREFIXES)]
        convergence = round(0.5 * (1.0 + float(rho)) * _factor(conv_findings, coverage, rows), 4)
    return {
        "overall": overall,
        "checked_share": round(len(areas) / len(every), 4) if every else None,
        "unchecked": unchecked,
        "stability": stability,
        "convergence": convergence,
        "areas": dict(sorted(areas.items())),
    }


def _scored(tracker: str) -> bool:
    from ..trackers import TRACKERS

    cls = TRACKERS.get(tracker)
    return cls is not None and cls.scored


def _is_stability(f: Finding, results: list[TrackerResult]) -> bool:
    from ..trackers import TRACKERS

    cls = TRACKERS.get(f.tracker)
    if cls is None:
        return False
    return any(r.id == f.rule and r.stability for r in cls.rules)

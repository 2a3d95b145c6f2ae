"""The rules about the stream itself, not a tracker's: steps logged again and rows not read.

The scan (:mod:`forensics.analysis.engine`) keeps the first record of each step and counts the
rows its readers skipped; :func:`stream_findings` turns those counts into findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..io.readers import ReadReport
from .findings import Finding, RuleSpec, Severity

__all__ = ["STREAM_RULES", "stream_findings"]

STEP_REPLAY = RuleSpec(
    "stream.step_replay", Severity.WARNING, "Steps logged again (resumed run)",
    "The step counter went back: the run was resumed from a checkpoint and re-logged steps "
    "it had logged before. The first record of each step is analysed; the replayed rows are "
    "counted and left out.",
    "Check why the run restarted (crash, pre-emption, NaN) around the step it went back "
    "from; resume from the latest checkpoint, or log to a fresh file per attempt.",
)
ROWS_SKIPPED = RuleSpec(
    "stream.rows_skipped", Severity.WARNING, "Rows could not be read",
    "Some rows of the input were malformed or truncated and were skipped; the analysis "
    "covers the rest.",
    "Look at the listed lines; a truncated last line means the writer was killed mid-write.",
)
#: The skip reasons of the step order (a replayed step, a run set aside by a restarted counter):
#: each is a stream.step_replay finding of its own, not rows lost.
REPLAYED = ("step replayed", "an earlier run in the same log")
#: Rules the scan raises about the stream itself (tracker "stream" in the catalogue).
STREAM_RULES = (STEP_REPLAY, ROWS_SKIPPED)


def _replay_finding(r: Any) -> Finding:
    """``r``: a replay of the scan's step order (``from_step``, ``to_step``, ``last_step``,
    ``line``, ``rows``)."""
    spec = STEP_REPLAY
    restart = bool(getattr(r, "restart", False))
    return Finding(
        rule=spec.id, severity=spec.severity, first_step=r.to_step,
        last_step=r.to_step if restart else max(r.from_step, r.last_step),
        onset_step=r.to_step if restart else r.from_step,
        message=(f"the step counter restarted at line {r.line} (from {r.from_step} back to {r.to_step}, the "
                 f"run's first step): a new run appended to the log; the {r.rows} rows of the run before "
                 "it set aside, the last run analysed" if restart else
                 f"step went back from {r.from_step} to {r.to_step} at line {r.line}: "
                 f"{r.rows} replayed rows set aside (first record of each step kept)"),
        remedy=spec.remedy, tracker="stream",
        evidence={"went_back_from": r.from_step, "went_back_to": r.to_step, "line": r.line,
                  **({"restart": True, "rows_set_aside": r.rows} if restart else {"replayed_rows": r.rows})},
        explanation=spec.explanation)


def _skipped_finding(rep: ReadReport, n: int, first_step: int, last_step: int) -> Finding:
    spec = ROWS_SKIPPED
    first = rep.issues[0] if rep.issues else None
    return Finding(
        rule=spec.id, severity=spec.severity,
        first_step=first_step, last_step=last_step, onset_step=first_step,
        message=f"{n} of {rep.rows_read} rows of {Path(rep.path).name} skipped"
                + (f" (first: line {first.line}: {first.reason})" if first else ""),
        remedy=spec.remedy, tracker="stream",
        evidence={"path": rep.path, "rows_skipped": n, "rows_read": rep.rows_read,
                  "by_reason": {k: v for k, v in rep.skipped.items()
                                if k not in REPLAYED}},
        explanation=spec.explanation)


def stream_findings(replays: Iterable[Any], reports: Sequence[ReadReport], first_step: int,
                    last_step: int) -> list[Finding]:
    """A ``stream.step_replay`` finding per replay, a ``stream.rows_skipped`` one per input that
    lost rows for another reason than a replay (the run's first and last step as its range)."""
    out = [_replay_finding(r) for r in replays]
    for rep in sorted(reports, key=lambda rep: rep.path):
        n = rep.rows_skipped - sum(rep.skipped.get(why, 0) for why in REPLAYED)
        if n > 0:
            out.append(_skipped_finding(rep, n, first_step, last_step))
    return out

"""Findings: what a tracker reports, one per episode (a contiguous range of steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["Finding", "RuleSpec", "Severity"]


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


@dataclass(frozen=True)
class RuleSpec:
    """A rule a tracker can fire: stable id, default severity, what it means and what to do.

    ``params`` names the tracker parameters that shape the rule, so ``forensics rules`` can list
    them beside it; ``stability`` marks rules that count against the stability score.
    """

    id: str
    severity: Severity
    title: str
    explanation: str
    remedy: str
    params: tuple[str, ...] = ()
    source: str = ""
    stability: bool = False


def _clean(value: Any) -> Any:
    """Make evidence JSON-safe and stable: round floats, map non-finite floats to strings."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        return _clean(value.item())
    return value


@dataclass
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

    def __post_init__(self) -> None:
        self.evidence = _clean(self.evidence)

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
        }

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
        )


#: Rules the engine raises about the stream itself (not a tracker's).
STREAM_RULES = (
    RuleSpec(
        "stream.step_replay", Severity.WARNING, "Steps logged again (resumed run)",
        "The step counter went back: the run was resumed from a checkpoint and re-logged steps "
        "it had logged before. The first record of each step is analysed; the replayed rows are "
        "counted and left out.",
        "Check why the run restarted (crash, pre-emption, NaN) around the step it went back "
        "from; resume from the latest checkpoint, or log to a fresh file per attempt.",
    ),
    RuleSpec(
        "stream.rows_skipped", Severity.WARNING, "Rows could not be read",
        "Some rows of the input were malformed or truncated and were skipped; the analysis "
        "covers the rest.",
        "Look at the listed lines; a truncated last line means the writer was killed mid-write.",
    ),
)

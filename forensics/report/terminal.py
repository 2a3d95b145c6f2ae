"""The readable summary printed by ``forensics scan``."""

from __future__ import annotations

from ..engine import Analysis
from ..findings import Severity

__all__ = ["render_summary"]


def _score(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.2f}"


def render_summary(analysis: Analysis, top: int = 8) -> str:
    lines: list[str] = []
    for r in analysis.inputs:
        skipped = ""
        if r.rows_skipped:
            reasons = ", ".join(f"{n} {k}" for k, n in sorted(r.skipped.items()))
            skipped = f", {r.rows_skipped} skipped ({reasons})"
        lines.append(f"{r.path} [{r.format}]: {r.rows_read} rows read, {r.rows_kept} kept{skipped}")
        for issue in r.issues[:3]:
            lines.append(f"  {issue}")
        if len(r.issues) > 3:
            lines.append(f"  ... {r.rows_skipped - 3} more (see analysis.json)")
        for note in r.notes:
            lines.append(f"  note: {note}")
    st = analysis.steps
    lines.append(f"steps {st['first']}..{st['last']} ({st['rows']} rows analysed)")
    h = analysis.health
    lines.append("")
    lines.append(f"health  overall {_score(h['overall'])}   stability {_score(h['stability'])}"
                 f"   convergence {_score(h['convergence'])}")
    for area, v in h["areas"].items():
        lines.append(f"        {area:<12} {_score(v)}")
    counts = {s: sum(1 for f in analysis.findings if f.severity is s) for s in Severity}
    lines.append("")
    lines.append(f"findings: {counts[Severity.CRITICAL]} critical, {counts[Severity.WARNING]} "
                 f"warning, {counts[Severity.INFO]} info")
    for f in analysis.findings[:top]:
        lines.append(f"  [{f.severity.value:<8}] {f.rule:<26} steps {f.first_step}-{f.last_step}:"
                     f" {f.message}")
        if f.severity is not Severity.INFO:
            lines.append(f"  {'':<10} -> {f.remedy}")
    if len(analysis.findings) > top:
        lines.append(f"  ... {len(analysis.findings) - top} more in findings.csv")
    notes = [n for r in analysis.results for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in notes)
    return "\n".join(lines)

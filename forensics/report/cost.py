"""The cost of waste in words: the ``cost`` section of an analysis
(:func:`forensics.analysis.diagnosis.cost.cost_section`) as the terminal summary and the reports
print it."""

from __future__ import annotations

from typing import Any

__all__ = ["cost_lines"]


def _amount(entry: dict[str, Any], price: float | None) -> str:
    parts = []
    if entry.get("gpu_hours") is not None:
        parts.append(f"{entry['gpu_hours']:.3g} GPU-hours")
    if entry.get("wall_clock_hours") is not None:
        parts.append(f"{entry['wall_clock_hours']:.3g} h wall clock")
    if entry.get("money") is not None and price is not None:
        parts.append(f"{entry['money']:,.2f} at {price:g} per GPU-hour")
    return ", ".join(parts)


def cost_lines(cost: dict[str, Any] | None) -> list[str]:
    """The cost in a few lines (the terminal summary, the Markdown and the HTML report).

    >>> first, second = cost_lines({"basis": "wall clock", "total": {"wall_clock_hours": 2.0}})
    >>> first
    'compute: 2 h wall clock in all (wall clock)'
    >>> second.strip()
    'nothing wasted: no critical finding, no sign that learning stopped'
    """
    if not cost:
        return []
    lines = [f"compute: {_amount(cost['total'], cost.get('gpu_price'))} in all ({cost['basis']})"]
    for a in cost.get("after") or []:
        lines.append(f"  after {a['after']} ({a['rule']} @ step {a['step']}): "
                     f"{_amount(a, cost.get('gpu_price'))} ({a['share']:.0%} of the run)")
    if not cost.get("after"):
        lines.append("  nothing wasted: no critical finding, no sign that learning stopped")
    return lines

"""fleet.html: the fleet table as one self-contained page (no network), sortable by any column.

Every value from a log (run names, paths, rules, errors) is escaped by the template engine
(autoescape); links to each run's report.html are percent-encoded relative paths.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

__all__ = ["render_fleet_html"]


def _link(report: str | None) -> str | None:
    return quote(report) if report else None


def _health_class(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "na"
    return "bad" if v < 0.5 else "warn" if v < 0.8 else "ok"


#: The verdicts worst first (sorting the verdict column).
VERDICT_ORDER = ("unreadable", "critical", "warning", "unchecked", "healthy")


def _verdict_rank(v: Any) -> str:
    return str(VERDICT_ORDER.index(v)) if v in VERDICT_ORDER else ""


def render_fleet_html(data: dict[str, Any], areas: list[str]) -> str:
    """The page for a fleet dict (:func:`forensics.fleet.table.fleet_dict`)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("forensics.fleet", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["link"] = _link
    env.filters["hclass"] = _health_class
    env.filters["vrank"] = _verdict_rank
    return env.get_template("fleet.html.j2").render(d=data, areas=areas)

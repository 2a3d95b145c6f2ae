"""The fleet table: one row per run, worst first, as fleet.csv, fleet.json and fleet.html.

Worst first means: runs that could not be read, then runs the gate failed, then by overall health
(lowest first), then by critical and warning findings (most first), then by name. The JSON also
counts in how many runs each rule fired. Nothing here depends on the engine that scanned the runs
or on the order they finished in: the same runs give byte-identical files.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..io.output import Outputs
from .scan import SEVERITIES

__all__ = ["FLEET_CSV", "FLEET_HTML", "FLEET_JSON", "fleet_dict", "rule_counts", "sort_rows",
           "write_fleet"]

FLEET_CSV, FLEET_JSON, FLEET_HTML = "fleet.csv", "fleet.json", "fleet.html"
SCHEMA_VERSION = "1.1"  # 1.1: each run's verdict


def _health_key(v: Any) -> float:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else 2.0


def sort_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worst first (see the module doc)."""
    return sorted(rows, key=lambda r: (r.get("error") is None, r.get("gate") != "failed",
                                       _health_key(r.get("health")),
                                       -r["findings"]["critical"], -r["findings"]["warning"],
                                       r["run"]))


def rule_counts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rule that fired: in how many runs, and how many of them at each severity (most
    runs first)."""
    counts: dict[str, dict[str, Any]] = {}
    for r in rows:
        for rule, sev in (r.get("rules") or {}).items():
            c = counts.setdefault(rule, {"rule": rule, "runs": 0, **dict.fromkeys(SEVERITIES, 0)})
            c["runs"] += 1
            c[sev] += 1
    return sorted(counts.values(), key=lambda c: (-c["runs"], -c["critical"], -c["warning"], c["rule"]))


def fleet_dict(rows: Sequence[dict[str, Any]], policy: str | None = None) -> dict[str, Any]:
    """fleet.json: the rows worst first, the rule counts and totals."""
    ordered = sort_rows(rows)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "forensics", "version": __version__},
        "policy": policy,
        "totals": {"runs": len(ordered), "unreadable": sum(r["error"] is not None for r in ordered),
                   "gate_failed": sum(r.get("gate") in ("failed", "error") for r in ordered)
                   if policy else None,
                   "findings": {s: sum(r["findings"][s] for r in ordered) for s in SEVERITIES}},
        "rules": rule_counts(ordered),
        "runs": ordered,
    }


def _areas(rows: Sequence[dict[str, Any]]) -> list[str]:
    return sorted({a for r in rows for a in (r.get("areas") or {})})


def csv_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    return ["run", "path", "verdict", "format", "algorithm", "rows", "health", "stability", "convergence",
            *(f"health_{a}" for a in _areas(rows)), *SEVERITIES, "first_domino_rule",
            "first_domino_step", "gate", "gate_failing", "error", "report", "rules"]


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return v


def fleet_csv(rows: Sequence[dict[str, Any]]) -> str:
    """fleet.csv: one row per run, worst first; ``rules`` lists the rules that fired (``;``)."""
    cols = csv_columns(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in sort_rows(rows):
        flat = {**r, **{f"health_{a}": v for a, v in (r.get("areas") or {}).items()},
                **r["findings"], "rules": ";".join(r.get("rules") or {})}
        w.writerow([_cell(flat.get(c)) for c in cols])
    return buf.getvalue()


def _json(data: Any) -> str:
    def clean(o: Any) -> Any:
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(data), sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_fleet(rows: Sequence[dict[str, Any]], out: Path, policy: str | None = None,
                outputs: Outputs | None = None) -> dict[str, Path]:
    """Write fleet.csv, fleet.json and fleet.html into ``out``; return their paths. Each is
    written through ``outputs`` (never over an input, a link or a special file; renamed into
    place whole)."""
    from .html import render_fleet_html

    outputs = outputs or Outputs()
    data = fleet_dict(rows, policy)
    paths = {"csv": out / FLEET_CSV, "json": out / FLEET_JSON, "html": out / FLEET_HTML}
    outputs.write_text(paths["csv"], fleet_csv(rows))
    outputs.write_text(paths["json"], _json(data))
    outputs.write_text(paths["html"], render_fleet_html(data, _areas(rows)))
    return paths

"""One run of a fleet: scan it, write its reports, and return its row of the fleet table.

:func:`scan_run` is what every engine runs, in a worker process or on a Ray worker. It is a pure
function of its task (the scan is, see :func:`forensics.analysis.engine.scan_path`), its result
is a plain dict, and it never raises: a run that cannot be read is a row with its error.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from ..analysis.engine import scan_path
from ..config import Config
from ..errors import ForensicsError
from ..records import record
from ..report.files import ANALYSIS_FILE, HTML_FILE, write_reports
from ..report.verdict import verdict as run_verdict
from ..verdicts.gate import Policy, evaluate
from .discover import Run

__all__ = ["PLOTLY_JS", "REPORTS", "SEVERITIES", "RunTask", "error_row", "row_from_analysis", "scan_run"]

SEVERITIES = ("critical", "warning", "info")


#: What ``--reports`` writes for each run: ``none`` the scan's data files only (analysis.json,
#: summary.json, the tables; ``forensics report OUT/<run>`` renders the pages later), ``html`` also
#: report.html (the default: the fleet table links it), ``all`` also report.md.
REPORTS = {"none": (), "html": ("html",), "all": ("html", "md")}
#: How each run's report.html carries plotly.js (``--plotly-js``): ``shared`` refers to the one
#: copy the fleet writes into its output folder; ``file`` a copy in each run's folder; ``inline``
#: inside each page.
PLOTLY_JS = ("shared", "file", "inline")


@record
class RunTask:
    """What a worker needs to scan one run (picklable)."""

    run: Run
    out: str
    config: Config = field(default_factory=Config)
    policy: Policy | None = None
    metrics: str = "auto"
    reports: str = "html"
    plotly_js: str = "shared"
    fmt: str | None = None

    def script(self) -> tuple[str, str | None]:
        """``(script, plotly_src)`` for :func:`~forensics.report.files.write_reports`: the shared
        copy is ``OUT/plotly-basic.min.js``, as many folders up as the run's name is deep."""
        if self.plotly_js != "shared":
            return self.plotly_js, None
        from ..report.html import PLOTLY_FILE

        return "file", "../" * len(PurePosixPath(self.run.name).parts) + PLOTLY_FILE


def _base(run: Run) -> dict[str, Any]:
    return {"run": run.name, "path": run.path, "verdict": None, "format": None, "algorithm": None, "rows": None,
            "health": None, "stability": None, "convergence": None, "areas": {},
            "findings": dict.fromkeys(SEVERITIES, 0), "rules": {}, "first_domino_rule": None,
            "first_domino_step": None, "gate": None, "gate_failing": None, "error": None,
            "report": None}


def error_row(run: Run, error: str, policy: Policy | None = None) -> dict[str, Any]:
    """The row of a run that could not be scanned (its gate verdict, under a policy: error)."""
    return {**_base(run), "verdict": "unreadable", "error": error, "gate": "error" if policy is not None else None}


def row_from_analysis(run: Run, d: dict[str, Any], policy: Policy | None = None,
                      report: str | None = None) -> dict[str, Any]:
    """The fleet row of an analysis dict (``Analysis.to_dict()`` or a saved analysis.json)."""
    health = d.get("health") or {}
    rules: dict[str, str] = {}
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    for f in d.get("findings", []):
        if rank.get(f["severity"], -1) > rank.get(rules.get(f["rule"], ""), -1):
            rules[f["rule"]] = f["severity"]
    domino = (d.get("timeline") or {}).get("first_domino") or {}
    inputs = d.get("inputs") or [{}]
    row = {**_base(run),
           "verdict": run_verdict(d.get("findings") or [], d.get("timeline"), None, d.get("coverage"))["state"],
           "format": inputs[0].get("format") or None,
           "algorithm": (d.get("run") or {}).get("algorithm"),
           "rows": (d.get("steps") or {}).get("rows"),
           "health": health.get("overall"), "stability": health.get("stability"),
           "convergence": health.get("convergence"),
           "areas": dict(sorted((health.get("areas") or {}).items())),
           "findings": {s: int((d.get("findings_by_severity") or {}).get(s, 0)) for s in SEVERITIES},
           "rules": dict(sorted(rules.items())),
           "first_domino_rule": domino.get("rule"), "first_domino_step": domino.get("onset_step"),
           "report": report}
    if policy is not None:
        verdict = evaluate(d, policy)
        row["gate"] = "passed" if verdict.passed else "failed"
        row["gate_failing"] = len(verdict.failing) + sum(not c["passed"] for c in verdict.health_checks)
    return row


def scan_run(task: RunTask) -> dict[str, Any]:
    """Scan one run, write ``OUT/<run>/`` and return its fleet row (never raises)."""
    run = task.run
    if run.error:  # found on discovery (a FIFO, a log that cannot be read)
        return error_row(run, run.error, task.policy)
    try:
        analysis = scan_path(run.path, config=task.config, fmt=task.fmt, run=run.member)
        out = Path(task.out) / run.name
        script, src = task.script()
        paths = write_reports(analysis, out, metrics=task.metrics, rendered=REPORTS[task.reports],
                              script=script, plotly_src=src)
        d = orjson.loads(paths["analysis"].read_bytes())  # as written, NaN as null
        report = f"{run.name}/{HTML_FILE if 'html' in paths else ANALYSIS_FILE}"
        return row_from_analysis(run, d, task.policy, report)
    except ForensicsError as exc:
        return error_row(run, str(exc), task.policy)
    except MemoryError:
        return error_row(run, "out of memory while scanning", task.policy)
    except Exception as exc:  # one run's bug must not stop the fleet; its row says what it was
        return error_row(run, f"internal error: {type(exc).__name__}: {exc}", task.policy)

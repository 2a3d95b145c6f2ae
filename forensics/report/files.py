"""Machine-readable outputs. The JSON is deterministic: same input, byte-identical file."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.result import Analysis
from ..io.output import Outputs

__all__ = ["ANALYSIS_FILE", "summary_dict", "to_json", "write_reports"]

ANALYSIS_FILE = "analysis.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.csv"
FINDINGS_FILE = "findings.csv"
WINDOWS_FILE = "windows.csv"
RECOMMENDATIONS_JSON = "recommendations.json"
RECOMMENDATIONS_YAML = "recommendations.yaml"
HTML_FILE = "report.html"
MARKDOWN_FILE = "report.md"
#: Every file ``write_reports`` may write (all are checked before the first is written).
REPORT_FILES = (ANALYSIS_FILE, SUMMARY_FILE, METRICS_FILE, FINDINGS_FILE, WINDOWS_FILE, RECOMMENDATIONS_JSON,
                RECOMMENDATIONS_YAML, HTML_FILE, MARKDOWN_FILE)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    return obj


def to_json(data: dict[str, Any]) -> str:
    """Stable JSON: sorted keys, NaN and infinities as null, newline-terminated."""
    return json.dumps(_jsonable(data), sort_keys=True, indent=2, allow_nan=False) + "\n"


def summary_dict(analysis: Analysis | dict[str, Any], top: int = 10) -> dict[str, Any]:
    """The short health summary: scores, counts, the top findings (from an analysis or its
    analysis dict)."""
    d = analysis if isinstance(analysis, dict) else analysis.to_dict()
    return {
        "schema_version": d["schema_version"],
        "run": d["run"],
        "rows": d["steps"]["rows"],
        "steps": {"first": d["steps"]["first"], "last": d["steps"]["last"]},
        "rows_skipped": sum(r["rows_skipped"] for r in d["inputs"]),
        "health": d["health"],
        "findings_by_severity": d["findings_by_severity"],
        "top_findings": [
            {k: f[k] for k in ("rule", "severity", "first_step", "last_step", "onset_step",
                               "message", "remedy")}
            for f in d["findings"][:top]
        ],
    }


def write_metrics_csv(analysis: Analysis, path: Path, outputs: Outputs | None = None) -> None:
    """One row per step, part by part of the per-step store (memory bounded by a part); NaN is
    an empty cell (a missing value, not a number). polars writes it: about 4x pyarrow's CSV
    writer on float columns (a million steps of 30 columns: 1.5 s instead of 6 s)."""
    import polars as pl

    with (outputs or Outputs()).open(path, "wb") as fh:
        names: list[str] | None = None
        for part in analysis.metrics_parts():
            if names is None:
                names = ["step"] + sorted(k for k in part if k != "step")
            pl.DataFrame({k: part[k] for k in names}).fill_nan(None).write_csv(
                fh, include_header=fh.tell() == 0)


def write_findings_csv(analysis: Analysis, path: Path, outputs: Outputs | None = None) -> None:
    cols = ["rule", "severity", "tracker", "first_step", "last_step", "onset_step", "message",
            "remedy", "evidence"]
    with (outputs or Outputs()).open(path) as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for f in analysis.findings:
            d = f.to_dict()
            d["evidence"] = json.dumps(_jsonable(d["evidence"]), sort_keys=True)
            w.writerow([d[c] for c in cols])


def write_reports(analysis: Analysis, out_dir: Path, outputs: Outputs | None = None) -> dict[str, Path]:
    """Write the report files into ``out_dir``; return their paths by kind.

    ``outputs`` knows the inputs (see :mod:`forensics.report.output`): every file is checked
    against them before any is written (an output that would replace an input, a link or a
    special file is a :class:`~forensics.errors.UsageError`), then written to a temporary file
    renamed into place. The files the scan read are added to it here.
    """
    outputs = outputs or Outputs()
    outputs.add(*(r.path for r in analysis.inputs))
    outputs.folder(out_dir)
    for name in REPORT_FILES:
        outputs.check(out_dir / name)
    paths = {
        "analysis": out_dir / ANALYSIS_FILE,
        "summary": out_dir / SUMMARY_FILE,
        "metrics": out_dir / METRICS_FILE,
        "findings": out_dir / FINDINGS_FILE,
    }
    d = analysis.to_dict()
    text = to_json(d)
    outputs.write_text(paths["analysis"], text)
    outputs.write_text(paths["summary"], to_json(summary_dict(d)))
    write_metrics_csv(analysis, paths["metrics"], outputs)
    write_findings_csv(analysis, paths["findings"], outputs)
    paths.update(write_training_files(analysis, out_dir, outputs))
    paths.update(write_rendered(json.loads(text), out_dir, outputs=outputs))
    return paths


WINDOW_COLUMNS = ("window", "first_step", "last_step", "rows", "reward_mean", "loss_mean", "loss_metric",
                  "reward_var", "reward_trend", "loss_trend", "reward_direction", "loss_direction",
                  "status", "issues")


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, (list, tuple)):
        return ";".join(str(x) for x in v)
    return v


def write_training_files(analysis: Analysis, out_dir: Path, outputs: Outputs | None = None) -> dict[str, Path]:
    """windows.csv and recommendations.{json,yaml} when the windows tracker produced them."""
    from ..analysis.health_check import to_yaml

    outputs = outputs or Outputs()
    sections: dict[str, Any] = {}
    for r in analysis.results:
        sections.update(r.sections)
    out: dict[str, Path] = {}
    if sections.get("windows"):
        out["windows"] = out_dir / WINDOWS_FILE
        with outputs.open(out["windows"]) as fh:
            w = csv.writer(fh)
            w.writerow(WINDOW_COLUMNS)
            for row in sections["windows"]:
                w.writerow([_cell(row.get(c)) for c in WINDOW_COLUMNS])
    if sections.get("recommendations"):
        rec = _jsonable(sections["recommendations"])
        out["recommendations"] = outputs.write_text(out_dir / RECOMMENDATIONS_JSON, to_json(rec))
        out["recommendations_yaml"] = outputs.write_text(
            out_dir / RECOMMENDATIONS_YAML,
            "# forensics: recommended adjustments (see recommendations.json for the same data)\n"
            + to_yaml(rec))
    return out




def write_rendered(data: dict[str, Any], out_dir: Path, formats: tuple[str, ...] = ("html", "md"),
                   outputs: Outputs | None = None) -> dict[str, Path]:
    """Write report.html and/or report.md for an analysis dict (a scan or a saved analysis.json)."""
    from .html import render_html
    from .markdown import render_markdown

    outputs = outputs or Outputs()
    out: dict[str, Path] = {}
    if "html" in formats:
        out["html"] = outputs.write_text(out_dir / HTML_FILE, render_html(data))
    if "md" in formats:
        out["markdown"] = outputs.write_text(out_dir / MARKDOWN_FILE, render_markdown(data))
    return out

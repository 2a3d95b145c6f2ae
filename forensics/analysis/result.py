"""The result of a scan: :class:`Analysis`, and its JSON form (the analysis JSON).

An analysis holds what the trackers found, the per-step table and the diagnosis computed from
them once, in ``Scan.finish`` (the timeline, the recommendations, the downsampled plot series:
:mod:`forensics.analysis.diagnosis.diagnose`); ``to_dict`` only serialises, so a saved ``analysis.json``
renders every report on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..config import RunMeta
from ..io.readers import ReadReport
from ..records import record
from ..schema import ColumnMapping
from .findings import Finding, Severity
from .store import MetricsStore
from .trackers.base import TrackerResult

if TYPE_CHECKING:  # pandas is imported when a DataFrame is asked for, not by every scan
    import pandas as pd

__all__ = ["SCHEMA_VERSION", "Analysis"]

#: Version of the analysis JSON layout; bumped on any incompatible change.
SCHEMA_VERSION = "1.0"


@record(repr=False)
class Analysis:
    """The result of a scan. ``to_dict`` is the analysis JSON (deterministic); ``repr`` is a
    few lines of summary (the inputs, steps, health and the findings by severity)."""

    inputs: list[ReadReport]
    mappings: dict[str, ColumnMapping]
    meta: RunMeta
    results: list[TrackerResult]
    findings: list[Finding]
    health: dict[str, Any]
    steps: dict[str, Any]
    metrics: MetricsStore
    sample_series: dict[str, tuple[np.ndarray, np.ndarray]]
    params: dict[str, dict[str, Any]]
    #: every run-metadata field with a value, and where it came from (see analysis.context)
    context: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: how much of the log was checked (see Scan._coverage); ``checked`` False: nothing was
    coverage: dict[str, Any] = field(default_factory=dict)
    #: the derived sections (the trackers' sections, timeline, recommendations, plots, cost),
    #: computed once by ``Scan.finish`` (:func:`forensics.analysis.diagnosis.diagnose.diagnose`)
    diagnosis: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self._core_dict(), **self.diagnosis}

    def _core_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "forensics", "version": __version__},
            "run": self.meta.to_dict(),
            "run_context": self.context,
            "coverage": self.coverage,
            "inputs": [r.to_dict() for r in self.inputs],
            "column_mapping": {k: v.to_dict() for k, v in self.mappings.items()},
            "steps": self.steps,
            "health": self.health,
            "trackers": {r.name: r.to_dict() for r in self.results},
            "findings": [f.to_dict() for f in self.findings],
            "findings_by_severity": {
                s.value: sum(1 for f in self.findings if f.severity is s) for s in Severity},
            "params": self.params,
        }

    def to_pandas(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The per-step metrics as a pandas DataFrame indexed by step: a notebook post-mortem's
        table. Without ``columns``: every column (and the series derived from the sample
        stream); with ``columns``: exactly those, in that order (a name that is not a column is a
        ``KeyError`` listing the ones there are)."""
        import pandas as pd

        if isinstance(columns, str):
            columns = [columns]
        if columns is not None:
            known = {*self.metrics.names, *self.sample_series}
            missing = [c for c in columns if c not in known]
            if missing:
                raise KeyError(f"no per-step column {', '.join(map(repr, missing))}; the columns are: "
                               + ", ".join(sorted(known)))
        frame = self.metrics_frame(columns)
        if columns is not None:
            frame = {"step": frame["step"], **{c: frame[c] for c in columns if c != "step"}}
        return pd.DataFrame(frame).set_index("step")

    def findings_frame(self) -> pd.DataFrame:
        """One row per finding (the columns of ``findings.csv``; ``evidence`` as a dict), with
        ``severity`` an ordered categorical (info < warning < critical), so sorting or
        ``df[df.severity >= "warning"]`` follows severity, not the alphabet."""
        import pandas as pd

        cols = ["rule", "severity", "tracker", "first_step", "last_step", "onset_step", "message",
                "explanation", "remedy", "evidence"]
        df = pd.DataFrame([f.to_dict() for f in self.findings], columns=cols)
        order = [s.value for s in sorted(Severity, key=lambda s: s.rank)]
        df["severity"] = pd.Categorical(df["severity"], categories=order, ordered=True)
        return df

    def __repr__(self) -> str:
        h = self.health
        score = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        counts = {s.value: sum(1 for f in self.findings if f.severity is s) for s in Severity}
        top = ", ".join(f"{f.rule} ({f.severity.value}, step {f.onset_step})" for f in self.findings[:3])
        more = f", ... {len(self.findings) - 3} more" if len(self.findings) > 3 else ""
        return "\n".join([
            f"<Analysis of {', '.join(r.path for r in self.inputs) or 'no input'}: steps "
            f"{self.steps.get('first')}..{self.steps.get('last')} ({self.steps.get('rows')} rows)"
            + (f", algorithm {self.meta.algorithm}" if self.meta.algorithm else ""),
            f"  health: overall {score(h.get('overall'))}, stability {score(h.get('stability'))}, "
            f"convergence {score(h.get('convergence'))}" + ("" if self.coverage.get("checked", True)
                                                           else " (nothing checked)"),
            f"  findings: {counts['critical']} critical, {counts['warning']} warning, {counts['info']} info"
            + (f": {top}{more}" if top else ""),
            "  (.findings_frame(), .to_pandas(), .to_dict() for the rest)>"])

    def _repr_html_(self) -> str:
        """The summary in a notebook: the verdict, health scores and the top findings."""
        from html import escape

        d = self._core_dict()
        h = self.health
        counts = d["findings_by_severity"]
        score = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        checked = self.coverage.get("checked", True)
        head = ("Nothing checked: no training metric in the log was recognised" if not checked else
                f"{counts.get('critical', 0)} critical, {counts.get('warning', 0)} warning, "
                f"{counts.get('info', 0)} info finding(s)")
        rows = "".join(
            f"<tr><td>{escape(f.severity.value)}</td><td><code>{escape(f.rule)}</code></td>"
            f"<td>{f.first_step}-{f.last_step}</td><td>{escape(f.message)}</td><td>{escape(f.remedy)}</td></tr>"
            for f in self.findings[:10])
        more = f"<p>... {len(self.findings) - 10} more: <code>.findings_frame()</code></p>" \
            if len(self.findings) > 10 else ""
        inputs = ", ".join(escape(r.path) for r in self.inputs)
        return (f"<div class='forensics-analysis'><p><b>forensics</b>: {escape(inputs)}; steps "
                f"{self.steps.get('first')}..{self.steps.get('last')} ({self.steps.get('rows')} rows)"
                + (f"; algorithm {escape(str(self.meta.algorithm))}" if self.meta.algorithm else "")
                + f"</p><p><b>{escape(head)}</b></p><p>health: overall {score(h.get('overall'))}, stability "
                f"{score(h.get('stability'))}, convergence {score(h.get('convergence'))}</p>"
                + (f"<table><tr><th>severity</th><th>rule</th><th>steps</th><th>message</th><th>remedy</th></tr>"
                   f"{rows}</table>" if rows else "") + more + "</div>")

    def metrics_frame(self, columns: list[str] | None = None) -> dict[str, np.ndarray]:
        """Per-step columns (all, or the named ones) plus the per-step series derived from the
        sample stream."""
        return self._with_sample_series(self.metrics.frame(columns))

    def metrics_parts(self) -> Iterator[dict[str, np.ndarray]]:
        """:meth:`metrics_frame` of every column, a part of the per-step store at a time (a
        million-step run's table is never whole in memory)."""
        for part in self.metrics.parts():
            yield self._with_sample_series(part)

    def _with_sample_series(self, frame: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        steps = frame["step"]
        frame = dict(frame)
        for name, (s, v) in sorted(self.sample_series.items()):
            col = np.full(len(steps), np.nan, dtype=np.float32)
            if len(steps) and len(s):
                order = np.argsort(steps, kind="stable")
                pos = np.searchsorted(steps[order], s)
                ok = pos < len(steps)
                ok[ok] = steps[order][pos[ok]] == s[ok]
                col[order[pos[ok]]] = v[ok]
            frame[name] = col
        return frame

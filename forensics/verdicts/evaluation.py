"""Detection quality on labelled runs: event-level precision and recall, delay, false alarms, NAB.

A labelled run has a manifest: ``fault`` (None for a healthy run), ``onset_step``,
``expected_rules`` (the first is the primary one) and ``horizon_steps`` (how soon after onset a
detection still counts). An *alarm* is a finding of severity warning or critical, at its onset
step (one per episode, so a sustained condition is one alarm, as SIGNATURES.md section 3.2
recommends).

* The detection window of a fault is ``[t0 - a, t0 + b]`` with ``b = horizon_steps`` and
  ``a = 0.25 b`` (early warning is rewarded).
* A fault is **detected** when an alarm of an expected rule falls in its window; the **delay** is
  that alarm's onset minus ``t0`` (negative: early warning).
* **False alarms**: every alarm in a healthy run, and alarms before ``t0 - a`` in a faulty run
  (the run was still healthy). Alarms after the onset whose rule was not expected are consequences
  of the fault and are reported separately (``other``), not counted either way. Ops rules
  (``throughput.*``) judge the machine, not the training, and are listed apart.
* **Per-rule precision** = alarms of the rule inside a window that expects it / all alarms of the
  rule outside the ``other`` class; **recall** = faults expecting the rule in which it fired in the
  window / faults expecting it.
* **NAB score** (Lavin and Ahmad 2015; standard profile A_TP = 1, A_FN = 1, A_FP = 0.11) with the
  scaled sigmoid over the window position, normalised so that 0 is the detector that never fires
  and 100 the perfect one.

Corpora: a labelled run is a folder with a ``manifest.json`` and either the forensics step stream
(``steps.jsonl``: the reference trainer's ``fixtures/runs``) or the file a trainer wrote
(``trainer_state.json``: TRL's ``fixtures/trl``), or a folder with one ``labels.json`` naming logs
kept elsewhere (``fixtures/real``: real trainers' logs from public repositories, read from
``../shared/real-logs/calibration``). ``make eval`` scores each corpus apart and all of them
together, then scans every unlabelled real log it is given (no score: findings only).
"""

from __future__ import annotations

import json
import math
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from ..records import record

__all__ = ["LabelledRun", "Quality", "corpus_available", "corpus_logs", "evaluate", "evaluate_corpora", "load_runs",
           "real_log_lines", "render_table", "scan_labelled_logs", "scan_real_logs", "scan_runs"]

A_TP, A_FN, A_FP = 1.0, 1.0, 0.11
ALARM_SEVERITIES = ("warning", "critical")
#: Rules about the machine, not the training (wall-clock throughput, memory). The labelled corpus
#: has no ops labels and its timings are real measurements of a shared machine, so these alarms
#: are listed per run (``ops``) but counted neither as detections nor as false alarms.
OPS_PREFIXES = ("throughput.",)


@record
class LabelledRun:
    name: str
    fault: str | None
    onset_step: int | None
    expected_rules: list[str]
    horizon_steps: int
    steps: int
    findings: list[dict[str, Any]]
    #: why the log could not be read (a labelled log that cannot be read is a failure either way)
    error: str | None = None
    #: what the default gate should say ("pass" or "fail"; None: not labelled) and what it said
    gate_expected: str | None = None
    gate: str | None = None

    @property
    def alarms(self) -> list[dict[str, Any]]:
        """One alarm per episode (a finding that groups recurrences is one alarm per episode)."""
        out = []
        for f in self.findings:
            if f["rule"].startswith(OPS_PREFIXES):
                continue
            for ep in f.get("episodes") or [f]:
                if ep["severity"] in ALARM_SEVERITIES:
                    out.append({**f, **ep})
        return out

    @property
    def ops_alarms(self) -> list[str]:
        return sorted({f["rule"] for f in self.findings if f["severity"] in ALARM_SEVERITIES
                       and f["rule"].startswith(OPS_PREFIXES)})


@record
class RuleStats:
    tp: int = 0
    fp: int = 0
    expected: int = 0
    detected: int = 0
    delays: list[int] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.expected if self.expected else None


@record
class Quality:
    rules: dict[str, RuleStats]
    runs: list[dict[str, Any]]
    healthy_steps: int
    false_alarms: int
    faults: int
    detected: int
    nab: float | None

    @property
    def false_alarms_per_1000(self) -> float:
        return 1000 * self.false_alarms / self.healthy_steps if self.healthy_steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "faults": self.faults,
            "detected": self.detected,
            "recall": self.detected / self.faults if self.faults else None,
            "false_alarms": self.false_alarms,
            "healthy_steps": self.healthy_steps,
            "false_alarms_per_1000_healthy_steps": round(self.false_alarms_per_1000, 3),
            "nab_standard": self.nab,
            "rules": {k: {"precision": v.precision, "recall": v.recall, "tp": v.tp, "fp": v.fp,
                          "expected": v.expected, "detected": v.detected,
                          "median_delay": _quantile(v.delays, 0.5),
                          "p90_delay": _quantile(v.delays, 0.9)}
                      for k, v in sorted(self.rules.items())},
            "runs": self.runs,
        }


def _quantile(xs: list[int], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _sigma(y: float) -> float:
    """NAB's scaled sigmoid: 2 / (1 + e^(5y)) - 1, and -1 past y = 3."""
    return -1.0 if y > 3 else 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def evaluate(runs: list[LabelledRun]) -> Quality:
    """Score findings against labels (see module doc)."""
    rules: dict[str, RuleStats] = {}
    out_runs: list[dict[str, Any]] = []
    healthy_steps = false_alarms = faults = detected = 0
    nab_raw = nab_null = nab_perfect = 0.0
    for run in runs:
        alarms = run.alarms
        rec: dict[str, Any] = {"name": run.name, "fault": run.fault, "onset": run.onset_step,
                               "ops": run.ops_alarms, "gate": run.gate, "gate_expected": run.gate_expected}
        if run.error is not None:
            rec.update(error=run.error, detected=False, delay=None, first_rule=None, detected_by=[],
                       primary_first=False, false_alarms=[], other=[])
            faults += run.fault is not None
            out_runs.append(rec)
            continue
        if run.fault is None or run.onset_step is None:
            healthy_steps += run.steps
            false_alarms += len(alarms)
            for a in alarms:
                rules.setdefault(a["rule"], RuleStats()).fp += 1
                nab_raw -= A_FP
            rec.update(false_alarms=[a["rule"] for a in alarms])
            out_runs.append(rec)
            continue
        faults += 1
        t0, b = run.onset_step, max(run.horizon_steps, 1)
        lo, hi = t0 - 0.25 * b, t0 + b
        for r in run.expected_rules:
            rules.setdefault(r, RuleStats()).expected += 1
        hits = sorted((f for f in alarms if f["rule"] in run.expected_rules
                       and lo <= f["onset_step"] <= hi), key=lambda f: f["onset_step"])
        early = [f for f in alarms if f["onset_step"] < lo]
        other = [f for f in alarms if f not in hits and f not in early]
        healthy_steps += max(int(lo) - 0, 0)
        false_alarms += len(early)
        for f in early:
            rules.setdefault(f["rule"], RuleStats()).fp += 1
            nab_raw -= A_FP
        seen: set[str] = set()
        for f in hits:
            st = rules[f["rule"]]
            st.tp += 1
            if f["rule"] not in seen:
                seen.add(f["rule"])
                st.detected += 1
                st.delays.append(int(f["onset_step"] - t0))
        nab_null -= A_FN
        nab_perfect += A_TP
        if hits:
            detected += 1
            first = hits[0]["onset_step"]
            y = -(hi - first + 1) / (hi - lo + 1)
            nab_raw += _sigma(y) * A_TP / _sigma(-1.0)
        else:
            nab_raw -= A_FN
        rec.update(detected=bool(hits),
                   delay=int(hits[0]["onset_step"] - t0) if hits else None,
                   first_rule=hits[0]["rule"] if hits else None,
                   detected_by=sorted({f["rule"] for f in hits}),
                   primary_first=bool(hits) and hits[0]["rule"] == run.expected_rules[0],
                   false_alarms=[f["rule"] for f in early],
                   other=sorted({f["rule"] for f in other}))
        out_runs.append(rec)
    nab = None
    if nab_perfect > 0:
        nab = round(100 * (nab_raw - nab_null) / (nab_perfect - nab_null), 2)
    return Quality(rules, out_runs, healthy_steps, false_alarms, faults, detected, nab)


def load_runs(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``(run folder, manifest)`` for every ``manifest.json`` under ``root``, sorted by name."""
    out = []
    for manifest in sorted(root.glob("*/manifest.json")):
        out.append((manifest.parent, json.loads(manifest.read_text(encoding="utf-8"))))
    return out


#: A corpus of logs kept outside the repository, labelled by one file (see fixtures/real).
LABELS_FILE = "labels.json"


def corpus_available(root: Path) -> bool:
    """Whether ``root`` holds a corpus: manifests, or a labels file whose log folder exists."""
    if (root / LABELS_FILE).is_file():
        return labelled_logs_root(root).is_dir()
    return root.is_dir()


def labelled_logs_root(root: Path) -> Path:
    labels = json.loads((root / LABELS_FILE).read_text(encoding="utf-8"))
    return (root / labels["root"]).resolve()


def _row_step(steps: list[int], row: int) -> int:
    """The step of the ``row``-th logged row (1-based), clamped to the run."""
    return int(steps[min(max(row, 1), len(steps)) - 1]) if steps else row


def scan_labelled_logs(root: Path) -> tuple[list[LabelledRun], list[dict[str, Any]]]:
    """Scan the logs a labels file names: ``(scored runs, unlabelled entries)``.

    A label counts its onset and horizon in logged rows (``onset_row``, ``horizon_rows``); they
    are turned into steps with the scan's own step column, so a reader that recovers the
    trainer's step numbers (a console that logs every 20 steps) needs no new labels.
    """
    from ..analysis.engine import scan_path
    from ..errors import ForensicsError
    from .gate import default_gate

    labels = json.loads((root / LABELS_FILE).read_text(encoding="utf-8"))
    logs = labelled_logs_root(root)
    runs: list[LabelledRun] = []
    unlabelled: list[dict[str, Any]] = []
    for entry in labels["runs"]:
        try:
            analysis = scan_path(logs / entry["file"])
        except ForensicsError as exc:
            runs.append(LabelledRun(name=entry["file"], fault=entry.get("fault"), onset_step=None,
                                    expected_rules=_expected(entry, root / LABELS_FILE),
                                    horizon_steps=1, steps=0, findings=[], error=str(exc)))
            continue
        findings = [f.to_dict() for f in analysis.findings]
        if entry.get("fault") == "unlabelled":
            unlabelled.append({"name": entry["file"], "alarm_rules": sorted(
                {f["rule"] for f in findings if f["severity"] in ALARM_SEVERITIES})})
            continue
        steps = [int(s) for s in analysis.metrics.frame([])["step"]]
        onset = horizon = None
        if entry.get("fault"):
            onset = _row_step(steps, int(entry["onset_row"]))
            end = _row_step(steps, int(entry["onset_row"]) + int(entry["horizon_rows"]))
            horizon = max(end - onset, 1)
        runs.append(LabelledRun(
            name=entry["file"], fault=entry.get("fault"), onset_step=onset,
            expected_rules=_expected(entry, root / LABELS_FILE), horizon_steps=horizon or 50,
            steps=int(analysis.steps["rows"]), findings=findings,
            gate_expected=entry.get("gate", "pass" if entry.get("fault") is None else None),
            gate=default_gate(findings, analysis.coverage)))
    return runs, unlabelled


def corpus_logs(root: Path) -> list[tuple[Path, bool]]:
    """``(log, labelled healthy)`` of every labelled run of a corpus (``fixtures/runs``,
    ``fixtures/trl``, or a labels file naming logs kept elsewhere); unlabelled logs are left out."""
    if (root / LABELS_FILE).is_file():
        labels = json.loads((root / LABELS_FILE).read_text(encoding="utf-8"))
        logs = labelled_logs_root(root)
        return [(logs / e["file"], e.get("fault") is None) for e in labels["runs"]
                if e.get("fault") != "unlabelled"]
    return [(folder, m.get("fault") is None) for folder, m in load_runs(root)]


def _expected(label: dict[str, Any], where: Path) -> list[str]:
    """A label's expected rules by their ids now (an old id is read with a warning naming the new)."""
    from ..analysis.trackers import current_rule_id

    return [current_rule_id(r, str(where)) for r in label.get("expected_rules", [])]


def scan_runs(root: Path) -> list[LabelledRun]:
    """Scan every labelled run under ``root`` and attach its findings."""
    from ..analysis.engine import scan_path
    from .gate import default_gate

    if (root / LABELS_FILE).is_file():
        return scan_labelled_logs(root)[0]
    runs = []
    for folder, m in load_runs(root):
        analysis = scan_path(folder)  # read as forensics scan reads it (forensics.io.locate)
        findings = [f.to_dict() for f in analysis.findings]
        runs.append(LabelledRun(
            name=m.get("name", folder.name), fault=m.get("fault"), onset_step=m.get("onset_step"),
            expected_rules=_expected(m, folder / "manifest.json"),
            horizon_steps=int(m.get("horizon_steps", 50)), steps=int(analysis.steps["rows"]),
            findings=findings, gate_expected=m.get("gate", "pass" if m.get("fault") is None else None),
            gate=default_gate(findings, analysis.coverage)))
    return runs


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if pct else f"{v:g}"


def render_table(q: Quality) -> str:
    """The table ``make eval`` prints."""
    lines = [f"{'rule':<28} {'precision':>9} {'recall':>7} {'tp':>4} {'fp':>4} "
             f"{'median delay':>12} {'p90 delay':>9}"]
    for rule, st in sorted(q.rules.items()):
        lines.append(f"{rule:<28} {_fmt(st.precision, True):>9} {_fmt(st.recall, True):>7} "
                     f"{st.tp:>4} {st.fp:>4} {_fmt(_quantile(st.delays, 0.5)):>12} "
                     f"{_fmt(_quantile(st.delays, 0.9)):>9}")
    lines.append("")
    gated = [r for r in q.runs if r.get("gate_expected") and r.get("gate")]
    gate_right = sum(r["gate"] == r["gate_expected"] for r in gated)
    lines.append(f"faults detected: {q.detected}/{q.faults}   false alarms: {q.false_alarms} "
                 f"({q.false_alarms_per_1000:.2f} per 1,000 healthy steps)   "
                 f"NAB (standard): {_fmt(q.nab)}   default gate as labelled: {gate_right}/{len(gated)}")
    for r in q.runs:
        if r.get("error"):
            status = f"UNREADABLE: {r['error'][:60]}"
        elif r.get("fault") is None:
            status = "clean" if not r["false_alarms"] else f"FALSE ALARMS {r['false_alarms']}"
        elif r["detected"]:
            status = f"detected by {r['first_rule']} (delay {r['delay']:+d} steps)"
        else:
            status = "MISSED"
        extra = f"; early alarms {r['false_alarms']}" if r.get("fault") and r["false_alarms"] else ""
        if r.get("ops"):
            extra += f"; ops alarms (not scored) {r['ops']}"
        if r.get("gate"):
            wrong = r.get("gate_expected") not in (None, r["gate"])
            extra += f"; gate {r['gate']}" + (f" (LABELLED {r['gate_expected'].upper()})" if wrong else "")
        lines.append(f"  {r['name']:<34} {r.get('fault') or 'healthy'!s:<22} {status}{extra}")
    return "\n".join(lines)


def scan_real_logs(folder: Path) -> list[dict[str, Any]]:
    """Scan every log in ``folder`` (unlabelled: findings only, no score).

    Each entry: ``name``, ``rows``, ``format``, ``findings_by_severity``, ``alarm_rules`` (the rule
    ids of warning and critical findings) and ``unmapped`` (metric keys no canonical name covers);
    or ``name`` and ``error`` when the log cannot be read. Documentation (``*.md``, ``*.txt``)
    and hidden files are skipped.
    """
    from ..analysis.engine import scan_path
    from ..errors import ForensicsError

    out: list[dict[str, Any]] = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.suffix.lower() in (".md", ".txt") or path.is_dir():
            continue
        try:
            analysis = scan_path(path)
        except ForensicsError as exc:
            out.append({"name": path.name, "error": str(exc)})
            continue
        findings = [f.to_dict() for f in analysis.findings]
        by_sev = {sev: sum(1 for f in findings if f["severity"] == sev)
                  for sev in ("critical", "warning", "info")}
        out.append({
            "name": path.name,
            "rows": int(analysis.steps["rows"]),
            "format": ", ".join(sorted({r.format for r in analysis.inputs if r.format})),
            "findings_by_severity": by_sev,
            "alarm_rules": sorted({f["rule"] for f in findings if f["severity"] in ALARM_SEVERITIES}),
            "unmapped": sorted({k for m in analysis.mappings.values() for k in m.unmapped}),
        })
    return out


def real_log_lines(logs: list[dict[str, Any]]) -> list[str]:
    """One line per real log (the part of ``make eval`` that has no labels)."""
    lines = []
    for e in logs:
        if "error" in e:
            lines.append(f"  {e['name']:<52} UNREADABLE: {e['error']}")
            continue
        sev = e["findings_by_severity"]
        rules = ", ".join(e["alarm_rules"]) or "-"
        lines.append(f"  {e['name']:<52} {e['rows']:>6} rows  critical {sev['critical']:>2}  "
                     f"warning {sev['warning']:>2}  info {sev['info']:>2}  alarms: {rules}")
    return lines


def _parse_args(argv: list[str] | None) -> Any:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m forensics.verdicts.evaluation",
                                 description="Detection quality on labelled corpora (make eval).")
    ap.add_argument("corpora", nargs="*", metavar="[NAME=]DIR",
                    help="labelled corpora (default: reference=fixtures/runs trl=fixtures/trl real=fixtures/real)")
    ap.add_argument("--real-logs", type=Path, metavar="DIR",
                    help="unlabelled real logs to scan (one line each); skipped with a note if missing")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    ap.add_argument("--txt", type=Path, metavar="FILE", help="write the printed tables to a file too")
    ap.add_argument("--metamorphic", action="store_true",
                    help="check that each labelled log's verdict survives rows dropped, a cut, a reward "
                         "rescaled, keys renamed, a tied row and a restart (forensics.verdicts.metamorphic)")
    return ap.parse_args(argv)


def evaluate_corpora(corpora: dict[str, Path], real_logs: Path | None = None,
                     metamorphic: bool = False) -> tuple[str, dict[str, Any]]:
    """Score each corpus, all of them together, and scan the real logs: ``(text, figures)``; with
    ``metamorphic``, the share of verdicts kept under each transformation of every labelled log
    (:mod:`forensics.verdicts.metamorphic`)."""
    text: list[str] = [f"== {name}: {root} not found, skipped" for name, root in corpora.items()
                       if not corpus_available(root)]
    scanned = {name: scan_runs(root) for name, root in corpora.items() if corpus_available(root)}
    figures: dict[str, Any] = {"corpora": {}, "all": None, "real_logs": None}
    for name, runs in scanned.items():
        q = evaluate(runs)
        figures["corpora"][name] = {"path": str(corpora[name]), **q.to_dict()}
        text += [f"== {name} ({corpora[name]}): {len(runs)} labelled runs", render_table(q), ""]
    if len(scanned) > 1:
        # in the union a run is named by its corpus too: two corpora may hold runs of one name
        everything = [replace(r, name=f"{name}/{r.name}") for name, runs in scanned.items() for r in runs]
        q = evaluate(everything)
        figures["all"] = q.to_dict()
        text += [f"== all corpora ({' + '.join(scanned)}): {len(everything)} labelled runs",
                 render_table(q), ""]
    if metamorphic and scanned:
        from .metamorphic import check_logs, shares
        from .metamorphic import render_table as render_metamorphic

        checks = check_logs(log for name in scanned for log in corpus_logs(corpora[name]))
        figures["metamorphic"] = {"logs": len(checks), "transformations": shares(checks)}
        text += [f"== metamorphic checks ({' + '.join(scanned)}): {len(checks)} logs, the share of "
                 "verdicts each transformation keeps", render_metamorphic(checks), ""]
    if real_logs is not None:
        if real_logs.is_dir():
            logs = scan_real_logs(real_logs)
            figures["real_logs"] = {"path": str(real_logs), "logs": logs}
            text += [f"== real logs ({real_logs}): {len(logs)} logs, no labels, not scored",
                     *real_log_lines(logs)]
        else:
            text.append(f"== real logs: {real_logs} not found, skipped")
    return "\n".join(text).rstrip() + "\n", figures


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - exercised by `make eval`
    a = _parse_args(argv)
    specs = a.corpora or ["reference=fixtures/runs", "trl=fixtures/trl", "real=fixtures/real"]
    corpora: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        corpora[name if sep else Path(spec).name] = Path(path if sep else spec)
    text, figures = evaluate_corpora(corpora, a.real_logs, metamorphic=a.metamorphic)
    print(text, end="")
    if a.txt:
        a.txt.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()

"""The readable summary printed by ``forensics scan``."""

from __future__ import annotations

from typing import Any

from ..analysis.findings import Severity
from ..analysis.result import Analysis
from ..analysis.spans import with_span
from .cost import cost_lines
from .verdict import verdict

__all__ = ["paint", "render_plan", "render_summary"]

#: How each kind of text is coloured on a terminal (click.style keywords).
STYLES: dict[str, dict[str, Any]] = {
    "critical": {"fg": "red", "bold": True},
    "warning": {"fg": "yellow", "bold": True},
    "info": {"fg": "cyan"},
    "ok": {"fg": "green"},
    "bad": {"fg": "red", "bold": True},
    "title": {"bold": True},
}


def paint(text: str, kind: str, colour: bool) -> str:
    r"""``text`` in the colour of ``kind`` when ``colour`` is on (a terminal without NO_COLOR).

    >>> paint("critical", "critical", False)
    'critical'
    >>> paint("ok", "ok", True)
    '\x1b[32mok\x1b[0m'
    """
    if not colour or kind not in STYLES:
        return text
    import click

    return click.style(text, **STYLES[kind])


def _score(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.2f}"


def render_summary(analysis: Analysis, top: int = 8, colour: bool = False) -> str:
    """The terminal summary (``colour``: severities and the verdict in colour)."""
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
    lines.extend(coverage_lines(analysis.coverage, analysis.meta.algorithm))
    h = analysis.health
    lines.append("")
    lines.append(f"health  overall {_score(h['overall'])}   stability {_score(h['stability'])}"
                 f"   convergence {_score(h['convergence'])}")
    for area, v in h["areas"].items():
        lines.append(f"        {area:<12} {_score(v)}")
    if h.get("unchecked"):
        lines.append(f"        unknown: {', '.join(h['unchecked'])} (not checked: nothing they read is logged)")
    timeline = analysis.diagnosis["timeline"]
    advice: dict[str, Any] = {k: analysis.diagnosis[k] for k in ("windows", "recommendations")
                              if k in analysis.diagnosis}
    v = verdict([f.to_dict() for f in analysis.findings], timeline, advice.get("recommendations"),
                analysis.coverage)
    healthy = not any(f.severity is not Severity.INFO for f in analysis.findings) and analysis.coverage.get(
        "checked", True)
    lines += ["", paint(f"verdict: {v['headline']}", "ok" if healthy else "bad", colour)]
    if v.get("domino"):
        lines.append(f"first domino: {v['domino']}")
    for item in v["do_now"]:
        lines.append(f"  do now: {item}")
    lines += _changes("  do now", v["do_now_patch"], v["do_now_command_line"])
    counts = {s: sum(1 for f in analysis.findings if f.severity is s) for s in Severity}
    lines.append("")
    crit, warn = counts[Severity.CRITICAL], counts[Severity.WARNING]
    lines.append(f"findings: {paint(f'{crit} critical', 'critical', colour and crit > 0)}, "
                 f"{paint(f'{warn} warning', 'warning', colour and warn > 0)}, {counts[Severity.INFO]} info")
    for f in analysis.findings[:top]:
        label = paint(f"[{f.severity.value:<8}]", f.severity.value, colour)
        lines.append(f"  {label} {f.rule:<26} {with_span(f.message, f.first_step, f.last_step)}")
        if f.severity is not Severity.INFO:
            lines.append(f"  {'':<10} -> {f.remedy}")
    if len(analysis.findings) > top:
        lines.append(f"  ... {len(analysis.findings) - top} more in findings.csv")
    lines.extend(_training_health(analysis, advice, v))
    cost = cost_lines(analysis.diagnosis.get("cost"))
    if cost:
        lines += ["", *cost]
    notes = [n for r in analysis.results if r.active for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in notes)
    return "\n".join(lines)


def render_plan(analysis: Analysis) -> str:
    """What ``-v`` adds: each input's column mapping (source key -> canonical name, with unit
    notes and the user's own maps marked) and the tracker plan (what each tracker reads, or why it
    did not run)."""
    from ..analysis.catalogue import metrics_read_by

    lines = ["column mapping:"]
    for path, m in sorted(analysis.mappings.items()):
        lines.append(f"  {path}:")
        for src, dst in sorted(m.mapping.items()):
            extra = [x for x in (m.notes.get(src), m.transforms.get(src) and f"transform {m.transforms[src]}") if x]
            lines.append(f"    {src} -> {dst}" + (f"  ({'; '.join(extra)})" if extra else ""))
        if m.shadowed:
            lines.append("    shadowed (another key feeds the name; carried through): "
                         + ", ".join(sorted(m.shadowed)))
        if m.unmapped:
            lines.append("    unmapped (carried through; --map SRC=CANONICAL names one): "
                         + ", ".join(sorted(m.unmapped)))
    mapped = set(analysis.coverage.get("columns", {}).get("mapped_names", []))
    lines.append("tracker plan:")
    for name, entry in analysis.coverage.get("trackers", {}).items():
        if entry.get("active"):
            reads = [c for c in metrics_read_by(name) if c in mapped]
            lines.append(f"  {name:<12} runs on {', '.join(reads) if reads else 'derived series'}")
        else:
            lines.append(f"  {name:<12} not run: {entry.get('reason', '')}")
    return "\n".join(lines)


def coverage_lines(cov: dict[str, Any], algorithm: str | None = None) -> list[str]:
    """What was checked, in two lines; a plain warning when nothing was."""
    if not cov:
        return []
    cols = cov["columns"]
    from ..analysis.engine import map_not_found_text, rule_metric_not_found_text

    warnings = [f"warning: {map_not_found_text(m)}" for m in cols.get("maps_not_found") or []]
    warnings += [f"warning: {rule_metric_not_found_text(m)}" for m in cols.get("rule_metrics_not_found") or []]
    suggest = suggestion_lines(cols)
    if not cov["checked"]:
        keys = ", ".join(cols["unmapped_keys"][:8]) + (" ..." if cols["unmapped"] > 8 else "")
        read = [c for c in cols.get("mapped_names") or [] if c != "step"]
        head = (f"NOT JUDGED: none of the core training signals ({CORE_WORDS}) was read; read: "
                f"{', '.join(read)}" + (f"; {cols['unmapped']} unrecognised: {keys}" if cols["unmapped"] else "")
                + "." if read else
                "NOTHING CHECKED: none of the logged columns is a training metric forensics "
                f"knows ({cols['unmapped']} unrecognised: {keys}).")
        return [*warnings, "", head, *suggest,
                "  This is not a healthy verdict. Name your keys with forensics' canonical names "
                "(forensics rules --metrics, --map KEY=NAME) or convert the log; `forensics gate` fails this run."]
    active = cov.get("trackers_judging", [])
    idle = [n for n, e in cov["trackers"].items() if not e["active"]]
    return [f"checked: {len(active)} trackers ({', '.join(active)}) on {cols['mapped']} mapped "
            f"column(s); {cols['unmapped']} column(s) not recognised"
            + (f"; algorithm {algorithm}" if algorithm else "")
            + (f"; not run: {', '.join(idle)}" if idle else ""), *suggest, *warnings]


#: The core training signals in words (forensics.schema.CORE_SIGNALS).
CORE_WORDS = "reward, KL, gradient norm, loss, entropy, response length"


def suggestion_lines(cols: dict[str, Any]) -> list[str]:
    """The unrecognised keys with the canonical name each most likely means, and the ``--map``
    options that read them (a guess is marked with a question mark: check it before mapping)."""
    found = cols.get("suggested_maps") or []
    if not found:
        return []
    named = ", ".join(f"{s['key']} -> {s['canonical']}{'' if s['sure'] else '?'}" for s in found)
    maps = " ".join(f"--map {_shell(s['key'] + '=' + s['canonical'])}" for s in found)
    return [f"not recognised, most likely: {named}", f"  to read them: {maps}"]


def _shell(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _num(v: Any, fmt: str = ".4g") -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else format(v, fmt)


def _changes(label: str, patch: dict[str, Any], command_line: list[str]) -> list[str]:
    """A config patch and its command line, each on a line of its own."""
    import json

    return ([f"{label}, config patch: {json.dumps(patch)}"] if patch else []) + (
        [f"{label}, command line: {' '.join(command_line)}"] if command_line else [])


def _training_health(analysis: Analysis, advice: dict[str, Any], v: dict[str, Any],
                     max_windows: int = 12) -> list[str]:
    """Reward components, windows that are not ok, the changes recommended after the do-now list
    (``v``: the verdict, :func:`~forensics.report.verdict.advice`), throughput, generation."""
    lines: list[str] = []
    results = {r.name: r for r in analysis.results}
    sections = analysis.diagnosis
    rw = results.get("rewards")
    if rw is not None and rw.active and rw.summary.get("components"):
        lines += ["", "reward components (mean, first -> last level):"]
        for name, st in rw.summary["components"].items():
            lines.append(f"  {name:<24} mean {_num(st.get('mean'))}  {_num(st.get('first'))} -> "
                         f"{_num(st.get('last'))} ({st.get('direction') or '-'})")
    windows = advice.get("windows") or []
    if windows:
        summary = results["windows"].summary if "windows" in results else {}
        unit = "one epoch each" if summary.get("mode") == "epoch" else f"{summary.get('window_rows')} rows each"
        flagged = [w for w in windows if w["status"] != "ok"]
        counts = ", ".join(f"{sum(1 for w in windows if w['status'] == s)} {s}"
                           for s in ("alert", "warn", "watch", "ok"))
        lines += ["", f"windows: {len(windows)}, {unit} ({counts}); all in windows.csv"]
        if flagged:
            lines.append(f"  {'window':>6} {'steps':>15} {'reward':>10} {'loss':>10} {'reward':>6} "
                         f"{'status':>6}  issues and findings")
            for w in flagged[:max_windows]:
                what = ", ".join([*w["issues"], *w.get("findings", [])])
                lines.append(f"  {w['window']:>6} {str(w['first_step']) + '-' + str(w['last_step']):>15} "
                             f"{_num(w['reward_mean']):>10} {_num(w['loss_mean']):>10} "
                             f"{w['reward_direction'] or '-':>6} {w['status']:>6}  {what}")
            if len(flagged) > max_windows:
                lines.append(f"  ... {len(flagged) - max_windows} more windows not ok in windows.csv")
    if v["later"] or v["later_patch"] or v["later_command_line"]:
        trainer = (advice.get("recommendations") or {}).get("trainer") or {}
        where = f" in {trainer['config']} keys" if trainer else ""
        lines += ["", f"recommended after the do-now changes{where} (recommendations.yaml):"]
        for words, items in v["later"]:
            lines += [f"  [{words}] {item}" for item in items]
        lines += _changes("  if it persists", v["later_patch"], v["later_command_line"])
    tp = results.get("throughput")
    if tp is not None and tp.active:
        s = tp.summary
        parts = []
        if s.get("step_time"):
            parts.append(f"step time p50 {_num(s['step_time']['p50'])} s, p99 {_num(s['step_time']['p99'])} s")
        for name, label in (("gen_tokens_per_s", "gen"), ("train_tokens_per_s", "train")):
            if s.get(name):
                parts.append(f"{label} {_num(s[name]['p50'], '.0f')} tok/s")
        if s.get("mfu"):
            parts.append(f"MFU {_num(s['mfu']['mean'], '.1%')}")
        if s.get("duration"):
            parts.append(f"duration {_num(s['duration']['seconds'] / 3600, '.2f')} h")
        if s.get("eta") and s["eta"].get("eta_seconds") is not None:
            parts.append(f"ETA {_num(s['eta']['eta_seconds'] / 3600, '.2f')} h")
        if parts:
            lines += ["", "throughput: " + "; ".join(parts)]
        api = s.get("api") or {}
        if api.get("api_tokens_sent") or api.get("api_tokens_received"):
            sent = (api.get("api_tokens_sent") or {}).get("total")
            recv = (api.get("api_tokens_received") or {}).get("total")
            lines.append(f"judge/teacher API: {_num(sent, '.0f')} tokens sent, {_num(recv, '.0f')} received")
        res = s.get("resources") or {}
        if res:
            lines.append("resources: " + "; ".join(f"{k} max {_num(v['max'])}" for k, v in res.items()))
    gen = sections.get("generation")
    if gen:
        g = gen["summary"]
        lines += ["", f"generation: {g['responses']} responses, tag format (format_pattern, not the run's "
                      f"own format reward) {_num(g.get('format_rate'), '.0%')}, "
                      f"repetition {_num(g.get('repetition'), '.1%')}, think {_num(g.get('mean_think_chars'), '.0f')}"
                      f" chars, answer {_num(g.get('mean_answer_chars'), '.0f')} chars, reasoning indicators "
                      f"{_num(g.get('reasoning_indicators_per_response'), '.2f')}/response"]
    return lines

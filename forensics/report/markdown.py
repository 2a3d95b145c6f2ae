"""The Markdown summary: short enough for a pull-request comment or a CI job summary.

GitHub renders some raw HTML in Markdown, so text from the logs is escaped (``<``, ``>``, ``&``
and the characters that break a table cell or start formatting).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..analysis.diagnosis.timeline import timeline_from_dict
from .cost import cost_lines
from .html import run_title, trainer_text
from .verdict import verdict

__all__ = ["render_markdown", "write_markdown"]

_ICON = {"critical": "🔴", "warning": "🟠", "info": "🔵"}
_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _md(text: Any) -> str:
    """Escape log text for a Markdown table cell (no HTML, no line breaks, no pipes)."""
    s = str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|#":
        s = s.replace(ch, "\\" + ch)
    return " ".join(s.split())


def _code(text: Any) -> str:
    """Text for a code span inside a table: code spans show HTML literally; only ` and | matter."""
    return "`" + " ".join(str(text).replace("`", "'").replace("|", "\\|").split()) + "`"


def _score(v: float | None) -> str:
    if v is None:
        return "n/a"
    mark = "✅" if v >= 0.85 else ("⚠️" if v >= 0.6 else "❌")
    return f"{v:.2f} {mark}"


def _changes(which: str, config: str, patch: dict[str, Any], command_line: list[str]) -> list[str]:
    """A config patch and its command line (the advice's rule: :func:`~forensics.report.verdict.advice`)."""
    out = ["", f"Config patch {which} ({config}): {_code(json.dumps(patch))}"] if patch else []
    return out + ([f"Command line {which}: {_code(' '.join(command_line))}"] if command_line else [])


def render_markdown(d: dict[str, Any], top: int = 15) -> str:
    """Markdown for an analysis dict (``Analysis.to_dict()`` or a loaded analysis.json)."""
    inputs = d.get("inputs") or []
    run = d.get("run") or {}
    name = run.get("name") or (run_title(inputs[0]["path"]) if inputs else "run")
    st = d.get("steps") or {}
    h = d.get("health") or {}
    counts = d.get("findings_by_severity") or {}
    algorithm = (run.get("algorithm") or "").upper() or "algorithm not stated"
    out = [f"## forensics: {_md(name)} ({_md(algorithm)}, {_md(trainer_text(d))})", ""]
    rows_read = sum(i.get("rows_read", 0) for i in inputs)
    skipped = sum(i.get("rows_skipped", 0) for i in inputs)
    out.append(f"Steps {st.get('first')}–{st.get('last')} · {st.get('rows', 0):,} rows analysed · "
               f"{rows_read:,} read, {skipped:,} skipped · "
               f"**{counts.get('critical', 0)} critical, {counts.get('warning', 0)} warning, "
               f"{counts.get('info', 0)} info**")
    out += ["", "| Health | Score |", "|---|---|"]
    for k in ("overall", "stability", "convergence"):
        out.append(f"| {k} | {_score(h.get(k))} |")
    for area, v in (h.get("areas") or {}).items():
        out.append(f"| {_md(area)} (area) | {_score(v)} |")
    tl = timeline_from_dict(d)
    rec = d.get("recommendations") if isinstance(d.get("recommendations"), dict) else None
    v = verdict(d.get("findings") or [], tl, rec, d.get("coverage"))
    checked = [f"Checked: {_md(v['checked'])}.", ""] if v.get("checked") else []
    checked += [f"- not checked: {_md(line)}" for line in v.get("not_checked") or []]
    out[2:2] = [f"**{_md(v['headline'])}**", "", *checked, *([""] if v.get("not_checked") else [])]
    dom = tl.get("first_domino")
    if dom:
        out += [""]
        what = f" ({_md(v['domino_finding']['message'])})" if v.get("domino_finding") else ""
        if dom.get("linked") and len(dom.get("chain_rules", [])) > 1:
            events = {e["id"]: e for e in tl.get("events", [])}
            chain = " → ".join(f"{_code(events[i]['rule'])} @{events[i]['onset_step']}"
                               for i in dom["chain"] if i in events)
            out.append(f"**First domino:** {_code(dom['rule'])} at step {dom['onset_step']}{what}. "
                       f"Likely chain: {chain}")
        else:
            out.append(f"**First domino:** {_code(dom['rule'])} at step {dom['onset_step']}{what} "
                       "(earliest warning or critical finding; no linked chain)")
    config = _md(((rec or {}).get("trainer") or {}).get("config", "keys"))
    if v["do_now"]:
        out += ["", "**Do now:**"]
        out += [f"- {_md(item)}" for item in v["do_now"]]
    out += _changes("of these changes", config, v["do_now_patch"], v["do_now_command_line"])
    findings = sorted(d.get("findings") or [],
                      key=lambda f: (_ORDER.get(f["severity"], 3), f["onset_step"], f["rule"]))
    out.append("")
    serious = [f for f in findings if f["severity"] != "info"]
    info = [f for f in findings if f["severity"] == "info"]
    if serious:
        out += ["| | Rule | Steps | What happened | What to do |", "|---|---|---|---|---|"]
        for f in serious[:top]:
            steps = str(f["first_step"]) if f["first_step"] == f["last_step"] else f"{f['first_step']}–{f['last_step']}"
            out.append(f"| {_ICON.get(f['severity'], '')} {f['severity']} | {_code(f['rule'])} | "
                       f"{steps} | {_md(f['message'])} | {_md(f.get('remedy', ''))} |")
        if len(serious) > top:
            out.append(f"\n… and {len(serious) - top} more (see the HTML report or findings.csv).")
    else:
        out.append("No warning or critical findings. ✅")
    if info:
        by_rule: dict[str, int] = {}
        for f in info:
            by_rule[f["rule"]] = by_rule.get(f["rule"], 0) + 1
        out += ["", f"{_ICON['info']} {len(info)} info finding(s), context rather than problems: "
                + ", ".join(f"{_code(r)} ×{n}" for r, n in sorted(by_rule.items()))]
    if v["later"]:
        out += ["", "**After the do-now changes:**"]
        out += [f"- {words}: {_md(item)}" for words, items in v["later"] for item in items]
    out += _changes("if it persists", config, v["later_patch"], v["later_command_line"])
    windows = d.get("windows")
    if isinstance(windows, list) and windows:
        bad = [w for w in windows if str(w.get("status", "")).lower() not in ("ok", "healthy", "")]
        out += ["", f"Windows: {len(windows)}, {len(bad)} not healthy"
                + (": " + ", ".join(f"{w.get('first_step')}–{w.get('last_step')} ({_md(w.get('status'))})"
                                    for w in bad[:6]) if bad else "")]
    cost = cost_lines(d.get("cost"))
    if cost:
        out += ["", "**Cost of waste:** " + _md(cost[0])] + [f"- {_md(line.strip())}" for line in cost[1:]]
    out += ["", f"<sub>forensics {_md((d.get('tool') or {}).get('version', ''))}</sub>", ""]
    return "\n".join(out)


def write_markdown(d: dict[str, Any], path: Path) -> Path:
    path.write_text(render_markdown(d), encoding="utf-8")
    return path

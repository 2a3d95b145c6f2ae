"""The HTML post-mortem: one self-contained file rendered from an analysis dict.

The page needs no network: plotly.js is inlined once, the figures are JSON in a
``<script type="application/json">`` block (with ``<``, ``>`` and ``&`` escaped as ``\\u003c``...,
so no log text can close the block or start markup), and a small fixed script draws them. All
text from the logs goes through jinja2's autoescaping; no inline event handlers, no URLs.

It renders from the analysis dict alone (``Analysis.to_dict()`` or a saved ``analysis.json``):
the ``plots`` section carries the downsampled series, so the logs are not read again.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from ..analysis.timeline import timeline_from_dict

__all__ = ["build_figures", "render_html", "write_html"]

TEMPLATES = Path(__file__).parent / "templates"

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
SHADE = {"critical": "rgba(214,39,40,0.20)", "warning": "rgba(255,127,14,0.20)",
         "info": "rgba(31,119,180,0.10)"}
SEV_COLOR = {"critical": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}

#: Most rows drawn in the timeline chart (the table below it lists every link).
MAX_TIMELINE_ROWS = 40

#: Figures: id, title, rule families shaded on it, what it shows.
_FIGS = [
    ("kl", "KL to the reference, with the KL coefficient", ("kl.", "kl_ctl."),
     "Mean per-token KL (left axis) and the KL coefficient β (right axis); the green band is the "
     "target band when a KL target is known."),
    ("grad", "Gradient norms (log scale)", ("grad.",),
     "Global gradient norms before clipping; the dashed line is the clip threshold when known."),
    ("adv", "Advantages", ("adv.",), "Batch mean and spread of the advantages."),
    ("length", "Response length and truncation", ("length.",),
     "Mean response length (left axis) and the share of truncated responses (right axis)."),
    ("length_reward", "Response length against reward", (),
     "One point per step (thinned evenly on long runs), coloured by step: a rising diagonal "
     "means the reward pays for length."),
    ("reward", "Reward and reward components", ("reward.",), "Mean task reward and its components."),
    ("loss", "Losses", ("loss.",), "Training losses."),
    ("entropy", "Policy entropy", ("entropy.",), "Mean per-token entropy of the policy."),
    ("throughput", "Throughput", ("throughput.", "perf.", "speed."),
     "Tokens per second (left axis) and seconds per step (right axis)."),
]


def _esc(s: Any) -> str:
    """Text for plotly labels: plotly reads a little HTML in labels, so escape it."""
    return html.escape(str(s), quote=False)


def _line(series: dict[str, Any], name: str, label: str | None = None, axis: str = "y",
          dash: str | None = None, width: float = 1.4) -> dict[str, Any] | None:
    s = series.get(name)
    if not s:
        return None
    tr: dict[str, Any] = {"type": "scattergl" if len(s["x"]) > 5000 else "scatter", "mode": "lines",
                          "name": _esc(label or name), "x": s["x"], "y": s["y"], "yaxis": axis,
                          "line": {"width": width}}
    if dash:
        tr["line"]["dash"] = dash
    return tr


def _shapes(findings: list[dict[str, Any]], families: tuple[str, ...], span: int) -> tuple[list, list]:
    """Finding ranges as shaded rectangles (at least 0.4 % of the run wide, so short ones show)."""
    shapes, notes = [], []
    chosen = [f for f in findings if f["rule"].startswith(families)] if families else []
    pad = max(0.5, 0.002 * span)
    for f in chosen:
        sev = f.get("severity", "info")
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": f["first_step"] - pad,
                       "x1": f["last_step"] + pad, "y0": 0, "y1": 1, "fillcolor": SHADE.get(sev),
                       "line": {"width": 0}, "layer": "below"})
    if 0 < len(chosen) <= 6:
        for f in chosen:
            notes.append({"x": f["first_step"], "y": 1.0, "xref": "x", "yref": "paper",
                          "yanchor": "bottom", "xanchor": "left", "showarrow": False,
                          "text": _esc(f["rule"]), "font": {"size": 10, "color": SEV_COLOR.get(
                              f.get("severity", "info"))}})
    return shapes, notes


def _log_ticks(values: list[float], steps: tuple[float, ...] = ()) -> dict[str, Any]:
    """Readable ticks for a log axis: decades (and ``steps`` x decade, e.g. 2 and 5, when the
    range is short), all labelled alike; a range inside one decade gets its two extremes."""
    pos = [v for v in values if v > 0]
    if not pos:
        return {}
    lo, hi = min(pos), max(pos)
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mult = (1.0, *steps) if e1 - e0 <= 3 else (1.0,)
    ticks = {m * 10.0 ** e for e in range(e0, e1 + 1) for m in mult if lo <= m * 10.0 ** e <= hi}
    if len(ticks) < 2:
        ticks |= {float(f"{lo:.2g}"), float(f"{hi:.2g}")}
    vals = sorted(ticks)
    return {"tickmode": "array", "tickvals": vals, "ticktext": [f"{v:.3g}" for v in vals]}


def _layout(title_y: str, **extra: Any) -> dict[str, Any]:
    lay: dict[str, Any] = {
        "height": 320, "margin": {"l": 64, "r": 64, "t": 34, "b": 44},
        "hovermode": "x unified", "showlegend": True,
        "legend": {"orientation": "h", "y": -0.14, "yanchor": "top", "x": 0},
        "xaxis": {"zeroline": False, "hoverformat": "d"},
        "yaxis": {"title": {"text": title_y}, "zeroline": False, "automargin": True},
        "font": {"size": 12}, "plot_bgcolor": "#fff", "paper_bgcolor": "#fff",
    }
    lay["xaxis"]["gridcolor"] = lay["yaxis"]["gridcolor"] = "#eee"
    lay.update(extra)
    return lay


def _y2(title: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "overlaying": "y", "side": "right", "showgrid": False,
            "zeroline": False, "automargin": True, "tickmode": "auto", **extra}


def build_figures(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Plotly figure specs (``{id, title, caption, data, layout}``) from an analysis dict."""
    plots = d.get("plots") or {}
    series = plots.get("series") or {}
    findings = d.get("findings") or []
    run = d.get("run") or {}
    params = (d.get("params") or {}).get("kl_schedule", {})
    st = d.get("steps") or {}
    span = int(st["last"] - st["first"]) if st.get("first") is not None and st.get("last") is not None else 0
    figs = []
    for fid, title, families, caption in _FIGS:
        traces: list[dict[str, Any] | None] = []
        layout = _layout("")
        extra_shapes: list[dict[str, Any]] = []
        if fid == "kl":
            kl_name = "kl_seq" if run.get("kl_target_unit") == "sequence" and "kl_seq" in series else "kl"
            traces = [_line(series, kl_name, "KL" if kl_name == "kl" else "KL (per sequence)"),
                      _line(series, "kl_coef", "KL coefficient β", "y2", "dot")]
            layout["yaxis"]["title"]["text"] = "nats/token" if kl_name == "kl" else "nats/sequence"
            if "kl_coef" in series:
                layout["yaxis2"] = _y2("β", rangemode="tozero")
            target = run.get("kl_target")
            if target and kl_name in series:
                lo, hi = target * params.get("band_low", 0.5), target * params.get("band_high", 1.5)
                extra_shapes += [
                    {"type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": lo, "y1": hi,
                     "fillcolor": "rgba(44,160,44,0.12)", "line": {"width": 0}, "layer": "below"},
                    {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": target,
                     "y1": target, "line": {"color": "#2ca02c", "dash": "dash", "width": 1}}]
                caption += f" Target {target:g}, band [{lo:.3g}, {hi:.3g}]."
        elif fid == "grad":
            traces = [_line(series, "grad_norm", "policy"), _line(series, "grad_norm_value", "value"),
                      _line(series, "grad_norm_clipped", "policy, clipped", dash="dot"),
                      _line(series, "learning_rate", "learning rate", "y2", "dash")]
            layout["yaxis"].update(type="log", title={"text": "L2 norm"}, **_log_ticks(
                [y for n in ("grad_norm", "grad_norm_value", "grad_norm_clipped") if n in series
                 for y in series[n]["y"]], (2.0, 5.0)))
            if "learning_rate" in series:
                layout["yaxis2"] = _y2("learning rate", type="log", **_log_ticks(series["learning_rate"]["y"]))
            clip = run.get("max_grad_norm")
            if clip and any(n in series for n in ("grad_norm", "grad_norm_value")):
                extra_shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1,
                                     "y0": clip, "y1": clip,
                                     "line": {"color": "#555", "dash": "dash", "width": 1}})
        elif fid == "adv":
            traces = [_line(series, n, n.replace("advantage_", "")) for n in
                      ("advantage_mean", "advantage_std", "advantage_min", "advantage_max")]
        elif fid == "length":
            traces = [_line(series, "response_length_mean", "mean length"),
                      _line(series, "response_length_max", "max length", dash="dot"),
                      _line(series, "truncation_rate", "truncation rate", "y2")]
            layout["yaxis"]["title"]["text"] = "tokens"
            if "truncation_rate" in series:
                layout["yaxis2"] = _y2("truncated share", rangemode="tozero", tickformat=".3~%")
        elif fid == "length_reward":
            pair = (plots.get("pairs") or {}).get("length_reward")
            if pair and pair["x"]:
                traces = [{"type": "scattergl" if len(pair["x"]) > 5000 else "scatter", "mode": "markers",
                           "name": "step", "x": pair["x"], "y": pair["y"], "text": pair["step"],
                           "hovertemplate": "step %{text}<br>length %{x}<br>reward %{y}<extra></extra>",
                           "marker": {"size": 5, "color": pair["step"], "colorscale": "Viridis",
                                      "showscale": True, "colorbar": {"title": {"text": "step"}}}}]
                layout = _layout("reward", hovermode="closest", showlegend=False)
                layout["xaxis"]["title"] = {"text": "mean response length (tokens)"}
        elif fid == "reward":
            traces = [_line(series, "reward_mean", "reward", width=2),
                      _line(series, "reward_penalized", "reward − β·KL", dash="dot")]
            traces += [_line(series, n, n.split("/", 1)[1]) for n in sorted(series)
                       if n.startswith("reward/")]
        elif fid == "loss":
            traces = [_line(series, n, n.replace("_", " ")) for n in
                      ("loss", "policy_loss", "value_loss", "entropy_loss")]
        elif fid == "entropy":
            traces = [_line(series, "entropy", "entropy")]
            layout["yaxis"]["title"]["text"] = "nats/token"
        elif fid == "throughput":
            traces = [_line(series, n, n.replace("_", " ")) for n in
                      ("gen_tokens_per_s", "train_tokens_per_s", "samples_per_s")]
            traces.append(_line(series, "step_time", "step time (s)", "y2", "dot"))
            layout["yaxis"]["title"]["text"] = "per second"
            if "step_time" in series:
                layout["yaxis2"] = _y2("s / step", rangemode="tozero")
        data = [t for t in traces if t is not None]
        if not data:
            continue
        shapes, notes = _shapes(findings, families, span)
        layout["shapes"] = extra_shapes + shapes
        layout["annotations"] = notes
        figs.append({"id": f"fig-{fid}", "title": title, "caption": caption, "data": data,
                     "layout": layout})
    return figs


def _timeline_figure(tl: dict[str, Any], steps: dict[str, Any]) -> dict[str, Any] | None:
    events = tl.get("events") or []
    if len(events) > MAX_TIMELINE_ROWS:  # keep the chart readable: drop info findings first
        linked = {i for lk in tl.get("links") or [] for i in (lk["cause"], lk["effect"])}
        keep = [e for e in events if e["severity"] != "info" or e["id"] in linked]
        events = keep[:MAX_TIMELINE_ROWS]
    if not events:
        return None
    n = len(events)
    ys = list(range(n))
    base = [e["first_step"] for e in events]
    width = [max(e["last_step"] - e["first_step"], 0) + 1 for e in events]
    colors = [SEV_COLOR.get(e["severity"], "#7f7f7f") for e in events]
    labels = [_esc(f"{e['rule']} @ {e['onset_step']}") for e in events]
    hover = [_esc(f"{e['rule']} [{e['severity']}] steps {e['first_step']}-{e['last_step']}") for e in events]
    data = [{"type": "bar", "orientation": "h", "y": ys, "x": width, "base": base,
             "marker": {"color": colors}, "text": hover, "textposition": "none",
             "hovertemplate": "%{text}<extra></extra>", "showlegend": False},
            {"type": "scatter", "mode": "markers", "y": ys, "x": [e["onset_step"] for e in events],
             "marker": {"symbol": "diamond", "size": 9, "color": colors, "line": {"width": 1, "color": "#222"}},
             "text": hover, "hovertemplate": "onset %{x}: %{text}<extra></extra>", "showlegend": False}]
    index = {e["id"]: i for i, e in enumerate(events)}
    arrows = []
    for lk in tl.get("links") or []:
        c, e = index.get(lk["cause"]), index.get(lk["effect"])
        if c is None or e is None:
            continue
        arrows.append({"x": events[e]["onset_step"], "y": e, "ax": events[c]["onset_step"], "ay": c,
                       "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "showarrow": True,
                       "arrowhead": 3, "arrowsize": 1.2, "arrowwidth": 1.3, "arrowcolor": "#444",
                       "text": ""})
    layout = _layout("", height=max(200, 60 + 28 * n), hovermode="closest", showlegend=False,
                     annotations=arrows[:200], bargap=0.35)
    layout["yaxis"].update(tickvals=ys, ticktext=labels, autorange="reversed", automargin=True)
    layout["margin"]["l"] = 10
    layout["xaxis"]["title"] = {"text": "step"}
    if steps.get("first") is not None and steps.get("last") is not None:
        pad = max(1.0, 0.01 * (steps["last"] - steps["first"]))
        layout["xaxis"]["range"] = [steps["first"] - pad, steps["last"] + pad]
    return {"id": "fig-timeline", "title": "Timeline", "caption": "", "data": data, "layout": layout}


def _run_title(path: str) -> str:
    """A run's display name: the folder of a ``steps.*`` file, else the file name."""
    p = Path(path)
    return p.parent.name or p.name if p.name.startswith("steps.") else p.name


def _json_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` left."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return "–"
        return f"{v:.{digits}g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    return str(v)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h} h {m:02d} min" if h else (f"{m} min {sec:02d} s" if m else f"{seconds:.3g} s")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)),
                      autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True,
                                                   default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    env.filters["duration"] = _duration
    env.filters["columns"] = lambda rows: list(dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r))
    env.filters["pick_columns"] = lambda rows, wanted: [
        c for c in wanted if any(isinstance(r, dict) and r.get(c) not in (None, "", []) for r in rows)]
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)
    return env


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render_html(d: dict[str, Any], plotly_js: str | None = None) -> str:
    """The whole page for an analysis dict. ``plotly_js`` replaces the inlined library (tests)."""
    findings = sorted(d.get("findings") or [],
                      key=lambda f: (SEVERITY_ORDER.get(f["severity"], 3), f["onset_step"], f["rule"]))
    tl = timeline_from_dict(d)
    by_id = {e["id"]: e for e in tl.get("events", [])}
    links = [dict(lk, cause_event=by_id.get(lk["cause"]), effect_event=by_id.get(lk["effect"]))
             for lk in tl.get("links", [])]
    domino = tl.get("first_domino")
    chain = [by_id[i] for i in (domino or {}).get("chain", []) if i in by_id]
    figures = build_figures(d)
    tfig = _timeline_figure(tl, d.get("steps") or {})
    all_figs = figures + ([tfig] if tfig else [])
    data_json = _json_script({"figures": [{"id": f["id"], "data": f["data"], "layout": f["layout"]}
                                          for f in all_figs]})
    plots = d.get("plots") or {}
    downsampled = [n for n, s in (plots.get("series") or {}).items() if s.get("downsampled")]
    inputs = d.get("inputs") or []
    run = d.get("run") or {}
    title = run.get("name") or (_run_title(inputs[0]["path"]) if inputs else "run")
    notes = [(name, n) for name, t in sorted((d.get("trackers") or {}).items()) for n in t.get("notes", [])]
    gen = d.get("generation") if isinstance(d.get("generation"), dict) else None
    examples = (gen or {}).get("examples") or {}
    gen_fields = {k: v for k, v in (gen or {}).items() if k != "examples"}
    ctx = {
        "title": title,
        "run": run,
        "inputs": inputs,
        "steps": d.get("steps") or {},
        "duration": (plots.get("duration") or {}),
        "health": d.get("health") or {},
        "findings": findings,
        "counts": d.get("findings_by_severity") or {},
        "timeline": tl,
        "links": links,
        "domino": domino,
        "chain": chain,
        "figures": figures,
        "timeline_fig": tfig,
        "has_plots": bool(plots),
        "downsampled": downsampled,
        "max_points": plots.get("max_points"),
        "windows": d.get("windows") if isinstance(d.get("windows"), list) else [],
        "recommendations": d.get("recommendations") if isinstance(d.get("recommendations"), dict) else None,
        "generation": gen_fields,
        "has_generation": gen is not None,
        "examples": {k: v for k, v in examples.items() if isinstance(v, list)},
        "notes": notes,
        "data_json": data_json,
        "plotly_js": _plotly_js() if plotly_js is None else plotly_js,
        "tool": d.get("tool") or {},
    }
    return _environment().get_template("report.html.j2").render(**ctx)


def write_html(d: dict[str, Any], path: Path) -> Path:
    path.write_text(render_html(d), encoding="utf-8")
    return path

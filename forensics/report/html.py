"""The HTML post-mortem rendered from an analysis dict.

The first screen says what matters: the verdict (healthy, or what broke), the first domino with
its evidence in words and as a small table, and what to do now, under a header that names the
run, its algorithm and the trainer that wrote the log. Findings, the timeline, plots, windows,
recommendations, generation and inputs follow.

Plotting library, and why. The page must open with no network, draw every plot with its values
on hover, shade the findings' episodes, and let a finding's "show on the plot" link zoom to its
steps. Measured on plotly.js 4.1.1 (the figures below are this file's inlined weight):

- the full bundle (``plotly.min.js``, what the plotly package ships): 4.82 MB, 97% of a page;
- the "cartesian" partial bundle: 1.50 MB, the whole budget of a page before any data;
- the "basic" partial bundle (scatter, bar and pie traces; shapes, annotations, log axes, colour
  bars, unified hover and zoom are in its core): 1.19 MB. **Chosen**: it draws everything this
  page draws (lines, markers coloured by step, the timeline's bars) with the interactions users
  rely on, and needs no change to the figures but one: WebGL traces (``scattergl``) are not in it,
  and none are needed, since no trace here has more than ``MAX_POINTS`` (1,000) points;
- server-side SVG (no JavaScript): smallest, but hover values and zoom would have to be written
  again by hand in a script of our own.

It is vendored (``vendor/plotly-basic.min.js``, from the npm package ``plotly.js-basic-dist-min``;
``vendor/SOURCE.md`` says how to update it), so the plotly Python package is not needed. The plot
data is kept small too: each line is the analysis's min/max envelope of at most
``forensics.analysis.diagnosis.series.MAX_POINTS`` points (spikes kept), values to the six significant
digits analysis.json holds, steps stored as differences. A page with every
plot then weighs 0.13 MB plus the library for the 240-step demo, and 0.25 MB plus the library for
a 100,000-step run of 20 metrics (1.44 MB inline). The values are not rounded again for the page:
a fifth digit less made it 7% lighter and cost a small scan a tenth of its report's time.

The library is inlined once (``script="inline"``, the default: one self-contained file), or
written once per folder as ``plotly-basic.min.js`` beside the page and referenced by that
relative name (``script="file"``: the page is then the plot data and text only, and every report
in the folder shares the library; :func:`write_plotly_asset` writes it). The figures are JSON in
a ``<script type="application/json">`` block (with ``<``, ``>`` and ``&`` escaped as
``\\u003c``..., so no log text can close the block or start markup), and a small fixed script
draws them and wires the "show on the plot" links. All text from the logs goes through jinja2's
autoescaping; no inline event handlers, no URLs.

It renders from the analysis dict alone (``Analysis.to_dict()`` or a saved ``analysis.json``):
the ``plots`` section carries the downsampled series, so the logs are not read again.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..analysis.diagnosis.timeline import timeline_from_dict
from ..io.output import Outputs
from .cost import cost_lines
from .jsonsafe import jsonable
from .verdict import evidence_rows, verdict

if TYPE_CHECKING:
    from jinja2 import Environment

__all__ = ["PLOTLY_FILE", "build_figures", "render_html", "render_html_bytes", "run_title", "trainer_text",
           "write_html", "write_plotly_asset"]

TEMPLATES = Path(__file__).parent / "templates"
#: The shared library file ``script="file"`` writes beside the page.
PLOTLY_FILE = "plotly-basic.min.js"
#: The vendored library (plotly.js's basic bundle; see the module's docstring).
PLOTLY_SOURCE = Path(__file__).parent / "vendor" / PLOTLY_FILE
#: Where the inlined library goes in the rendered page: no text from a log can write it (its
#: ``<`` would be escaped), so its first occurrence is the script element's.
_PLOTLY_MARK = "<!--forensics:plotly.js-->"

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
SHADE = {"critical": "rgba(214,39,40,0.16)", "warning": "rgba(255,127,14,0.16)",
         "info": "rgba(31,119,180,0.07)"}
SEV_COLOR = {"critical": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}

#: Most rows drawn in the timeline chart (the table below it lists every link).
MAX_TIMELINE_ROWS = 40
#: A positive series whose largest value is this many times its smallest is drawn on a log axis.
LOG_SPAN = 100.0

#: Figures: id, title, rule families shaded on it (and linked from findings), what it shows.
_FIGS = [
    ("kl", "KL to the reference, with the KL coefficient", ("kl.", "kl_ctl.", "hyperparams.kl_coef_"), ""),
    ("grad", "Gradient norms and the learning rate", ("grad.", "hyperparams.lr_", "kl.update_stalled"), ""),
    ("adv", "Advantages", ("adv.",), "Batch mean and spread of the advantages."),
    ("length", "Response length and truncation", ("length.",),
     "Mean response length (left axis) and the share of truncated responses (right axis)."),
    ("length_reward", "Response length against reward", (),
     "One point per step (thinned evenly on long runs), coloured by step: a rising diagonal "
     "means the reward pays for length."),
    ("reward", "Reward and reward components", ("reward.", "generation."), ""),
    ("loss", "Losses", ("loss.",), ""),
    ("loss_log", "Losses spanning decades (log scale)", ("loss.",), ""),
    ("entropy", "Policy entropy", ("entropy.",), "Mean per-token entropy of the policy (nats/token)."),
    ("throughput", "Throughput", ("throughput.",),
     "Tokens per second (left axis) and seconds per step (right axis)."),
]


def _esc(s: Any) -> str:
    """Text for plotly labels: plotly reads a little HTML in labels, so escape it (as
    ``html.escape(s, quote=False)``, whose module loads its table of entities, a millisecond of a
    start).

    >>> _esc("a<b & c>d")
    'a&lt;b &amp; c&gt;d'
    """
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _line(series: dict[str, Any], name: str, label: str | None = None, axis: str = "y",
          dash: str | None = None, width: float = 1.4) -> dict[str, Any] | None:
    s = series.get(name)
    if not s:
        return None
    tr: dict[str, Any] = {"type": "scatter", "mode": "lines", "name": _esc(label or name),
                          "x": s["x"], "y": s["y"], "yaxis": axis, "line": {"width": width}}
    if dash:
        tr["line"]["dash"] = dash
    return tr


def _packed(trace: dict[str, Any], last: list[Any]) -> dict[str, Any]:
    """A trace as stored in the page: integer steps ``x`` as differences ``xd`` (a step of a long
    run is six digits, its difference to the previous point one or two); the page's script adds
    them back up before drawing. ``last`` holds the steps and differences of the trace packed
    before: the traces of a page mostly share their steps, which are then compared, not
    differenced again (a 1,000-step page: 20 traces, a millisecond)."""
    xs = trace.get("x")
    if not isinstance(xs, list) or len(xs) < 2 or set(map(type, xs)) != {int}:
        return trace
    out = {k: v for k, v in trace.items() if k != "x"}
    if last and last[0] == xs:  # both all integers: equal lists have equal differences
        out["xd"] = last[1]
        return out
    steps = np.array(xs, dtype=object if max(xs) >= 2**62 or min(xs) <= -2**62 else np.int64)
    out["xd"] = [xs[0]] + np.diff(steps).tolist()  # beyond 62 bits: Python's integers
    last[:] = [xs, out["xd"]]
    return out


def _merge(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping ranges as one (stacked shading would darken into an unreadable block)."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _shapes(findings: list[dict[str, Any]], families: tuple[str, ...], span: int) -> tuple[list, list]:
    """Finding ranges as shaded rectangles, merged per severity so episodes that overlap shade once
    (at least 0.4 % of the run wide, so short ones show), and labels that do not overlap: each goes
    on the first of three rows where it clears the label before it, or is left to the hover."""
    shapes, notes = [], []
    chosen = [f for f in findings if f["rule"].startswith(families)] if families else []
    pad = max(0.5, 0.002 * span)
    for sev in ("info", "warning", "critical"):  # the most severe drawn last, on top
        ranges = [(f["first_step"] - pad, f["last_step"] + pad) for f in chosen if f.get("severity") == sev]
        for x0, x1 in _merge(ranges):
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0,
                           "y1": 1, "fillcolor": SHADE[sev], "line": {"width": 0}, "layer": "below"})
    serious = sorted({(f["onset_step"], f["rule"], f.get("severity", "info")) for f in chosen
                      if f.get("severity") != "info"})
    ends = [-math.inf] * 3  # where each label row is free again, in steps
    width = max(span, 1) / 90.0  # about one character of a plot ~560 px wide, in steps
    for onset, rule, sev in serious:
        row = next((i for i, end in enumerate(ends) if onset >= end), None)
        if row is None:
            continue
        ends[row] = onset + (len(rule) + 2) * width
        notes.append({"x": onset, "y": 1.0 + 0.07 * row, "xref": "x", "yref": "paper",
                      "yanchor": "bottom", "xanchor": "left", "showarrow": False, "text": _esc(rule),
                      "font": {"size": 10, "color": SEV_COLOR.get(sev)}})
    return shapes, notes


def _decades(series: dict[str, Any], name: str) -> bool:
    """Whether a series is positive and spans ``LOG_SPAN`` or more (a log axis shows it whole)."""
    ys = [y for y in (series.get(name) or {}).get("y", []) if y is not None]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) >= LOG_SPAN


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
    losses = [n for n in ("loss", "policy_loss", "value_loss", "entropy_loss") if n in series]
    log_losses = [n for n in losses if _decades(series, n)]
    figs = []
    for fid, title, families, caption in _FIGS:
        traces: list[dict[str, Any] | None] = []
        layout = _layout("")
        extra_shapes: list[dict[str, Any]] = []
        if fid == "kl":
            per_seq = (run.get("kl_target_unit") == "sequence" and "kl_seq" in series) or "kl" not in series
            kl_name = "kl_seq" if per_seq else "kl"
            unit = "nats/sequence" if per_seq else "nats/token"
            traces = [_line(series, kl_name, "KL per sequence" if per_seq else "KL per token"),
                      _line(series, "kl_coef", "KL coefficient β", "y2", "dot")]
            layout["yaxis"]["title"]["text"] = unit
            caption = ("KL summed over the response tokens, averaged over responses" if per_seq else
                       "Mean per-token KL") + f" ({unit}, left axis)"
            if _decades(series, kl_name):
                layout["yaxis"].update(type="log", **_log_ticks(series[kl_name]["y"], (2.0, 5.0)))
                caption += ", log scale"
            if "kl_coef" in series:
                layout["yaxis2"] = _y2("β", rangemode="tozero")
                caption += "; the KL coefficient β (dotted, right axis)"
            caption += "."
            target = run.get("kl_target")
            if target and kl_name in series:
                lo, hi = target * params.get("band_low", 0.5), target * params.get("band_high", 1.5)
                extra_shapes += [
                    {"type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": lo, "y1": hi,
                     "fillcolor": "rgba(44,160,44,0.12)", "line": {"width": 0}, "layer": "below"},
                    {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": target,
                     "y1": target, "line": {"color": "#2ca02c", "dash": "dash", "width": 1}}]
                caption += f" Green: the target {target:g} {unit} and its band [{lo:.3g}, {hi:.3g}]."
        elif fid == "grad":
            traces = [_line(series, "grad_norm", "policy"), _line(series, "grad_norm_value", "value"),
                      _line(series, "grad_norm_clipped", "policy, clipped", dash="dashdot"),
                      _line(series, "learning_rate", "learning rate", "y2", "dot", width=2)]
            layout["yaxis"].update(type="log", title={"text": "L2 norm"}, **_log_ticks(
                [y for n in ("grad_norm", "grad_norm_value", "grad_norm_clipped") if n in series
                 for y in series[n]["y"]], (2.0, 5.0)))
            caption = "Global gradient norms before clipping (left axis, log scale)"
            if "learning_rate" in series:
                layout["yaxis2"] = _y2("learning rate", type="log", **_log_ticks(series["learning_rate"]["y"]))
                caption += "; the learning rate (thick dotted line, right axis, log scale)"
            clip = run.get("max_grad_norm")
            if clip and any(n in series for n in ("grad_norm", "grad_norm_value")):
                extra_shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1,
                                     "y0": clip, "y1": clip,
                                     "line": {"color": "#555", "dash": "dash", "width": 1}})
                caption += f"; the thin dashed line is the clip threshold max_grad_norm = {clip:g}"
            caption += "."
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
                traces = [{"type": "scatter", "mode": "markers",
                           "name": "step", "x": pair["x"], "y": pair["y"], "text": pair["step"],
                           "hovertemplate": "step %{text}<br>length %{x}<br>reward %{y}<extra></extra>",
                           "marker": {"size": 5, "color": pair["step"], "colorscale": "Viridis",
                                      "showscale": True, "colorbar": {"title": {"text": "step"}}}}]
                layout = _layout("reward", hovermode="closest", showlegend=False)
                layout["xaxis"]["title"] = {"text": "mean response length (tokens)"}
        elif fid == "reward":
            traces = [_line(series, "reward_mean", "reward", width=2)]
            traces += [_line(series, n, n.split("/", 1)[1]) for n in sorted(series) if n.startswith("reward/")]
            traces.append(_line(series, "reward_penalized", "reward − β·KL", "y2", "dot"))
            caption = "Mean task reward (the score before any KL penalty) and its components (left axis)"
            if "reward_penalized" in series:
                layout["yaxis2"] = _y2("reward − β·KL")
                caption += "; the KL-penalised reward on its own scale (dotted, right axis)"
            caption += "."
        elif fid == "loss":
            linear = [n for n in losses if n not in log_losses]
            traces = [_line(series, n, n.replace("_", " ")) for n in linear]
            caption = "Training losses, linear scale" + (
                f"; {', '.join(n.replace('_', ' ') for n in log_losses)} span decades: see the next plot."
                if log_losses else ".")
        elif fid == "loss_log":
            traces = [_line(series, n, n.replace("_", " ")) for n in log_losses]
            if log_losses:
                layout["yaxis"].update(type="log", **_log_ticks(
                    [y for n in log_losses for y in series[n]["y"]], (2.0, 5.0)))
            caption = "Losses whose largest value is 100x their smallest or more, on a log scale."
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
        if notes:
            layout["margin"]["t"] = 34 + 14 * (1 + max(round((n["y"] - 1.0) / 0.07) for n in notes))
        figs.append({"id": f"fig-{fid}", "title": title, "caption": caption, "data": data,
                     "layout": layout, "families": list(families)})
    return figs


def figure_for(rule: str, figures: list[dict[str, Any]]) -> str | None:
    """The id of the figure a finding's rule is shaded on (its "show on the plot" link)."""
    for f in figures:
        if any(rule.startswith(fam) for fam in f.get("families", ())):
            return str(f["id"])
    return None


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


#: File names a trainer or logger gives every run: the run is named by its folder instead.
_GENERIC_LOG = re.compile(r"(steps|samples|trainer_state|trainer_log|metrics|history|progress|log|train|"
                          r"output|console|stdout|events|wandb-history|wandb-summary|debug)(\..*)?$|"
                          r"events\.out\.tfevents\..*|run-\w+\.wandb|output\.log", re.I)
#: Folders that hold a run's files without naming it (a checkpoint, the callback's, W&B's).
_GENERIC_DIR = re.compile(r"checkpoint-\d+|forensics|files|logs?|runs|tensorboard|tb|wandb|\.", re.I)
_WANDB_RUN = re.compile(r"(?:offline-)?run-\d{8}_\d{6}-(\w+)")


def run_title(path: str) -> str:
    """A run's display name, never a file name every run has: the run's folder (above a
    ``checkpoint-N/``, ``forensics/`` or W&B ``files/``), a W&B run's id, or the log file's
    name without its extensions when the file is named for the run.

    >>> [run_title(p) for p in ("out/my-grpo/trainer_state.json", "out/my-grpo/checkpoint-40/trainer_state.json",
    ...  "w/wandb/run-20250101_000000-abc123/run-abc123.wandb", "runs/ppo-7/steps.jsonl", "ppo_seed3.jsonl.gz")]
    ['my-grpo', 'my-grpo', 'abc123', 'ppo-7', 'ppo_seed3']
    """
    p = Path(path)
    if not _GENERIC_LOG.fullmatch(p.name):
        return p.name.split(".")[0] or p.name
    for folder in [p.parent, *p.parent.parents]:
        wandb = _WANDB_RUN.fullmatch(folder.name)
        if wandb:
            return wandb.group(1)
        if folder.name and not _GENERIC_DIR.fullmatch(folder.name):
            return folder.name
    return p.name


def _json_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` left."""
    try:
        text = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()  # compact; NaN is null
    except (orjson.JSONEncodeError, TypeError):  # an integer beyond 64 bits in a saved analysis...
        text = json.dumps(jsonable(obj), allow_nan=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if text.isascii():  # (known without a pass over the text) no line separator to escape
        return text
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


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


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    """The template environment, built once per process (jinja2 is imported here, when a page
    is first rendered). Compiled templates are cached by jinja2 between processes (see
    :func:`_bytecode_cache`)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), bytecode_cache=_bytecode_cache(),
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


def _bytecode_cache() -> Any:
    """jinja2's compiled-template cache in a private folder of the user's temporary directory
    (``_jinja2-cache-<uid>``, checked by jinja2 to belong to the user): compiling the report's
    template costs more than rendering it. None (compile each time) when that folder is unusable."""
    from jinja2 import FileSystemBytecodeCache

    class _Quiet(FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:  # a read-only or full temporary directory: compile next time
                pass

    try:
        return _Quiet()
    except (OSError, RuntimeError):
        return None


@functools.lru_cache(maxsize=1)
def _plotly_bytes() -> bytes:
    """The vendored plotly.js basic bundle (1.2 MB, UTF-8), read once per process."""
    return PLOTLY_SOURCE.read_bytes()


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    """The bundle as text (:func:`render_html`'s string page)."""
    return _plotly_bytes().decode("utf-8")


def write_plotly_asset(folder: Path, outputs: Outputs | None = None, earlier: Path | None = None) -> Path:
    """The shared library ``folder/plotly-basic.min.js`` that pages rendered with
    ``script="file"`` in that folder refer to, copied unless the folder already holds it (one
    copy serves every page that refers to it: a folder's reports, or a whole fleet's). ``outputs``
    (:class:`~forensics.io.output.Outputs`) writes it safely, never over an input or a link. The
    bytes are copied by the kernel (``shutil.copyfile``), not read and written by Python, and the
    copy takes the vendored file's modification time. ``earlier``: a folder (the report's
    previous generation) whose copy is hard-linked instead when it is such a copy, of the same
    size and time (a scan written again into its folder: 0.5 ms of its reports)."""
    lib = folder / PLOTLY_FILE
    if lib.exists():
        return lib
    out = outputs or Outputs()
    source = PLOTLY_SOURCE.stat()
    if earlier is not None and _same_copy(earlier / PLOTLY_FILE, source):
        out.check(lib)
        try:
            os.link(earlier / PLOTLY_FILE, lib)
            return lib
        except OSError:  # no hard links there: copied
            pass
    with out.temporary(lib) as tmp:
        shutil.copyfile(PLOTLY_SOURCE, tmp)
        os.utime(tmp, ns=(source.st_atime_ns, source.st_mtime_ns))
    return lib


def _same_copy(path: Path, source: os.stat_result) -> bool:
    """Whether ``path`` is a regular file of the vendored library's size and modification time."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == source.st_size and st.st_mtime_ns == source.st_mtime_ns


def trainer_text(d: dict[str, Any]) -> str:
    """Which trainer wrote the log, in words: the recommendations' trainer, or the formats read."""
    rec = d.get("recommendations") if isinstance(d.get("recommendations"), dict) else {}
    trainer = (rec or {}).get("trainer") or {}
    formats = sorted({i.get("format") for i in d.get("inputs") or [] if i.get("format")})
    if trainer:
        return f"{trainer.get('name')} ({trainer.get('config')})"
    return ", ".join(formats) if formats else "unknown"


def _generation(gen: dict[str, Any], series: dict[str, Any]) -> dict[str, Any]:
    """The generation section in words: what each rate measures, beside the run's own rewards of
    the same name (a tag format rate of 0% beside a format reward of 0.99 measure different things)."""
    s = gen.get("summary") or {}
    rows = []

    def add(label: str, value: Any, fmt: str = "") -> None:
        if value is not None:
            rows.append((label, format(value, fmt) if fmt and isinstance(value, (int, float)) else value))

    add("responses", s.get("responses"))
    add("steps with responses", s.get("steps"))
    add("responses matching the tag format (format_pattern below)", s.get("format_rate"), ".1%")
    add("mean length (tokens)", s.get("mean_length_tokens"), ".4g")
    add("mean length (characters)", s.get("mean_chars"), ".4g")
    add("mean reasoning (<think>) characters", s.get("mean_think_chars"), ".4g")
    add("mean answer (<answer>) characters", s.get("mean_answer_chars"), ".4g")
    add("reasoning indicators per response", s.get("reasoning_indicators_per_response"), ".3g")
    add(f"repeated word {gen.get('ngram', 3)}-grams", s.get("repetition"), ".1%")
    rewards = []
    for name in sorted(series):
        if name.startswith("reward/") and series[name].get("y"):
            ys = [y for y in series[name]["y"] if y is not None]
            if ys:
                rewards.append((f"the run's own reward {name} (mean of the plotted points)",
                                format(sum(ys) / len(ys), ".4g")))
    examples = []
    for w in gen.get("windows") or []:
        for kind in ("best", "worst"):
            ex = w.get(kind)
            if isinstance(ex, dict):
                examples.append(dict(ex, kind=kind, window=f"{w.get('first_step')}–{w.get('last_step')}"))
    return {"rows": rows, "rewards": rewards, "pattern": gen.get("format_pattern"), "examples": examples[:12]}


def render_html(d: dict[str, Any], plotly_js: str | None = None, script: str = "inline",
                plotly_src: str = PLOTLY_FILE) -> str:
    """The whole page for an analysis dict. ``plotly_js`` replaces the inlined library (tests);
    ``script="file"`` references the shared library instead of inlining it: ``plotly_src``, a
    relative URL (default ``plotly-basic.min.js`` beside the page; a page in a sub-folder of the
    folder :func:`write_plotly_asset` wrote it to gives ``../plotly-basic.min.js``)."""
    page = _page(d, script, plotly_src)
    if script == "file":
        return page
    # the library (1.2 MB) is spliced in once instead of going through the template's output
    return page.replace(_PLOTLY_MARK, _plotly_js() if plotly_js is None else plotly_js, 1)


def render_html_bytes(d: dict[str, Any], script: str = "inline", plotly_src: str = PLOTLY_FILE) -> bytes:
    """:func:`render_html`'s page as the UTF-8 bytes written to report.html: the inlined library
    is the vendored file's own bytes, never decoded, copied into a string or encoded again (3.7 ms
    of a small scan's first report, 2 ms of each after)."""
    page = _page(d, script, plotly_src)
    if script == "file":
        return page.encode("utf-8")
    head, _, tail = page.partition(_PLOTLY_MARK)
    return b"".join((head.encode("utf-8"), _plotly_bytes(), tail.encode("utf-8")))


def _page(d: dict[str, Any], script: str, plotly_src: str) -> str:
    """The template's page: with ``script="inline"``, ``_PLOTLY_MARK`` where the library goes."""
    findings = sorted(d.get("findings") or [],
                      key=lambda f: (SEVERITY_ORDER.get(f["severity"], 3), f["onset_step"], f["rule"]))
    tl = timeline_from_dict(d)
    by_id = {e["id"]: e for e in tl.get("events", [])}
    links = [dict(lk, cause_event=by_id.get(lk["cause"]), effect_event=by_id.get(lk["effect"]))
             for lk in tl.get("links", [])]
    domino = tl.get("first_domino")
    chain = [by_id[i] for i in (domino or {}).get("chain", []) if i in by_id]
    rec = d.get("recommendations") if isinstance(d.get("recommendations"), dict) else None
    v = verdict(d.get("findings") or [], tl, rec, d.get("coverage"))
    figures = build_figures(d)
    tfig = _timeline_figure(tl, d.get("steps") or {})
    all_figs = figures + ([tfig] if tfig else [])
    last: list[Any] = []
    data_json = _json_script({"figures": [{"id": f["id"], "data": [_packed(t, last) for t in f["data"]],
                                           "layout": f["layout"]} for f in all_figs]})
    st = d.get("steps") or {}
    pad = max(1.0, 0.02 * ((st.get("last") or 0) - (st.get("first") or 0)))
    links_to = {id(f): figure_for(f["rule"], figures) for f in findings}
    plots = d.get("plots") or {}
    downsampled = [n for n, sr in (plots.get("series") or {}).items() if sr.get("downsampled")]
    inputs = d.get("inputs") or []
    run = d.get("run") or {}
    title = run.get("name") or (run_title(inputs[0]["path"]) if inputs else "run")
    notes = [(name, n) for name, t in sorted((d.get("trackers") or {}).items()) for n in t.get("notes", [])]
    gen = d.get("generation") if isinstance(d.get("generation"), dict) else None
    root = v.get("domino_finding")
    ctx = {
        "title": title,
        "run": run,
        "algorithm": (run.get("algorithm") or "").upper() or "algorithm not stated",
        "trainer": trainer_text(d),
        "inputs": inputs,
        "steps": st,
        "duration": (plots.get("duration") or {}),
        "health": d.get("health") or {},
        "verdict": v,
        "root_evidence": evidence_rows((root or {}).get("evidence"), limit=5),
        "root_link": figure_for(root["rule"], figures) if root else None,
        "findings": [dict(f, evidence_rows=evidence_rows(f.get("evidence")), figure=links_to[id(f)],
                          x0=f["first_step"] - pad, x1=f["last_step"] + pad) for f in findings],
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
        "recommendations": rec,
        "generation": _generation(gen, plots.get("series") or {}) if gen else None,
        "notes": notes,
        "data_json": data_json,
        "script": script,
        "plotly_file": plotly_src,
        "plotly_js": "" if script == "file" else _PLOTLY_MARK,
        "tool": d.get("tool") or {},
        "cost": cost_lines(d.get("cost")),
    }
    return _environment().get_template("report.html.j2").render(**ctx)


def write_html(d: dict[str, Any], path: Path, script: str = "inline") -> Path:
    """Write the page; with ``script="file"``, also the shared library beside it
    (:func:`write_plotly_asset`)."""
    path.write_bytes(render_html_bytes(d, script=script))
    if script == "file":
        write_plotly_asset(path.parent)
    return path

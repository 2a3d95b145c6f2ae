"""Run diff: compare run B against run A, step by step, as a regression gate.

What is compared
----------------
* **Health**: every score of A and B and the change.
* **Findings**: a finding of B is *new* when A has no finding of the same rule whose step range
  overlaps it; a finding of A is *resolved* when B has none. (Runs that fail at slightly different
  steps still match as long as the ranges overlap.)
* **Distributions** of the key metrics (:data:`KEY_METRICS`, when both runs logged them): the
  two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``) on all finite values of each run.
* **Final reward**: the mean ``reward_mean`` over the last :data:`FINAL_FRACTION` of each run's
  steps (at least one step).
* **Divergence**: the runs are aligned on the steps both logged. For ``reward_mean`` and ``kl``,
  ``d = |a - b|``; the threshold is the larger of ``median + 6 x 1.4826 x MAD`` of ``d`` over the
  first :data:`BASELINE_FRACTION` of the aligned steps (at least 20) and three times the combined
  step-to-step noise of the two series; the divergence step is the first of :data:`CONSECUTIVE`
  consecutive steps above the threshold.

Regression (exit 1 from ``forensics diff``): the overall, stability or convergence score drops by
more than ``tolerance``, or B has a new warning or critical finding.
"""

from __future__ import annotations

import warnings
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.stats.order import median
from ..config import DIFF_TOLERANCE
from ..io.output import is_report_link
from ..records import record
from .saved import load_analysis

__all__ = ["BASELINE_FRACTION", "CONSECUTIVE", "FINAL_FRACTION", "KEY_METRICS", "RunData",
           "diff_runs", "first_divergence", "load_saved", "render_text", "run_from_analysis"]

KEY_METRICS = ("kl", "reward_mean", "grad_norm", "entropy", "response_length_mean")
DIVERGENCE_METRICS = ("reward_mean", "kl")
FINAL_FRACTION = 0.05
BASELINE_FRACTION = 0.1
CONSECUTIVE = 5
_HEALTH = ("overall", "stability", "convergence")


@record
class RunData:
    """One side of a diff: the analysis dict and its per-step columns."""

    label: str
    analysis: dict[str, Any]
    frame: dict[str, np.ndarray] = field(default_factory=dict)
    #: "metrics.csv", "scan" or "plots (downsampled)": where the per-step columns came from
    series_source: str = "scan"


def run_from_analysis(analysis: Any, label: str) -> RunData:
    """A :class:`RunData` from a finished :class:`~forensics.analysis.engine.Analysis`."""
    return RunData(label, analysis.to_dict(), analysis.metrics_frame(), "scan")


def load_saved(path: Path) -> RunData:
    """Load ``analysis.json`` (a file or a report folder), checked as ``report`` and ``gate`` check it
    (:func:`~forensics.verdicts.saved.load_analysis`), and ``metrics.csv`` beside it if any."""
    file = path / "analysis.json" if path.is_dir() else path
    metrics = file.parent / "metrics.csv"
    if is_report_link(file) and is_report_link(metrics):  # both of one report generation
        file = file.resolve()
        metrics = file.parent / metrics.name
    data = load_analysis(file)
    frame = read_metrics_csv(metrics)
    if frame is not None:
        return RunData(str(path), data, frame, "metrics.csv")
    frame = _frame_from_plots(data)
    return RunData(str(path), data, frame, "plots (downsampled)" if frame else "none")


def read_metrics_csv(path: Path) -> dict[str, np.ndarray] | None:
    """The per-step columns of a ``metrics.csv`` written by ``forensics scan`` (None if unusable),
    or of the ``metrics.parquet`` beside it (a large run's table)."""
    if not path.is_file() and path.with_suffix(".parquet").is_file():
        path = path.with_suffix(".parquet")
    if not path.is_file():
        return None
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path) if path.suffix == ".parquet" else pacsv.read_csv(path)
        frame = {name: table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
                 for name in table.column_names}
        frame["step"] = frame["step"].astype(np.int64)
    except Exception:  # unreadable or not ours: the caller falls back to what it has
        return None
    return frame


def _frame_from_plots(d: dict[str, Any]) -> dict[str, np.ndarray]:
    series = (d.get("plots") or {}).get("series") or {}
    if not series:
        return {}
    steps = np.unique(np.concatenate([np.asarray(s["x"], dtype=np.int64) for s in series.values()]))
    frame: dict[str, np.ndarray] = {"step": steps}
    for name, s in series.items():
        col = np.full(len(steps), np.nan)
        # null (a NaN the writer could not store) is NaN again
        col[np.searchsorted(steps, np.asarray(s["x"], dtype=np.int64))] = np.asarray(s["y"], dtype=np.float64)
        frame[name] = col
    return frame


def _f(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return float(f"{x:.6g}") if np.isfinite(x) else None


def _overlaps(f: dict[str, Any], g: dict[str, Any]) -> bool:
    return (f["rule"] == g["rule"] and int(f["first_step"]) <= int(g["last_step"])
            and int(g["first_step"]) <= int(f["last_step"]))


def _brief(f: dict[str, Any]) -> dict[str, Any]:
    return {k: f[k] for k in ("rule", "severity", "first_step", "last_step", "onset_step", "message")
            if k in f}


def first_divergence(a: np.ndarray, b: np.ndarray, steps: np.ndarray,
                     k: int = CONSECUTIVE) -> dict[str, Any]:
    """First step of ``k`` consecutive aligned steps where ``|a - b|`` exceeds the robust threshold.

    >>> s = np.arange(200); a = np.sin(s / 7.0); b = a.copy(); b[120:] += 5
    >>> first_divergence(a, b, s)["step"]
    120
    >>> first_divergence(a, a.copy(), s)["step"] is None
    True
    """
    ok = np.isfinite(a) & np.isfinite(b)
    a, b, steps = a[ok], b[ok], steps[ok]
    n = len(a)
    if n < k + 2:
        return {"step": None, "threshold": None, "note": "too few aligned steps"}
    d = np.abs(a - b)
    base = d[: max(20, int(BASELINE_FRACTION * n))]
    med = median(base)
    mad = median(np.abs(base - med))
    noise = np.sqrt(sum((1.4826 * median(np.abs(np.diff(x))) / np.sqrt(2)) ** 2
                        for x in (a, b)))
    scale = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))), 1e-12)
    threshold = max(med + 6 * 1.4826 * mad, 3 * noise, 1e-6 * scale)
    above = d > threshold
    if above.sum() >= k:
        run = np.convolve(above.astype(np.int64), np.ones(k, dtype=np.int64), mode="valid")
        hits = np.flatnonzero(run == k)
        if len(hits):
            i = int(hits[0])
            return {"step": int(steps[i]), "threshold": _f(threshold), "a": _f(a[i]), "b": _f(b[i])}
    return {"step": None, "threshold": _f(threshold)}


def _final_reward(frame: dict[str, np.ndarray]) -> float | None:
    r = frame.get("reward_mean")
    if r is None:
        return None
    r = r[np.isfinite(r)]
    if not len(r):
        return None
    m = max(1, int(np.ceil(FINAL_FRACTION * len(r))))
    return _f(np.mean(r[-m:]))


def diff_runs(a: RunData, b: RunData, tolerance: float = 0.05) -> dict[str, Any]:
    """Compare B against A (see the module docstring). JSON-able; ``regression.regressed`` decides."""
    tolerance = DIFF_TOLERANCE.check(tolerance, "tolerance")
    ha, hb = a.analysis.get("health") or {}, b.analysis.get("health") or {}
    health: dict[str, Any] = {}
    for name in _HEALTH:
        va, vb = ha.get(name), hb.get(name)
        health[name] = {"a": va, "b": vb,
                        "delta": None if va is None or vb is None else round(vb - va, 4)}
    areas = sorted(set(ha.get("areas") or {}) | set(hb.get("areas") or {}))
    health["areas"] = {}
    for name in areas:
        va, vb = (ha.get("areas") or {}).get(name), (hb.get("areas") or {}).get(name)
        health["areas"][name] = {"a": va, "b": vb,
                                 "delta": None if va is None or vb is None else round(vb - va, 4)}
    fa, fb = a.analysis.get("findings", []), b.analysis.get("findings", [])
    new = [_brief(g) for g in fb if not any(_overlaps(f, g) for f in fa)]
    resolved = [_brief(f) for f in fa if not any(_overlaps(f, g) for g in fb)]
    persisting = [_brief(g) for g in fb if any(_overlaps(f, g) for f in fa)]
    metrics: dict[str, Any] = {}
    for name in KEY_METRICS:
        xa, xb = a.frame.get(name), b.frame.get(name)
        if xa is None or xb is None:
            continue
        xa, xb = xa[np.isfinite(xa)].astype(np.float64), xb[np.isfinite(xb)].astype(np.float64)
        if len(xa) < 2 or len(xb) < 2:
            continue
        from scipy import stats  # here, not at import: `gate` and `report` load this module too

        with warnings.catch_warnings():  # "exact calculation unsuccessful": asymptotic is fine
            warnings.simplefilter("ignore", RuntimeWarning)
            ks = stats.ks_2samp(xa, xb)
        metrics[name] = {"a_mean": _f(xa.mean()), "b_mean": _f(xb.mean()),
                         "a_median": _f(median(xa)), "b_median": _f(median(xb)),
                         "ks_statistic": _f(ks.statistic), "ks_pvalue": _f(ks.pvalue),
                         "n_a": len(xa), "n_b": len(xb)}
    sa = a.frame.get("step", np.zeros(0, np.int64))
    sb = b.frame.get("step", np.zeros(0, np.int64))
    common, ia, ib = np.intersect1d(sa, sb, assume_unique=False, return_indices=True)
    divergence: dict[str, Any] = {}
    for name in DIVERGENCE_METRICS:
        if name in a.frame and name in b.frame and len(common):
            divergence[name] = first_divergence(a.frame[name][ia].astype(np.float64),
                                                b.frame[name][ib].astype(np.float64), common)
    firsts = [(v["step"], m) for m, v in divergence.items() if v.get("step") is not None]
    first = {"metric": min(firsts)[1], "step": min(firsts)[0]} if firsts else None
    fra, frb = _final_reward(a.frame), _final_reward(b.frame)
    reasons = []
    for name in _HEALTH:
        delta = health[name]["delta"]
        if delta is not None and -delta > tolerance:
            reasons.append(f"health {name} dropped {-delta:.3f} ({health[name]['a']} -> "
                           f"{health[name]['b']}), more than the tolerance {tolerance}")
    serious = [g for g in new if g["severity"] in ("warning", "critical")]
    if serious:
        reasons.append(f"{len(serious)} new warning/critical finding(s): "
                       + ", ".join(sorted({g['rule'] for g in serious})))
    return {
        "a": a.label, "b": b.label,
        "series_source": {"a": a.series_source, "b": b.series_source},
        "aligned_steps": len(common),
        "aligned_range": [int(common[0]), int(common[-1])] if len(common) else None,
        "health": health,
        "findings": {"new": new, "resolved": resolved, "persisting": persisting},
        "metrics": metrics,
        "final_reward": {"a": fra, "b": frb, "delta": None if fra is None or frb is None
                         else _f(frb - fra), "fraction": FINAL_FRACTION},
        "divergence": divergence,
        "first_divergence": first,
        "tolerance": tolerance,
        "regression": {"regressed": bool(reasons), "reasons": reasons},
    }


def _s(v: Any, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def render_text(d: dict[str, Any]) -> str:
    """A readable diff report."""
    lines = [f"A: {d['a']}", f"B: {d['b']}",
             f"aligned steps: {d['aligned_steps']}"
             + (f" ({d['aligned_range'][0]}..{d['aligned_range'][1]})" if d["aligned_range"] else ""),
             "", "health            A       B   change"]
    for name in _HEALTH:
        h = d["health"][name]
        lines.append(f"  {name:<12} {_s(h['a']):>7} {_s(h['b']):>7} {_s(h['delta'], '+.3f'):>8}")
    for name, h in d["health"]["areas"].items():
        lines.append(f"    {name:<10} {_s(h['a']):>7} {_s(h['b']):>7} {_s(h['delta'], '+.3f'):>8}")
    f = d["findings"]
    lines += ["", f"findings: {len(f['new'])} new, {len(f['resolved'])} resolved, "
                  f"{len(f['persisting'])} persisting"]
    for g in f["new"]:
        lines.append(f"  + [{g['severity']}] {g['rule']} steps {g['first_step']}-{g['last_step']}: "
                     f"{g['message']}")
    for g in f["resolved"]:
        lines.append(f"  - [{g['severity']}] {g['rule']} steps {g['first_step']}-{g['last_step']}")
    if d["metrics"]:
        lines += ["", "distributions (two-sample KS)      mean A      mean B    KS D   p-value"]
        for name, m in d["metrics"].items():
            lines.append(f"  {name:<28} {_s(m['a_mean'], '10.4g')}  {_s(m['b_mean'], '10.4g')}  "
                         f"{_s(m['ks_statistic'], '6.3f')}  {_s(m['ks_pvalue'], '.3g')}")
    fr = d["final_reward"]
    if fr["a"] is not None or fr["b"] is not None:
        lines += ["", f"final reward (last {fr['fraction']:.0%} of steps): A {_s(fr['a'], '.4g')}, "
                      f"B {_s(fr['b'], '.4g')}, change {_s(fr['delta'], '+.4g')}"]
    fd = d["first_divergence"]
    for name, v in d["divergence"].items():
        where = f"from step {v['step']}" if v.get("step") is not None else "no divergence"
        lines.append(f"divergence of {name}: {where} (threshold |A-B| > {_s(v.get('threshold'), '.4g')})")
    if fd:
        lines.append(f"first divergence: {fd['metric']} at step {fd['step']}")
    src = d["series_source"]
    if "plots (downsampled)" in src.values():
        lines.append("note: per-step series taken from the downsampled plots section (no metrics.csv "
                     "beside the analysis); distributions are approximate")
    r = d["regression"]
    lines += ["", "REGRESSION: B is worse than A" if r["regressed"] else "no regression"]
    lines += [f"  - {x}" for x in r["reasons"]]
    return "\n".join(lines)

"""The cost of waste: the compute a run spent after its first critical finding and after it
stopped learning.

Two things are needed: where the waste began (the onset of the first critical finding; the
earliest onset of a damage finding that says learning stopped: :data:`LEARNING_STOPPED`, critical
only: the cost of waste comes from damage, never from information) and what the
run's steps cost. The cost comes from the log's wall clock (``timestamp``, else the sum of
``step_time``: :mod:`forensics.schema`) times the GPUs (``[run] gpus``, ``--gpus``), or from the
run's total GPU-hours (``gpu_hours``, ``--gpu-hours``) shared out by wall clock, or by steps when
the log has no clock. A price per GPU-hour (``gpu_price``, ``--gpu-price``) turns GPU-hours into
money. Without GPUs or GPU-hours the section states wall-clock hours only.

Timestamps are stored as float32 (about two minutes of resolution on epoch seconds): good to a
few minutes, which is what a cost in GPU-hours needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...records import record
from ..findings import Finding, Severity

if TYPE_CHECKING:
    from ..result import Analysis

__all__ = ["LEARNING_STOPPED", "cost_section"]

#: Rules whose onset says the run stopped learning: the reward went flat or sits at its floor,
#: groups carry no signal, a preference loss never left ln 2.
LEARNING_STOPPED = ("reward.stagnation", "signal.dead_groups", "signal.reward_floor", "pref.not_learning")


@record
class _Clock:
    """Elapsed wall-clock seconds: in all, and before each step of interest; rows likewise."""

    source: str | None
    total_s: float
    before_s: dict[int, float]
    rows: int
    rows_before: dict[int, int]


def _clock(parts: Iterable[dict[str, np.ndarray]], steps: list[int]) -> _Clock:
    """One pass over the per-step table: the wall clock (timestamps, else step times) and the
    rows, in all and before each step of ``steps``."""
    ts_first = ts_last = None
    ts_at: dict[int, float] = {}
    st_sum, st_any = 0.0, False
    st_before = dict.fromkeys(steps, 0.0)
    rows, rows_before = 0, dict.fromkeys(steps, 0)
    for part in parts:
        step = part["step"]
        rows += len(step)
        for s in steps:
            rows_before[s] += int((step < s).sum())
        ts = part.get("timestamp")
        if ts is not None:
            ok = np.isfinite(ts)
            if ok.any():
                t, st_ok = ts[ok].astype(np.float64), step[ok]
                ts_first = float(t[0]) if ts_first is None else ts_first
                ts_last = float(t[-1])
                for s in steps:
                    hit = np.flatnonzero(st_ok >= s)
                    if s not in ts_at and len(hit):
                        ts_at[s] = float(t[hit[0]])
        st = part.get("step_time")
        if st is not None:
            ok = np.isfinite(st) & (st >= 0)
            if ok.any():
                st_any = True
                st_sum += float(st[ok].astype(np.float64).sum())
                for s in steps:
                    st_before[s] += float(st[ok & (step < s)].astype(np.float64).sum())
    if ts_first is not None and ts_last is not None and ts_last > ts_first:
        total = ts_last - ts_first
        return _Clock("timestamp", total, {s: ts_at.get(s, ts_last) - ts_first for s in steps}, rows, rows_before)
    if st_any and st_sum > 0:
        return _Clock("sum of step_time", st_sum, st_before, rows, rows_before)
    return _Clock(None, 0.0, {}, rows, rows_before)


def _events(findings: list[Finding]) -> list[dict[str, Any]]:
    """Where the waste began: the first critical finding, the first sign learning stopped."""
    out = []
    crit = [f for f in findings if f.severity is Severity.CRITICAL]
    # waste is priced from damage only: an information-level plateau (a converged run) or a
    # warning the run recovered from wasted nothing that the report can name
    stop = [f for f in findings if f.rule in LEARNING_STOPPED and f.severity is Severity.CRITICAL]
    for what, group in (("first critical finding", crit), ("learning stopped", stop)):
        if group:
            f = min(group, key=lambda f: (f.onset_step, f.rule))
            out.append({"after": what, "rule": f.rule, "step": int(f.onset_step)})
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def cost_section(analysis: Analysis) -> dict[str, Any] | None:
    """The ``cost`` section of the analysis JSON (``after`` empty when nothing was wasted), or
    None when the run gives no measure of its cost (no wall clock, no GPU-hours)."""
    meta = analysis.meta
    events = _events(analysis.findings)
    clock = _clock(analysis.metrics.parts(["timestamp", "step_time"]), [e["step"] for e in events])
    if clock.source is None and meta.gpu_hours is None:
        return None
    hours = clock.total_s / 3600 if clock.source else None
    if meta.gpu_hours is not None:
        total_gpu_h, basis = float(meta.gpu_hours), "gpu_hours given"
    elif meta.gpus is not None and hours is not None:
        total_gpu_h, basis = hours * float(meta.gpus), "wall clock x gpus"
    else:
        total_gpu_h, basis = None, "wall clock only (give gpus for GPU-hours)"
    price = meta.gpu_price

    def spent(share: float, wall_s: float | None) -> dict[str, Any]:
        gpu_h = None if total_gpu_h is None else total_gpu_h * share
        return {"share": _round(share), "wall_clock_hours": _round(None if wall_s is None else wall_s / 3600),
                "gpu_hours": _round(gpu_h), "money": _round(None if gpu_h is None or price is None else gpu_h * price)}

    after = []
    for e in events:
        if clock.source:
            wall = max(0.0, clock.total_s - clock.before_s[e["step"]])
            share = wall / clock.total_s
        else:
            wall, share = None, (clock.rows - clock.rows_before[e["step"]]) / max(clock.rows, 1)
        after.append({**e, **spent(share, wall)})
    return {"time_source": clock.source, "basis": basis, "gpus": meta.gpus, "gpu_price": price,
            "total": spent(1.0, clock.total_s if clock.source else None), "after": after}

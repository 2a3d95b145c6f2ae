"""Window table: per epoch (or per block of steps) reward and loss, their trends, status and issues.

A window is one epoch when the first row of the step stream logs ``epoch`` (the integer part of
the epoch, forward-filled over rows that omit it); otherwise a block of ``window_steps`` steps
counted from the first step. For each window: the average reward (``reward_mean``), the average
loss (``loss``, or ``policy_loss`` in a window without a total loss), the reward variance (sample
variance of the per-step reward over the window, ddof=1, as pandas), the change of both averages
against the previous window and its direction (up/down/flat at ``flat_z`` standard errors), and the
issues and status from :class:`forensics.analysis.health_check.HealthCheck`, whose rule table also gives the
``recommendations`` section (adjustments, config patch, priorities, monitoring).

Each window's statistics are computed from that window's values only, so the table does not depend
on how the stream was cut into batches. The tracker reports no findings of its own (it is a view):
its score is left out of the health areas.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ...config import param
from ...io.canonical import Batch
from ..health_check import HealthCheck, HealthCheckParams, window_stats
from .base import Tracker, TrackerResult

__all__ = ["Windows", "window_keys"]


@dataclass
class WindowsParams(HealthCheckParams):
    """The health check's parameters (:class:`forensics.analysis.health_check.HealthCheckParams`), plus
    the window size for logs without an epoch column."""

    window_steps: int = param(100, "Steps per window when the log has no epoch column.", le=10**12)


def window_keys(steps: np.ndarray, epoch: np.ndarray | None, first_step: int, window_steps: int,
                last_epoch: float) -> tuple[np.ndarray, float]:
    """Window index per row: ``floor(epoch)`` forward-filled, or ``(step - first) // window_steps``.

    >>> window_keys(np.array([5, 6, 15]), None, 5, 10, np.nan)[0].tolist()
    [0, 0, 1]
    >>> window_keys(np.array([1, 2, 3]), np.array([0.5, np.nan, 1.2]), 1, 10, np.nan)[0].tolist()
    [0, 0, 1]
    """
    if epoch is None:
        return (steps - first_step) // max(window_steps, 1), last_epoch
    e = np.concatenate([[last_epoch], epoch])
    idx = np.where(np.isfinite(e), np.arange(len(e)), 0)
    np.maximum.accumulate(idx, out=idx)
    filled = e[idx][1:]
    keys = np.where(np.isfinite(filled), np.floor(filled), 0).astype(np.int64)
    return keys, float(filled[-1]) if len(filled) else last_epoch


class Windows(Tracker):
    """Per-window table of reward and loss with the health check's issues and recommendations."""

    name = "windows"
    area = "training"
    requires = ("reward_mean", "loss", "policy_loss")
    rules = ()
    Params = WindowsParams

    def __init__(self, params: WindowsParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: WindowsParams = self.params
        self.p = p
        hp = HealthCheckParams(**{f.name: getattr(p, f.name) for f in fields(HealthCheckParams)})
        meta_values = {"max_grad_norm": self.meta.max_grad_norm, "kl_coef": self.meta.kl_coef_init}
        self.check = HealthCheck(self.meta.config, hp, meta_values, self.meta.algorithm)
        self.mode: str | None = None
        self.first_step = 0
        self.last_epoch = float("nan")
        self.key: int | None = None
        self.buf: dict[str, list[np.ndarray]] = {}
        self.table: list[dict[str, Any]] = []

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not len(batch):
            return None
        if self.mode is None:
            self.mode = "epoch" if bool(batch.logged("epoch")[0]) and np.isfinite(
                batch.col("epoch")[0]) else "steps"
            self.first_step = int(batch.steps[0])
        if any(batch.has(c) for c in self.requires):
            self.active = True
        self.rows += len(batch)
        keys, self.last_epoch = window_keys(
            batch.steps, batch.col("epoch") if self.mode == "epoch" else None, self.first_step,
            self.p.window_steps, self.last_epoch)
        cols = {"step": batch.steps.astype(np.float64), "reward": batch.col("reward_mean"),
                "loss": batch.col("loss"), "policy_loss": batch.col("policy_loss"),
                "kl": batch.col("kl_seq") if batch.has("kl_seq") and not batch.has("kl")
                else batch.col("kl")}
        bounds = np.flatnonzero(np.diff(keys)) + 1
        for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(keys)]):
            k = int(keys[a])
            if self.key is not None and k != self.key:
                self._close()
            self.key = k
            for name, values in cols.items():
                self.buf.setdefault(name, []).append(values[a:b])
        return None

    def _close(self) -> None:
        if self.key is None or not self.buf:
            return
        cols = {k: np.concatenate(v) for k, v in self.buf.items()}
        self.buf = {}
        loss_metric = "loss" if np.isfinite(cols["loss"]).any() else "policy_loss"
        stats = window_stats(cols["reward"], cols[loss_metric], cols["kl"])
        rep = self.check.add_window(self.key, stats)
        has_loss = bool(stats["n_loss"])
        self.table.append({
            "window": self.key,
            "first_step": int(cols["step"][0]),
            "last_step": int(cols["step"][-1]),
            "rows": len(cols["step"]),
            "reward_mean": stats["reward_mean"],
            "loss_mean": stats["loss_mean"],
            "loss_metric": loss_metric if has_loss else None,
            "reward_var": stats["reward_var"],
            "reward_trend": rep.reward_trend,
            "loss_trend": rep.loss_trend,
            "reward_direction": rep.reward_direction,
            "loss_direction": rep.loss_direction,
            "status": rep.status,
            "issues": list(rep.issues),
        })

    def finish(self) -> TrackerResult:
        self._close()
        self.key = None
        sections: dict[str, Any] = {}
        summary: dict[str, Any] = {"mode": self.mode, "windows": len(self.table)}
        if self.mode == "steps":
            summary["window_steps"] = self.p.window_steps
        if self.active and self.table:
            rec = self.check.recommendations()
            sections = {"windows": self.table, "recommendations": rec}
            summary["issues"] = {k: len(v) for k, v in rec["issues"].items()}
            summary["status"] = {s: sum(1 for w in self.table if w["status"] == s)
                                 for s in ("ok", "watch", "warn", "alert")}
        res = self.result(summary, [], None, sections)
        res.score = None  # a view of the run, not a health area
        return res

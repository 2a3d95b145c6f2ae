"""Window table: reward and loss per epoch (or per block of rows), their moves, status and issues.

Windows are the run's epochs when the step stream logs ``epoch`` from its first row and the run
has between ``min_epochs`` and ``max_windows`` of them; otherwise blocks of rows whose size is
chosen from the run's length: blocks start at ``min_window_rows`` rows and double (adjacent
blocks merge) whenever ``max_windows`` of them have closed, so a run has tens of windows, never
thousands (``window_rows`` fixes the size instead).

A window is summarised by mergeable moments of its reward, loss and log KL
(:class:`forensics.analysis.stats.moments.Moments`): memory is constant, and each row is added once,
in a fixed order, so the table does not depend on how the stream was cut into batches. For each
window: the average reward (``reward_mean``), the average loss (``loss``, or ``policy_loss`` in a
run without a total loss), the reward variance (ddof=1, as pandas), the geometric-mean KL, the
move of both averages against the previous window and its direction, and the issues and status
from :class:`forensics.analysis.trackers.health_check.HealthCheck`, which judges each window against a
bounded summary of the earlier ones (constant work per window).

The tracker reports no findings of its own (it is a view): its score is left out of the health
areas. After the scan each window also lists the warning and critical findings whose episodes
overlap it (:mod:`forensics.analysis.diagnosis.recommendations`), so windows and findings agree.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

import numpy as np

from ...config import param
from ...io.canonical import Batch
from ...records import record
from ..context import loss_is_progress
from ..stats.moments import Moments, accumulate, segment_moments
from .base import Tracker, TrackerResult
from .health_check import HealthCheck, HealthCheckParams

__all__ = ["Windows", "window_keys"]

_SERIES = ("reward", "loss", "log_kl")


@record
class WindowsParams(HealthCheckParams):
    """The health check's parameters (:class:`forensics.analysis.trackers.health_check.HealthCheckParams`),
    plus how the run is cut into windows."""

    max_windows: int = param(40, "Most windows kept: when this many blocks have closed, adjacent "
                             "blocks merge and the block size doubles (tens of windows per run).")
    min_window_rows: int = param(10, "Rows of the first (smallest) block.")
    window_rows: int = param(0, "Rows per window, fixed (0: chosen from the run's length).", ge=0)
    min_epochs: int = param(8, "Epochs needed for epoch windows; fewer epochs are too few windows "
                            "to judge, so blocks of rows are used.")


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


@record
class _Window:
    """One window's rows while it fills: its key, step range and running sums."""

    key: int
    first_step: int
    last_step: int
    rows: int
    moments: dict[str, Moments]

    def merge(self, right: _Window) -> _Window:
        return _Window(self.key, self.first_step, right.last_step, self.rows + right.rows,
                       {s: self.moments[s].merge(right.moments[s]) for s in _SERIES})


@record
class _Cut:
    """Windows being built from consecutive segments: the closed ones and the open one."""

    closed: list[_Window] = field(default_factory=list)
    open: _Window | None = None

    def add(self, key: int, first: int, last: int, rows: int, segs: dict[str, np.ndarray],
            shifts: dict[str, float]) -> None:
        """Add segments (all of window ``key``) to the open window, closing it first when the
        key changed."""
        if self.open is not None and self.open.key != key:
            self.closed.append(self.open)
            self.open = None
        if self.open is None:
            self.open = _Window(key, first, last, 0, {s: Moments(shifts[s]) for s in _SERIES})
        w = self.open
        w.last_step, w.rows = last, w.rows + rows
        for s in _SERIES:
            w.moments[s] = accumulate(w.moments[s], segs[s])

    def all(self) -> list[_Window]:
        return self.closed + ([self.open] if self.open is not None else [])


class Windows(Tracker):
    """Per-window table of reward and loss with the health check's issues."""

    name = "windows"
    area = "training"
    requires = ("reward_mean", "loss", "policy_loss", "epoch", "kl", "kl_seq")
    starts_on = ("reward_mean", "loss", "policy_loss")
    rules = ()
    Params = WindowsParams

    def __init__(self, params: WindowsParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: WindowsParams = self.params
        self.p = p
        self.hp = HealthCheckParams(**{f.name: getattr(p, f.name) for f in fields(HealthCheckParams)})
        self.base = max(p.window_rows or p.min_window_rows, 1)
        self.size = self.base  # rows per block window (doubles as the run grows)
        self.limit = max(2, p.max_windows - p.max_windows % 2)  # even: closed blocks merge in pairs
        self.epochs: bool | None = None  # epoch windows still possible
        self.last_epoch = float("nan")
        self.loss_metric: str | None = None
        self.kl_metric: str | None = None
        self.shifts: dict[str, float] = {s: 0.0 for s in _SERIES}
        self.shift_known: dict[str, bool] = {s: False for s in _SERIES}
        self.buf: dict[str, np.ndarray] = {}  # raw rows of the segment still open
        self.blocks = _Cut()
        self.epoch_windows = _Cut()

    # -- streaming -------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not len(batch):
            return None
        if self.epochs is None:
            self.epochs = bool(batch.logged("epoch")[0]) and bool(np.isfinite(batch.col("epoch")[0]))
        if self.logs_start(batch):
            self.active = True
        if self.loss_metric is None:
            self.loss_metric = "loss" if batch.has("loss") else ("policy_loss" if batch.has("policy_loss")
                                                                 else None)
        if self.kl_metric is None and (batch.has("kl") or batch.has("kl_seq")):
            self.kl_metric = "kl" if batch.has("kl") else "kl_seq"
        row0 = self.rows
        self.rows += len(batch)
        kl = batch.col(self.kl_metric) if self.kl_metric else np.full(len(batch), np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_kl = np.where(kl > 0, np.log(np.where(kl > 0, kl, 1.0)), np.nan)
        keys = np.zeros(len(batch), dtype=np.int64)
        if self.epochs:
            keys, self.last_epoch = window_keys(batch.steps, batch.col("epoch"), 0, 1, self.last_epoch)
        new = {"row": np.arange(row0, self.rows, dtype=np.int64), "step": batch.steps.astype(np.int64),
               "epoch": keys, "reward": batch.col("reward_mean"),
               "loss": batch.col(self.loss_metric) if self.loss_metric else np.full(len(batch), np.nan),
               "log_kl": log_kl}
        cols = {k: np.concatenate([self.buf[k], v]) if self.buf else v for k, v in new.items()}
        self._segments(cols)
        return None

    def _segments(self, cols: dict[str, np.ndarray], final: bool = False) -> None:
        """Cut the rows into complete segments (at every ``base`` rows and every epoch change),
        add them to the windows, and keep the rows of the last, still open segment (``final``:
        the stream ended, so it is complete too)."""
        rows, epoch = cols["row"], cols["epoch"]
        cut = (rows % self.base == 0)
        if self.epochs:
            cut[1:] |= epoch[1:] != epoch[:-1]
        cut[0] = True
        starts = np.flatnonzero(cut)
        end = len(rows)
        complete_to = end if final or (rows[-1] + 1) % self.base == 0 else starts[-1]
        starts = starts[starts < complete_to]
        self.buf = {k: v[complete_to:] for k, v in cols.items()}
        if not len(starts):
            return
        for s in _SERIES:
            if not self.shift_known[s]:
                ok = np.flatnonzero(np.isfinite(cols[s][:complete_to]))
                if len(ok):
                    self.shifts[s], self.shift_known[s] = float(cols[s][ok[0]]), True
        segs = {s: segment_moments(cols[s][:complete_to], starts, self.shifts[s]) for s in _SERIES}
        seg_rows, seg_first = rows[starts], cols["step"][starts]
        seg_last = cols["step"][np.r_[starts[1:], complete_to] - 1]
        n_rows = np.diff(np.r_[starts, complete_to])
        self._add(self.blocks, seg_rows, seg_first, seg_last, n_rows, segs, by_rows=True)
        if self.epochs:
            self._add(self.epoch_windows, cols["epoch"][starts], seg_first, seg_last, n_rows, segs,
                      by_rows=False)
            if len(self.epoch_windows.closed) > self.p.max_windows:
                self.epochs = False  # too many epochs to be windows: blocks of rows it is
                self.epoch_windows = _Cut()

    def _add(self, cut: _Cut, keys: np.ndarray, first: np.ndarray, last: np.ndarray, n_rows: np.ndarray,
             segs: dict[str, np.ndarray], by_rows: bool) -> None:
        """Add segments to consecutive windows, a run of segments of the same window at a time."""
        i = 0
        while i < len(keys):
            if by_rows:
                key = int(keys[i]) // self.size
                j = int(np.searchsorted(keys, (key + 1) * self.size, side="left"))
            else:
                key = int(keys[i])
                j = i + 1 + int(np.argmax(keys[i + 1:] != key)) if (keys[i + 1:] != key).any() else len(keys)
            cut.add(key, int(first[i]), int(last[j - 1]), int(n_rows[i:j].sum()),
                    {s: segs[s][i:j] for s in _SERIES}, self.shifts)
            if by_rows and not self.p.window_rows and len(cut.closed) >= self.limit:
                self._double(cut)
            i = j

    def _double(self, cut: _Cut) -> None:
        """Merge adjacent closed blocks: twice the rows per window, half the windows."""
        c = cut.closed
        cut.closed = [c[k].merge(c[k + 1]) for k in range(0, len(c) - 1, 2)] + (c[-1:] if len(c) % 2 else [])
        for w in cut.closed:
            w.key //= 2
        self.size *= 2
        if cut.open is not None:
            cut.open.key //= 2

    # -- the table --------------------------------------------------------------------------
    def close(self) -> None:
        if self.buf and len(self.buf["row"]):  # the last segment ends with the stream
            cols, self.buf = self.buf, {}
            self._segments(cols, final=True)

    def conclude(self) -> TrackerResult:
        mode = "epoch" if self.epochs and len(self.epoch_windows.all()) >= self.p.min_epochs else "rows"
        windows = self.epoch_windows.all() if mode == "epoch" else self.blocks.all()
        check = HealthCheck(self.meta.config, self.hp, self.meta.algorithm,
                            judge_loss=loss_is_progress(self.loss_metric or "loss", self.meta.family))
        table: list[dict[str, Any]] = []
        for i, w in enumerate(windows):
            label = w.key if mode == "epoch" else i
            rep = check.add_window(label, w.moments)
            st = rep.stats
            table.append({
                "window": label, "first_step": w.first_step, "last_step": w.last_step, "rows": w.rows,
                "reward_mean": st["reward_mean"], "loss_mean": st["loss_mean"],
                "loss_metric": self.loss_metric if st["n_loss"] else None,
                "reward_var": st["reward_var"], "kl": st["kl"],
                "reward_trend": rep.reward_trend, "loss_trend": rep.loss_trend,
                "reward_direction": rep.reward_direction, "loss_direction": rep.loss_direction,
                "status": rep.status, "issues": list(rep.issues),
            })
        summary: dict[str, Any] = {"mode": mode, "windows": len(table), "judge_work": check.work}
        if mode == "rows":
            summary["window_rows"] = self.size
        sections: dict[str, Any] = {}
        if self.active and table:
            sections = {"windows": table}
            issues: dict[str, int] = {}
            for row in table:
                for issue in row["issues"]:
                    issues[issue] = issues.get(issue, 0) + 1
            summary["issues"] = issues
            summary["status"] = {s: sum(1 for row in table if row["status"] == s)
                                 for s in ("ok", "watch", "warn", "alert")}
        res = self.result(summary, [], None, sections)
        res.score = None  # a view of the run, not a health area
        return res

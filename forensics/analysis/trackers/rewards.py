"""Reward: breakdown per reward function and total, trends, variance, best-of-N gap, stagnation,
decline and distance to a target.

Levels are trailing block medians (``smooth`` rows); the run's noise is the robust scale of the
step-to-step differences, ``median |diff| / (0.6745 * sqrt 2)``, which a trend does not inflate.
Every rule is relative to the run's own level and noise:

* ``reward.trend`` (info): a component (``reward/<name>``) moved by more than ``trend_share`` of
  its level between the previous ``trend_window`` rows and the last ones, with its direction.
  The total's trend is summarised (first and last level, direction) and shown per window in the
  window table rather than raised as a finding: a rising total is what training is for.
* ``reward.stagnation`` (warning): after probation, the mean reward of the last half of a window
  of ``W = max(stagnation_window, stagnation_share * row)`` rows is less than
  ``stagnation_sigmas`` standard errors above the mean of its first half (standard error
  ``sigma * sqrt(1/n1 + 1/n2)`` from the per-step noise): the window grows with the run, so a
  long run that improves slowly is judged over a span where its progress shows, while a reward
  that levelled off is found within a window of the plateau.
* ``reward.decline`` (warning): the level fell from the run's best by more than
  ``decline_sigmas`` noise sigmas and ``decline_share`` of the range the run covered, sustained,
  and by more than the best of the run's levels stands above stationary noise by chance
  (``sqrt(2 ln M)`` level sigmas over M levels, see ``_selection_margin``): a long run of
  autocorrelated noise otherwise "declines" from a lucky best again and again.

Rewards come from the step stream (``reward_mean``, ``reward/<name>``); a run that logs only
per-response rewards (sample stream ``reward``, ``reward/<name>``) is aggregated per step (mean,
std, min, max) and judged the same way, rows then being steps of the sample stream.

A reward that never moves (a constant, e.g. group-normalised rewards logged as their mean 0) has
no noise to judge against: stagnation and decline are skipped and the report says so.

References: SIGNATURES.md #8 (per-function rewards, TRL ``rewards/{func}/mean``), section 2
(robust scale, persistence).
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ...schema import REWARD_COMPONENT_PREFIX
from ..findings import RuleSpec, Severity
from ..spans import append_span, step_span
from ..stats.course import Course
from ..stats.episodes import Episode, Episodes
from ..stats.grouping import StepGrouper
from ..stats.noise import block_median, diff_sigma
from ..stats.order import median
from ..stats.run_values import RunValues
from ..stats.trailing import Context, History, PrefixSums, TrailingRunMedian, shift
from .base import Tracker, TrackerResult

#: Reward components that measure the task's correctness (reward.proxy_gain).
CORRECTNESS = re.compile(r"correct|accura|exact|pass|solve|success", re.IGNORECASE)

#: Rows in a stagnation half up to which the halves' prefix sums are kept for every row.
HALF_ROWS = 2048

__all__ = ["Rewards"]

@record
class RewardsParams:
    """The rewards tracker's thresholds (``[rewards]`` in a config)."""

    smooth: int = param(20, "Rows in the trailing block median that defines the reward level.")
    window: int = param(100, "Trailing window (rows) of the noise estimate.")
    probation: int = param(50, "Rows at the start on which stagnation and decline do not fire.", ge=0)
    trend_window: int = param(50, "Rows compared (last vs previous) for trend alerts.")
    trend_share: float = param(0.10, "A level change above this share of the previous level (or of "
                               "the run's spread, when larger) is a trend alert.")
    trend_z: float = param(6.0, "...and more than this many standard errors of the difference of the "
                           "two block medians (from the spread around the level).")
    stagnation_window: int = param(300, "Rows over which the best reward level must improve.")
    stagnation_share: float = param(0.25, "...or this share of the rows so far, when longer.", le=1)
    stagnation_gap: int = param(3000, "Stagnant stretches at most this many rows apart are one "
                                "finding (the condition flickers around its threshold).", ge=0)
    stagnation_sigmas: float = param(2.0, "Minimum rise of the window's second-half mean over its "
                                     "first half, in standard errors of that difference.")
    decline_sigmas: float = param(4.0, "Fall from the best level, in noise sigmas, that is a decline. "
                                  "The sigma is how far the reward wanders over `smooth` rows (not "
                                  "only its step-to-step noise, which autocorrelated rewards "
                                  "understate), and the best level is a best_smooth-row median. "
                                  "The fall must also exceed (decline_sigmas + sqrt(2 ln M)) sigmas "
                                  "of the level itself, M = rows / best_smooth: how far a running "
                                  "best of M levels stands above stationary noise by chance.")
    best_smooth: int = param(60, "Rows in the median whose running best is the run's best level.")
    decline_share: float = param(0.10, "...and at least this share of the range the run's level "
                                 "covered (best minus lowest).", le=1)
    sign_rows: int = param(10, "Rows on which the total must be the negative of the only reward "
                           "function (reward.sign_flip).")
    decline_k: int = param(15, "Decline persistence: rows out of decline_m.")
    decline_m: int = param(20, "Decline persistence window (rows).")
    target: float = param(float("nan"), "Reward target ([rewards] target); NaN: none configured.")
    proxy_floor_share: float = param(0.05, "A correctness component whose level stays below this "
                                     "share of the total reward's is at its floor (reward.proxy_gain).",
                                     le=1)
    proxy_gain_share: float = param(0.1, "...and that gained less than this share of the total's "
                                    "gain while the total climbed.", le=1)
    relations: ClassVar[Relations] = (("decline_k", "<=", 1, "decline_m"),)


_R = RuleSpec
RULES = (
    _R("reward.trend", Severity.INFO, "Reward component trend",
       "A reward component (or the total) moved by more than trend_share of its level over the "
       "trend window. Expected while learning; compare the components: one saturating while the "
       "task component stalls is reward hacking of the easy term.",
       "Check which components move; gate easy (format) rewards on correctness; reweight.",
       ("trend_window", "trend_share", "trend_z"), "SIGNATURES #8"),
    _R("reward.stagnation", Severity.INFO, "Reward stagnates (a plateau)",
       "After probation the reward's mean over the second half of a long window was not clearly "
       "above its mean over the first half (in standard errors of the difference, from the run's "
       "own noise): training no longer learns from this reward. A plateau is information, not a "
       "fault: a converged run stagnates too, and stationary noise of any length is flat. A run "
       "that never improved is another matter: when the last quarter of a long run (at least "
       "stagnation_window rows) is not clearly above its first quarter, the run did not learn "
       "from this reward at all, and that is a warning.",
       "Raise the reward weight 15% or the temperature 10%; check for zero-variance groups and "
       "entropy collapse; stop early if the run has converged.",
       ("stagnation_window", "stagnation_share", "stagnation_sigmas", "stagnation_gap", "smooth",
        "probation")),
    _R("reward.sign_flip", Severity.WARNING, "Total reward is the negative of its reward function",
       "The run has one reward function and the total reward moves as its negative on every step "
       "(whatever constant the total adds): a "
       "negative weight or a sign error makes the policy minimise what the function scores (the "
       "logged total rises while the function's own score falls).",
       "Check the sign of reward_weights (TRL) or of the reward function's return; a penalty "
       "function needs a positive companion to optimise.",
       ("sign_rows",), "TRL reward_weights; SIGNATURES #8"),
    _R("reward.proxy_gain", Severity.WARNING, "Reward rises while correctness stays at its floor",
       "The total reward climbed while a logged component that measures the task's correctness "
       "(a name with correct, accuracy, exact, pass, solve or success) stayed near zero, below a "
       "twentieth of the total, and gained less than a tenth of what the total gained: the "
       "policy learnt the proxy terms (format, compilability, length), not the task. A reward "
       "design with correctness rising beside a format term is not one.",
       "Gate the proxy terms on correctness (pay format only for a correct answer) or raise the "
       "correctness weight; check the correctness reward on a few completions by hand.",
       ("proxy_floor_share", "proxy_gain_share"), "SIGNATURES #8 (proxy reward hacking)"),
    _R("reward.decline", Severity.WARNING, "Reward declines from its best",
       "The reward level fell well below the best level the run reached (in noise sigmas and as a "
       "share of the run's range) and stayed there: the policy is getting worse.",
       "Roll back to the checkpoint at the best level; lower the learning rate 20%; lower the KL "
       "coefficient 10% if the penalty dominates, or look for a policy collapse (KL surge).",
       ("decline_sigmas", "decline_share", "decline_k", "decline_m"), "SIGNATURES #4"),
)


class _Trend:
    """Trend alerts for one series: block median now vs ``trend_window`` rows before."""

    def __init__(self, name: str, p: RewardsParams) -> None:
        self.name, self.p = name, p
        self.ctx = Context(3 * p.trend_window + 2)
        self.ep = {"up": Episodes(10, 10, gap=p.trend_window, mode="max"),
                   "down": Episodes(10, 10, gap=p.trend_window, mode="min")}
        self.values = RunValues()
        self.head = History(p.trend_window)
        self.head_done = False
        self.tail = History(p.trend_window)

    def update(self, rows: np.ndarray, steps: np.ndarray, x: np.ndarray, alerts: bool = True) -> None:
        p = self.p
        self.values.extend(x)
        if not self.head_done:
            self.head.values = np.concatenate([self.head.values, x])[: p.trend_window]
            self.head_done = len(self.head.values) >= p.trend_window
        self.tail.extend(x)
        if not alerts:
            return
        w = p.trend_window
        full, n0 = self.ctx.extend(x=x)
        cur = block_median(full["x"], w, w // 2)
        prev = shift(cur, w)
        q = block_median(np.abs(full["x"] - cur), 2 * w, w)  # spread around the level
        denom = np.fmax(np.abs(prev), np.fmax(q, 1e-12))
        # the move must also be significant: trend_z standard errors of a difference of block medians
        se = 1.2533 * (q / 0.6745) * np.sqrt(2.0 / w)
        with np.errstate(invalid="ignore"):
            rel = ((cur - prev) / denom)[n0:]
            ok = np.isfinite(rel) & (np.abs(cur - prev) > p.trend_z * se)[n0:]
        self.ep["up"].update(rows, steps, ok & (rel > p.trend_share), rel,
                             {"level": cur[n0:], "previous": prev[n0:]})
        self.ep["down"].update(rows, steps, ok & (rel < -p.trend_share), rel,
                               {"level": cur[n0:], "previous": prev[n0:]})

    def stats(self) -> dict[str, Any]:
        v = self.values
        if not len(v):
            return {"rows": 0}
        head = self.head.values[np.isfinite(self.head.values)]
        tail = self.tail.values[np.isfinite(self.tail.values)]
        first = median(head) if len(head) else None
        last = median(tail) if len(tail) else None
        change = None
        if first is not None and last is not None and first != 0:
            change = (last - first) / abs(first)
        return {"rows": len(v), "mean": v.mean(), "std": v.std(ddof=1) if len(v) > 1 else None,
                "min": v.min(), "max": v.max(),
                "first": first, "last": last, "change_share": change,
                "direction": None if first is None or last is None else
                ("up" if last > first else "down" if last < first else "flat")}


def quarter_shift(x: np.ndarray, blocks: int = 40) -> tuple[float, float, float] | None:
    """``(z, first, last)``: the mean of the last quarter of ``x`` minus that of the first, in
    standard errors, and the two means; None when too short.

    The standard error comes from ``blocks`` block means around their linear trend: blocks much
    longer than the series' memory are nearly independent, so an autocorrelated series (AR(1)
    noise that wanders over tens of steps) does not look like a shift, as it would against the
    step-to-step noise.

    >>> rng = np.random.default_rng(0)
    >>> round(quarter_shift(np.linspace(0, 1, 400) + rng.normal(0, 0.1, 400))[0]) > 10
    True
    >>> abs(quarter_shift(rng.normal(0, 1, 400))[0]) < 3
    True
    """
    x = x[np.isfinite(x)]
    if len(x) < 4 * blocks:
        return None
    q = len(x) // 4
    size = len(x) // blocks
    means = x[: size * blocks].reshape(blocks, size).mean(axis=1)
    idx = np.arange(blocks, dtype=np.float64)
    resid = means - np.polyval(np.polyfit(idx, means, 1), idx)
    se = float(resid.std(ddof=2)) * math.sqrt(2.0 / (blocks / 4))
    m1, m4 = float(x[:q].mean()), float(x[-q:].mean())
    if not se > 0:
        return None
    return (m4 - m1) / se, m1, m4


class Rewards(Tracker):
    """Reward breakdown, trends, variance, best-of-N gap, stagnation, decline, target distance."""

    name = "rewards"
    area = "reward"
    streams = ("step", "sample")
    requires = ("reward_mean", "reward", "reward_std", "reward_max", "loss", "policy_loss", "value_loss", "kl")
    starts_on = ("reward_mean", "reward")
    rules = RULES
    Params = RewardsParams

    def __init__(self, params: RewardsParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: RewardsParams = self.params
        self.p = p
        self.trends: dict[str, _Trend] = {}
        self.ctx = Context(max(p.window, 2 * p.best_smooth) + 2 * p.window + p.smooth + 2)
        self.best = -np.inf
        self.low = np.inf
        self.ep = {"reward.sign_flip": Episodes(p.sign_rows, p.sign_rows, gap=10**9, mode="absmax"),
                   "reward.stagnation": Episodes(10, 10, gap=p.stagnation_gap, mode="min"),
                   "reward.decline": Episodes(p.decline_k, p.decline_m, gap=p.smooth, mode="max")}
        # run-long values for the summary's medians and rank correlation (bounded memory)
        self.reward = RunValues()
        self.step_span: list[int | None] = [None, None]
        #: series that show the optimiser at work (kept while the rewards are held in memory)
        self.movers: dict[str, list[np.ndarray]] = {n: [] for n in ("loss", "policy_loss", "value_loss", "kl")}
        self.var = RunValues(ends=p.trend_window)
        self.gap = RunValues(ends=p.trend_window)
        self.has_gap = False
        self.moved = False
        self.first_value: float | None = None
        self.target_step: int | None = None
        self.last_level = float("nan")
        self.comp_std: dict[str, RunValues] = {}
        # the stream the rewards come from: the step stream, or per-response rows aggregated per step
        self.source: str | None = None
        self.grouper = StepGrouper()
        self.sample_components: list[str] = []
        self.sample_rows = 0
        # the finite rewards' prefix sums, as far back as a stagnation window can reach
        self.prefix = PrefixSums()
        # the decline's selection margin: the run's median of the level's second differences
        self.bends = TrailingRunMedian(block=p.window, lag=p.window)
        #: the total and each correctness component per row, for reward.proxy_gain (float32)
        self.proxy: dict[str, list[np.ndarray]] = {}
        #: the total and the only component on the row before this batch (reward.sign_flip)
        self.sign_prev = (float("nan"), float("nan"))

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if batch.stream == "sample":
            self._update_samples(batch)
            return None
        components = sorted(c for c in batch.columns if c.startswith(REWARD_COMPONENT_PREFIX)
                            and batch.has(c))
        if not batch.has("reward_mean") and not self.active and not components:
            return None
        if self.source == "sample":
            return None
        self.source = "step"
        return self._update_steps(batch, components)

    def _update_samples(self, batch: Batch) -> None:
        """Per-response rewards, when the step stream logs none: per-step mean, std, min, max."""
        if self.source == "step" or not (batch.has("reward") or self.source == "sample"):
            return None
        self.source = "sample"
        for c in sorted(batch.columns):
            if c.startswith(REWARD_COMPONENT_PREFIX) and c not in self.sample_components:
                self.sample_components.append(c)
        cols = {"reward": batch.col("reward"), **{c: batch.col(c) for c in self.sample_components}}
        for steps, groups in self.grouper.push(batch.steps, cols):
            self._sample_steps(steps, groups)
        return None

    def _sample_steps(self, steps: np.ndarray, groups: list[dict[str, np.ndarray]]) -> None:
        names = ["reward", *self.sample_components]
        agg = {n: np.full(len(steps), np.nan) for n in (*names, "std", "min", "max")}
        for j, g in enumerate(groups):
            for n in names:
                v = g.get(n, np.zeros(0))
                v = v[np.isfinite(v)]
                if len(v):
                    agg[n][j] = float(np.mean(v))
                    if n == "reward":
                        agg["std"][j] = float(np.std(v, ddof=1)) if len(v) > 1 else np.nan
                        agg["min"][j], agg["max"][j] = float(v.min()), float(v.max())
        cols = {"reward_mean": agg["reward"], "reward_std": agg["std"], "reward_min": agg["min"],
                "reward_max": agg["max"], **{c: agg[c] for c in self.sample_components}}
        b = Batch(steps=steps.astype(np.int64), columns=cols, row0=self.sample_rows)
        self.sample_rows += len(steps)
        comps = [c for c in self.sample_components if b.has(c)]
        self._update_steps(b, comps)

    def _update_steps(self, batch: Batch, components: list[str]) -> dict[str, np.ndarray] | None:
        self.active = True
        self.rows += len(batch)
        p = self.p
        rows, steps = batch.rows, batch.steps
        r = batch.col("reward_mean")
        self.source_keys.setdefault("reward_mean", "reward_mean")
        for name in ["reward_mean", *components]:
            if name not in self.trends:
                self.trends[name] = _Trend(name, p)
        for name, tr in self.trends.items():
            tr.update(rows, steps, batch.col(name), alerts=name != "reward_mean")
            if name != "reward_mean":  # TRL also logs the within-batch std: rewards/<f>/std
                short = name[len(REWARD_COMPONENT_PREFIX):]
                for key in (f"rewards/{short}/std", f"reward/{short}/std"):
                    if key in batch.columns or key in self.comp_std:
                        self.comp_std.setdefault(key, RunValues()).extend(batch.col(key))
        self.reward.extend(r)
        truth = [c for c in components if CORRECTNESS.search(c[len(REWARD_COMPONENT_PREFIX):])]
        if truth or self.proxy:
            for name in ("step", "reward_mean", *truth):
                self.proxy.setdefault(name, []).append(
                    steps.astype(np.float64) if name == "step" else batch.col(name).astype(np.float32))
        if len(self.reward) <= self.reward.memory:
            for name, parts in self.movers.items():
                if batch.has(name):
                    parts.append(batch.col(name).astype(np.float64))
        if self.step_span[0] is None:
            self.step_span[0] = int(steps[0])
        self.step_span[1] = int(steps[-1])
        self.var.extend(np.square(batch.col("reward_std")))
        if len(self.trends) == 2:  # one reward function: the total is w x its score
            self._sign(rows, steps, r, batch.col(components[0]) if components else
                       batch.col(next(n for n in self.trends if n != "reward_mean")))
        out: dict[str, np.ndarray] = {}
        if batch.has("reward_max") or self.has_gap:
            self.has_gap = True
            gap = batch.col("reward_max") - r
            self.gap.extend(gap)
            out["reward_best_of_n_gap"] = gap
        fin = r[np.isfinite(r)]
        if len(fin):
            if self.first_value is None:
                self.first_value = float(fin[0])
            if np.any(fin != self.first_value):
                self.moved = True
        self._levels(rows, steps, r)
        return out or None

    def _sign(self, rows: np.ndarray, steps: np.ndarray, total: np.ndarray, comp: np.ndarray) -> None:
        """The total moves as the negative of the only component (a negative weight), row by row:
        judged on the moves, so a total shifted by a constant (a baseline, a bonus) is read alike."""
        t_all = np.concatenate([[self.sign_prev[0]], total])
        c_all = np.concatenate([[self.sign_prev[1]], comp])
        self.sign_prev = (float(total[-1]), float(comp[-1]))
        dt, dc = np.diff(t_all), np.diff(c_all)
        scale = np.fmax(np.fmax(np.abs(comp), np.abs(c_all[:-1])), 1e-9)
        with np.errstate(invalid="ignore"):
            flipped = (np.abs(dc) > 1e-9 * scale) & (np.abs(dt + dc) <= 1e-6 * scale + 1e-9)
        self.ep["reward.sign_flip"].update(rows, steps, flipped, comp, {"total": total})

    def _levels(self, rows: np.ndarray, steps: np.ndarray, r: np.ndarray) -> None:
        with np.errstate(invalid="ignore", divide="ignore"):
            self._levels_inner(rows, steps, r)

    def _levels_inner(self, rows: np.ndarray, steps: np.ndarray, r: np.ndarray) -> None:
        p = self.p
        full, n0 = self.ctx.extend(r=r)
        level_full = block_median(full["r"], p.smooth, max(p.smooth // 2, 1))
        level = level_full[n0:]
        sigma = diff_sigma(full["r"], p.window, p.window // 4)[n0:]
        # how far the reward wanders over `smooth` rows: the robust spread of x_t - x_(t-smooth),
        # over the window. The step-to-step noise alone understates an autocorrelated reward
        # (AR(1) noise at phi = 0.9 moves 0.3 sigma a step but wanders a whole sigma), and a
        # difference at a lag is not widened by a steady trend the way a plain spread is.
        # Measured one window back, so a decline does not widen the yardstick it is judged by.
        lagged = np.abs(full["r"] - shift(full["r"], p.smooth))
        wander_f = block_median(lagged, p.window, p.window // 4) / (0.6745 * np.sqrt(2.0))
        spread = np.where(np.isfinite(shift(wander_f, p.window)), shift(wander_f, p.window), wander_f)[n0:]
        # running best (of a longer median: its extremes grow slowly with the run's length) and
        # lowest level (max/min are exact, so batch-invariant)
        slow = block_median(full["r"], p.best_smooth, max(p.best_smooth // 2, 1))[n0:]
        lv = np.where(np.isfinite(slow), slow, -np.inf)
        best = np.maximum.accumulate(np.concatenate([[self.best], lv]))[1:]
        lo = np.minimum.accumulate(np.concatenate([[self.low], np.where(np.isfinite(level), level,
                                                                         np.inf)]))[1:]
        self.best, self.low = float(best[-1]), float(lo[-1])
        fin = np.isfinite(level)
        if fin.any():
            self.last_level = float(level[fin][-1])
        span_rows = np.maximum(p.stagnation_window, (p.stagnation_share * rows).astype(np.int64))
        first_half, second_half = self._halves(rows, r, span_rows)
        after = rows >= p.probation
        noisy = np.isfinite(sigma) & (sigma > 1e-12)
        drop = best - level
        span = best - lo
        level_sigma = np.fmax(sigma, np.where(np.isfinite(spread), spread, 0.0))
        margin = self._selection_margin(rows, level_full, n0)
        decline = (after & noisy & fin & (drop > p.decline_sigmas * level_sigma)
                   & (drop > p.decline_share * span) & ~(drop <= margin))  # NaN margin: no level moves yet
        self.ep["reward.decline"].update(rows, steps, decline, drop,
                                         {"level": level, "best": best, "sigma": level_sigma,
                                          "margin": margin})
        (m1, n1), (m2, n2) = first_half, second_half
        se = sigma * np.sqrt(1.0 / n1 + 1.0 / n2)
        z = (m2 - m1) / np.where(noisy & (n1 >= 2) & (n2 >= 2), se, np.nan)
        stag = (after & np.isfinite(z) & (rows >= p.probation + p.stagnation_window)
                & (z < p.stagnation_sigmas) & ~(drop > p.decline_sigmas * level_sigma))
        self.ep["reward.stagnation"].update(rows, steps, stag, z,
                                            {"earlier_mean": m1, "recent_mean": m2, "sigma": sigma,
                                             "span": span_rows.astype(float)})
        t = p.target
        if np.isfinite(t) and self.target_step is None:
            hit = np.flatnonzero(fin & (level >= t))
            if len(hit):
                self.target_step = int(steps[hit[0]])

    def _selection_margin(self, rows: np.ndarray, level_full: np.ndarray, n0: int) -> np.ndarray:
        """The fall from the running best that stationary noise reaches by chance at each row.

        The best is the maximum over the ``rows / best_smooth`` levels seen so far, so on a reward
        that only fluctuates it sits about ``sqrt(2 ln M)`` level sigmas above the mean and creeps
        up as the run grows: a fixed number of sigmas below it is crossed sooner or later on any
        long run, and often when the reward is autocorrelated (a level then moves nearly as much
        as a single step). The margin is ``(decline_sigmas + sqrt(2 ln M))`` sigmas of the level
        itself. That sigma is a run-long median (up to one window back, updated each ``window``
        rows), which neither a short quiet stretch nor a few sharp bends move, of the level's
        second differences at lag ``best_smooth``, which a steady rise or fall does not inflate
        (a first difference would: a run that climbed for most of its length would then hide the
        decline that follows). For an independent reward it is the step noise over about
        ``sqrt(smooth)``, so the margin stays under the ``decline_sigmas`` step-noise threshold
        and changes nothing.
        """
        p = self.p
        lag = p.best_smooth
        bend = np.abs(level_full - 2.0 * shift(level_full, lag) + shift(level_full, 2 * lag))[n0:]
        level_bend = self.bends.update(rows, bend)
        # |a - 2b + c| of three independent N(m, v) is |N(0, 6 v)|, whose median is 0.6745 sqrt(6 v)
        level_sd = level_bend / (0.6745 * np.sqrt(6.0))
        m = np.maximum((rows + 1) / p.best_smooth, 1.0)
        return (p.decline_sigmas + np.sqrt(2.0 * np.log(m))) * level_sd

    def _halves(self, rows: np.ndarray, r: np.ndarray, span: np.ndarray
                ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Mean and count of the finite rewards over the first and the second half of the
        ``span`` rows ending at each row.

        The span grows with the run (a share of it), and so would the prefix sums kept to reach
        back over it: past ``HALF_ROWS`` rows a half, the halves' starts are rounded down to a
        power-of-two stride of at most half / HALF_ROWS rows (a half is then longer by less than
        0.05%), so at most about 4 x HALF_ROWS prefixes are kept at any run length."""
        half = span // 2
        stride = 2 ** np.floor(np.log2(np.maximum(half / HALF_ROWS, 1.0))).astype(np.int64)
        self.prefix.coarsen(int(stride[0]))  # the batch's smallest: later rows need no finer one
        s2, c2 = self.prefix.extend(r, int(rows[0]))
        s0, c0 = self.prefix.at((rows - 2 * half + 1) // stride * stride - 1)
        s1, c1 = self.prefix.at((rows - half + 1) // stride * stride - 1)
        n1, n2 = c1 - c0, c2 - c1
        with np.errstate(divide="ignore", invalid="ignore"):  # an empty half: NaN
            out = ((s1 - s0) / n1, n1.astype(float)), ((s2 - s1) / n2, n2.astype(float))
        # a later row r reaches back to r - span(r), which grows with r (span grows by at most
        # ``stagnation_share`` per row, up to rounding): keep from the next row's reach, with a margin
        nxt = int(rows[-1]) + 1
        reach = max(self.p.stagnation_window, int(self.p.stagnation_share * nxt))
        self.prefix.forget_before(nxt - reach - 16 - int(stride[-1]))
        return out

    def _never_improved(self) -> None:
        """The whole run against its start: a long run whose last quarter is not clearly above its
        first, while the optimiser visibly moved something (a loss fell, the KL grew), never
        learned from its reward. A converged run improved first, and a run where nothing moves at
        all is stationary: both stay information."""
        p = self.p
        first, last = self.step_span
        if self.reward.spilled or len(self.reward) < p.stagnation_window or first is None or last is None:
            return
        r = self.reward.values()
        shift = quarter_shift(r)
        if shift is None or shift[0] >= p.stagnation_sigmas or shift[0] <= -p.stagnation_sigmas:
            return  # it improved, or it fell: a fall is a decline (reward.decline), not a plateau
        moved = {name: z for name, z in ((n, quarter_shift(np.concatenate(v)) if v else None)
                                         for n, v in self.movers.items())
                 if z is not None and abs(z[0]) >= 2 * p.stagnation_sigmas}
        if not moved:
            return
        z, m1, m4 = shift
        ep = Episode(onset_step=first, first_step=first, last_step=last, last_row=len(r) - 1,
                     n_rows=len(r), peak=z, peak_step=last)
        what = ", ".join(f"{n} {v[1]:.3g} -> {v[2]:.3g}" for n, v in sorted(moved.items()))
        self.emit("reward.stagnation", ep,
                  f"the reward never improved over the {len(r)} rows of the run (mean {m1:.4g} over its "
                  f"first quarter, {m4:.4g} over its last: {z:+.2g} standard errors) while training moved "
                  f"({what}): the run did not learn from this reward",
                  {"first_quarter_mean": m1, "last_quarter_mean": m4, "rise_standard_errors": z,
                   "threshold_standard_errors": p.stagnation_sigmas, "rows": len(r),
                   "moved": {n: {"first_quarter": v[1], "last_quarter": v[2]} for n, v in moved.items()},
                   "metrics": ["reward_mean"]}, Severity.WARNING)

    def close(self) -> None:
        for steps, groups in self.grouper.flush():
            self._sample_steps(steps, groups)

    def conclude(self) -> TrackerResult:
        notes: list[str] = []
        summary: dict[str, Any] = {"rows": self.rows, "source": self.source}
        if self.active:
            summary.update(self._active_summary(notes))
        self._emit_component_trends()
        self._never_improved()
        self._emit_level_findings()
        self._emit_proxy_gain()
        return self.result(summary, notes)

    def _active_summary(self, notes: list[str]) -> dict[str, Any]:
        """The reward's trend, components, levels, variance and target (notes added to ``notes``)."""
        p = self.p
        summary: dict[str, Any] = {}
        rho, used = self.reward.trend_spearman()
        summary["reward_step_spearman"] = rho
        if used < len(self.reward):
            notes.append(f"reward_step_spearman ranks every {-(-len(self.reward) // used)}th "
                         f"reward ({used:,} of {len(self.reward):,}): the run is too long to "
                         f"rank every one in memory")
        summary["total"] = self.trends["reward_mean"].stats() if "reward_mean" in self.trends \
            else {"rows": 0}
        summary["components"] = {name[len(REWARD_COMPONENT_PREFIX):]: tr.stats()
                                 for name, tr in self.trends.items() if name != "reward_mean"}
        for key, v in self.comp_std.items():
            short = key.split("/")[1]
            if len(v) and short in summary["components"]:
                summary["components"][short]["batch_std_median"] = v.quantiles([0.5])[0]
        summary["best_level"] = self.best if np.isfinite(self.best) else None
        summary["current_level"] = self.last_level
        if len(self.var):
            summary["variance"] = self._variance(self.var)
        if len(g := self.gap):
            summary["best_of_n_gap"] = {"mean": g.mean(), "median": g.quantiles([0.5])[0],
                                        "first": median(g.head()),
                                        "last": median(g.tail())}
        if np.isfinite(p.target):
            cur = self.last_level
            summary["target"] = {"target": p.target, "current": cur, "distance": p.target - cur,
                                 "share_achieved": cur / p.target if p.target else None,
                                 "reached_step": self.target_step}
        if not self.moved:
            notes.append("reward_mean is constant over the run (group-normalised rewards?): "
                         "stagnation and decline not judged")
        return summary

    def _emit_component_trends(self) -> None:
        p = self.p
        for name, tr in self.trends.items():
            if name == "reward_mean":  # the total's trend is in the summary and the window table
                continue
            comp = f"reward component {name}"
            for direction, eps in tr.ep.items():
                for ep in eps.finish():
                    prev = ep.extras.get("previous", float("nan"))
                    lvl = ep.extras.get("level", float("nan"))
                    self.emit("reward.trend", ep,
                              f"{comp} went {direction} by {abs(ep.peak):.0%} of its level "
                              f"({prev:.4g} -> {lvl:.4g}) over {p.trend_window} rows, "
                              f"{step_span(ep.first_step, ep.last_step)}",
                              {"component": name, "direction": direction, "change_share": ep.peak,
                               "previous_level": prev, "level": lvl, "threshold": p.trend_share,
                               "metrics": [name]})

    def _emit_level_findings(self) -> None:
        """reward.stagnation, reward.sign_flip and reward.decline."""
        p = self.p
        for ep in self.ep["reward.stagnation"].finish():
            span = ep.extras.get("span", p.stagnation_window)
            before, recent = ep.extras.get("earlier_mean", float("nan")), ep.extras.get("recent_mean", float("nan"))
            self.emit("reward.stagnation", ep,
                      f"mean reward over the last {span / 2:.0f} rows ({recent:.4g}) was not clearly above "
                      f"the {span / 2:.0f} rows before ({before:.4g}; {ep.peak:.2g} standard errors), "
                      f"{step_span(ep.first_step, ep.last_step)}",
                      {"rise_standard_errors": ep.peak, "recent_mean": recent, "earlier_mean": before,
                       "noise_sigma": ep.extras.get("sigma"), "threshold_standard_errors": p.stagnation_sigmas,
                       "window": span, "metrics": ["reward_mean"]})
        for ep in self.ep["reward.sign_flip"].finish():
            comp = next((n for n in self.trends if n != "reward_mean"), "")
            self.emit("reward.sign_flip", ep,
                      f"the total reward is minus {comp} on {ep.n_rows} rows from step {ep.onset_step} "
                      f"(at step {ep.peak_step}: total {ep.extras.get('total', float('nan')):.4g}, "
                      f"{comp} {ep.peak:.4g}): the policy is trained to lower that function's score",
                      {"component": comp, "component_value": ep.peak, "total": ep.extras.get("total"),
                       "rows": ep.n_rows, "metrics": ["reward_mean", comp]})
        for ep in self.ep["reward.decline"].finish():
            sig = ep.extras.get("sigma", float("nan"))
            self.emit("reward.decline", ep,
                      append_span(f"reward level fell {ep.peak:.4g} below its best "
                                  f"{ep.extras.get('best', float('nan')):.4g} ({ep.peak / sig:.1f} noise "
                                  f"sigmas) at step {ep.peak_step}", ep.first_step, ep.last_step),
                      {"drop": ep.peak, "best_level": ep.extras.get("best"),
                       "level": ep.extras.get("level"), "noise_sigma": sig,
                       "threshold_sigmas": p.decline_sigmas, "threshold_share": p.decline_share,
                       "metrics": ["reward_mean"]})

    def _emit_proxy_gain(self) -> None:
        """reward.proxy_gain: the total climbs while every correctness component stays at its floor."""
        p = self.p
        if not self.proxy or len({len(v) for v in self.proxy.values()}) > 1:
            return  # (a component that appeared mid-run: its rows do not line up with the total's)
        cols = {k: np.concatenate(v) for k, v in self.proxy.items()}
        steps, total = cols.pop("step"), cols.pop("reward_mean")
        course = Course.of(steps, total)
        if course is None or not course.improved():
            return
        gain = course.end - course.start
        floor = p.proxy_floor_share * max(abs(course.end), abs(gain))
        truth = {}
        for name, v in cols.items():
            c = Course.of(steps, v.astype(np.float64))
            if c is None or c.end > floor or c.end - c.start > p.proxy_gain_share * gain:
                return  # a correctness measure that moves: the gain is (partly) real
            truth[name] = c
        if not truth:
            return
        # from where the total's level first rose clear of its start
        level = block_median(total.astype(np.float64), course.block, max(course.block // 2, 1))
        rose = level - course.start > max(2.0 * np.sqrt(2.0) * course.se, 0.1 * course.span)
        rows = np.arange(len(total))
        eps = Episodes(3, 5, gap=len(total), mode="max")
        eps.update(rows, steps.astype(np.int64), rose, level)
        names = ", ".join(truth)
        for ep in eps.finish():
            self.emit("reward.proxy_gain", ep,
                      f"the reward rose from {course.start:.4g} to {course.end:.4g} while {names} "
                      f"stayed at {', '.join(f'{c.end:.3g}' for c in truth.values())} (from "
                      f"{', '.join(f'{c.start:.3g}' for c in truth.values())}): the gain is in the "
                      f"proxy terms, not the task, from step {ep.onset_step}",
                      {"reward_start": course.start, "reward_end": course.end,
                       "correctness": {n: {"start": c.start, "end": c.end} for n, c in truth.items()},
                       "floor": floor, "metrics": ["reward_mean", *truth]})

    def _variance(self, v: RunValues) -> dict[str, Any]:
        """Within-batch reward variance (reward_std squared): level and early-vs-late trend."""
        first, last = median(v.head()), median(v.tail())
        ratio = last / first if first > 0 else None
        return {"median": v.quantiles([0.5])[0], "first": first, "last": last, "late_over_early": ratio,
                "direction": None if ratio is None else
                ("up" if ratio > 1 + self.p.trend_share else
                 "down" if ratio < 1 - self.p.trend_share else "flat")}


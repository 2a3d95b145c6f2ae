"""Losses: spikes, oscillation, divergence and non-finite values of the total, policy, value and
entropy losses.

Every rule is scale-aware and relative to the run. A loss whose first ``min_history`` values are
(``log_share``) positive is judged on a log scale (its right tail is heavy: a value loss at 3x its median is
routine; SIGNATURES section 2.1 uses the robust z of log loss); otherwise on its own scale. A GRPO
loss sits near zero and changes sign (and rises as beta * KL grows: "completely normal",
SIGNATURES 1.1), so ratios of values near zero mean nothing: on the linear scale a series counts
as *positive-level* only where its trailing median is clearly above zero (``level_iqrs`` robust
sigmas); only then do the ratio guards apply. Deviations are always measured in robust sigmas:
the blocks' MAD / 0.6745 combined with the spread of their medians over the trailing window
(spikes; see :class:`forensics.analysis.stats.trailing.BlockScale`: the window is the ``window // block`` blocks of
``block`` rows before the row's own block) or the robust per-step noise ``median |diff| / 0.954``
over half a window (divergence), which a trend does not inflate. Both are floored by the run's
own wander, measured up to one window back so a fault does not widen its own yardstick: the
run's median deviation from the trailing median (spikes) and the run's median move of the level
over ``smooth`` rows (divergence). An autocorrelated loss looks calm within a window and moves
little from step to step, yet wanders over a long run; against the window alone, stationary
AR(1) noise at phi 0.9 gave 16 to 325 divergence warnings.

* ``loss.spike`` (warning): robust z against the trailing window *excluding* the current point
  and its block (SIGNATURES section 2.1) above ``spike_z``; on a positive-level series the value must also be
  ``spike_min_ratio`` x the trailing median.
* ``loss.oscillation`` (warning): the typical step-to-step swing (median ``|diff|`` over half a
  window) stays ``oscillation_ratio`` x above the run's early swing while the loss alternates
  (lag-1 autocorrelation below ``-oscillation_rho``).
* ``loss.divergence`` (warning, critical past ``divergence_critical_ratio``): the level rose
  ``divergence_sigmas`` noise sigmas above both its value one window earlier and the lowest level
  of the run, sustained, and by ``divergence_min_ratio - 1`` times the run's scale (``|lowest
  level|``, or the IQR one window earlier when that is larger): a slow drift that is large only
  against a tiny noise is not a divergence. Not judged for ``entropy_loss``: an entropy bonus
  rises when the entropy falls, which the entropy tracker judges.
* ``loss.nonfinite`` (critical): a NaN or Inf loss was logged (SIGNATURES #22).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..context import loss_is_progress
from ..findings import RuleSpec, Severity
from ..spans import append_span, step_span
from ..stats.episodes import Episodes
from ..stats.noise import DIFF_TO_SIGMA
from ..stats.order import median
from ..stats.trailing import BlockScale, Context, History, TrailingRunMedian, shift, window_median
from .base import Tracker, TrackerResult

__all__ = ["LOSS_SERIES", "Losses", "lag1_autocorr"]

#: A ratio (or robust z) past this is against a near-zero scale and says nothing: the message
#: gives the level "from ~0" instead.
NEAR_ZERO_RATIO = 1000

#: The loss series the tracker follows, in report order.
LOSS_SERIES = ("loss", "policy_loss", "value_loss", "entropy_loss")


@record
class LossesParams:
    """The losses tracker's thresholds (``[losses]`` in a config)."""

    window: int = param(100, "Trailing window (rows) of the robust baseline.")
    block: int = param(10, "Rows per block of the robust baseline (see stats.BlockStats).")
    min_history: int = param(20, "Rows of history before a robust z-score is trusted.")
    probation: int = param(10, "Rows at the start on which no relative rule fires.", ge=0)
    baseline_rows: int = param(50, "Rows after probation that define the early swing.")
    smooth: int = param(20, "Rows in the block median that defines the loss level.")
    log_share: float = param(0.8, "A loss is judged on a log scale when at least this share of its "
                             "first min_history values is positive (non-positive values are then "
                             "left out of the relative rules).", le=1)
    level_iqrs: float = param(2.0, "A series is positive-level where its median exceeds this many "
                              "robust sigmas (ratio guards apply only there).")
    spike_z: float = param(8.0, "Robust z (vs the trailing window, current point excluded) of a "
                           "spike (SIGNATURES #20: healthy runs peak at 4.5).")
    spike_min_ratio: float = param(1.5, "On a positive-level series a spike must also be this many "
                                   "times the trailing median.")
    oscillation_ratio: float = param(3.0, "Swing (median |diff| over window/2) above this multiple "
                                     "of the early swing is oscillation.")
    oscillation_rho: float = param(0.5, "...and the lag-1 autocorrelation over window/2 is below minus "
                                   "this: the loss alternates up and down (noise growing with the "
                                   "level is not oscillation; the lag-1 autocorrelation of 50 rows "
                                   "of independent noise has a standard error of 0.14, so -0.3 "
                                   "turns up by chance in a long run).", le=1)
    oscillation_rows: int = param(20, "Consecutive rows the oscillation condition must hold.")
    divergence_sigmas: float = param(6.0, "Rise of the level, in noise sigmas, above both its value "
                                     "one window ago and the run's lowest level.")
    divergence_min_ratio: float = param(1.5, "The rise above the lowest level must also be "
                                        "(this - 1) x the run's scale: |lowest level|, or the IQR one "
                                        "window earlier when larger (a level near zero).")
    divergence_critical_ratio: float = param(5.0, "Rise of (this - 1) x the run's scale makes it "
                                             "critical.")
    noise_floor: float = param(0.01, "Smallest per-step noise of a loss level (on the log scale: "
                               "1%; linear: this share of the level), so rounded, repeating "
                               "values do not make a noise of zero.")
    divergence_k: int = param(15, "Divergence persistence: rows out of divergence_m.")
    divergence_m: int = param(20, "Divergence persistence window (rows).")
    relations: ClassVar[Relations] = (("divergence_k", "<=", 1, "divergence_m"),
                                      ("window", ">=", 2, "block"),
                                      ("min_history", "<=", 1, "window"))


_R = RuleSpec
RULES = (
    _R("loss.nonfinite", Severity.WARNING, "Non-finite loss",
       "A NaN or Inf loss was logged: the step overflowed or the weights are corrupted.",
       "Restore the last good checkpoint; switch fp16 to bf16; lower the learning rate 20%; look "
       "for log(0) or a division by a zero std in the loss.",
       (), "SIGNATURES #22", stability=True),
    _R("loss.spike", Severity.WARNING, "Loss spike",
       "A loss value far from the run's recent level (robust z against the trailing window, "
       "current point excluded; on positive losses also a minimum ratio to the median). Only a "
       "loss that measures progress is judged for spikes, oscillation or divergence: a preference "
       "loss, the value loss and the entropy bonus. A policy-gradient loss (PPO's surrogate swings "
       "with each batch's advantages; GRPO's and RLOO's is noise plus beta x KL) is not, nor is "
       "the total loss of a run whose algorithm is unknown.",
       "Inspect the batch at onset; lower the learning rate 20% and tighten gradient clipping "
       "20% if spikes repeat.",
       ("spike_z", "spike_min_ratio", "window", "min_history"), "SIGNATURES #20", stability=True),
    _R("loss.oscillation", Severity.WARNING, "Loss oscillates",
       "The step-to-step swing of the loss stayed several times larger than early in the run: "
       "updates overshoot back and forth.",
       "Lower the learning rate 20%; raise the batch size; tighten gradient clipping 20%.",
       ("oscillation_ratio", "oscillation_rho", "oscillation_rows", "baseline_rows"), stability=True),
    _R("loss.divergence", Severity.WARNING, "Loss diverges",
       "The loss level rose far above its recent and its lowest level (in noise sigmas) and kept "
       "there: training is moving away from its optimum.",
       "Restart from a checkpoint before onset with the learning rate 20-50% lower; check the "
       "reward scale and the value-loss coefficient.",
       ("divergence_sigmas", "divergence_min_ratio", "divergence_critical_ratio",
        "divergence_k", "divergence_m"), "SIGNATURES #18, #20", stability=True),
)


def lag1_autocorr(y: np.ndarray, window: int, at: np.ndarray | None = None) -> np.ndarray:
    """Lag-1 autocorrelation of the ``window`` values ending at each position (its own window only).

    ``at`` (a boolean mask) limits the work to those positions; the others are NaN.

    >>> float(np.round(lag1_autocorr(np.array([1.0, -1.0] * 5), 6)[-1], 3))
    -1.0
    """
    n = len(y)
    out = np.full(n, np.nan)
    if n == 0 or window < 3:
        return out
    v = np.lib.stride_tricks.sliding_window_view(np.concatenate([np.full(window - 1, np.nan), y]),
                                                 window)
    idx = np.arange(n) if at is None else np.flatnonzero(at)
    if not len(idx):
        return out
    v = v[idx]
    a, b = v[:, 1:], v[:, :-1]
    ok = np.isfinite(a) & np.isfinite(b)
    cnt = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ma = np.where(ok, a, 0.0).sum(axis=1) / cnt
        mb = np.where(ok, b, 0.0).sum(axis=1) / cnt
        da = np.where(ok, a - ma[:, None], 0.0)
        db = np.where(ok, b - mb[:, None], 0.0)
        den = np.sqrt((da * da).sum(axis=1) * (db * db).sum(axis=1))
        out[idx] = np.where((cnt >= window // 2) & (den > 0), (da * db).sum(axis=1) / den, np.nan)
    return out


class _LossSeries:
    """The rolling state of one loss series."""

    def __init__(self, name: str, p: LossesParams, progress_signal: bool = True) -> None:
        self.name, self.p = name, p
        self.ctx = Context(2 * p.window + p.smooth + 2)
        # the robust baseline, created once the scale is decided (its block summaries are on it)
        self.bs: BlockScale | None = None
        self.sigma_hist = History(p.window)  # sigma one window back (the run's scale near zero)
        # the run's typical move of the level over a window (see _update's divergence)
        self.wander = TrailingRunMedian(block=p.smooth, lag=p.window)
        # the run's typical deviation from the trailing median (a floor under the spike's sigma)
        self.spread = TrailingRunMedian(block=p.window, lag=p.window)
        self.base: list[np.ndarray] = []
        self.base_swing: float | None = None
        self.lowest = np.inf
        self.base_end = 2**62
        self.first: list[float] = []
        self.log: bool | None = None  # log scale (positive loss) or linear; decided once
        self.decided_row = 0
        self.rows = 0
        self.nonfinite = 0
        # an entropy bonus rises when entropy falls: that is the entropy tracker's business
        self.judge_divergence = name != "entropy_loss" and progress_signal
        # with group-relative advantages the surrogate is zero-mean noise and the loss rises with
        # beta * KL as the policy learns (SIGNATURES section 1.1, algorithm gating): only
        # non-finite values are judged there
        self.judge_level = progress_signal
        self.ep = {
            "loss.nonfinite": Episodes(1, 1, gap=5),
            "loss.spike": Episodes(1, 1, gap=3, mode="absmax"),
            "loss.oscillation": Episodes(p.oscillation_rows, p.oscillation_rows, gap=p.window),
            "loss.divergence": Episodes(p.divergence_k, p.divergence_m, gap=p.window, mode="max"),
        }

    def update(self, batch: Batch, scale: np.ndarray | None = None) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # a reward of 1e200 squared
            return self._update(batch, scale)

    def _decide(self, rows: np.ndarray, x: np.ndarray) -> None:
        """Log or linear scale, from the first ``min_history`` finite values (then fixed)."""
        ok = np.isfinite(x)
        need = self.p.min_history - len(self.first)
        self.first.extend(x[ok][:need].tolist())
        if len(self.first) >= self.p.min_history:
            self.decided_row = int(rows[ok][need - 1]) if need > 0 else int(rows[0])
            self.log = bool(np.mean(np.asarray(self.first) > 0) >= self.p.log_share)

    def _baseline(self, rows: np.ndarray, yf: np.ndarray, n0: int) -> tuple[np.ndarray, np.ndarray]:
        """Trailing robust median and sigma of the new rows (NaN before the scale is decided).

        Block statistics instead of per-row rolling quantiles: the same robust baseline, about 20x
        cheaper. The block summaries are on the decided scale, so the baseline starts when the scale
        is decided, from the history kept in ``ctx`` (longer than the window): the same
        summaries whichever batch the decision fell in. Rows before the decision get NaN, for
        the same reason.
        """
        n = len(rows)
        if self.log is None or not n:
            return np.full(n, np.nan), np.full(n, np.nan)
        if self.bs is None:
            p = self.p
            self.bs = BlockScale(p.window, p.block, min_blocks=max(p.min_history // p.block, 2))
            start = int(rows[0]) - n0  # global row of yf[0]; pad back to a block boundary
            pad = start % p.block
            med, sigma = self.bs.update(np.concatenate([np.full(pad, np.nan), yf]), start - pad)
            med, sigma = med[-n:], sigma[-n:]
        else:
            med, sigma = self.bs.update(yf[n0:], int(rows[0]))
        early = rows < self.decided_row
        return np.where(early, np.nan, med), np.where(early, np.nan, sigma)

    def _update(self, batch: Batch, scale: np.ndarray | None) -> dict[str, np.ndarray]:
        p = self.p
        rows, steps = batch.rows, batch.steps
        x = batch.col(self.name)
        if scale is not None:  # judged relative to the squared reward scale (see Losses)
            x = x / np.square(scale)
        nonfinite = batch.nonfinite(self.name)
        self.rows += int(batch.logged(self.name).sum())
        self.nonfinite += int(nonfinite.sum())
        self.ep["loss.nonfinite"].update(rows, steps, nonfinite, np.where(nonfinite, 1.0, 0.0))
        if self.log is None:
            self._decide(rows, x)
        full, n0 = self.ctx.extend(x=x)
        xf = full["x"]
        # every relative rule runs on log(loss) for a positive loss (a heavy right tail is normal
        # there, SIGNATURES section 2.1), on the loss itself for one near zero or changing sign
        yf = np.log(np.where(xf > 0, xf, np.nan)) if self.log else xf
        ready = (rows >= max(p.probation, self.decided_row)) if self.log is not None \
            else np.zeros(len(rows), dtype=bool)
        med_b, sigma_b = self._baseline(rows, yf, n0)
        z = self._spikes(rows, steps, x, yf[n0:], med_b, sigma_b, ready)
        d = np.abs(np.diff(yf, prepend=np.nan))
        self._early_swing(rows, d[n0:])
        # a series judged for non-finite values only needs no swing, level or noise: its
        # oscillation and divergence conditions never hold (the same episodes: none)
        if self.judge_level:
            swing_f = self._oscillation(rows, steps, yf, d, n0)
            if self.judge_divergence:
                self._divergence(rows, steps, yf, n0, swing_f, sigma_b, ready)
        return {f"{self.name}_robust_z": z}

    def _spikes(self, rows: np.ndarray, steps: np.ndarray, x: np.ndarray, y: np.ndarray,
                med_b: np.ndarray, sigma_b: np.ndarray, ready: np.ndarray) -> np.ndarray:
        """loss.spike: the robust z-score of the new rows (returned) against the baseline."""
        p = self.p
        scale_b = np.fmax(sigma_b, np.fmax(0.0 if self.log else 1e-3 * np.abs(med_b), 1e-12))
        # a loss that wanders slowly looks calm within one window: the run's median deviation
        # from the trailing median (one window back) floors the sigma, as for KL spikes
        dev = np.where(ready, np.abs(y - med_b), np.nan)
        run_sigma = self.spread.update(rows, dev) / 0.6745
        scale_b = np.where(run_sigma > scale_b, run_sigma, scale_b)
        z = (y - med_b) / scale_b
        if self.log:
            spike = (z > p.spike_z) & (x >= p.spike_min_ratio * np.exp(med_b))
            median_x = np.exp(med_b)
        else:
            # a level clearly above zero: also the log-scale z by the delta method,
            # log(x / median) / (sigma / median), so a heavy right tail does not count
            positive = (med_b > p.level_iqrs * sigma_b) & (med_b > 0)
            ratio_x = x / np.where(positive, med_b, np.nan)
            z_log = np.log(np.where(ratio_x > 0, ratio_x, np.nan)) / (scale_b / med_b)
            spike = np.where(positive, (z > p.spike_z) & (ratio_x >= p.spike_min_ratio)
                             & (z_log > p.spike_z), np.abs(z) > p.spike_z)
            median_x = med_b
        spike &= np.isfinite(z) & ready & self.judge_level
        self.ep["loss.spike"].update(rows, steps, spike, z, {"value": x, "median": median_x,
                                                            "scale": scale_b})
        return z

    def _early_swing(self, rows: np.ndarray, d: np.ndarray) -> None:
        """The early swing (median ``|diff|`` of the ``baseline_rows`` after probation), once."""
        p = self.p
        if self.base_swing is None and self.log is not None:
            b0 = max(p.probation, self.decided_row)
            sel = (rows >= b0) & (rows < b0 + p.baseline_rows)
            self.base.append(d[sel])
            if rows[-1] >= b0 + p.baseline_rows - 1:
                b = np.concatenate(self.base)
                b = b[np.isfinite(b)]
                self.base_swing = median(b) if len(b) else float("nan")
                self.base_end = b0 + p.baseline_rows

    def _oscillation(self, rows: np.ndarray, steps: np.ndarray, yf: np.ndarray, d: np.ndarray,
                     n0: int) -> np.ndarray:
        """loss.oscillation: the swing over half a window against the early swing, with a negative
        lag-1 autocorrelation. Returns the swing over the context (the divergence's noise)."""
        p = self.p
        half = max(p.window // 2, 2)
        swing_f = window_median(d, half, max(half // 2, 1))
        swing = swing_f[n0:]
        has_base = rows >= self.base_end
        base_swing = self.base_swing if self.base_swing is not None else np.nan
        ratio = swing / max(base_swing, 1e-12) if np.isfinite(base_swing) else np.full(len(rows), np.nan)
        wide = has_base & np.isfinite(ratio) & (ratio > p.oscillation_ratio)
        rho1 = lag1_autocorr(yf, half, np.concatenate([np.zeros(n0, dtype=bool), wide]))[n0:]
        osc = wide & (rho1 < -p.oscillation_rho) & self.judge_level
        self.ep["loss.oscillation"].update(rows, steps, osc, ratio, {"swing": swing, "lag1": rho1})
        return swing_f

    def _level_noise(self, rows: np.ndarray, level_f: np.ndarray, swing_f: np.ndarray, n0: int,
                     ready: np.ndarray) -> np.ndarray:
        """The noise the level's moves are measured in, per new row."""
        p = self.p
        level = level_f[n0:]
        noise_f = swing_f / DIFF_TO_SIGMA  # robust per-step noise over half a window
        noise = np.where(np.isfinite(shift(noise_f, p.window)), shift(noise_f, p.window), noise_f)[n0:]
        # a floor on the noise: a log that rounds its values (fp16 losses, 4-digit consoles)
        # repeats them, and a zero step noise would turn any rise into millions of sigmas
        noise = np.fmax(noise, p.noise_floor if self.log else
                        np.fmax(p.noise_floor * np.abs(level), 1e-12))
        # ...and under the level's own wander: an autocorrelated loss (AR(1) noise at phi 0.9)
        # moves little from step to step but its level wanders by twice that per-step noise, and
        # over a long run its lowest level sits far below its mean. The run-long median move of
        # the level over ``smooth`` rows (up to one window back, so a divergence does not widen
        # its own yardstick), as a sigma; for independent noise it is below the per-step noise
        # and changes nothing
        move = np.where(ready, np.abs(level - shift(level_f, p.smooth)[n0:]), np.nan)
        wander = self.wander.update(rows, move) / 0.6745
        return np.where(wander > noise, wander, noise)

    def _divergence(self, rows: np.ndarray, steps: np.ndarray, yf: np.ndarray, n0: int,
                    swing_f: np.ndarray, sigma_b: np.ndarray, ready: np.ndarray) -> None:
        """loss.divergence: the level against one window ago and against its lowest, in noise sigmas."""
        p = self.p
        level_f = window_median(yf, p.smooth, max(p.smooth // 2, 1))
        level = level_f[n0:]
        level_ago = shift(level_f, p.window)[n0:]
        noise = self._level_noise(rows, level_f, swing_f, n0, ready)
        lv = np.where(np.isfinite(level) & ready, level, np.inf)
        lowest = np.minimum.accumulate(np.concatenate([[self.lowest], lv]))[1:]
        self.lowest = float(lowest[-1])
        rise = (level - level_ago) / noise
        above = (level - lowest) / noise
        if self.log:  # the rise as a ratio to the lowest level
            rel = np.exp(level - lowest) - 1.0
            level_x, lowest_x = np.exp(level), np.exp(lowest)
        else:  # the run's scale: |lowest level|, or the spread one window earlier near zero
            sig_f, k0 = self.sigma_hist.extend(sigma_b)
            iqr_before = shift(sig_f * 1.349, p.window)[k0:]
            scale_run = np.fmax(np.abs(lowest), np.where(np.isfinite(iqr_before), iqr_before, 0.0))
            rel = (level - lowest) / np.fmax(scale_run, 1e-12)
            level_x, lowest_x = level, lowest
        div = (ready & self.judge_divergence & np.isfinite(rise) & (rise > p.divergence_sigmas)
               & (above > p.divergence_sigmas) & (rel >= p.divergence_min_ratio - 1.0))
        self.ep["loss.divergence"].update(rows, steps, div, rel,
                                          {"level": level_x, "lowest": lowest_x, "sigmas": above})


class Losses(Tracker):
    """Spikes, oscillation, divergence and non-finite values of each logged loss."""

    name = "losses"
    area = "loss"
    requires = (*LOSS_SERIES, "reward_mean")
    starts_on = LOSS_SERIES
    rules = RULES
    Params = LossesParams

    def __init__(self, params: LossesParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        self.p: LossesParams = self.params
        self.series: dict[str, _LossSeries] = {}
        self.reward_ctx = Context(self.p.window)
        self.reward_peak = 0.0
        self.scaled = False

    def _progress_signal(self, name: str) -> bool:
        """Whether a loss series measures progress (:func:`forensics.analysis.context.loss_is_progress`)."""
        return loss_is_progress(name, self.meta.family)

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        for name in LOSS_SERIES:
            if name not in self.series and batch.has(name):
                self.series[name] = _LossSeries(name, self.p, self._progress_signal(name))
                self.source_keys.setdefault(name, name)
                if name == "value_loss" and batch.has("reward_mean"):
                    self.scaled = True
        if not self.series:
            return None
        self.active = True
        self.rows += len(batch)
        scale = self._reward_scale(batch) if self.scaled else None
        out: dict[str, np.ndarray] = {}
        for name, s in self.series.items():
            out.update(s.update(batch, scale if name == "value_loss" else None))
        return out

    def _reward_scale(self, batch: Batch) -> np.ndarray:
        """The reward's scale at each row: the largest median |reward_mean| over a trailing
        window so far. A critic's squared error grows with the square of the returns it
        predicts, so the value loss is judged relative to it: a value loss that grows with the
        reward scale is a healthy critic, not a divergence. The scale never falls: a reward that
        climbs from -0.6 through zero to 2 has returns of that size all along (a scale that
        followed |mean| to zero turned a steady critic into a 20x "divergence")."""
        full, n0 = self.reward_ctx.extend(r=np.abs(batch.col("reward_mean")))
        med = window_median(full["r"], self.p.smooth, 5)[n0:]
        peak = np.fmax.accumulate(np.concatenate([[self.reward_peak], np.nan_to_num(med)]))
        self.reward_peak = float(peak[-1])
        return np.fmax(peak[1:], 1e-6)

    def conclude(self) -> TrackerResult:
        summary: dict[str, Any] = {"rows": self.rows, "series": {}}
        for name, s in self.series.items():
            summary["series"][name] = {"rows": s.rows, "nonfinite": s.nonfinite,
                                       "early_swing": s.base_swing,
                                       "scale": None if s.log is None else ("log" if s.log else "linear"),
                                       **({"relative_to": "reward_scale^2"}
                                          if name == "value_loss" and self.scaled else {})}
            for rule, eps in s.ep.items():
                for ep in eps.finish():
                    self._emit(rule, name, ep)
        unjudged = [n for n, s in self.series.items() if not s.judge_level]
        notes = [f"{', '.join(unjudged)} judged for non-finite values only: not a progress signal for "
                 f"{self.meta.algorithm or 'a run whose algorithm is unknown'}"] if unjudged else []
        return self.result(summary, notes)

    def _emit(self, rule: str, name: str, ep: Any) -> None:
        p = self.p
        ev: dict[str, Any] = {"metrics": [name], "series": name, "rows": ep.n_rows}
        sev = None
        span = step_span(ep.first_step, ep.last_step)
        if rule == "loss.nonfinite":
            msg = f"{name} was NaN or Inf on {ep.n_rows} rows, {span}"
        elif rule == "loss.spike":
            value, med = ep.extras.get("value", float("nan")), ep.extras.get("median", float("nan"))
            against = (f"robust z {ep.peak:.1f} vs the trailing median {med:.4g}" if abs(ep.peak) < NEAR_ZERO_RATIO
                       else f"from a trailing median of ~0 ({med:.3g})")
            msg = append_span(f"{name} spiked to {value:.4g} at step {ep.peak_step} ({against})",
                              ep.first_step, ep.last_step)
            ev.update(value=value, trailing_median=med, robust_z=ep.peak,
                      robust_scale=ep.extras.get("scale"), threshold_z=p.spike_z,
                      threshold_ratio=p.spike_min_ratio)
        elif rule == "loss.oscillation":
            msg = (f"{name} swings {ep.peak:.1f}x its early step-to-step swing over {ep.n_rows} rows, "
                   f"{span}")
            ev.update(swing_ratio=ep.peak, swing=ep.extras.get("swing"), lag1_autocorr=ep.extras.get("lag1"),
                      threshold=p.oscillation_ratio, threshold_rho=-p.oscillation_rho)
        else:
            rel, sig = ep.peak, ep.extras.get("sigmas", float("nan"))
            level, lowest = ep.extras.get("level", float("nan")), ep.extras.get("lowest", float("nan"))
            what = f"{name} / reward_scale^2" if name == "value_loss" and self.scaled else name
            if rel == rel and rel > NEAR_ZERO_RATIO:
                msg = f"{what} rose from ~0 ({lowest:.3g}) to {level:.4g} ({sig:.1f} noise sigmas), {span}"
            else:
                msg = (f"{what} rose to {level:.4g} ({rel:.1f}x the run's scale and {sig:.1f} noise sigmas "
                       f"above its lowest level {lowest:.4g}), {span}")
            ev.update(level=level, lowest_level=lowest, rise_sigmas=sig, rise_over_scale=rel,
                      threshold_sigmas=p.divergence_sigmas, threshold_ratio=p.divergence_min_ratio)
            if rel == rel and rel >= p.divergence_critical_ratio - 1.0:
                sev = Severity.CRITICAL
        self.emit(rule, ep, msg, ev, sev)

"""KL to the reference policy and the controller that steers it.

Level against a target band, time in band, trend, volatility, robust spikes, early-versus-late
drift; for the coefficient: responsiveness (does beta move toward the target?), overshoot,
oscillation, a stuck controller, and conformance to the adaptive controller of Ziegler et al.
(2019) when the run says it is adaptive.

Units: the tracker reads ``kl`` (nats/token) or, when a run logs only the per-sequence sum,
``kl_seq`` (nats/sequence). A target is compared only with the series in its own unit.

Without a target (none in run.json, the config or ``--kl-target``), the band, saturation and
controller-direction checks are skipped (and the report says so); the spike and run-relative
drift checks still run against the run's own baseline. A coefficient that never changes is a
fixed controller (usual in GRPO), never a stuck one, unless the run declares itself adaptive.

References
----------
Ziegler et al. 2019, *Fine-Tuning Language Models from Human Preferences*, arXiv:1909.08593;
``openai/lm-human-preferences`` ``AdaptiveKLController``. Iglewicz and Hoaglin 1993 (robust z).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..spans import append_span, step_span
from ..stats.episodes import Episode, Episodes
from ..stats.order import median
from ..stats.trailing import BlockStats, Context, History, TrailingRunMedian, block_median_mad
from .base import Tracker, TrackerResult

__all__ = ["KLSchedule"]


@record
class KLScheduleParams:
    """The KL schedule tracker's thresholds (``[kl_schedule]`` in a config)."""

    window: int = param(100, "Trailing window (rows) for the rolling baseline and trends.")
    block: int = param(10, "Rows per block of the robust baseline (see stats.BlockStats).")
    min_history: int = param(20, "Rows of history needed before a robust z-score is trusted.")
    probation: int = param(10, "Rows at the start of the run on which no rule fires.", ge=0)
    baseline_rows: int = param(50, "Rows after probation that define the run's KL baseline.")
    spike_z: float = param(6.0, "Robust z of log KL (vs the trailing window) that marks a spike. The "
                           "sigma is the window's spread or, if larger, the run's median deviation "
                           "from the trailing median: a KL that wanders slowly looks calm within one "
                           "window.")
    spike_min_ratio: float = param(2.0, "A spike must also be this many times the trailing median.")
    spike_critical_ratio: float = param(10.0, "Spike peak / median ratio that makes it critical.")
    spike_floor_token: float = param(0.1, "A spike must reach this per-token KL (nats/token; a "
                                     "per-sequence KL is divided by the mean response length): a "
                                     "large ratio to a near-zero baseline is not a spike.")
    spike_floor_sequence: float = param(3.0, "The same floor for a per-sequence KL when no response "
                                        "length is logged (nats/sequence).")
    excessive_token: float = param(0.5, "Per-token KL to the reference (nats/token) that no healthy "
                                   "LM fine-tuning run sustains (kl.excessive; healthy GRPO/PPO runs "
                                   "stay near 0.001-0.1).")
    excessive_critical_token: float = param(1.0, "Per-token KL that makes kl.excessive critical.")
    excessive_sequence: float = param(20.0, "kl.excessive for a per-sequence KL when no response "
                                      "length is logged (twice the upper end of TRL's FAQ: keep it "
                                      "between 0 and 10).")
    excessive_critical_sequence: float = param(100.0, "Per-sequence KL that makes kl.excessive "
                                               "critical.")
    excessive_rows: int = param(3, "Rows of the last 5 on which the KL level must exceed the "
                                "prior (kl.excessive; no probation: a run broken from its first "
                                "update is caught).", le=5)
    band_low: float = param(0.5, "Lower edge of the target band, as a multiple of the target.")
    band_high: float = param(1.5, "Upper edge of the target band (SIGNATURES #1: 1.5 x target).")
    runaway_critical: float = param(4.0, "KL above this multiple of the target is critical.")
    drift_factor: float = param(3.0, "Without a target: KL this many times its level one window "
                                "earlier (and rising) is a runaway; late/early ratio for kl.drift.")
    trend_ratio: float = param(1.2, "Median of the last window/2 rows over the window/2 before "
                               "it that counts as rising.")
    negative_token: float = param(-0.01, "Mean per-token KL below this is negative KL.")
    negative_sequence: float = param(-1.0, "Per-sequence KL below this is negative KL (TRL).")
    off_target_rows: int = param(20, "Consecutive rows outside the band for kl.off_target.")
    saturation_rows: int = param(50, "Consecutive updates with |KL/target - 1| >= 0.2 that "
                                 "mean the controller is saturated.")
    stuck_rows: int = param(10, "Consecutive out-of-band updates with beta unchanged.")
    law_tolerance: float = param(1e-3, "Allowed |log(beta ratio) - Ziegler law| per update.")
    oscillation_crossings: int = param(4, "Band crossings within one window that count as "
                                       "oscillation.")
    coef_collapse: float = param(1e-3, "beta below this multiple of beta_0 is a runaway.")
    stall_ratio: float = param(1e-3, "approx_kl (old vs new policy) below this multiple of its "
                               "highest earlier block median means the policy stopped moving.")
    stall_rows: int = param(10, "Consecutive rows the stalled-update condition must hold.")
    coef_explode: float = param(100.0, "beta above this multiple of beta_0 is a runaway.")
    relations: ClassVar[Relations] = (("excessive_token", "<=", 1, "excessive_critical_token"),
                                      ("excessive_sequence", "<=", 1, "excessive_critical_sequence"),
                                      ("band_low", "<", 1, "band_high"),
                                      ("window", ">=", 2, "block"),
                                      ("min_history", "<=", 1, "window"))


_R = RuleSpec
#: a rule's message and its severity (None: the rule's own)
_Said = tuple[str, Severity | None]
Evidence = dict[str, object]
RULES = (
    _R("kl.excessive", Severity.WARNING, "KL to the reference far above any healthy run",
       "The KL between the policy and the reference is at a level no healthy language-model "
       "fine-tuning run reaches (per token; a per-sequence KL is divided by the response length). "
       "The policy has left the reference far behind: from the first updates this is a learning "
       "rate far too high or a missing or broken KL penalty. Judged against fixed priors, not the "
       "run's own baseline, so a run broken from its first update is caught; not applied to toy "
       "policies (param_count below 1e6) and reported as information when the run has no KL "
       "penalty by design. A KL already at the prior at the first logged step is judged from "
       "twice that level (a KL to the policy's own start is 0 there: this one is to another "
       "model, as the teacher of on-policy distillation, and its level is the objective, not a "
       "drift).",
       "Lower the learning rate 10x (a KL this far out is not a 20% problem); check that the KL "
       "penalty is on (beta > 0) and applied; roll back to the last checkpoint before the onset.",
       ("excessive_token", "excessive_critical_token", "excessive_sequence",
        "excessive_critical_sequence", "excessive_rows"),
       "SIGNATURES #1 (TRL FAQ: sequence KL 0-10 nats), #4"),
    _R("kl.spike", Severity.WARNING, "KL spike",
       "KL to the reference jumped far above its own recent level (robust z-score of log KL "
       "against the trailing window) to a level that matters (spike_floor_token). One-step "
       "spikes that return at once and stay below twice the floor are information; spikes that "
       "persist often precede a collapse.",
       "Inspect the batch at onset; lower the learning rate 20% or tighten the clip range; if "
       "spikes repeat, raise the KL coefficient 20%.",
       ("spike_z", "spike_min_ratio", "spike_critical_ratio", "spike_floor_token",
        "spike_floor_sequence", "window"),
       "SIGNATURES #1, #20", stability=True),
    _R("kl.runaway", Severity.WARNING, "KL runs away from the reference",
       "KL is above the target band (or, with no target, several times its early level) and "
       "still rising: the policy is drifting from the reference faster than the penalty holds it.",
       "Raise the KL coefficient 20% or enable the adaptive controller; lower the learning rate "
       "20%; use fewer PPO epochs; roll back if reward is falling.",
       ("band_high", "runaway_critical", "drift_factor", "trend_ratio"), "SIGNATURES #1"),
    _R("kl.negative", Severity.WARNING, "Negative KL",
       "The k1 KL estimate is persistently negative: sampling differs from scoring (top-k, "
       "min_length, temperature) and the penalty now pays the policy to sit below the reference.",
       "Sample with top_k=0, top_p=1.0 and no min_length; score with the rollout temperature.",
       ("negative_token", "negative_sequence"), "SIGNATURES #2"),
    _R("kl.off_target", Severity.INFO, "KL outside the target band",
       "KL stayed outside [band_low, band_high] x target for a sustained stretch.",
       "Retune the target or the controller horizon; check that target and KL share a unit.",
       ("band_low", "band_high", "off_target_rows")),
    _R("kl.drift", Severity.INFO, "KL drifted between early and late training",
       "The late KL level differs from the early baseline by more than drift_factor.",
       "Expected in part as the policy learns; compare with reward and length before acting.",
       ("drift_factor", "baseline_rows")),
    _R("kl.volatile", Severity.INFO, "KL is volatile",
       "The robust spread of KL over the window is larger than its median.",
       "Larger rollout batches or a lower learning rate make the KL estimate steadier.",
       ("window",)),
    _R("kl_ctl.wrong_direction", Severity.WARNING, "KL controller moves the wrong way",
       "While KL is above the target the coefficient falls (or rises while KL is below it): the "
       "controller amplifies the error instead of correcting it (a sign error).",
       "Fix the controller update sign: beta <- beta * (1 + clip(KL/target - 1, -0.2, 0.2) * n/H).",
       ("band_low", "band_high"), "Ziegler et al. 2019"),
    _R("kl_ctl.stuck", Severity.WARNING, "Adaptive KL controller stuck",
       "The run is adaptive but the coefficient does not move while KL is outside the band.",
       "Check that the controller's update is called each step with the current KL.",
       ("stuck_rows",)),
    _R("kl_ctl.saturated", Severity.WARNING, "KL controller saturated",
       "KL stayed at least 20% from the target for many updates: the controller runs at its "
       "maximum rate and still cannot reach the target (target inconsistent with LR or units).",
       "Retune the KL target or shorten the horizon; check the KL units (token vs sequence).",
       ("saturation_rows",), "SIGNATURES #3a"),
    _R("kl_ctl.law_mismatch", Severity.WARNING, "Coefficient does not follow the adaptive law",
       "The logged beta updates differ from Ziegler et al.'s law with the run's target, horizon "
       "and batch size: the controller running is not the one configured.",
       "Check n (batch size x processes), the horizon and the KL fed to the controller.",
       ("law_tolerance",), "SIGNATURES #3b, section 4"),
    _R("kl_ctl.overshoot", Severity.INFO, "KL overshoots the band",
       "KL's smoothed level (median over the two blocks before each row) crossed from one side "
       "of the target band to the other.",
       "A longer controller horizon damps overshoot.", ("band_low", "band_high")),
    _R("kl_ctl.oscillation", Severity.WARNING, "KL oscillates around the target",
       "KL's smoothed level crossed the band from side to side repeatedly within one window: "
       "the controller overcorrects.",
       "Lengthen the controller horizon (e.g. double it) or lower the learning rate 20%.",
       ("oscillation_crossings", "window"), stability=True),
    _R("kl.update_stalled", Severity.WARNING, "Policy updates stalled",
       "The KL between the policy before and after each update (approx_kl) fell by orders of "
       "magnitude below its earlier level and stayed there: the optimizer no longer moves the "
       "policy (learning rate far too low, a schedule that decayed to zero, or skipped steps).",
       "Check the learning rate and its schedule (raise it back to the value the run started "
       "with); check that optimizer.step() runs and that gradients reach the policy parameters.",
       ("stall_ratio", "stall_rows"), "SIGNATURES #16", formerly=("update.stalled",)),
    _R("kl_ctl.runaway", Severity.WARNING, "KL coefficient ran away",
       "beta collapsed toward zero or grew by orders of magnitude from its initial value.",
       "Retune the KL target; bound beta; check the KL units fed to the controller.",
       ("coef_collapse", "coef_explode"), "SIGNATURES #3c"),
)


class KLSchedule(Tracker):
    """KL level, spikes and drift; controller responsiveness and conformance."""

    name = "kl_schedule"
    area = "kl"
    requires = ("kl", "kl_seq", "kl_coef", "approx_kl", "response_length_mean")
    starts_on = ("kl", "kl_seq", "kl_coef")
    rules = RULES
    Params = KLScheduleParams

    def __init__(self, params: KLScheduleParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: KLScheduleParams = self.params
        self.p = p
        self.series_name: str | None = None
        self.bs = BlockStats(p.window, p.block, min_blocks=max(p.min_history // p.block, 2))
        self.tail = History(p.window)
        # the run's typical |log KL - trailing median| (past probation), a floor under the window's
        # own spread: a KL that wanders slowly looks calm within one window
        self.run_spread = TrailingRunMedian(block=p.window, lag=p.window)
        self.baseline_vals: list[np.ndarray] = []
        self.baseline: float | None = None
        self.ep = {
            "kl.excessive": Episodes(p.excessive_rows, 5, gap=p.window, mode="max"),
            "kl.spike": Episodes(1, 1, gap=3, mode="max"),
            "kl.runaway": Episodes(5, 8, gap=p.window // 2, mode="max"),
            "kl.negative": Episodes(5, 8, gap=p.window // 2, mode="min"),
            "kl.off_target": Episodes(p.off_target_rows, p.off_target_rows, gap=p.window,
                                      mode="absmax"),
            "kl.volatile": Episodes(p.window // 2, p.window // 2, gap=p.window),
            "kl_ctl.wrong_direction": Episodes(5, 8, gap=p.window // 2, mode="absmax"),
            "kl_ctl.stuck": Episodes(p.stuck_rows, p.stuck_rows, gap=p.window // 2),
            "kl_ctl.saturated": Episodes(p.saturation_rows, p.saturation_rows, gap=p.window,
                                         mode="absmax"),
            "kl_ctl.law_mismatch": Episodes(5, 8, gap=p.window, mode="absmax"),
            "kl_ctl.overshoot": Episodes(1, 1, gap=p.window),
            "kl_ctl.oscillation": Episodes(1, 1, gap=p.window),
            "kl_ctl.runaway": Episodes(1, 1, gap=p.window),
            "kl.update_stalled": Episodes(p.stall_rows, p.stall_rows, gap=p.window, mode="min"),
        }
        self.upd_partial = np.zeros(0)
        self.upd_max = -np.inf
        # controller state: the previous row, whose update is judged when the next row arrives
        self.prev: tuple[float, float, int, int] | None = None
        self.beta0: float | None = None
        self.coef_distinct = False
        self.coef_seen = False
        #: coefficient updates not judged against the adaptive law (rows several steps apart)
        self.law_skipped = 0
        #: the KL was at the level prior from the first logged step: a KL to another model
        self.teacher_kl = False
        self.last_state = 0
        self.crossings = Context(p.window)
        self.n_rows_kl = 0
        #: the first logged KL level (nats/token where known): 0 for a KL to the policy's start
        self.first_level: float | None = None
        self.in_band = 0
        self.kl_sum_rows = 0
        self.fit_num = 0.0
        self.fit_den = 0.0
        self.kl_first: list[float] = []
        self.last_step = 0
        self.baseline_end_step = 0

    # -- configuration-derived ------------------------------------------------------------
    def _target(self) -> float | None:
        t = self.meta.kl_target
        if t is None or self.series_name is None:
            return None
        unit = "token" if self.series_name == "kl" else "sequence"
        return float(t) if unit == self.meta.kl_target_unit else None

    def _adaptive(self) -> bool:
        if self.meta.kl_controller is not None:
            return self.meta.kl_controller == "adaptive"
        return self.coef_distinct

    # -- update -------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if batch.has("approx_kl") or len(self.upd_partial) or np.isfinite(self.upd_max):
            self._update_stall(batch)
        if not self._takes(batch):
            return None
        self.active = True
        self.rows += len(batch)
        name = self.series_name or "kl"
        self.source_keys.setdefault("kl", name)
        kl = batch.col(name)
        rows, steps = batch.rows, batch.steps
        with np.errstate(invalid="ignore", divide="ignore"):
            logkl = np.log(np.where(kl > 0, kl, np.nan))
        z, sigma, med = self._robust_z(logkl, batch.row0, rows)
        self._update_baseline(kl, rows, steps)
        self.n_rows_kl += int(np.isfinite(kl).sum())
        # the level in nats/token where it can be known (priors and floors are per token)
        per_token = self._per_token(batch, kl, name)
        floor = np.where(np.isfinite(per_token), per_token >= self.p.spike_floor_token,
                         kl >= (self.p.spike_floor_token if name == "kl" else self.p.spike_floor_sequence))
        self._update_level(rows, steps, kl, per_token, z, floor, np.exp(med))
        target = self._target()
        if target is not None:
            self._update_band(rows, steps, kl, target)
        else:
            self._update_drift(rows, steps, kl, floor)
        after_probation = rows >= self.p.probation
        neg = self.p.negative_token if name == "kl" else self.p.negative_sequence
        self.ep["kl.negative"].update(rows, steps, after_probation & (kl < neg), kl)
        robust_cv = np.expm1(sigma)
        self.ep["kl.volatile"].update(rows, steps, after_probation & (robust_cv > 1.0), robust_cv)
        self.tail.extend(kl)
        self.last_step = int(steps[-1])
        self._controller(batch, kl, batch.col("kl_coef"), target)
        return {"kl_robust_z": z}

    def _takes(self, batch: Batch) -> bool:
        """Whether the batch is this tracker's business: a KL series (the first one logged, in
        the target's unit where both are) or a coefficient, in a run that samples."""
        if self.series_name is None:
            # with both units logged, follow the target's unit (run.json kl_target_unit)
            prefer = ("kl_seq", "kl") if self.meta.kl_target_unit == "sequence" else ("kl", "kl_seq")
            self.series_name = next((s for s in prefer if batch.has(s)), None)
        if self.series_name is None and not batch.has("kl_coef") and not self.coef_seen:
            return False
        if self._offline_preference():
            self.skip_reason = "offline preference optimisation samples nothing: no sampling KL to judge"
            return False
        return True

    def _robust_z(self, logkl: np.ndarray, row0: int,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Robust z-score of log KL against the trailing block medians, the sigma and the median."""
        med, sigma = self.bs.update(logkl, row0)
        sigma = np.fmax(sigma, 0.05)  # log-scale floor: a 5% wiggle is never a spike
        # ...nor a wander the run makes all the time (AR(1) noise at phi 0.9 spreads a window only
        # half as wide as the run): the run's median deviation from the trailing median, as a sigma
        dev = np.where(rows >= self.p.probation, np.abs(logkl - med), np.nan)
        run_sigma = self.run_spread.update(rows, dev) / 0.6745
        sigma = np.where(run_sigma > sigma, run_sigma, sigma)
        return (logkl - med) / sigma, sigma, med

    def _rising(self) -> np.ndarray:
        recent, previous = self.bs.trend(max(self.bs.nblocks // 2, 1))
        return np.exp(recent - previous) > self.p.trend_ratio

    def _update_baseline(self, kl: np.ndarray, rows: np.ndarray, steps: np.ndarray) -> None:
        """The baseline: robust median over [probation, probation + baseline_rows)."""
        p = self.p
        if self.baseline is not None:
            return
        sel = (rows >= p.probation) & (rows < p.probation + p.baseline_rows)
        self.baseline_vals.append(kl[sel])
        if rows[-1] >= p.probation + p.baseline_rows - 1:
            vals = np.concatenate(self.baseline_vals)
            vals = vals[np.isfinite(vals)]
            self.baseline = median(vals) if len(vals) else None
            end = rows == p.probation + p.baseline_rows - 1
            self.baseline_end_step = int(steps[end][0]) if end.any() else int(steps[-1])

    def _update_level(self, rows: np.ndarray, steps: np.ndarray, kl: np.ndarray, per_token: np.ndarray,
                      z: np.ndarray, floor: np.ndarray, median: np.ndarray) -> None:
        """kl.excessive (the level against the language-model priors) and kl.spike."""
        p = self.p
        if self.meta.lm_priors:
            warn_at, _ = self._excessive_levels(per_token)
            level = np.where(np.isfinite(per_token), per_token, kl)
            if self.first_level is None and np.isfinite(level).any():
                self.first_level = float(level[np.isfinite(level)][0])
            if self.first_level is not None:
                # a KL to the policy's own start is 0 at the first step: one already at the prior
                # there is to another model (a teacher: the objective), and only its doubling is
                # a drift
                first = self.first_level
                self.teacher_kl = self.teacher_kl or bool(np.any(first > warn_at))
                warn_at = np.where(first > warn_at, np.fmax(warn_at, 2.0 * first), warn_at)
            self.ep["kl.excessive"].update(rows, steps, level > warn_at, level,
                                           {"kl": kl, "per_token": per_token})
        ratio = kl / median
        spike = (rows >= p.probation) & (z > p.spike_z) & (ratio > p.spike_min_ratio) & floor
        self.ep["kl.spike"].update(rows, steps, spike, ratio, {"kl": kl, "z": z, "median": median,
                                                              "per_token": per_token})

    def _update_band(self, rows: np.ndarray, steps: np.ndarray, kl: np.ndarray, target: float) -> None:
        """Runaway, time in band, off-target stretches and band crossings against a target."""
        p = self.p
        after_probation = rows >= p.probation
        hi, lo = target * p.band_high, target * p.band_low
        finite = np.isfinite(kl)
        band_state = np.where(finite, np.where(kl > hi, 1, np.where(kl < lo, -1, 0)), 0)
        self.in_band += int((finite & (band_state == 0)).sum())
        # the smoothed level (median of the two blocks before each row) must be out of band too:
        # a noisy KL straddling the band edge is not a runaway, nor an oscillating controller
        level = np.exp(self.bs.trend(2)[0])
        runaway = after_probation & (kl > hi) & (level > hi) & self._rising()
        self.ep["kl.runaway"].update(rows, steps, runaway, kl / target,
                                     {"kl": kl, "target": np.full(len(kl), target)})
        off = after_probation & (band_state != 0)
        self.ep["kl.off_target"].update(rows, steps, off, kl / target, {"kl": kl})
        smooth_state = np.where(level > hi, 1, np.where(level < lo, -1, 0))
        smooth_state = np.where(np.isfinite(level), smooth_state, 0)
        self._crossings(rows, steps, smooth_state, level / target)

    def _update_drift(self, rows: np.ndarray, steps: np.ndarray, kl: np.ndarray, floor: np.ndarray) -> None:
        """Runaway without a target: against KL's level one window earlier (the early baseline
        would not do: KL starts at 0, so any healthy growth is a large multiple), judged only once
        that whole earlier window lies past probation, not against the first rows."""
        p = self.p
        _, lagged = self.bs.trend(self.bs.nblocks)
        lagged_kl = np.where(rows >= p.probation + 2 * p.window, np.exp(lagged), np.nan)
        runaway = (rows >= p.probation) & (kl > p.drift_factor * lagged_kl) & self._rising() & floor
        self.ep["kl.runaway"].update(rows, steps, runaway, kl / lagged_kl,
                                     {"kl": kl, "reference": lagged_kl})

    def _per_token(self, batch: Batch, kl: np.ndarray, name: str) -> np.ndarray:
        """KL in nats/token: the per-token series itself, or the per-sequence sum over the mean
        response length (NaN where neither is known)."""
        if name == "kl":
            return kl
        length = batch.col("response_length_mean")
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(length >= 1, kl / length, np.nan)

    def _excessive_levels(self, per_token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Warning and critical levels of kl.excessive, per row, in the unit the row is judged in."""
        p = self.p
        token = np.isfinite(per_token)
        if self.series_name == "kl":
            return (np.full(len(per_token), p.excessive_token),
                    np.full(len(per_token), p.excessive_critical_token))
        return (np.where(token, p.excessive_token, p.excessive_sequence),
                np.where(token, p.excessive_critical_token, p.excessive_critical_sequence))

    def _offline_preference(self) -> bool:
        """Offline preference optimisation samples nothing: there is no sampling KL to judge
        (KTO's ``kl`` is a batch estimate inside the loss)."""
        return self.meta.family == "preference" and self.meta.algorithm != "online_dpo"

    def _update_stall(self, batch: Batch) -> None:
        """approx_kl against the highest block median before each row's block."""
        self.active = True
        p = self.p
        ak = batch.col("approx_kl")
        with np.errstate(invalid="ignore", divide="ignore"):
            la = np.log(np.where(ak > 0, ak, np.nan))
        full = np.concatenate([self.upd_partial, la])
        nc = len(full) // p.block
        meds = block_median_mad(full[: nc * p.block].reshape(-1, p.block))[0]
        # cm[j]: the highest block median before the j-th block that completes in this batch
        cm = np.fmax.accumulate(np.concatenate([[self.upd_max], meds]))
        ref = cm[np.arange(len(self.upd_partial), len(full)) // p.block]
        self.upd_max = float(cm[-1])
        self.upd_partial = full[nc * p.block :]
        after = batch.rows >= p.probation
        with np.errstate(invalid="ignore"):
            stalled = after & np.isfinite(la) & (la < np.log(p.stall_ratio) + ref)
        self.ep["kl.update_stalled"].update(batch.rows, batch.steps, stalled, ak,
                                         {"reference": np.exp(ref)})

    def _crossings(self, rows: np.ndarray, steps: np.ndarray, state: np.ndarray,
                   rel: np.ndarray) -> None:
        """Band crossings (one side to the other, in-band rows in between ignored)."""
        # forward-fill the last non-zero side across in-band rows, seeded by the previous batch
        side = state.astype(np.float64)
        side[side == 0] = np.nan
        side = np.concatenate([[self.last_state or np.nan], side])
        idx = np.where(np.isfinite(side), np.arange(len(side)), 0)
        np.maximum.accumulate(idx, out=idx)
        filled = side[idx]
        cross = np.isfinite(filled[:-1]) & np.isfinite(filled[1:]) & (filled[1:] != filled[:-1])
        cross &= rows >= self.p.probation
        if np.isfinite(filled[-1]):
            self.last_state = int(filled[-1])
        self.ep["kl_ctl.overshoot"].update(rows, steps, cross, rel)
        full, n0 = self.crossings.extend(c=cross.astype(np.float64))
        counts = np.cumsum(np.concatenate([[0.0], full["c"]]))
        w = self.p.window
        idx2 = np.arange(1, len(full["c"]) + 1)
        in_window = (counts[idx2] - counts[np.maximum(idx2 - w, 0)])[n0:]
        self.ep["kl_ctl.oscillation"].update(rows, steps,
                                             in_window >= self.p.oscillation_crossings, in_window)

    def _controller(self, batch: Batch, kl: np.ndarray, coef: np.ndarray,
                    target: float | None) -> None:
        """Judge each coefficient update beta_t -> beta_{t+1} against KL_t."""
        if not batch.has("kl_coef") and self.prev is None:
            return
        self.coef_seen = True
        p = self.p
        prev = self.prev
        k_all = np.concatenate([[prev[0]] if prev else [], kl])
        b_all = np.concatenate([[prev[1]] if prev else [], coef])
        s_all = np.concatenate([[prev[2]] if prev else [], batch.steps]).astype(np.int64)
        r_all = np.concatenate([[prev[3]] if prev else [], batch.rows]).astype(np.int64)
        self.prev = (float(kl[-1]), float(coef[-1]), int(batch.steps[-1]), int(batch.rows[-1]))
        fin_b = b_all[np.isfinite(b_all) & (b_all > 0)]
        if self.beta0 is None and len(fin_b):
            self.beta0 = float(fin_b[0])
        if len(fin_b) and self.beta0 is not None:
            if np.any(np.abs(fin_b / self.beta0 - 1.0) > 1e-9):
                self.coef_distinct = True
        if len(k_all) < 2:
            return
        kt, bt, bnext = k_all[:-1], b_all[:-1], b_all[1:]
        rows, steps = r_all[:-1], s_all[:-1]
        after = rows >= p.probation
        with np.errstate(divide="ignore", invalid="ignore"):
            dlog = np.log(bnext / bt)
        if self.beta0:
            rel = b_all[1:] / self.beta0
            runaway = (rel < p.coef_collapse) | (rel > p.coef_explode)
            self.ep["kl_ctl.runaway"].update(rows, steps, runaway & after, rel)
        if target is not None and self._adaptive():
            self._adaptive_updates(rows, steps, np.diff(s_all), kt, k_all[1:], bt, dlog, target)

    def _adaptive_updates(self, rows: np.ndarray, steps: np.ndarray, gaps: np.ndarray, kt: np.ndarray,
                          knext: np.ndarray, bt: np.ndarray, dlog: np.ndarray, target: float) -> None:
        """An adaptive controller's updates against the target: direction, stuck, saturated, law."""
        p = self.p
        after = rows >= p.probation
        err = np.clip(kt / target - 1.0, -0.2, 0.2)
        ok = np.isfinite(err) & np.isfinite(dlog)
        moved = np.abs(dlog) > 1e-12
        # a controller maps one step's KL to the next coefficient: rows logged several steps apart
        # hide the KLs in between, so the law is judged on consecutive steps only, and the
        # direction where the KL is on one side of the target at both ends
        consecutive = gaps == 1
        with np.errstate(invalid="ignore", divide="ignore"):
            err_next = np.clip(knext / target - 1.0, -0.2, 0.2)
        one_side = consecutive | ((np.sign(err_next) == np.sign(err)) & (np.abs(err_next) >= 0.1))
        wrong = ok & after & one_side & moved & (np.abs(err) >= 0.1) & (np.sign(dlog) == -np.sign(err))
        self.ep["kl_ctl.wrong_direction"].update(rows, steps, wrong, err,
                                                 {"kl": kt, "beta": bt, "dlog_beta": dlog})
        outside = ok & ((kt > target * p.band_high) | (kt < target * p.band_low))
        stuck = outside & after & ~moved
        self.ep["kl_ctl.stuck"].update(rows, steps, stuck, kt / target)
        saturated = ok & after & (np.abs(kt / target - 1.0) >= 0.2)
        self.ep["kl_ctl.saturated"].update(rows, steps, saturated, kt / target)
        sel = ok & (err != 0)
        # added strictly in order (cumsum), onto the totals so far: numpy's pairwise sum groups
        # the terms by the arrays' memory alignment, so the estimate's last bit depended on what
        # the process had allocated before (a fleet worker, ``watch``) and on the batch cuts
        terms = np.vstack([[self.fit_num, self.fit_den], np.column_stack([dlog[sel] * err[sel], err[sel] ** 2])])
        self.fit_num, self.fit_den = (float(v) for v in np.cumsum(terms, axis=0)[-1])
        n, horizon = self.meta.kl_batch_size, self.meta.kl_horizon
        if self.meta.kl_controller == "adaptive" and n and horizon:
            predicted = np.log1p(err * n / horizon)
            resid = np.abs(dlog - predicted)
            self.law_skipped += int((~consecutive).sum())
            bad = ok & after & consecutive & (resid > p.law_tolerance)
            self.ep["kl_ctl.law_mismatch"].update(rows, steps, bad, resid,
                                                  {"observed": dlog, "predicted": predicted})

    def _notes(self, target: float | None) -> list[str]:
        """What the KL checks could not judge on this run, and why."""
        notes: list[str] = []
        if self.meta.kl_penalty == "none":
            notes.append("no KL penalty in this run (kl_penalty = none): KL findings are "
                         "information, not warnings")
        if self.law_skipped:
            notes.append(f"{self.law_skipped} coefficient updates span several steps (the log skips "
                         "steps): not judged against the adaptive law, which maps one step's KL to "
                         "the next coefficient (the direction it moved is judged where the KL stayed on one "
                         "side of the target)")
        if not self.meta.lm_priors:
            notes.append("not a language model (param_count below 1e6 or language_model = false): "
                         "the KL level priors (kl.excessive) are not applied")
        elif self.teacher_kl and self.first_level is not None:
            notes.append(f"the KL was already {self.first_level:.3g} at the first logged step, where a "
                         "KL to the policy's own start is 0: a KL to another model (on-policy "
                         "distillation's teacher, the objective); the RLHF prior is set aside and "
                         "kl.excessive counts from twice that level")
        if self.meta.kl_target is None:
            notes.append("no KL target given (run.json, config [run] kl_target or --kl-target): "
                         "band, saturation and controller-direction checks skipped; spikes and "
                         "drift are judged against the run's own baseline")
        elif target is None and self.series_name is not None:
            notes.append(f"KL target is per {self.meta.kl_target_unit} but the log has only "
                         f"{self.series_name}: band checks skipped")
        return notes

    # -- finish -------------------------------------------------------------------------
    def conclude(self) -> TrackerResult:
        p = self.p
        summary: dict[str, object] = {"series": self.series_name, "rows": self.rows}
        target = self._target()
        unit = "nats/token" if self.series_name == "kl" else "nats/sequence"
        summary["unit"] = unit
        notes = self._notes(target)
        summary["target"] = target
        summary["baseline"] = self.baseline
        if target is not None and self.n_rows_kl:
            summary["time_in_band"] = round(self.in_band / self.n_rows_kl, 4)
        late = self.tail.values[np.isfinite(self.tail.values)]
        if len(late) and self.baseline:
            drift = median(late) / self.baseline
            summary["late_over_early"] = drift
        summary["controller"] = ("adaptive" if self._adaptive() else "fixed") if self.coef_seen \
            else None
        if self.fit_den > 0:
            summary["controller_gain_estimate"] = self.fit_num / self.fit_den
        summary["beta0"] = self.beta0
        if self.coef_seen and not self._adaptive():
            notes.append("constant KL coefficient: a fixed controller, not judged as stuck")

        for rule, eps in self.ep.items():
            for ep in eps.finish():
                self._emit(rule, ep, target, unit)
        late_over_early = summary.get("late_over_early")
        if isinstance(late_over_early, float) and late_over_early > p.drift_factor and not any(
            f.rule == "kl.runaway" for f in self._findings
        ):
            ep = Episode(onset_step=self.baseline_end_step, first_step=self.baseline_end_step,
                         last_step=self.last_step, last_row=0, n_rows=p.window)
            self.emit("kl.drift", ep,
                      f"late KL is {summary['late_over_early']:.3g}x the early baseline "
                      f"({self.baseline:.3g} {unit})",
                      {"late_over_early": summary["late_over_early"], "baseline": self.baseline,
                       "threshold": p.drift_factor, "metrics": ["kl"]})
        return self.result(summary, notes)

    def _emit(self, rule: str, ep: Episode, target: float | None, unit: str) -> None:
        ev: Evidence = {"metrics": ["kl"], "rows": ep.n_rows}
        msg, sev = self._MESSAGES[rule](self, ep, target, unit, ev)
        if self.meta.kl_penalty == "none" and rule.startswith("kl.") and rule != "kl.update_stalled":
            # no KL regularisation by design (DAPO, beta = 0): the level is information
            sev = Severity.INFO
            msg += " (the run has no KL penalty: reported, not judged)"
        self.emit(rule, ep, msg, ev, sev)

    # -- one message (and severity) per rule: (episode, target, unit, evidence to fill) ----------
    def _say_excessive(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        p = self.p
        per_token = ep.extras.get("per_token", float("nan"))
        token = per_token == per_token
        warn, crit = ((p.excessive_token, p.excessive_critical_token) if token or
                      self.series_name == "kl" else
                      (p.excessive_sequence, p.excessive_critical_sequence))
        level_unit = "nats/token" if token or self.series_name == "kl" else unit
        seq = (f" ({ep.extras.get('kl', float('nan')):.3g} {unit} over the response length)"
               if token and self.series_name != "kl" else "")
        msg = (f"KL to the reference reached {ep.peak:.3g} {level_unit}{seq} at step "
               f"{ep.peak_step}, above the {warn:g} {level_unit} no healthy run sustains, from "
               f"step {ep.onset_step}")
        ev.update(peak_level=ep.peak, level_unit=level_unit, prior=warn, critical_prior=crit,
                  peak_kl=ep.extras.get("kl"))
        sev = Severity.CRITICAL if ep.peak >= crit else None
        if self.first_level is not None and self.first_level > warn:
            # (the episode holds only rows past twice the first level: see _update_level)
            msg += (f"; it was already {self.first_level:.3g} at the first logged step (a KL to "
                    "another model, such as on-policy distillation's teacher, where the level is "
                    "the objective), so it counts from where it doubled")
            ev.update(first_level=self.first_level, judged_from="twice the first logged level")
        return msg, sev

    def _say_spike(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        p = self.p
        kl = ep.extras.get("kl", float("nan"))
        med = ep.extras.get("median", float("nan"))
        per_token = ep.extras.get("per_token", float("nan"))
        msg = append_span(f"KL spiked to {kl:.3g} {unit} at step {ep.peak_step} ({ep.peak:.3g}x the "
                          f"trailing median {med:.3g})", ep.first_step, ep.last_step)
        ev.update(peak_kl=kl, trailing_median=med, peak_ratio=ep.peak,
                  robust_z=ep.extras.get("z"), threshold_z=p.spike_z,
                  threshold_ratio=p.spike_min_ratio, peak_per_token=per_token)
        # critical only where the level itself matters, not a large ratio to a tiny baseline
        level = per_token if per_token == per_token else (
            kl if self.series_name == "kl" else kl / p.excessive_sequence * p.excessive_token)
        if ep.peak >= p.spike_critical_ratio and level >= p.excessive_token:
            return msg, Severity.CRITICAL
        if ep.n_rows < 2 and not level >= 2 * p.spike_floor_token:
            # one step to a modest level, back at once: a noisy batch, not a KL event
            # (SIGNATURES #1: transient spikes were reported harmless; require persistence)
            return msg, Severity.INFO
        return msg, None

    def _say_runaway(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        p = self.p
        ref = "target" if target is not None else f"level {p.window} rows earlier"
        msg = (f"KL reached {ep.peak:.3g}x the {ref} at step {ep.peak_step} and kept rising "
               f"({step_span(ep.first_step, ep.last_step)})")
        ev.update(peak_ratio=ep.peak, peak_kl=ep.extras.get("kl"), reference=ref,
                  threshold=p.band_high if target is not None else p.drift_factor)
        return msg, Severity.CRITICAL if target is not None and ep.peak >= p.runaway_critical else None

    def _say_negative(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(min_kl=ep.peak)
        return f"KL stayed negative (down to {ep.peak:.3g} {unit}), {step_span(ep.first_step, ep.last_step)}", None

    def _say_off_target(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(peak_ratio=ep.peak, band=[self.p.band_low, self.p.band_high], target=target)
        return (f"KL outside the target band for {ep.n_rows} rows (up to {ep.peak:.3g}x the "
                f"target), {step_span(ep.first_step, ep.last_step)}"), None

    def _say_volatile(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(robust_cv=ep.peak)
        return (f"KL robust spread exceeded its median (CV {ep.peak:.3g}), "
                f"{step_span(ep.first_step, ep.last_step)}"), None

    def _say_wrong_direction(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(kl=ep.extras.get("kl"), beta=ep.extras.get("beta"), target=target,
                  clipped_error=ep.peak)
        return (f"KL coefficient moved against the KL error on {ep.n_rows} updates, "
                f"{step_span(ep.first_step, ep.last_step)} (e.g. KL {ep.extras.get('kl', float('nan')):.3g} "
                f"vs target {target}, log-change of beta {ep.extras.get('dlog_beta', float('nan')):.3g})"), None

    def _say_stuck(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(kl_over_target=ep.peak)
        return (f"adaptive KL coefficient did not move while KL was out of band, "
                f"{step_span(ep.first_step, ep.last_step)}"), None

    def _say_saturated(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(kl_over_target=ep.peak, threshold_rows=self.p.saturation_rows)
        return (f"KL stayed >=20% from the target for {ep.n_rows} updates (up to {ep.peak:.3g}x), "
                f"{step_span(ep.first_step, ep.last_step)}"), None

    def _say_law_mismatch(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(max_residual=ep.peak, tolerance=self.p.law_tolerance,
                  observed=ep.extras.get("observed"), predicted=ep.extras.get("predicted"),
                  horizon=self.meta.kl_horizon, batch_size=self.meta.kl_batch_size)
        return (f"beta updates deviate from the adaptive law by up to {ep.peak:.3g} (log) on "
                f"{ep.n_rows} updates, {step_span(ep.first_step, ep.last_step)}"), None

    def _say_overshoot(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(kl_over_target=ep.peak)
        return f"KL crossed the target band to the other side at step {ep.onset_step} ({ep.peak:.3g}x target)", None

    def _say_oscillation(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(crossings=ep.peak, threshold=self.p.oscillation_crossings)
        return (f"KL crossed the band {int(ep.peak)} times within {self.p.window} rows, "
                f"{step_span(ep.first_step, ep.last_step)}"), None

    def _say_stalled(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ref = ep.extras.get("reference", float("nan"))
        ev.update(min_approx_kl=ep.peak, earlier_level=ref, threshold_ratio=self.p.stall_ratio,
                  metrics=["approx_kl"])
        return (f"approx_kl fell to {ep.peak:.3g} ({ref / ep.peak if ep.peak else float('inf'):.3g}x "
                f"below its earlier level {ref:.3g}): the policy stopped moving, "
                f"{step_span(ep.first_step, ep.last_step)}"), None

    def _say_coef_runaway(self, ep: Episode, target: float | None, unit: str, ev: Evidence) -> _Said:
        ev.update(beta_over_beta0=ep.peak, beta0=self.beta0)
        return f"KL coefficient reached {ep.peak:.3g}x its initial value at step {ep.peak_step}", None

    _MESSAGES: ClassVar[dict[str, Callable[..., _Said]]] = {
        "kl.excessive": _say_excessive, "kl.spike": _say_spike, "kl.runaway": _say_runaway,
        "kl.negative": _say_negative, "kl.off_target": _say_off_target, "kl.volatile": _say_volatile,
        "kl_ctl.wrong_direction": _say_wrong_direction, "kl_ctl.stuck": _say_stuck,
        "kl_ctl.saturated": _say_saturated, "kl_ctl.law_mismatch": _say_law_mismatch,
        "kl_ctl.overshoot": _say_overshoot, "kl_ctl.oscillation": _say_oscillation,
        "kl.update_stalled": _say_stalled, "kl_ctl.runaway": _say_coef_runaway,
    }

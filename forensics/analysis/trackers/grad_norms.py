"""Gradient norms: explosions, spikes, vanishing, non-finite steps, policy/value imbalance, clipping.

Thresholds are relative to the run's own trailing baseline wherever the scale of a gradient norm
depends on the setup (loss reduction, batch size, model size); the absolute ones are last-resort
guards. A NaN or Inf gradient norm usually means the optimizer skipped the step (fp16 overflow)
or the weights are already corrupted.

References: SIGNATURES.md #20-#22 (spike thresholds calibrated on healthy runs, persistent
clipping), OPT-175B logbook, PaLM (spikes despite clipping).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..spans import append_span, step_span
from ..stats.episodes import Episodes
from ..stats.order import median
from ..stats.trailing import BlockStats, Context, persist, shift, window_median
from .base import Tracker, TrackerResult

__all__ = ["GradNorms"]


@record
class GradNormsParams:
    """The gradient-norm tracker's thresholds (``[grad_norms]`` in a config)."""

    window: int = param(100, "Trailing window (rows) of the robust baseline.")
    block: int = param(10, "Rows per block of the robust baseline (see stats.BlockStats).")
    min_history: int = param(20, "Rows of history before robust scores are trusted.")
    probation: int = param(10, "Rows at the start on which relative rules do not fire.", ge=0)
    spike_z: float = param(6.0, "Robust z of log grad norm that marks a spike (MON: 6).")
    spike_min_ratio: float = param(3.0, "A spike must also be this many times the trailing median.")
    explode_ratio: float = param(10.0, "Grad norm this many times the trailing median (or the "
                                 "early baseline), sustained, is an explosion.")
    explode_abs: float = param(1e3, "Grad norm above this is an explosion whatever the baseline.")
    explode_k: int = param(3, "Explosion persistence: rows out of explode_m.")
    explode_m: int = param(5, "Explosion persistence window (rows).")
    vanish_ratio: float = param(0.01, "Grad norm below this multiple of the early baseline, "
                                "sustained, is vanishing.")
    vanish_abs: float = param(1e-7, "Grad norm below this is vanishing whatever the baseline.")
    vanish_rows: int = param(10, "Consecutive rows a vanishing condition must hold.")
    baseline_rows: int = param(50, "Rows after probation that define the early baseline.")
    imbalance_decades: float = param(2.0, "|log10(policy / value grad norm)| above this is an "
                                     "imbalance (2 = 100x).")
    imbalance_rows: int = param(10, "Consecutive rows the imbalance must hold.")
    imbalance_shift: float = param(1.0, "A shift of the policy/value ratio by this many decades "
                                   "from its early level is an imbalance too (1 = 10x).")
    clip_share: float = param(0.05, "Share of recent steps clipped that means saturation "
                              "(MON: healthy <= 0.5%).", le=1)
    clip_window: int = param(300, "Rows over which the clipped share is measured.")
    clip_far: float = param(10.0, "Grad norm this many times max_grad_norm (on clip_far_k of 5 "
                            "rows, from the first step) makes clipping saturation critical: the "
                            "update is a tenth of what the gradient asks for, every step.")
    clip_far_k: int = param(3, "Rows out of 5 the grad norm must be clip_far x max_grad_norm.", le=5)
    spike_warning_ratio: float = param(10.0, "Spike peak / trailing median below which a "
                                       "gradient spike is information (healthy runs show 3-5x "
                                       "spikes; the clip bounds their update). A one-step spike "
                                       "below spike_critical_ratio is information too.")
    early_jump: float = param(40.0, "In the first rows, before the trailing baseline is trusted, a "
                              "gradient norm this many times the median of the early_rows before "
                              "it (or clip_far times a known clip) is a spike: priors need no "
                              "probation.")
    early_rows: int = param(5, "Ordinary rows (tied steps left out) whose median is the reference "
                            "of an early jump.")
    spike_critical_ratio: float = param(30.0, "Spike peak / trailing median that makes grad.spike "
                                        "critical.")
    relations: ClassVar[Relations] = (("explode_k", "<=", 1, "explode_m"),
                                      ("spike_warning_ratio", "<=", 1, "spike_critical_ratio"),
                                      ("window", ">=", 2, "block"),
                                      ("min_history", "<=", 1, "window"))


_R = RuleSpec
RULES = (
    _R("grad.nonfinite", Severity.WARNING, "Non-finite gradient norm",
       "A NaN or Inf gradient norm was logged: the step overflowed (fp16), was skipped, or the "
       "weights are already corrupted.",
       "Restore the last good checkpoint; switch fp16 to bf16; lower the learning rate 20%; "
       "check the loss for log(0) or division by a zero std.",
       (), "SIGNATURES #22", stability=True),
    _R("grad.explode", Severity.WARNING, "Gradient explosion",
       "The gradient norm rose an order of magnitude above its trailing median and stayed "
       "there, or crossed the absolute ceiling.",
       "Lower the learning rate 20% (or 50% if it recurs); set max_grad_norm=1.0 if clipping is "
       "off; restart from a checkpoint before onset.",
       ("explode_ratio", "explode_abs", "explode_k", "explode_m"), "SIGNATURES #20; OPT",
       stability=True),
    _R("grad.spike", Severity.WARNING, "Gradient-norm spike",
       "A gradient norm far above the run's recent level (robust z of log norm over the "
       "trailing window, current point excluded).",
       "Skip or inspect the batch at onset; lower the learning rate 20% or beta2 to 0.95 if "
       "spikes repeat; tighten gradient clipping 20%.",
       ("spike_z", "spike_min_ratio", "spike_warning_ratio", "spike_critical_ratio", "window"),
       "SIGNATURES #20",
       stability=True),
    _R("grad.vanish", Severity.WARNING, "Vanishing gradients",
       "The gradient norm fell to a tiny fraction of its early level and stayed there: the "
       "policy has stopped learning (learning rate far too low, saturated outputs, dead "
       "advantages).",
       "Check the learning rate schedule (raise it if it decayed to ~0); check that advantages "
       "are non-zero; check that the loss is connected to the parameters (gradient checkpointing "
       "with frozen inputs leaves every gradient None).",
       ("vanish_ratio", "vanish_abs", "vanish_rows")),
    _R("grad.imbalance", Severity.WARNING, "Policy/value gradient imbalance",
       "Policy and value gradient norms differ by orders of magnitude, or their ratio shifted by "
       "an order of magnitude from its early level: one loss dominates the shared update "
       "(typically an unscaled value loss).",
       "Scale the value loss (vf_coef 0.1-0.5) or clip the value-loss gradient separately; "
       "give the value head its own optimizer or learning rate.",
       ("imbalance_decades", "imbalance_rows")),
    _R("grad.clip_saturation", Severity.WARNING, "Gradient clipping saturated",
       "A large share of recent steps hit the clipping threshold, or the gradient norm stays "
       "many times above it: the effective step size is set by the clip, not the learning "
       "rate (critical when the norm is an order of magnitude above the clip from the start).",
       "Lower the learning rate 20%; check the reward scale; raise max_grad_norm only if "
       "clipping is deliberately tight.",
       ("clip_share", "clip_window", "clip_far", "clip_far_k"), "SIGNATURES #21"),
)


class GradNorms(Tracker):
    """Gradient-norm health from ``grad_norm`` (and ``grad_norm_value``)."""

    name = "grad_norms"
    area = "gradients"
    requires = ("grad_norm", "grad_norm_value", "reward_std", "frac_reward_zero_std")
    rules = RULES
    Params = GradNormsParams

    def __init__(self, params: GradNormsParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: GradNormsParams = self.params
        self.p = p
        self.bs = BlockStats(p.window, p.block, min_blocks=max(p.min_history // p.block, 2))
        self.clip_ctx = Context(p.clip_window)
        self.base_vals: list[np.ndarray] = []
        self.baseline: float | None = None
        self.ep = {
            "grad.nonfinite": Episodes(1, 1, gap=5),
            "grad.explode": Episodes(p.explode_k, p.explode_m, gap=p.explode_m, mode="max"),
            "grad.spike": Episodes(1, 1, gap=3, mode="max"),
            "grad.clip_far": Episodes(p.clip_far_k, 5, gap=p.window, mode="max"),
            "grad.vanish": Episodes(p.vanish_rows, p.vanish_rows, gap=p.window, mode="min"),
            "grad.imbalance": Episodes(p.imbalance_rows, p.imbalance_rows, gap=p.window,
                                       mode="absmax"),
            "grad.clip_saturation": Episodes(1, 1, gap=p.clip_window, mode="max"),
        }
        self.nonfinite_rows = 0
        self.recent = Context(p.early_rows + 1)
        self.clipped_rows = 0
        self.norm_rows = 0
        self.log_ratio_first: float | None = None
        self.ratio_vals: list[np.ndarray] = []
        self.base_ratio: float | None = None
        self.log_ratio_last: float | None = None

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not (batch.has("grad_norm") or batch.has("grad_norm_value")):
            if not self.active:
                return None
        self.active = True
        self.rows += len(batch)
        p = self.p
        rows, steps = batch.rows, batch.steps
        g = batch.col("grad_norm")
        self.source_keys.setdefault("grad_norm", "grad_norm")
        nonfinite = batch.nonfinite("grad_norm") | batch.nonfinite("grad_norm_value")
        self.nonfinite_rows += int(nonfinite.sum())
        self.ep["grad.nonfinite"].update(rows, steps, nonfinite,
                                         np.where(nonfinite, 1.0, 0.0))
        pos = np.isfinite(g) & (g > 0)
        self.norm_rows += int(pos.sum())
        # a step where every group tied (no reward spread) has no advantage to follow: its norm
        # is below the metric's floor, so it is neither a level to judge others against nor a
        # spike (the next ordinary row is not one)
        tie = (batch.col("reward_std") == 0) | (batch.col("frac_reward_zero_std") >= 1)
        logg = np.log(np.where(pos & ~tie, g, np.nan))
        med, sigma = self.bs.update(logg, batch.row0)
        sigma = np.fmax(sigma, 0.05)  # log-scale floor: a 5% wiggle is never a spike
        z = (logg - med) / sigma
        # the early baseline: the trailing one adapts to a sustained explosion, this one does not
        if self.baseline is None:
            self.baseline = self._early_median(self.base_vals, rows, g, None)
        base = self.baseline if self.baseline else np.nan
        self._explosions(rows, steps, g, np.exp(med), base)
        self._spikes(rows, steps, np.where(tie, np.nan, g), z, np.exp(med), base)
        vanish = np.isfinite(g) & ((g < p.vanish_abs) | (self._has_base(rows) & (g < p.vanish_ratio * base)))
        self.ep["grad.vanish"].update(rows, steps, vanish, g, {"baseline": np.full(len(g), base)})
        lr = self._imbalance(rows, steps, g, batch.col("grad_norm_value"))
        if self.meta.max_grad_norm:  # clipping saturation, when the clip threshold is known
            self._clipping(rows, steps, g, self.meta.max_grad_norm, self.rows - len(batch))
        return {"grad_norm_robust_z": z, "grad_policy_value_log10": lr}

    def _has_base(self, rows: np.ndarray) -> np.ndarray:
        return rows >= self.p.probation + self.p.baseline_rows

    def _early_median(self, kept: list[np.ndarray], rows: np.ndarray, x: np.ndarray,
                      empty: float | None) -> float | None:
        """Keep the rows of ``x`` in [probation, probation + baseline_rows); once that stretch
        is complete, their median (``empty`` when none is finite), else None."""
        p = self.p
        kept.append(x[(rows >= p.probation) & (rows < p.probation + p.baseline_rows)])
        if rows[-1] < p.probation + p.baseline_rows - 1:
            return None
        vals = np.concatenate(kept)
        vals = vals[np.isfinite(vals)]
        return median(vals) if len(vals) else empty

    def _explosions(self, rows: np.ndarray, steps: np.ndarray, g: np.ndarray, median: np.ndarray,
                    base: float) -> None:
        """grad.explode: far above the trailing median, the early baseline or the absolute cap."""
        p = self.p
        ratio = g / median
        has_base = self._has_base(rows)
        explode = ((rows >= p.probation) & (ratio > p.explode_ratio)) | (np.isfinite(g) & (g > p.explode_abs))
        explode |= has_base & (g > p.explode_ratio * base)
        self.ep["grad.explode"].update(rows, steps, explode, g,
                                       {"ratio": ratio, "median": median,
                                        "base_ratio": g / base if has_base.any() else np.full(len(g), np.nan)})

    def _spikes(self, rows: np.ndarray, steps: np.ndarray, g: np.ndarray, z: np.ndarray,
                median: np.ndarray, base: float) -> None:
        """grad.spike: judged against the run's own level: the trailing median, or the early
        baseline when the norm has sunk far below it (a spike out of a stretch of near-zero
        gradients is no larger than the run's usual step); in the first rows, before a trailing
        baseline exists, against the previous row and the clip."""
        p = self.p
        ref = np.fmax(median, base) if np.isfinite(base) else median
        ratio_s = g / ref
        spike = (rows >= p.probation) & (z > p.spike_z) & (ratio_s > p.spike_min_ratio)
        # before a trailing baseline exists: the median of the last few ordinary rows, never one
        # neighbour (a tied step's near-zero norm would make the next ordinary row a spike)
        full, n0 = self.recent.extend(g=np.where(g > 0, g, np.nan))
        prev = shift(window_median(full["g"], p.early_rows, 1), 1)[n0:]
        clip = self.meta.max_grad_norm if "max_grad_norm" not in self.meta.assumed else None
        with np.errstate(invalid="ignore", divide="ignore"):
            jump = ~np.isfinite(z) & np.isfinite(prev) & (prev > 0) & (
                (g > p.early_jump * prev) | ((g > p.clip_far * clip) if clip else False))
            ratio_s = np.where(jump, g / prev, ratio_s)
        self.ep["grad.spike"].update(rows, steps, spike | jump, ratio_s,
                                     {"grad_norm": g, "z": z, "median": np.where(jump, prev, ref),
                                      "early": jump.astype(np.float64)})

    def _imbalance(self, rows: np.ndarray, steps: np.ndarray, g: np.ndarray, gv: np.ndarray) -> np.ndarray:
        """grad.imbalance: log10 of the policy over the value gradient norm (returned), far from
        zero or shifted from its early level."""
        p = self.p
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log10(g / gv)
        ok = np.isfinite(lr)
        if ok.any():
            if self.log_ratio_first is None:
                self.log_ratio_first = float(lr[ok][0])
            self.log_ratio_last = float(lr[ok][-1])
        if self.base_ratio is None:
            self.base_ratio = self._early_median(self.ratio_vals, rows, lr, float("nan"))
        shifted = self._has_base(rows) & (np.abs(lr - (self.base_ratio if self.base_ratio is not None
                                                       else np.nan)) > p.imbalance_shift)
        imb = ok & (rows >= p.probation) & ((np.abs(lr) > p.imbalance_decades) | shifted)
        self.ep["grad.imbalance"].update(rows, steps, imb, lr, {"policy": g, "value": gv})
        return lr

    def _clipping(self, rows: np.ndarray, steps: np.ndarray, g: np.ndarray, clip: float, row0: int) -> None:
        """grad.clip_saturation (the share of clipped steps over a window) and a norm far above the clip."""
        p = self.p
        after = rows >= p.probation
        clipped = np.isfinite(g) & (g > clip)
        self.clipped_rows += int(clipped.sum())
        cfull, c0 = self.clip_ctx.extend(c=clipped)
        k = max(1, int(np.ceil(p.clip_share * p.clip_window)))
        sat = persist(cfull["c"], k, p.clip_window)[c0:] & after
        counts = np.cumsum(np.concatenate([[0], cfull["c"].astype(np.int64)]))
        idx = np.arange(1, len(cfull["c"]) + 1)
        share = ((counts[idx] - counts[np.maximum(idx - p.clip_window, 0)])
                 / np.minimum(idx + (row0 - c0), p.clip_window))[c0:]
        # the norm against its early level: a norm steadily above the clip is the run's own
        # scale (information); one that keeps growing past it is a warning
        base = self.baseline if self.baseline else np.nan
        self.ep["grad.clip_saturation"].update(rows, steps, sat, share, {"growth": g / base})
        if "max_grad_norm" not in self.meta.assumed:
            # against a default the run may not use (DPO's pre-clip norms sit at 10-100 with
            # the Trainer's 1.0), a far-above-the-clip norm proves nothing
            self.ep["grad.clip_far"].update(rows, steps, np.isfinite(g) & (g >= p.clip_far * clip),
                                            g / clip, {"grad_norm": g})

    def _spike_severity(self, ep) -> Severity:  # type: ignore[no-untyped-def]
        """Severity by magnitude; a spike the clip cut back to near the usual update size is
        information (the optimizer took an ordinary step)."""
        p = self.p
        clip = self.meta.max_grad_norm
        peak, median = ep.extras.get("grad_norm", float("nan")), ep.extras.get("median", float("nan"))
        # a jump in the first rows to ten times a clip the run chose is judged whatever its size
        far = bool(ep.extras.get("early") and clip and "max_grad_norm" not in self.meta.assumed
                   and peak == peak and peak >= p.clip_far * clip)
        if clip and peak == peak and median == median and median > 0 and not far:
            if min(peak, clip) / min(median, clip) < 2.0:
                return Severity.INFO
        if ep.peak >= p.spike_critical_ratio:
            return Severity.CRITICAL
        if ep.n_rows < 2 and not far:
            # one step, back at once: an isolated excursion (SIGNATURES section 1.1 downgrades
            # single-metric, single-step events; the clip bounded its update)
            return Severity.INFO
        return Severity.WARNING if ep.peak >= p.spike_warning_ratio or far else Severity.INFO

    def conclude(self) -> TrackerResult:
        notes = []
        if not self.meta.max_grad_norm:
            notes.append("clip value unknown (run.json max_grad_norm): clipping saturation "
                         "not checked")
        summary: dict[str, object] = {
            "rows": self.rows,
            "nonfinite_rows": self.nonfinite_rows,
            "baseline": self.baseline,
            "log10_policy_value_first": self.log_ratio_first,
            "log10_policy_value_last": self.log_ratio_last,
        }
        if self.meta.max_grad_norm and self.norm_rows:
            summary["clipped_share"] = round(self.clipped_rows / self.norm_rows, 4)
        for ep in self.ep["grad.nonfinite"].finish():
            self.emit("grad.nonfinite", ep,
                      f"{ep.n_rows} non-finite gradient norms, {step_span(ep.first_step, ep.last_step)}",
                      {"rows": ep.n_rows, "metrics": ["grad_norm"]})
        self._emit_explosions_and_spikes()
        self._emit_vanish_and_imbalance()
        self._emit_clipping()
        return self.result(summary, notes)

    def _emit_explosions_and_spikes(self) -> None:
        """grad.explode, then the spikes no explosion covers."""
        p = self.p
        explode_eps = self.ep["grad.explode"].finish()
        spans = [(e.first_step, e.last_step) for e in explode_eps]
        for ep in explode_eps:
            ratio, base_ratio = ep.extras.get("ratio", float("nan")), ep.extras.get("base_ratio", float("nan"))
            # against the early baseline when the trailing median has caught up with a lasting rise
            vs = (f"{base_ratio:.3g}x the early baseline {self.baseline:.3g}" if base_ratio > ratio
                  and self.baseline else f"{ratio:.3g}x the trailing median")
            self.emit("grad.explode", ep,
                      append_span(f"gradient norm exploded to {ep.peak:.3g} ({vs}) at step {ep.peak_step}",
                                  ep.first_step, ep.last_step),
                      {"peak": ep.peak, "peak_ratio": ep.extras.get("ratio"),
                       "trailing_median": ep.extras.get("median"),
                       "threshold_ratio": p.explode_ratio, "threshold_abs": p.explode_abs,
                       "metrics": ["grad_norm"]})
        for ep in self.ep["grad.spike"].finish():
            if any(a - p.explode_m <= ep.onset_step <= b + p.explode_m for a, b in spans):
                continue  # the explosion finding already covers this step
            vs = "the rows before it" if ep.extras.get("early") else "the run's level"
            self.emit("grad.spike", ep,
                      f"gradient norm spiked to {ep.extras.get('grad_norm', float('nan')):.3g} at step "
                      f"{ep.peak_step} ({ep.peak:.3g}x {vs} {ep.extras.get('median', float('nan')):.3g})",
                      {"peak_ratio": ep.peak, "peak": ep.extras.get("grad_norm"),
                       "robust_z": ep.extras.get("z"), "threshold_z": p.spike_z,
                       "threshold_ratio": p.spike_min_ratio, "metrics": ["grad_norm"]},
                      self._spike_severity(ep))

    def _emit_vanish_and_imbalance(self) -> None:
        p = self.p
        for ep in self.ep["grad.vanish"].finish():
            base = ep.extras.get("baseline", float("nan"))
            vs = f"early baseline {base:.3g}" if base == base else "no early level above it to compare"
            self.emit("grad.vanish", ep,
                      f"gradient norm fell to {ep.peak:.3g} ({vs}), {step_span(ep.first_step, ep.last_step)}",
                      {"min": ep.peak, "baseline": ep.extras.get("baseline"),
                       "threshold_ratio": p.vanish_ratio, "threshold_abs": p.vanish_abs,
                       "metrics": ["grad_norm"]})
        for ep in self.ep["grad.imbalance"].finish():
            self.emit("grad.imbalance", ep,
                      f"policy/value gradient norms differ by 10^{abs(ep.peak):.2g} "
                      f"(policy {ep.extras.get('policy', float('nan')):.3g}, value "
                      f"{ep.extras.get('value', float('nan')):.3g}), {step_span(ep.first_step, ep.last_step)}",
                      {"log10_ratio": ep.peak, "first_log10_ratio": self.log_ratio_first,
                       "baseline_log10_ratio": self.base_ratio,
                       "threshold_decades": p.imbalance_decades,
                       "threshold_shift_decades": p.imbalance_shift,
                       "metrics": ["grad_norm", "grad_norm_value"]})

    def _emit_clipping(self) -> None:
        """grad.clip_saturation: a share of clipped steps, or a norm far above the clip."""
        p = self.p
        assumed = "max_grad_norm" in self.meta.assumed
        for ep in self.ep["grad.clip_saturation"].finish():
            self.emit("grad.clip_saturation", ep,
                      f"{ep.peak:.0%} of recent steps were clipped at max_grad_norm="
                      f"{self.meta.max_grad_norm}" + (" (the trainer's default)" if assumed else "")
                      + f", {step_span(ep.first_step, ep.last_step)}",
                      {"clipped_share": ep.peak, "threshold": p.clip_share,
                       "max_grad_norm": self.meta.max_grad_norm, "clip_assumed": assumed,
                       "metrics": ["grad_norm"]},
                      # a clip the run did not choose may be routine for its trainer (RLOO's
                      # unnormalised advantages), and a norm steadily above the clip is the run's
                      # own scale: report them, warn only when the norm keeps growing
                      None if not assumed and ep.extras.get("growth", 0.0) >= 2.0 else Severity.INFO)
        for ep in self.ep["grad.clip_far"].finish():
            self.emit("grad.clip_saturation", ep,
                      f"gradient norm {ep.extras.get('grad_norm', float('nan')):.3g} at step "
                      f"{ep.peak_step} is {ep.peak:.3g}x max_grad_norm={self.meta.max_grad_norm}: "
                      f"every update is cut to a fraction of its gradient, from step {ep.onset_step}",
                      {"peak_over_clip": ep.peak, "peak": ep.extras.get("grad_norm"),
                       "threshold": p.clip_far, "max_grad_norm": self.meta.max_grad_norm,
                       "rows": ep.n_rows, "metrics": ["grad_norm"]}, Severity.CRITICAL)

"""Preference optimisation (DPO, IPO, ORPO, KTO, SimPO, CPO): over-optimisation, margin blow-up,
likelihood displacement, and a run that does not learn.

DPO's implicit reward of a response is beta x log(pi / pi_ref); the loss pushes the chosen
response's reward above the rejected one's. At the first step pi = pi_ref, so every implicit
reward is 0 and the sigmoid loss is ln 2 = 0.693 (an analytic null). From there:

* **over-optimisation**: the loss collapses toward 0 and the pairwise accuracy pins at 1 early in
  training: the policy separates the training pairs perfectly, usually by memorising them (IPO's
  motivation: the logit transform weakens the KL regularisation as preferences approach
  certainty). Accuracies alternate between 0.5 and 1 with tiny batches, so both are smoothed.
* **margin blow-up**: the implicit-reward margin keeps growing to values no calibrated preference
  needs (a margin of 10 at beta = 0.1 is a 100-nat log-ratio gap).
* **likelihood displacement**: the margin grows while the chosen response's own log-probability
  falls: the policy wins by pushing both responses down, the rejected faster. Normal in moderation
  (TRL's docs; the DPO authors: negative chosen rewards alone are no sign of degeneration); a
  problem when the chosen log-probability falls by a large share of its starting value.
* **not learning**: after the first steps the loss is still ln 2 and the margin 0: the learning
  rate is too low, the policy is frozen, or the reference is the policy.

References: SIGNATURES.md #23-#25; Rafailov et al. 2023 (DPO); Azar et al. 2023 (IPO); Razin et al.
2024 (likelihood displacement); TRL DPOTrainer docs; trl#1236 (loss 0, accuracies 1, margins 11-17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import param
from ...io.canonical import Batch
from ..episodes import Episodes
from ..findings import RuleSpec, Severity
from ..stats import Context, window_median
from .base import Tracker, TrackerResult

__all__ = ["Preference"]

LN2 = math.log(2.0)


@dataclass
class PreferenceParams:
    smooth: int = param(5, "Rows in the trailing median that smooths loss, accuracy and margin.")
    overfit_loss: float = param(0.1, "Smoothed loss below this with accuracy pinned is "
                                "over-optimisation (SIGNATURES #24).")
    overfit_accuracy: float = param(0.98, "Smoothed pairwise accuracy at or above this counts as "
                                    "pinned at 1.")
    overfit_critical_loss: float = param(0.01, "Smoothed loss below this makes pref.overfit "
                                         "critical (the pairs are separated with certainty).")
    overfit_rows: int = param(5, "Consecutive rows the over-optimisation condition must hold.")
    margin_max: float = param(10.0, "Smoothed implicit-reward margin above this (and rising) is a "
                              "blow-up (trl#1236: 11-17 with loss 0).")
    margin_critical: float = param(30.0, "Margin that makes pref.margin_blowup critical.")
    margin_rows: int = param(5, "Consecutive rows the blow-up condition must hold.")
    displacement_share: float = param(0.5, "Chosen log-probability more negative than its early "
                                      "level by this share of it, while the margin grows, is a "
                                      "warning (below: information).")
    displacement_info_share: float = param(0.1, "The share at which displacement is reported as "
                                           "information.")
    displacement_rows: int = param(10, "Consecutive rows the displacement condition must hold.")
    baseline_rows: int = param(5, "First rows whose median is the early level of logps/chosen.")
    null_loss_tolerance: float = param(0.005, "|loss - ln 2| below this, with |margin| below "
                                       "null_margin, is no learning (SIGNATURES #25).")
    null_margin: float = param(0.01, "|margin| below this counts as no preference learnt.")
    null_after_rows: int = param(10, "The no-learning condition is judged from this row on.")
    null_rows: int = param(30, "Consecutive rows the no-learning condition must hold (a slow "
                           "start is not a frozen policy).")


_R = RuleSpec
RULES = (
    _R("pref.overfit", Severity.WARNING, "Preference loss collapsed (over-optimisation)",
       "The preference loss fell toward zero while the pairwise accuracy pinned at 1: the policy "
       "separates the training pairs with certainty, which for DPO's sigmoid loss means the "
       "implicit rewards ran far from the reference (the KL regularisation weakens as preferences "
       "approach certainty) and generations drift; usually memorisation of the training pairs.",
       "Raise beta (x2); lower the learning rate 20%; train fewer epochs (stop at the best eval "
       "loss); use loss_type='ipo' or label_smoothing 0.1; check the pairs are not trivially "
       "separable (chosen always longer, duplicated prompts).",
       ("overfit_loss", "overfit_accuracy", "overfit_critical_loss", "overfit_rows", "smooth"),
       "SIGNATURES #24; Azar et al. 2023 (IPO)"),
    _R("pref.margin_blowup", Severity.WARNING, "Implicit-reward margin blows up",
       "The margin between the implicit rewards of chosen and rejected responses keeps growing far "
       "beyond what a calibrated preference needs: the policy's log-ratios to the reference run "
       "away.",
       "Raise beta (x2); lower the learning rate 20%; train fewer epochs; add an NLL term on the chosen "
       "responses (rpo_alpha) to anchor the likelihoods.",
       ("margin_max", "margin_critical", "margin_rows"), "SIGNATURES #24; trl#1236"),
    _R("pref.likelihood_displacement", Severity.WARNING, "Chosen responses lose likelihood",
       "The margin grows while the log-probability of the chosen responses falls: the policy wins "
       "the preference by pushing both responses down, the rejected faster. Probability mass moves "
       "to responses in neither set, which can undo what the chosen responses taught (refusals, "
       "formats). Reported as information while the fall is small.",
       "Add an NLL/SFT term on the chosen responses (rpo_alpha 0.5-1, or CPO/ORPO's SFT term); "
       "raise beta (x2); lower the learning rate 20%; filter pairs whose chosen and rejected responses are "
       "near-identical (CHES).",
       ("displacement_share", "displacement_info_share", "displacement_rows", "baseline_rows"),
       "SIGNATURES #23; Razin et al. 2024"),
    _R("pref.not_learning", Severity.WARNING, "Preference loss stuck at ln 2",
       "After the first steps the loss is still ln 2 = 0.693 and the margin 0: the policy has not "
       "moved from the reference (learning rate far too low or zero, frozen parameters, or the "
       "reference model is the policy itself).",
       "Check the learning rate and its warm-up (raise it to 5e-7-5e-6 for full fine-tuning, "
       "5e-6-5e-5 for LoRA); check that the policy's parameters require gradients and that the "
       "reference is a separate, frozen copy.",
       ("null_loss_tolerance", "null_margin", "null_after_rows", "null_rows"), "SIGNATURES #25"),
)


class Preference(Tracker):
    """Loss, accuracy, margin and chosen log-probability of a preference-optimisation run."""

    name = "preference"
    area = "preference"
    requires = ("pref_margin", "pref_accuracy", "pref_reward_chosen", "logp_chosen",
                "log_odds_ratio")
    rules = RULES
    Params = PreferenceParams

    def __init__(self, params: PreferenceParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: PreferenceParams = self.params
        self.p = p
        self.ctx = Context(p.smooth - 1)
        self.ep = {
            "pref.overfit": Episodes(p.overfit_rows, p.overfit_rows, gap=p.smooth, mode="min"),
            "pref.margin_blowup": Episodes(p.margin_rows, p.margin_rows, gap=p.smooth, mode="max"),
            "pref.likelihood_displacement": Episodes(p.displacement_rows, p.displacement_rows,
                                                     gap=p.smooth, mode="max"),
            "pref.not_learning": Episodes(p.null_rows, p.null_rows, gap=p.smooth, mode="max"),
        }
        self.base_vals: list[np.ndarray] = []
        self.logp0: float | None = None
        self.margin_peak = -np.inf
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not self.begin(batch):
            return None
        p = self.p
        rows, steps = batch.rows, batch.steps
        cols = {name: batch.col(name) for name in ("loss", "pref_accuracy", "pref_margin", "logp_chosen")}
        for name in cols:
            if batch.has(name):
                self.source_keys.setdefault(name, name)
                fin = cols[name][np.isfinite(cols[name])]
                if len(fin):
                    self.first.setdefault(name, float(fin[0]))
                    self.last[name] = float(fin[-1])
        full, n0 = self.ctx.extend(**cols)
        sm = {name: window_median(v, p.smooth, min(3, p.smooth))[n0:] for name, v in full.items()}
        loss, acc, margin, logp = sm["loss"], sm["pref_accuracy"], sm["pref_margin"], sm["logp_chosen"]
        with np.errstate(invalid="ignore"):
            over = (loss < p.overfit_loss) & (acc >= p.overfit_accuracy)
            self.ep["pref.overfit"].update(rows, steps, over, loss,
                                           {"accuracy": acc, "margin": margin})
            # the margin's running peak before each row: "rising" means a new high
            peak = np.fmax.accumulate(np.concatenate([[self.margin_peak], margin]))
            self.margin_peak = float(peak[-1])
            rising = margin >= peak[:-1]
            self.ep["pref.margin_blowup"].update(rows, steps, (margin > p.margin_max) & rising,
                                                 margin, {"loss": loss})
            if self.logp0 is None:
                self.base_vals.append(logp[rows < p.baseline_rows])
                if rows[-1] >= p.baseline_rows - 1:
                    vals = np.concatenate(self.base_vals)
                    vals = vals[np.isfinite(vals)]
                    self.logp0 = float(np.median(vals)) if len(vals) else float("nan")
            logp0 = self.logp0 if self.logp0 is not None and self.logp0 < 0 else np.nan
            drop = (logp - logp0) / abs(logp0)  # negative when chosen responses lose likelihood
            growing = margin > 0
            displaced = (rows >= p.baseline_rows) & growing & (-drop >= p.displacement_info_share)
            self.ep["pref.likelihood_displacement"].update(rows, steps, displaced, -drop,
                                                           {"logp": logp, "margin": margin})
            null = ((rows >= p.null_after_rows) & (np.abs(margin) < p.null_margin)
                    & (np.abs(loss - LN2) < p.null_loss_tolerance))
            self.ep["pref.not_learning"].update(rows, steps, null, loss, {"margin": margin})
        return None

    def finish(self) -> TrackerResult:
        p = self.p
        for ep in self.ep["pref.overfit"].finish():
            acc, margin = ep.extras.get("accuracy", float("nan")), ep.extras.get("margin", float("nan"))
            self.emit("pref.overfit", ep,
                      f"preference loss fell to {ep.peak:.3g} with accuracy {acc:.0%} and margin "
                      f"{margin:.3g} at step {ep.peak_step}, from step {ep.onset_step}",
                      {"loss": ep.peak, "accuracy": acc, "margin": margin,
                       "threshold_loss": p.overfit_loss, "threshold_accuracy": p.overfit_accuracy,
                       "metrics": ["loss", "pref_accuracy", "pref_margin"]},
                      Severity.CRITICAL if ep.peak < p.overfit_critical_loss else None)
        for ep in self.ep["pref.margin_blowup"].finish():
            self.emit("pref.margin_blowup", ep,
                      f"implicit-reward margin grew to {ep.peak:.3g} at step {ep.peak_step} and kept "
                      f"rising, from step {ep.onset_step}",
                      {"margin": ep.peak, "loss": ep.extras.get("loss"), "threshold": p.margin_max,
                       "metrics": ["pref_margin"]},
                      Severity.CRITICAL if ep.peak >= p.margin_critical else None)
        for ep in self.ep["pref.likelihood_displacement"].finish():
            logp = ep.extras.get("logp", float("nan"))
            sev = Severity.INFO if ep.peak < p.displacement_share else None
            self.emit("pref.likelihood_displacement", ep,
                      f"log-probability of the chosen responses fell {ep.peak:.0%} below its early "
                      f"level ({self.logp0:.4g} -> {logp:.4g} nats) while the margin grew to "
                      f"{ep.extras.get('margin', float('nan')):.3g}, from step {ep.onset_step}",
                      {"relative_drop": ep.peak, "logp_chosen": logp, "early_logp_chosen": self.logp0,
                       "margin": ep.extras.get("margin"), "threshold": p.displacement_share,
                       "metrics": ["logp_chosen", "pref_margin"]}, sev)
        for ep in self.ep["pref.not_learning"].finish():
            self.emit("pref.not_learning", ep,
                      f"loss stayed at {ep.peak:.4f} (ln 2 = {LN2:.4f}) with margin "
                      f"{ep.extras.get('margin', float('nan')):.2g}: the policy has not moved from "
                      f"the reference, from step {ep.onset_step}",
                      {"loss": ep.peak, "margin": ep.extras.get("margin"),
                       "tolerance": p.null_loss_tolerance, "metrics": ["loss", "pref_margin"]})
        summary: dict[str, Any] = {"rows": self.rows, "first": self.first, "last": self.last,
                                   "early_logp_chosen": self.logp0}
        return self.result(summary)

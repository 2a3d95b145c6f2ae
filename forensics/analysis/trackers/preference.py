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
from typing import Any

import numpy as np

from ...config import param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..stats.episodes import Episode, Episodes
from ..stats.order import median
from ..stats.trailing import Context, shift, window_median
from .base import Tracker, TrackerResult

__all__ = ["Preference"]

LN2 = math.log(2.0)


@record
class PreferenceParams:
    """The preference tracker's thresholds (``[preference]`` in a config)."""

    smooth: int = param(5, "Rows in the trailing median that smooths loss, accuracy and margin.")
    overfit_loss: float = param(0.1, "Smoothed loss below this with accuracy pinned is "
                                "over-optimisation (SIGNATURES #24).")
    overfit_accuracy: float = param(0.98, "Smoothed pairwise accuracy at or above this counts as "
                                    "pinned at 1.", le=1)
    overfit_critical_loss: float = param(0.01, "Smoothed loss below this makes pref.overfit "
                                         "critical (the pairs are separated with certainty).")
    overfit_rows: int = param(5, "Consecutive rows the over-optimisation condition must hold.")
    margin_max: float = param(10.0, "Smoothed implicit-reward margin above this (and rising) is a "
                              "blow-up (trl#1236: 11-17 with loss 0).")
    margin_critical: float = param(30.0, "Margin that makes pref.margin_blowup critical.")
    margin_rows: int = param(5, "Consecutive rows the blow-up condition must hold.")
    saturated_margin: float = param(3.0, "Margin (median of trend_rows) at which the pairs are won: "
                                    "the sigmoid loss -log(sigmoid(3)) is below 0.05, so further "
                                    "updates only push both responses down. Likelihood displacement "
                                    "past it is over-optimisation under way (a warning); before it, "
                                    "ordinary DPO displacement (information).")
    trend_rows: int = param(20, "Rows in the trailing median that smooths the margin and the chosen "
                            "responses' reward or log-probability for the blow-up and displacement "
                            "rules (per-batch values of a few pairs swing widely), and the lag over "
                            "which the margin counts as rising.")
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
    mismatch_rows: int = param(5, "First rows on which the reference is checked against the policy "
                               "(pref.reference_mismatch).")
    mismatch_loss: float = param(0.1, "Median loss over the first rows this far above ln 2, with "
                                 "implicit rewards already non-zero and accuracy below 0.5, is a "
                                 "reference that is not the policy's starting point.")
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
       "beyond what a calibrated preference needs while the chosen responses' own implicit reward "
       "is negative: the policy wins the pairs by pushing both responses below the reference, the "
       "rejected far faster, and its log-ratios to the reference run away. A large margin whose "
       "chosen reward stays positive (the chosen responses gain likelihood) is information.",
       "Raise beta (x2); lower the learning rate 20%; train fewer epochs; add an NLL term on the chosen "
       "responses (rpo_alpha) to anchor the likelihoods.",
       ("margin_max", "margin_critical", "margin_rows", "trend_rows"), "SIGNATURES #24; trl#1236"),
    _R("pref.likelihood_displacement", Severity.WARNING, "Chosen responses lose likelihood",
       "The margin grows while the log-probability of the chosen responses falls: the policy wins "
       "the preference by pushing both responses down, the rejected faster. Probability mass moves "
       "to responses in neither set, which can undo what the chosen responses taught (refusals, "
       "formats). Judged on the chosen responses' implicit reward (beta x log(pi / pi_ref), which "
       "compares each sequence with itself) where it is logged: the log-probability sums of a few "
       "sequences of different lengths swing with the batch. Normal in moderation (TRL's docs; the "
       "DPO authors): information until the pairs are won (the margin past saturated_margin, the "
       "loss near 0), where further displacement is over-optimisation under way.",
       "Add an NLL/SFT term on the chosen responses (rpo_alpha 0.5-1, or CPO/ORPO's SFT term); "
       "raise beta (x2); lower the learning rate 20%; filter pairs whose chosen and rejected responses are "
       "near-identical (CHES).",
       ("displacement_share", "displacement_info_share", "displacement_rows", "baseline_rows",
        "trend_rows", "saturated_margin"),
       "SIGNATURES #23; Razin et al. 2024"),
    _R("pref.reference_mismatch", Severity.WARNING, "Reference model is not the policy's start",
       "At DPO's first step the policy is its reference, so every implicit reward is 0 and the "
       "loss is ln 2 = 0.693, whatever the data. Here the first rows already show non-zero implicit "
       "rewards, a loss well above ln 2 and an accuracy below 0.5: the reference is another model "
       "(other weights, a different adapter or precision, another tokenizer or chat template), so "
       "the loss starts from an offset the policy must first undo. Critical when the loss stays "
       "above ln 2 for most of the run. DPO (sigmoid loss) only: IPO, KTO, SimPO and CPO start "
       "elsewhere by design.",
       "Load the reference from the same checkpoint as the policy (ref_model=None in TRL makes "
       "the frozen copy itself; with PEFT the adapter-disabled base is the reference); check "
       "precision, adapter and chat template match; precompute_ref_log_probs from the same model.",
       ("mismatch_rows", "mismatch_loss"), "Rafailov et al. 2023 (the DPO loss at initialisation)"),
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
                "log_odds_ratio", "loss")
    starts_on = ("pref_margin", "pref_accuracy", "pref_reward_chosen", "logp_chosen",
                 "log_odds_ratio")
    rules = RULES
    Params = PreferenceParams

    def __init__(self, params: PreferenceParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: PreferenceParams = self.params
        self.p = p
        self.ctx = Context(max(p.smooth, 2 * p.trend_rows))
        self.ep = {
            "pref.overfit": Episodes(p.overfit_rows, p.overfit_rows, gap=p.smooth, mode="min"),
            "pref.margin_blowup": Episodes(p.margin_rows, p.margin_rows, gap=p.smooth, mode="max"),
            "pref.likelihood_displacement": Episodes(p.displacement_rows, p.displacement_rows,
                                                     gap=p.smooth, mode="max"),
            # the same once the pairs are won (a disjoint condition: its own episodes)
            "displacement_won": Episodes(p.displacement_rows, p.displacement_rows, gap=p.smooth, mode="max"),
            "pref.not_learning": Episodes(p.null_rows, p.null_rows, gap=p.smooth, mode="max"),
        }
        self.base_vals: list[np.ndarray] = []
        self.logp0: float | None = None
        self.first: dict[str, float] = {}
        #: the first rows' loss, accuracy and implicit rewards (the reference check)
        self.head: dict[str, list[float]] = {"loss": [], "pref_accuracy": [], "pref_margin": [],
                                             "pref_reward_chosen": []}
        self.head_steps: list[int] = []
        self.above_ln2 = [0, 0]
        self.last: dict[str, float] = {}

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not (self.active or self.logs_start(batch)):
            return None
        self.active = True
        self.rows += len(batch)
        p = self.p
        rows, steps = batch.rows, batch.steps
        cols = {name: batch.col(name) for name in ("loss", "pref_accuracy", "pref_margin", "logp_chosen",
                                                   "pref_reward_chosen")}
        for name in cols:
            if batch.has(name):
                self.source_keys.setdefault(name, name)
                fin = cols[name][np.isfinite(cols[name])]
                if len(fin):
                    self.first.setdefault(name, float(fin[0]))
                    self.last[name] = float(fin[-1])
        self._watch_reference(rows, steps, cols)
        full, n0 = self.ctx.extend(**cols)
        sm = {name: window_median(v, p.smooth, min(3, p.smooth))[n0:] for name, v in full.items()}
        # margin and chosen likelihood: a longer median (per-batch values swing), and the margin
        # one trend window earlier (rising = above it)
        margin_full = window_median(full["pref_margin"], p.trend_rows, min(3, p.trend_rows))
        trend = {name: window_median(full[name], p.trend_rows, min(3, p.trend_rows))[n0:]
                 for name in ("logp_chosen", "pref_reward_chosen")}
        margin_t, margin_before = margin_full[n0:], shift(margin_full, p.trend_rows)[n0:]
        loss, acc, margin = sm["loss"], sm["pref_accuracy"], sm["pref_margin"]
        chosen = trend["pref_reward_chosen"]
        with np.errstate(invalid="ignore"):
            over = (loss < p.overfit_loss) & (acc >= p.overfit_accuracy)
            self.ep["pref.overfit"].update(rows, steps, over, loss,
                                           {"accuracy": acc, "margin": margin, "logged_loss": cols["loss"],
                                            "logged_accuracy": cols["pref_accuracy"],
                                            "logged_margin": cols["pref_margin"]})
            rising = ~(margin_t <= margin_before)  # no earlier level yet counts as rising
            self.ep["pref.margin_blowup"].update(rows, steps, (margin_t > p.margin_max) & rising,
                                                 margin_t, {"loss": loss, "chosen_reward": chosen})
            self._displacement(rows, steps, trend["logp_chosen"], chosen, margin_t)
            null = ((rows >= p.null_after_rows) & (np.abs(margin) < p.null_margin)
                    & (np.abs(loss - LN2) < p.null_loss_tolerance))
            self.ep["pref.not_learning"].update(rows, steps, null, loss, {"margin": margin})
        return None

    def _watch_reference(self, rows: np.ndarray, steps: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        head = rows < self.p.mismatch_rows
        if head.any():
            self.head_steps.extend(int(x) for x in steps[head])
            for name, values in self.head.items():
                values.extend(float(x) for x in cols[name][head])
        loss = cols["loss"][np.isfinite(cols["loss"])]
        self.above_ln2[0] += int((loss > LN2).sum())
        self.above_ln2[1] += len(loss)

    def _reference_mismatch(self) -> None:
        p = self.p
        if self.meta.algorithm not in (None, "dpo") or not self.head_steps:
            return
        with np.errstate(invalid="ignore"):
            med = {k: float(np.nanmedian(v)) if np.isfinite(v).any() else math.nan
                   for k, v in ((k, np.asarray(v)) for k, v in self.head.items())}
        moved = max(abs(med["pref_margin"]), abs(med["pref_reward_chosen"]))
        if not (med["loss"] > LN2 + p.mismatch_loss and moved > p.null_margin and med["pref_accuracy"] < 0.5):
            return
        share = self.above_ln2[0] / max(self.above_ln2[1], 1)
        first, last = self.head_steps[0], self.head_steps[-1]
        ep = Episode(onset_step=first, first_step=first, last_step=last, last_row=len(self.head_steps) - 1,
                     n_rows=len(self.head_steps), peak=med["loss"], peak_step=first)
        self.emit("pref.reference_mismatch", ep,
                  f"over the first {len(self.head_steps)} rows (steps {first}-{last}) the loss is "
                  f"{med['loss']:.3f} (ln 2 = {LN2:.3f} when the policy is its reference), the "
                  f"implicit margin {med['pref_margin']:.3g} and the accuracy {med['pref_accuracy']:.0%}; "
                  f"the loss stays above ln 2 on {share:.0%} of all rows",
                  {"loss": med["loss"], "margin": med["pref_margin"], "chosen_reward": med["pref_reward_chosen"],
                   "accuracy": med["pref_accuracy"], "share_above_ln2": share,
                   "metrics": ["loss", "pref_margin", "pref_accuracy"]},
                  Severity.CRITICAL if share >= 0.5 else None)

    def _displacement(self, rows: np.ndarray, steps: np.ndarray, logp: np.ndarray, chosen: np.ndarray,
                      margin: np.ndarray) -> None:
        """Chosen responses losing likelihood while the margin grows: from their implicit reward
        (below 0: below the reference) where it is logged, else from the log-probability's fall
        below its early level."""
        p = self.p
        if self.logp0 is None:
            self.base_vals.append(logp[rows < p.baseline_rows])
            if rows[-1] >= p.baseline_rows - 1:
                vals = np.concatenate(self.base_vals)
                vals = vals[np.isfinite(vals)]
                self.logp0 = median(vals) if len(vals) else float("nan")
        logp0 = self.logp0 if self.logp0 is not None and self.logp0 < 0 else np.nan
        drop = (logp - logp0) / abs(logp0)  # negative when chosen responses lose likelihood
        by_reward = np.isfinite(chosen)
        displaced = (rows >= p.baseline_rows) & (margin > 0) & np.where(
            by_reward, chosen < 0, -drop >= p.displacement_info_share)
        won = margin >= p.saturated_margin
        value = np.where(by_reward, -chosen, -drop)
        extras = {"logp": logp, "margin": margin, "chosen_reward": chosen, "by_reward": by_reward}
        self.ep["pref.likelihood_displacement"].update(rows, steps, displaced & ~won, value, extras)
        self.ep["displacement_won"].update(rows, steps, displaced & won, value, extras)

    def _emit_blowup(self, ep: Episode) -> None:
        p = self.p
        chosen = ep.extras.get("chosen_reward", float("nan"))
        sev = Severity.CRITICAL if ep.peak >= p.margin_critical else None
        tail = ""
        if chosen == chosen:
            tail = f", the chosen responses' implicit reward at {chosen:.3g}"
            if chosen >= 0:  # the chosen responses gain likelihood: a confident, not a broken, policy
                sev, tail = Severity.INFO, tail + " (above the reference: not displacement)"
        self.emit("pref.margin_blowup", ep,
                  f"implicit-reward margin (median of {p.trend_rows} rows) grew to {ep.peak:.3g} at "
                  f"step {ep.peak_step} and kept rising{tail}, from step {ep.onset_step}",
                  {"margin": ep.peak, "loss": ep.extras.get("loss"), "chosen_reward": chosen,
                   "threshold": p.margin_max, "metrics": ["pref_margin", "pref_reward_chosen"]}, sev)

    def _emit_displacement(self, ep: Episode) -> None:
        p = self.p
        margin = ep.extras.get("margin", float("nan"))
        large = margin >= p.saturated_margin
        if ep.extras.get("by_reward"):
            what = (f"the chosen responses' implicit reward (median of {p.trend_rows} rows) fell to "
                    f"{-ep.peak:.3g}, below the reference,")
            evidence = {"chosen_reward": -ep.peak, "metrics": ["pref_reward_chosen", "pref_margin"]}
            sev = None if large else Severity.INFO
        else:
            logp = ep.extras.get("logp", float("nan"))
            what = (f"log-probability of the chosen responses fell {ep.peak:.0%} below its early "
                    f"level ({self.logp0:.4g} -> {logp:.4g} nats)")
            evidence = {"relative_drop": ep.peak, "logp_chosen": logp, "early_logp_chosen": self.logp0,
                        "metrics": ["logp_chosen", "pref_margin"]}
            sev = None if large and ep.peak >= p.displacement_share else Severity.INFO
        self.emit("pref.likelihood_displacement", ep,
                  f"{what} at step {ep.peak_step} while the margin grew to {margin:.3g}"
                  + (" (the pairs are won: over-optimisation under way)" if large
                     else " (the pairs are not yet won: ordinary DPO displacement)")
                  + f", from step {ep.onset_step}",
                  {**evidence, "margin": margin, "saturated_margin": p.saturated_margin,
                   "threshold": p.displacement_share}, sev)

    def conclude(self) -> TrackerResult:
        p = self.p
        for ep in self.ep["pref.overfit"].finish():
            acc, margin = ep.extras.get("accuracy", float("nan")), ep.extras.get("margin", float("nan"))
            logged = (ep.extras.get("logged_loss", float("nan")), ep.extras.get("logged_accuracy", float("nan")),
                      ep.extras.get("logged_margin", float("nan")))
            self.emit("pref.overfit", ep,
                      f"preference loss fell to {ep.peak:.3g} with accuracy {acc:.0%} and margin "
                      f"{margin:.3g} (medians of {p.smooth} rows; logged at step {ep.peak_step}: loss "
                      f"{logged[0]:.3g}, accuracy {logged[1]:.0%}, margin {logged[2]:.3g}), from step "
                      f"{ep.onset_step}",
                      {"loss": ep.peak, "accuracy": acc, "margin": margin,
                       "threshold_loss": p.overfit_loss, "threshold_accuracy": p.overfit_accuracy,
                       "metrics": ["loss", "pref_accuracy", "pref_margin"]},
                      Severity.CRITICAL if ep.peak < p.overfit_critical_loss else None)
        for ep in self.ep["pref.margin_blowup"].finish():
            self._emit_blowup(ep)
        for ep in [*self.ep["pref.likelihood_displacement"].finish(), *self.ep["displacement_won"].finish()]:
            self._emit_displacement(ep)
        self._reference_mismatch()
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

"""Advantage statistics: bias, scale and its drift, normalisation health, tails.

Reads per-step moments (``advantage_mean``/``std``, optionally ``min``/``max``/``skew``/
``kurtosis``/percentiles) from the step stream, and per-response ``advantage`` values from the
sample stream, from which it computes the same moments per step.

References: SIGNATURES.md #13 (advantage blow-up from std normalisation) and #19 (normalisation
faults): with whitening on, |mean| > 0.05 or |std - 1| > 0.1 points to a mask, padding or
sharding bug.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..spans import step_span
from ..stats.episodes import Episodes
from ..stats.grouping import StepGrouper
from ..stats.order import median
from ..stats.trailing import skew_kurtosis
from .base import Tracker, TrackerResult

__all__ = ["Advantages"]

#: Algorithms whose advantages are normalised within each prompt's group of responses.
GROUP_RELATIVE = frozenset({"grpo", "rloo", "dapo", "dr_grpo", "gspo"})


@record
class AdvantagesParams:
    """The advantages tracker's thresholds (``[advantages]`` in a config)."""

    probation: int = param(10, "Rows at the start on which no rule fires.", ge=0)
    baseline_rows: int = param(50, "Rows after probation that define the baseline scale.")
    bias_ratio: float = param(0.25, "|mean| / std above this is a biased advantage estimate.")
    whitened_mean: float = param(0.05, "With whitening, |mean| above this is a normalisation "
                                 "fault.")
    whitened_std: float = param(0.1, "With whitening, |std - 1| above this is a normalisation "
                                "fault.")
    scale_factor: float = param(10.0, "std changing by this factor from the baseline is drift.")
    max_abs: float = param(10.0, "max |advantage| above this is a blow-up (SIGNATURES #13).")
    kurtosis: float = param(10.0, "Excess kurtosis above this is a heavy tail.")
    skew: float = param(2.0, "|skewness| above this is a lopsided distribution.")
    persist_k: int = param(5, "Persistence: rows out of persist_m the condition must hold.")
    persist_m: int = param(8, "Persistence window (rows).")
    relations: ClassVar[Relations] = (("persist_k", "<=", 1, "persist_m"),)


_R = RuleSpec
RULES = (
    _R("adv.bias", Severity.WARNING, "Biased advantages",
       "The mean advantage is far from zero relative to its spread: the baseline (value head or "
       "group mean) is systematically off, so every sample is pushed the same way.",
       "Check the value baseline (value-loss scale, critic warm-up) or the group mean; enable "
       "advantage whitening; check masking of padded tokens in the mean.",
       ("bias_ratio", "persist_k", "persist_m"), "SIGNATURES #19"),
    _R("adv.not_normalized", Severity.WARNING, "Advantage normalisation broken",
       "The run whitens advantages (declared, or seen in its first steps) but mean and std "
       "moved away from 0 and 1: normalisation is off, or a mask or sharding bug skews it. "
       "For group-relative algorithms (GRPO, RLOO) only the mean is checked: their batch std is "
       "legitimately below 1 when some groups' rewards tie.",
       "Re-enable advantage whitening (mean 0, std 1 per batch); check the mask used for the "
       "moments and that they are reduced across data-parallel ranks.",
       ("whitened_mean", "whitened_std"), "SIGNATURES #19"),
    _R("adv.scale_drift", Severity.WARNING, "Advantage scale drifted",
       "The advantage std changed by an order of magnitude from its early level: the effective "
       "learning rate changed with it.",
       "Normalise advantages (or rewards, with running statistics); check the reward scale.",
       ("scale_factor",), "SIGNATURES #19"),
    _R("adv.blowup", Severity.WARNING, "Advantage blow-up",
       "Some advantages are huge: std-normalisation of a group with tiny reward spread divides "
       "by nearly zero. Information for advantages from a critic (GAE), which divide by no group "
       "spread.",
       "Use batch-level reward scaling (scale_rewards='batch') or none (Dr. GRPO); add an epsilon "
       "floor to the std; clip advantages.",
       ("max_abs",), "SIGNATURES #13", stability=True),
    _R("adv.heavy_tail", Severity.INFO, "Heavy-tailed advantages",
       "Advantage kurtosis or skew is extreme: a few samples dominate the gradient.",
       "Inspect the top samples; clip advantages or rewards.", ("kurtosis", "skew")),
)


class Advantages(Tracker):
    """Advantage moments per step, from step aggregates or per-response values."""

    name = "advantages"
    area = "advantages"
    streams = ("step", "sample")
    requires = ("advantage_mean", "advantage_std", "advantage", "advantage_min", "advantage_max",
                "advantage_skew", "advantage_kurtosis")
    starts_on = ("advantage_mean", "advantage_std", "advantage")
    rules = RULES
    Params = AdvantagesParams

    def __init__(self, params: AdvantagesParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: AdvantagesParams = self.params
        self.p = p
        k, m = p.persist_k, p.persist_m
        self.ep = {
            "adv.bias": Episodes(k, m, gap=m * 4, mode="absmax"),
            "adv.not_normalized": Episodes(k, m, gap=m * 4, mode="absmax"),
            "adv.scale_drift": Episodes(k, m, gap=m * 4, mode="absmax"),
            "adv.blowup": Episodes(3, 5, gap=m * 4, mode="max"),
            "adv.heavy_tail": Episodes(k, m, gap=m * 4, mode="max"),
        }
        self.base: dict[str, list[np.ndarray]] = {"mean": [], "std": []}
        self.base_mean: float | None = None
        self.base_std: float | None = None
        self.grouper = StepGrouper()
        self.step_rows = 0
        self.used_samples = False

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if batch.stream == "sample":
            if not batch.has("advantage") and not self.used_samples:
                return None
            if self.step_rows:  # the step stream already carries the moments
                return None
            self.used_samples = True
            for steps, groups in self.grouper.push(batch.steps, {"a": batch.col("advantage")}):
                self._samples_done(steps, groups)
            return None
        if not (batch.has("advantage_mean") or batch.has("advantage_std")) and not self.step_rows:
            return None
        self.step_rows += len(batch)
        cols = {
            "mean": batch.col("advantage_mean"), "std": batch.col("advantage_std"),
            "min": batch.col("advantage_min"), "max": batch.col("advantage_max"),
            "skew": batch.col("advantage_skew"), "kurt": batch.col("advantage_kurtosis"),
        }
        self._moments(batch.rows, batch.steps, cols)
        return None

    def _samples_done(self, steps: np.ndarray, groups: list[dict[str, np.ndarray]]) -> None:
        """Per-step moments from per-response advantages (complete steps only)."""
        stats = {k: np.full(len(steps), np.nan) for k in ("mean", "std", "min", "max", "skew",
                                                         "kurt")}
        for i, g in enumerate(groups):
            a = g["a"][np.isfinite(g["a"])]
            if len(a) == 0:
                continue
            stats["mean"][i], stats["min"][i], stats["max"][i] = a.mean(), a.min(), a.max()
            stats["std"][i] = a.std(ddof=0)
            if len(a) >= 4:
                stats["skew"][i], stats["kurt"][i] = skew_kurtosis(a)
        rows = np.arange(self.rows, self.rows + len(steps), dtype=np.int64)
        self._moments(rows, steps, stats)

    def _moments(self, rows: np.ndarray, steps: np.ndarray, c: dict[str, np.ndarray]) -> None:
        self.active = True
        self.rows += len(rows)
        self.source_keys.setdefault("advantage_mean", "advantage_mean")
        p = self.p
        after = rows >= p.probation
        mean, std = c["mean"], c["std"]
        if self.base_std is None:
            sel = (rows >= p.probation) & (rows < p.probation + p.baseline_rows)
            self.base["mean"].append(mean[sel])
            self.base["std"].append(std[sel])
            if rows[-1] >= p.probation + p.baseline_rows - 1:
                bm = np.concatenate(self.base["mean"])
                bs = np.concatenate(self.base["std"])
                bm, bs = bm[np.isfinite(bm)], bs[np.isfinite(bs)]
                self.base_mean = median(bm) if len(bm) else None
                self.base_std = median(bs) if len(bs) else None
        has_base = rows >= p.probation + p.baseline_rows
        with np.errstate(divide="ignore", invalid="ignore"):
            bias = np.abs(mean) / std
        self.ep["adv.bias"].update(rows, steps, after & (bias > p.bias_ratio), bias,
                                   {"mean": mean, "std": std})
        whitened = self.meta.advantage_normalization
        if whitened is None and self.base_std is not None and self.base_mean is not None:
            whitened = abs(self.base_std - 1) < p.whitened_std and abs(self.base_mean) < \
                p.whitened_mean
        if whitened:
            dev = np.abs(mean) / p.whitened_mean
            if not self._group_relative():
                # group-relative advantages (GRPO, RLOO) have mean 0 in every group, but their batch
                # std is below 1 whenever some groups tie (their advantages are all 0)
                dev = np.fmax(dev, np.abs(std - 1) / p.whitened_std)
            gate = after if self.meta.advantage_normalization else (after & has_base)
            self.ep["adv.not_normalized"].update(rows, steps, gate & (dev > 1), dev,
                                                 {"mean": mean, "std": std})
        if self.base_std:
            rel = std / self.base_std
            drift = has_base & ((rel > p.scale_factor) | (rel < 1 / p.scale_factor))
            with np.errstate(divide="ignore", invalid="ignore"):  # a std logged 0 or negative
                log_rel = np.log10(rel)
            self.ep["adv.scale_drift"].update(rows, steps, drift, log_rel, {"std": std})
        amax = np.fmax(np.abs(c["min"]), np.abs(c["max"]))
        self.ep["adv.blowup"].update(rows, steps, after & (amax > p.max_abs), amax)
        tail = (c["kurt"] > p.kurtosis) | (np.abs(c["skew"]) > p.skew)
        self.ep["adv.heavy_tail"].update(rows, steps, after & tail, c["kurt"],
                                         {"skew": c["skew"]})

    def _group_relative(self) -> bool:
        algo = (self.meta.algorithm or "").lower()
        kind = str(self.meta.config.get("advantage_normalization_kind", "")).lower()
        return algo in GROUP_RELATIVE or kind == "group"

    def close(self) -> None:
        if self.used_samples:
            for steps, groups in self.grouper.flush():
                self._samples_done(steps, groups)

    def conclude(self) -> TrackerResult:
        p = self.p
        for ep in self.ep["adv.bias"].finish():
            self.emit("adv.bias", ep,
                      f"advantage mean {ep.extras.get('mean', float('nan')):.3g} is "
                      f"{abs(ep.peak):.2g} std from zero, {step_span(ep.first_step, ep.last_step)}",
                      {"bias_ratio": ep.peak, "mean": ep.extras.get("mean"),
                       "std": ep.extras.get("std"), "threshold": p.bias_ratio,
                       "metrics": ["advantage_mean"]})
        for ep in self.ep["adv.not_normalized"].finish():
            self.emit("adv.not_normalized", ep,
                      f"advantages no longer whitened (mean {ep.extras.get('mean', float('nan')):.3g}, "
                      f"std {ep.extras.get('std', float('nan')):.3g}), {step_span(ep.first_step, ep.last_step)}",
                      {"mean": ep.extras.get("mean"), "std": ep.extras.get("std"),
                       "tolerance_mean": p.whitened_mean, "tolerance_std": p.whitened_std,
                       "declared": self.meta.advantage_normalization,
                       "metrics": ["advantage_mean", "advantage_std"]})
        for ep in self.ep["adv.scale_drift"].finish():
            self.emit("adv.scale_drift", ep,
                      f"advantage std moved to {ep.extras.get('std', float('nan')):.3g} "
                      f"({10 ** ep.peak:.3g}x the baseline {self.base_std:.3g}), "
                      f"{step_span(ep.first_step, ep.last_step)}",
                      {"std": ep.extras.get("std"), "baseline_std": self.base_std,
                       "factor": 10 ** ep.peak, "threshold": p.scale_factor,
                       "metrics": ["advantage_std"]})
        # the blow-up is a division by a group's tiny reward spread: advantages from a critic
        # (GAE, whitened over every token of the batch) have no such division, and the largest of
        # a hundred thousand whitened values sits in the tail by count alone
        critic = self.meta.family == "critic"
        for ep in self.ep["adv.blowup"].finish():
            self.emit("adv.blowup", ep,
                      f"|advantage| reached {ep.peak:.3g}, {step_span(ep.first_step, ep.last_step)}"
                      + ("; advantages from a critic (GAE) divide by no group spread: the tail of a "
                         "large batch, not a blow-up" if critic else ""),
                      {"max_abs": ep.peak, "threshold": p.max_abs, "metrics": ["advantage_max"]},
                      Severity.INFO if critic else None)
        for ep in self.ep["adv.heavy_tail"].finish():
            self.emit("adv.heavy_tail", ep,
                      f"advantage kurtosis {ep.peak:.3g} / skew {ep.extras.get('skew', float('nan')):.3g}, "
                      f"{step_span(ep.first_step, ep.last_step)}",
                      {"kurtosis": ep.peak, "skew": ep.extras.get("skew"),
                       "threshold_kurtosis": p.kurtosis, "threshold_skew": p.skew})
        summary = {"rows": self.rows, "baseline_mean": self.base_mean,
                   "baseline_std": self.base_std,
                   "source": "samples" if self.used_samples else "steps"}
        notes = []
        if self.meta.advantage_normalization is None:
            notes.append("advantage normalisation not declared: inferred from the first steps")
        return self.result(summary, notes)

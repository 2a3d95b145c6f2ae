"""The size of each policy update: the KL between the policy before and after it, and how many
tokens the PPO clip had to cut.

PPO keeps each update inside a trust region: the clipped ratio stops the step where the new
policy leaves the old one by more than the clip range. An update that moves the policy by an
approx_kl of whole nats, or on which a third of the tokens hit the clip, has left that region:
the learning rate is far too high or there are too many epochs on one batch. These are domain
priors, fixed levels no healthy run reaches (the N+ PPO reference: approx_kl 0.003-0.008, clip
fraction 0.025-0.073), judged from the first update on, so a run broken from its first step is
caught. (The run-relative check of the same signal, approx_kl collapsing to nothing, is the KL
tracker's ``kl.update_stalled``.)

References: SIGNATURES.md #16 (Spinning Up's early stop at 1.5 x target_kl with targets 0.01-0.05;
TRL's warnings on ratios; clip fraction above 0.3), Huang et al. 2024 (N+ implementation details).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..stats.episodes import Episodes
from .base import Tracker, TrackerResult

__all__ = ["TrustRegion"]


@record
class TrustRegionParams:
    """The trust-region tracker's thresholds (``[trust_region]`` in a config)."""

    approx_kl: float = param(0.1, "approx_kl (old vs new policy, nats/token) above which an update "
                             "left the trust region (healthy PPO: 0.003-0.008; Spinning Up stops "
                             "the epochs at 1.5 x a 0.01-0.05 target).")
    approx_kl_critical: float = param(1.0, "approx_kl that makes trust_region.exceeded critical.")
    clip_frac: float = param(0.3, "Fraction of tokens clipped above which an update left the trust "
                             "region (healthy PPO: 0.02-0.1).", le=1)
    clip_frac_critical: float = param(0.5, "Clip fraction that makes trust_region.exceeded critical.", le=1)
    persist_k: int = param(3, "Rows out of persist_m on which an update must be outside.")
    persist_m: int = param(5, "Persistence window (rows); no probation.")
    relations: ClassVar[Relations] = (("persist_k", "<=", 1, "persist_m"),
                                      ("approx_kl", "<=", 1, "approx_kl_critical"),
                                      ("clip_frac", "<=", 1, "clip_frac_critical"))


RULES = (
    RuleSpec(
        "trust_region.exceeded", Severity.WARNING, "Policy updates leave the trust region",
        "Each update moves the policy far more than PPO's clipped objective is built for: the KL "
        "between the policy before and after the update (approx_kl) or the share of tokens that "
        "hit the clip is at a level no healthy run reaches. The learning rate is far too high, or "
        "there are too many epochs or minibatches per batch; KL to the reference and the reward "
        "usually break next.",
        "Lower the learning rate 50% (10x when approx_kl is above 1 from the first updates); use "
        "fewer PPO epochs per batch; enable early stopping on approx_kl (target_kl 0.01-0.05).",
        ("approx_kl", "approx_kl_critical", "clip_frac", "clip_frac_critical", "persist_k",
         "persist_m"),
        "SIGNATURES #16; N+ (Huang et al. 2024)", stability=True, formerly=("policy.trust_region",)),
)


class TrustRegion(Tracker):
    """approx_kl and the clip fraction against fixed priors."""

    name = "trust_region"
    area = "policy"
    requires = ("approx_kl", "clip_frac")
    rules = RULES
    Params = TrustRegionParams

    def __init__(self, params: TrustRegionParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        self.p: TrustRegionParams = self.params
        self.ep = Episodes(self.p.persist_k, self.p.persist_m, gap=self.p.persist_m, mode="max")

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not (self.active or self.logs_start(batch)):
            return None
        self.active = True
        self.rows += len(batch)
        p = self.p
        ak, cf = batch.col("approx_kl"), batch.col("clip_frac")
        for name in ("approx_kl", "clip_frac"):
            if batch.has(name):
                self.source_keys.setdefault(name, name)
        # how far outside, as a multiple of the prior (the larger of the two signals)
        with np.errstate(invalid="ignore"):
            excess = np.fmax(np.abs(ak) / p.approx_kl, cf / p.clip_frac)
        self.ep.update(batch.rows, batch.steps, excess > 1.0, excess,
                       {"approx_kl": ak, "clip_frac": cf})
        return None

    def conclude(self) -> TrackerResult:
        p = self.p
        for ep in self.ep.finish():
            ak, cf = ep.extras.get("approx_kl", float("nan")), ep.extras.get("clip_frac", float("nan"))
            parts = []
            if ak == ak:
                parts.append(f"approx_kl {ak:.3g}")
            if cf == cf:
                parts.append(f"clip fraction {cf:.3g}")
            critical = (ak == ak and abs(ak) >= p.approx_kl_critical) or (
                cf == cf and cf >= p.clip_frac_critical)
            self.emit("trust_region.exceeded", ep,
                      f"{' and '.join(parts)} at step {ep.peak_step} (priors {p.approx_kl:g} and "
                      f"{p.clip_frac:g}): updates far outside the trust region from step "
                      f"{ep.onset_step}",
                      {"approx_kl": ak, "clip_frac": cf, "prior_approx_kl": p.approx_kl,
                       "prior_clip_frac": p.clip_frac, "rows": ep.n_rows,
                       "metrics": ["approx_kl", "clip_frac"]},
                      Severity.CRITICAL if critical else None)
        return self.result({"rows": self.rows})

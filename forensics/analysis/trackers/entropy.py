"""Policy entropy: collapse (a large fall from the run's early level) and blow-up, with onset.

The early level ``H_0`` is the median entropy of the first ``baseline_rows`` rows; the current
level is a trailing block median over ``smooth`` rows, so one noisy step moves nothing. Ratios are
unit-free, so summed-per-sequence and per-token entropies are judged alike (SIGNATURES #10 trap).

* ``entropy.collapse`` (warning): ``H_t / H_0 < collapse_ratio`` (0.3, SIGNATURES #10) for
  ``collapse_rows`` rows while the reward has stopped improving (or is not logged). A decline is
  expected while a policy learns (Cui et al. 2025: ~73% in the first twelfth of training); it
  becomes a problem when the reward plateaus, so a low entropy with a reward still rising is the
  informational ``entropy.low``.
* ``entropy.blowup`` (warning): ``H_t / H_0 > blowup_ratio`` (1.5, SIGNATURES #11) while the
  level is still rising (``blowup_rise`` over one window), for ``blowup_rows`` rows.

References: SIGNATURES.md #10, #11; Cui et al. 2025, *The Entropy Mechanism of RL for Reasoning
LMs*; DAPO (Yu et al. 2025) sections 3.1, 3.3.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..spans import step_span
from ..stats.episodes import Episodes
from ..stats.noise import block_median, diff_sigma
from ..stats.order import median
from ..stats.trailing import Context, shift
from .base import Tracker, TrackerResult

__all__ = ["Entropy"]


@record
class EntropyParams:
    """The entropy tracker's thresholds (``[entropy]`` in a config)."""

    baseline_rows: int = param(20, "First rows whose median entropy is the early level H_0.")
    smooth: int = param(20, "Rows in the block median that defines the current level.")
    window: int = param(100, "Rows over which rising entropy and reward improvement are judged.")
    collapse_ratio: float = param(0.3, "H_t / H_0 below this is a collapse (SIGNATURES #10).", le=1)
    collapse_rows: int = param(10, "Consecutive rows the collapse condition must hold.")
    plateau_rows: int = param(50, "Rows over which the reward's improvement is judged.")
    plateau_sigmas: float = param(2.0, "Reward level gain over plateau_rows below this many noise "
                                  "sigmas counts as a plateau.")
    blowup_ratio: float = param(1.5, "H_t / H_0 above this is a blow-up (SIGNATURES #11).")
    blowup_rise: float = param(0.05, "...while the level is still this share above its value one "
                               "window earlier.")
    blowup_rows: int = param(10, "Consecutive rows the blow-up condition must hold.")
    blowup_floor: float = param(1.0, "Per-token entropy (nats/token) a language model's policy must "
                                "exceed for a rise to be a blow-up (a prior of LM fine-tuning: "
                                "instruct models sample at 0.1-1 nats/token and stay coherent; an "
                                "entropy bonus lifting 0.14 to 0.27 is not drift to gibberish). Not "
                                "applied to toy policies.")
    floor: float = param(0.02, "Per-token entropy (nats/token) below which the policy is "
                         "near-deterministic whatever its early level (a prior of LM fine-tuning: "
                         "instruct models start near 0.2-1; 0.02 leaves almost no exploration).")
    floor_k: int = param(5, "Rows out of floor_m below the floor (no probation).")
    floor_m: int = param(8, "Persistence window of the floor (rows).")
    relations: ClassVar[Relations] = (("floor_k", "<=", 1, "floor_m"),)


_R = RuleSpec
RULES = (
    _R("entropy.collapse", Severity.WARNING, "Entropy collapse",
       "Policy entropy fell below a small share of its early level while the reward stopped "
       "improving, or below the floor no exploring language model goes under (near zero "
       "nats/token, judged from the first step): the policy has become near-deterministic and "
       "no longer explores.",
       "Raise the temperature 10%; use clip-higher (eps_high 0.28) or an (adaptive) entropy bonus; "
       "use dynamic sampling to drop all-correct/all-wrong groups.",
       ("collapse_ratio", "collapse_rows", "baseline_rows", "plateau_rows", "plateau_sigmas", "floor",
        "floor_k", "floor_m"), "SIGNATURES #10; DAPO section 3.1"),
    _R("entropy.low", Severity.INFO, "Entropy far below its early level",
       "Entropy fell below collapse_ratio of its early level but the reward is still improving: "
       "expected while learning, a collapse risk if the reward plateaus.",
       "Watch the reward; if it plateaus, raise the temperature 10% or use clip-higher.",
       ("collapse_ratio", "collapse_rows"), "SIGNATURES #10"),
    _R("entropy.blowup", Severity.WARNING, "Entropy blow-up",
       "Policy entropy rose well above its early level, keeps rising, and is high in absolute "
       "terms (above blowup_floor nats/token for a language model): generations drift toward "
       "gibberish and repetition. A rise that stays in the range where language models sample "
       "coherent text (an entropy bonus at work) is not one.",
       "Use a token-level loss (loss_type='dapo'); remove or clip the entropy bonus; lower the "
       "learning rate 20% or the temperature 10%.",
       ("blowup_ratio", "blowup_rise", "blowup_rows", "blowup_floor"), "SIGNATURES #11"),
)


class Entropy(Tracker):
    """Entropy level against its early value: collapse (with reward context) and blow-up."""

    name = "entropy"
    area = "policy"
    requires = ("entropy", "reward_mean")
    starts_on = ("entropy",)
    rules = RULES
    Params = EntropyParams

    def __init__(self, params: EntropyParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: EntropyParams = self.params
        self.p = p
        self.base_vals: list[np.ndarray] = []
        self.h0: float | None = None
        self.ctx = Context(2 * max(p.window, p.plateau_rows) + p.smooth + 2)
        self.ep = {
            "entropy.collapse": Episodes(p.collapse_rows, p.collapse_rows, gap=p.window, mode="min"),
            "entropy.low": Episodes(p.collapse_rows, p.collapse_rows, gap=p.window, mode="min"),
            "entropy.blowup": Episodes(p.blowup_rows, p.blowup_rows, gap=p.window, mode="max"),
        }
        self.floor_ep = Episodes(p.floor_k, p.floor_m, gap=p.window, mode="min")
        self.min_ratio = np.inf
        self.max_ratio = -np.inf
        self.last_ratio = float("nan")

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not batch.has("entropy") and not self.active:
            return None
        if self.meta.family == "preference" and self.meta.algorithm != "online_dpo":
            # offline preference optimisation samples nothing: its entropy is the policy's on
            # fixed pairs, and the sampling remedies (temperature, clip-higher) do not apply
            self.skip_reason = "offline preference optimisation samples nothing: no sampling entropy to judge"
            return None
        self.active = True
        self.source_keys.setdefault("entropy", "entropy")
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._update(batch)

    def _update(self, batch: Batch) -> dict[str, np.ndarray]:
        p = self.p
        rows, steps = batch.rows, batch.steps
        self.rows += len(batch)
        h = batch.col("entropy")
        if self.h0 is None:
            self.base_vals.append(h[rows < p.baseline_rows])
            if rows[-1] >= p.baseline_rows - 1:
                b = np.concatenate(self.base_vals)
                b = b[np.isfinite(b)]
                self.h0 = median(b) if len(b) else float("nan")
        h0 = self.h0 if self.h0 is not None and self.h0 > 0 else np.nan
        full, n0 = self.ctx.extend(h=h, r=batch.col("reward_mean"))
        level_f = block_median(full["h"], p.smooth, max(p.smooth // 2, 1))
        level = level_f[n0:]
        ratio = level / h0
        ago = shift(level_f, p.window)[n0:]
        known = rows >= p.baseline_rows
        low = known & np.isfinite(ratio) & (ratio < p.collapse_ratio)
        collapse, kept_low = self.ep["entropy.collapse"], self.ep["entropy.low"]
        if low.any() or not (collapse.idle() and kept_low.idle()):
            # reward improvement over one window, in reward noise sigmas (read only when the
            # entropy is low: a healthy run's batches skip two moving medians of the reward)
            r_level = block_median(full["r"], p.smooth, max(p.smooth // 2, 1))
            r_gain = ((r_level - shift(r_level, p.plateau_rows))
                      / np.fmax(diff_sigma(full["r"], p.window, p.window // 4), 1e-12))[n0:]
        else:
            r_gain = np.full(len(rows), np.nan)
        improving = np.isfinite(r_gain) & (r_gain >= p.plateau_sigmas)
        evidence = {"entropy": level, "reward_gain_sigmas": r_gain}
        collapse.update(rows, steps, low & ~improving, ratio, evidence)
        kept_low.update(rows, steps, low & improving, ratio, evidence)
        rising = np.isfinite(ago) & (level > ago * (1.0 + p.blowup_rise))
        blow = known & np.isfinite(ratio) & (ratio > p.blowup_ratio) & rising
        if self.meta.lm_priors:
            blow &= level >= p.blowup_floor
        self.ep["entropy.blowup"].update(rows, steps, blow, ratio, {"entropy": level})
        if self.meta.lm_priors:
            self.floor_ep.update(rows, steps, h < p.floor, h)
        fin = np.isfinite(ratio) & known
        if fin.any():
            self.min_ratio = min(self.min_ratio, float(ratio[fin].min()))
            self.max_ratio = max(self.max_ratio, float(ratio[fin].max()))
            self.last_ratio = float(ratio[fin][-1])
        return {"entropy_over_initial": ratio}

    def conclude(self) -> TrackerResult:
        p = self.p
        notes: list[str] = []
        summary: dict[str, Any] = {
            "rows": self.rows, "initial": self.h0,
            "min_over_initial": self.min_ratio if np.isfinite(self.min_ratio) else None,
            "max_over_initial": self.max_ratio if np.isfinite(self.max_ratio) else None,
            "last_over_initial": self.last_ratio}
        if self.active and (self.h0 is None or not self.h0 > 0):
            notes.append("early entropy is not positive (or too few rows): collapse and blow-up "
                         "not judged")
        for rule, eps in self.ep.items():
            for ep in eps.finish():
                ent = ep.extras.get("entropy", float("nan"))
                span = step_span(ep.first_step, ep.last_step)
                ev: dict[str, Any] = {"ratio_to_initial": ep.peak, "entropy": ent, "initial": self.h0,
                                      "metrics": ["entropy"]}
                if rule == "entropy.blowup":
                    msg = (f"entropy rose to {ep.peak:.2f}x its early level ({ent:.4g} vs "
                           f"{self.h0:.4g}) and kept rising, onset step {ep.onset_step}, {span}")
                    ev.update(threshold=p.blowup_ratio)
                else:
                    gain = ep.extras.get("reward_gain_sigmas", float("nan"))
                    ctx = ("reward still improving" if rule == "entropy.low" else
                           "reward not improving" if gain == gain else "reward trend unknown")
                    msg = (f"entropy fell to {ep.peak:.2g}x its early level ({ent:.4g} vs "
                           f"{self.h0:.4g}), {ctx}, onset step {ep.onset_step}, {span}")
                    ev.update(threshold=p.collapse_ratio, reward_gain_sigmas=gain)
                self.emit(rule, ep, msg, ev)
        for ep in self.floor_ep.finish():
            self.emit("entropy.collapse", ep,
                      f"entropy fell to {ep.peak:.3g} nats/token at step {ep.peak_step}, below the "
                      f"{p.floor:g} floor of an exploring policy, from step {ep.onset_step}",
                      {"entropy": ep.peak, "floor": p.floor, "initial": self.h0, "rows": ep.n_rows,
                       "metrics": ["entropy"]})
        return self.result(summary, notes)

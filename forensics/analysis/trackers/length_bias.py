"""Length bias: does reward pay for length rather than quality? Plus length growth and truncation.

From a per-response sample stream (step, length, reward): Pearson and Spearman correlation of
length with reward overall and in rolling pools of steps, the reward gap between long and short
responses, and the share of reward variance explained by length (r squared). From step aggregates
alone: length and reward rising together, length growing while reward stalls, truncation rising.

References: SIGNATURES.md #6, #7 (Singhal et al. 2023: 70-90% of PPO reward gain from length),
#15 (truncation). False-positive trap: in RLVR, longer reasoning legitimately earns more reward;
the coupled-growth rule is therefore informational unless the per-response correlation confirms.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ...config import param
from ...io.canonical import Batch
from ..episodes import Episodes
from ..findings import RuleSpec, Severity
from ..stats import BlockStats, pearson, spearman
from .base import Tracker, TrackerResult
from .grouping import StepGrouper

__all__ = ["LengthBias"]

_HASH = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class LengthBiasParams:
    window: int = param(50, "Trailing window (rows) for step-level trends.")
    block: int = param(5, "Rows per block of the trend statistics (see stats.BlockStats).")
    probation: int = param(10, "Steps at the start on which no rule fires.", ge=0)
    baseline_rows: int = param(30, "Steps after probation that define baselines.")
    pool_steps: int = param(10, "Steps pooled for the rolling per-response correlation.")
    rho_threshold: float = param(0.3, "Pooled Spearman(length, reward) above this is coupling.", le=1)
    rho_increase: float = param(0.1, "...and at least this much above the baseline correlation.")
    growth_factor: float = param(1.3, "Mean length above this multiple of the baseline is growth.")
    rising_ratio: float = param(1.1, "Median length of the last window/2 over the window/2 "
                                "before it that counts as rising.")
    stall_tolerance: float = param(0.25, "Reward rise (in IQRs of the window) below which reward "
                                   "counts as stalled.")
    truncation_rate: float = param(0.1, "Truncation rate above this is a finding.", le=1)
    truncation_rise: float = param(2.0, "...or above this multiple of the baseline and 0.05.")
    length_cap_share: float = param(0.95, "P95 length at this share of max_length is truncation.", le=1)
    persist_k: int = param(5, "Persistence: rows out of persist_m.")
    persist_m: int = param(8, "Persistence window (rows).")
    max_overall_samples: int = param(200_000, "Responses kept (deterministic hash sample) for the "
                                     "overall correlation.", le=10**7)


_R = RuleSpec
RULES = (
    _R("length.reward_correlation", Severity.WARNING, "Reward pays for length",
       "Within recent steps, longer responses get systematically more reward, more so than early "
       "in training, and responses have grown: the policy is learning length, not quality.",
       "Add a length penalty or length-normalise the reward; rebalance reward-model data by "
       "length; for DPO use R-DPO/LD-DPO.",
       ("rho_threshold", "rho_increase", "growth_factor", "pool_steps"), "SIGNATURES #7"),
    _R("length.growth", Severity.WARNING, "Length grows while reward stalls",
       "Mean response length keeps rising but reward does not improve: the extra tokens buy "
       "nothing (pattern collapse, repetition, or verbose failures).",
       "Inspect long samples; add a length penalty or use a constant loss normaliser (Dr. GRPO "
       "loss_type='dr_grpo'); lower the learning rate 20%.",
       ("growth_factor", "rising_ratio", "stall_tolerance"), "SIGNATURES #6, #14"),
    _R("length.coupled_growth", Severity.INFO, "Length and reward rise together",
       "Mean length and reward rise together; legitimate in reasoning tasks, a length-hacking "
       "sign otherwise. A per-response stream tells the two apart.",
       "Log per-response (length, reward) and check length.reward_correlation.",
       ("growth_factor", "rising_ratio")),
    _R("length.truncation", Severity.WARNING, "Responses hit the length cap",
       "Many responses are cut at the maximum length: rewards on truncated answers are noise and "
       "the policy may never learn to stop.",
       "Raise max_length (max_completion_length) 50%; mask truncated completions; add a soft "
       "overlong penalty.",
       ("truncation_rate", "truncation_rise", "length_cap_share"), "SIGNATURES #15"),
)


class LengthBias(Tracker):
    """Length-reward coupling from responses; growth and truncation from step aggregates."""

    name = "length_bias"
    area = "length"
    streams = ("step", "sample")
    requires = ("response_length_mean", "truncation_rate", "length")
    rules = RULES
    Params = LengthBiasParams

    def __init__(self, params: LengthBiasParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: LengthBiasParams = self.params
        self.p = p
        k, m = p.persist_k, p.persist_m
        self.ep = {
            "length.reward_correlation": Episodes(3, 5, gap=p.window, mode="max"),
            "length.growth": Episodes(k, m, gap=p.window, mode="max"),
            "length.coupled_growth": Episodes(k, m, gap=p.window, mode="max"),
            "length.truncation": Episodes(k, m, gap=p.window, mode="max"),
            "length.truncation_samples": Episodes(k, m, gap=p.window, mode="max"),
        }
        self.bs_len = BlockStats(p.window, p.block, keep=4 * (p.window // p.block))
        self.bs_rew = BlockStats(p.window, p.block, keep=4 * (p.window // p.block))
        self.base: dict[str, list[np.ndarray]] = {"len": [], "trunc": []}
        self.base_len: float | None = None
        self.base_trunc: float | None = None
        self.step_rows = 0
        # sample stream state
        self.grouper = StepGrouper()
        self.pool: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=p.pool_steps)
        self.sample_steps = 0
        self.sample_rows = 0
        self.s_base_rho: list[float] = []
        self.s_base_len: list[float] = []
        self.s_base_done = False
        self.sketch_h = np.zeros(0, dtype=np.uint64)
        self.sketch_l = np.zeros(0)
        self.sketch_r = np.zeros(0)
        self.series_steps: list[int] = []
        self.series_rho: list[float] = []
        self.series_r2: list[float] = []
        self.series_trunc: list[float] = []

    # -- step stream ------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if batch.stream == "sample":
            self._update_samples(batch)
            return None
        if not (batch.has("response_length_mean") or batch.has("truncation_rate")) \
                and not self.step_rows:
            return None
        self.active = True
        self.step_rows += len(batch)
        self.rows += len(batch)
        p = self.p
        rows, steps = batch.rows, batch.steps
        after = rows >= p.probation
        length = batch.col("response_length_mean")
        reward = batch.col("reward_mean")
        trunc = batch.col("truncation_rate")
        self.source_keys.setdefault("response_length_mean", "response_length_mean")
        if self.base_len is None:
            sel = (rows >= p.probation) & (rows < p.probation + p.baseline_rows)
            self.base["len"].append(length[sel])
            self.base["trunc"].append(trunc[sel])
            if rows[-1] >= p.probation + p.baseline_rows - 1:
                bl = np.concatenate(self.base["len"])
                bt = np.concatenate(self.base["trunc"])
                bl, bt = bl[np.isfinite(bl)], bt[np.isfinite(bt)]
                self.base_len = float(np.median(bl)) if len(bl) else float("nan")
                self.base_trunc = float(np.median(bt)) if len(bt) else float("nan")
        has_base = rows >= p.probation + p.baseline_rows
        base_len = self.base_len if self.base_len is not None else np.nan
        half = max(self.bs_len.nblocks // 2, 1)
        self.bs_len.update(length, batch.row0)
        rec_l, prev_l = self.bs_len.trend(half)
        rising_len = (rec_l / prev_l) > p.rising_ratio
        _, sigma_r = self.bs_rew.update(reward, batch.row0)
        rec_r, prev_r = self.bs_rew.trend(half)
        reward_gain = (rec_r - prev_r) / np.fmax(sigma_r, 1e-9)
        reward_known = np.isfinite(reward_gain)
        grown = has_base & after & (length > p.growth_factor * base_len) & rising_len
        stalled = reward_known & (reward_gain < p.stall_tolerance)
        rising_reward = reward_known & (reward_gain >= p.stall_tolerance)
        rel = length / base_len
        self.ep["length.growth"].update(rows, steps, grown & stalled, rel,
                                        {"length": length, "reward_gain": reward_gain})
        self.ep["length.coupled_growth"].update(rows, steps, grown & rising_reward, rel,
                                                {"length": length, "reward_gain": reward_gain})
        base_tr = self.base_trunc if self.base_trunc is not None else np.nan
        tr_cond = (trunc > p.truncation_rate) | (
            has_base & (trunc > p.truncation_rise * base_tr) & (trunc > 0.05))
        cap = self.meta.max_length
        lmax = batch.col("response_length_max")
        if cap:
            tr_cond |= np.isfinite(lmax) & (length >= p.length_cap_share * cap)
        self.ep["length.truncation"].update(rows, steps, after & tr_cond, trunc,
                                            {"length": length})
        return None

    # -- sample stream ----------------------------------------------------------------------
    def _update_samples(self, batch: Batch) -> None:
        if not batch.has("length"):
            return None
        self.active = True
        cols = {"l": batch.col("length"), "r": batch.col("reward"), "t": batch.col("truncated")}
        n0 = self.sample_rows
        self.sample_rows += len(batch)
        self._sketch(np.arange(n0, n0 + len(batch), dtype=np.uint64), cols["l"], cols["r"])
        for steps, groups in self.grouper.push(batch.steps, cols):
            self._steps_done(steps, groups)
        return None

    def _sketch(self, rows: np.ndarray, length: np.ndarray, reward: np.ndarray) -> None:
        """Bottom-k sample by a hash of the row index: the same rows whatever the batching."""
        with np.errstate(over="ignore"):
            h = (rows + np.uint64(1)) * _HASH
        self.sketch_h = np.concatenate([self.sketch_h, h])
        self.sketch_l = np.concatenate([self.sketch_l, length])
        self.sketch_r = np.concatenate([self.sketch_r, reward])
        cap = self.p.max_overall_samples
        if len(self.sketch_h) > 2 * cap:
            keep = np.argpartition(self.sketch_h, cap)[:cap]
            self.sketch_h, self.sketch_l, self.sketch_r = (
                self.sketch_h[keep], self.sketch_l[keep], self.sketch_r[keep])

    def _steps_done(self, steps: np.ndarray, groups: list[dict[str, np.ndarray]]) -> None:
        p = self.p
        conds, vals, rhos_out, lens = [], [], [], []
        for step, g in zip(steps, groups, strict=True):
            self.pool.append((g["l"], g["r"]))
            pl = np.concatenate([x for x, _ in self.pool])
            pr = np.concatenate([y for _, y in self.pool])
            rho = spearman(pl, pr)
            r = pearson(pl, pr)
            mean_len = float(np.nanmean(g["l"])) if np.isfinite(g["l"]).any() else np.nan
            t = g["t"]
            trunc = float(np.nanmean(t)) if np.isfinite(t).any() else np.nan
            idx = self.sample_steps
            self.sample_steps += 1
            if p.probation <= idx < p.probation + p.baseline_rows:
                if np.isfinite(rho):
                    self.s_base_rho.append(rho)
                if np.isfinite(mean_len):
                    self.s_base_len.append(mean_len)
            base_done = idx >= p.probation + p.baseline_rows
            base_rho = float(np.median(self.s_base_rho)) if self.s_base_rho else 0.0
            base_len = float(np.median(self.s_base_len)) if self.s_base_len else np.nan
            cond = base_done and np.isfinite(rho) and rho > p.rho_threshold and \
                rho - base_rho > p.rho_increase and mean_len > p.growth_factor * base_len
            conds.append(cond)
            vals.append(rho)
            rhos_out.append(r * r if np.isfinite(r) else np.nan)
            lens.append(mean_len)
            self.series_steps.append(int(step))
            self.series_rho.append(rho)
            self.series_r2.append(r * r if np.isfinite(r) else np.nan)
            self.series_trunc.append(trunc)
        rows = np.arange(self.sample_steps - len(steps), self.sample_steps, dtype=np.int64)
        self.ep["length.reward_correlation"].update(
            rows, steps, np.array(conds, dtype=bool), np.array(vals),
            {"r2": np.array(rhos_out), "length": np.array(lens)})
        if not self.step_rows:
            # truncation from the responses themselves when the step stream has no rate
            tr = np.array(self.series_trunc[-len(steps):])
            self.ep["length.truncation_samples"].update(
                rows, steps, (rows >= p.probation) & (tr > p.truncation_rate), tr,
                {"length": np.array(lens)})

    # -- finish -------------------------------------------------------------------------
    def finish(self) -> TrackerResult:
        for steps, groups in self.grouper.flush():
            self._steps_done(steps, groups)
        p = self.p
        summary: dict[str, object] = {"step_rows": self.step_rows,
                                      "sample_rows": self.sample_rows,
                                      "baseline_length": self.base_len}
        if len(self.sketch_h):
            cap = p.max_overall_samples
            if len(self.sketch_h) > cap:
                keep = np.argpartition(self.sketch_h, cap)[:cap]
                ls, rs = self.sketch_l[keep], self.sketch_r[keep]
            else:
                ls, rs = self.sketch_l, self.sketch_r
            ok = np.isfinite(ls) & np.isfinite(rs)
            ls, rs = ls[ok], rs[ok]
            r = pearson(ls, rs)
            summary.update(overall_pearson=r, overall_spearman=spearman(ls, rs),
                           overall_r2=r * r if r == r else None, responses_used=int(ok.sum()))
            if len(ls) >= 8:
                q1, q3 = np.quantile(ls, [0.25, 0.75])
                long, short = rs[ls >= q3], rs[ls <= q1]
                if len(long) and len(short):
                    summary["reward_gap_long_short"] = float(long.mean() - short.mean())
        if self.sample_rows and not self.rows:
            self.rows = self.sample_steps
        for ep in self.ep["length.reward_correlation"].finish():
            self.emit("length.reward_correlation", ep,
                      f"Spearman(length, reward) reached {ep.peak:.2f} over {p.pool_steps}-step "
                      f"pools (length explains {ep.extras.get('r2', float('nan')):.0%} of reward "
                      f"variance), steps {ep.first_step}-{ep.last_step}",
                      {"spearman": ep.peak, "r2": ep.extras.get("r2"),
                       "mean_length": ep.extras.get("length"),
                       "baseline_spearman": float(np.median(self.s_base_rho))
                       if self.s_base_rho else None,
                       "threshold": p.rho_threshold, "metrics": ["length", "reward"]})
        for rule in ("length.growth", "length.coupled_growth"):
            for ep in self.ep[rule].finish():
                what = "while reward stalled" if rule == "length.growth" else "with reward"
                self.emit(rule, ep,
                          f"mean length grew to {ep.peak:.2f}x its baseline {what}, steps "
                          f"{ep.first_step}-{ep.last_step}",
                          {"length_over_baseline": ep.peak, "length": ep.extras.get("length"),
                           "baseline_length": self.base_len, "threshold": p.growth_factor,
                           "reward_gain_iqr": ep.extras.get("reward_gain"),
                           "metrics": ["response_length_mean", "reward_mean"]})
        for rule in ("length.truncation", "length.truncation_samples"):
            for ep in self.ep[rule].finish():
                self.emit("length.truncation", ep,
                          f"truncation rate reached {ep.peak:.0%}, steps {ep.first_step}-"
                          f"{ep.last_step}",
                          {"truncation_rate": ep.peak, "baseline": self.base_trunc,
                           "threshold": p.truncation_rate, "max_length": self.meta.max_length,
                           "metrics": ["truncation_rate"]})
        series = {}
        if self.series_steps:
            st = np.array(self.series_steps, dtype=np.int64)
            series = {"length_reward_spearman": (st, np.array(self.series_rho)),
                      "length_reward_r2": (st, np.array(self.series_r2))}
        return self.result(summary, [], series)

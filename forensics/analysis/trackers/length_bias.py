"""Length bias: does reward pay for length rather than quality? Plus length growth and truncation.

From a per-response sample stream (step, length, reward), every response counted: the
within-step Spearman and Pearson correlation of length with reward for every step (ranks and
sums over all of a step's responses, vectorised across the steps of a batch:
:mod:`.segments`), pooled over the last ``pool_steps`` steps (weighted by responses) and judged
step by step against the run's own early baseline, so the finding's onset is the step where the
coupling appears; the overall Pearson correlation and r squared over all responses (exact
streaming moments); the overall Spearman correlation and the reward gap between long and short
responses from a deterministic hash sample whose size and share the summary states. From step
aggregates alone: length and reward rising together, length growing while reward stalls,
truncation rising.

The coupling is judged *within* steps: responses of one step share the policy and the prompts'
difficulty, so a correlation there is the reward paying for length, not both drifting with
training (which a correlation pooled across steps would mix in).

References: SIGNATURES.md #6, #7 (Singhal et al. 2023: 70-90% of PPO reward gain from length),
#15 (truncation). False-positive trap: in RLVR, longer reasoning legitimately earns more reward;
the coupled-growth rule is therefore informational unless the per-response correlation confirms.
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
from ..stats.order import median, quantiles
from ..stats.segments import Block, StepRuns, segment_mean, segment_moments, segment_spearman
from ..stats.trailing import BlockStats, Context, spearman, window_median
from .base import Tracker, TrackerResult

__all__ = ["LengthBias"]

_HASH = np.uint64(0x9E3779B97F4A7C15)
#: Most batches' rows the sketch holds aside before it joins them (a live scan's batches of a few
#: rows would otherwise pile up as many small arrays between trims).
_SKETCH_PARTS = 64


@record
class LengthBiasParams:
    """The length-bias tracker's thresholds (``[length_bias]`` in a config)."""

    window: int = param(50, "Trailing window (rows) for step-level trends.")
    block: int = param(5, "Rows per block of the trend statistics (see stats.BlockStats).")
    probation: int = param(10, "Steps at the start on which no rule fires.", ge=0)
    baseline_rows: int = param(30, "Steps after probation that define baselines.")
    pool_steps: int = param(10, "Most steps pooled (weighted by responses) for the within-step "
                            "correlation a step is judged on.")
    pool_responses: int = param(2000, "...fewer when the last steps hold this many responses (a "
                                "step of 2,000 responses is judged alone).")
    rho_threshold: float = param(0.3, "Pooled within-step Spearman(length, reward) above this is "
                                 "coupling.", le=1)
    rho_increase: float = param(0.1, "...and at least this much above the baseline correlation.")
    growth_factor: float = param(1.3, "Mean length above this multiple of the baseline is growth.")
    rising_ratio: float = param(1.1, "Median length of the last window/2 over the window/2 "
                                "before it that counts as rising.")
    stall_tolerance: float = param(0.25, "Reward rise (in IQRs of the window) below which reward "
                                   "counts as stalled.")
    truncation_rate: float = param(0.1, "Truncation rate above this is a finding.", le=1)
    truncation_rise: float = param(2.0, "...or above this multiple of the baseline and 0.05.")
    length_cap_share: float = param(0.95, "P95 length at this share of max_length is truncation.", le=1)
    pinned_rows: int = param(5, "With no truncation rate, longest response or max_length logged: "
                             "rows whose mean length equals exactly the largest mean logged that "
                             "make it the cap (a mean reaches the cap only when every response "
                             "is cut); they must also be truncation_rate of the rows (so at least "
                             "that share of responses was cut).")
    pinned_share: float = param(0.9, "...and a mean length (median of 20 rows) at this share of "
                                "that cap is truncation.", le=1)
    truncation_all: float = param(0.9, "Truncation rate at or above this (on 3 of 5 rows, from the "
                                  "first step) makes length.truncation critical: nearly every "
                                  "response is cut.", le=1)
    collapse_factor: float = param(10.0, "Mean length this many times below its highest earlier "
                                   "level (5-row median) is a collapse.")
    collapse_critical: float = param(100.0, "Fall factor that makes length.collapse critical.")
    collapse_floor: float = param(1.5, "Mean length (tokens) at or below which answers are empty (the "
                                  "end-of-sequence token alone): a collapse once the length had been "
                                  "at least 4 times higher.")
    persist_k: int = param(5, "Persistence: rows out of persist_m.")
    persist_m: int = param(8, "Persistence window (rows).")
    max_overall_samples: int = param(200_000, "Responses kept (deterministic hash sample) for the "
                                     "overall Spearman correlation and the long/short reward gap "
                                     "(the per-step statistics and the overall Pearson use all).",
                                     le=10**7)
    relations: ClassVar[Relations] = (("persist_k", "<=", 1, "persist_m"), ("window", ">=", 2, "block"))


_R = RuleSpec
RULES = (
    _R("length.reward_correlation", Severity.WARNING, "Reward pays for length",
       "Within each recent step, longer responses get systematically more reward, more so than "
       "early in training: the reward pays for length, and the policy learns length, not quality "
       "(the evidence says whether responses have grown yet).",
       "Add a length penalty or length-normalise the reward; rebalance reward-model data by "
       "length; for DPO use R-DPO/LD-DPO.",
       ("rho_threshold", "rho_increase", "growth_factor", "pool_steps", "pool_responses"),
       "SIGNATURES #7"),
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
       "the policy may never learn to stop. Where the log names no cap and no truncated share, a "
       "mean length that hits one largest value exactly on several rows has found the cap (a "
       "mean equals it only when every response is cut), and a mean near it is truncation.",
       "Raise max_length (max_completion_length) 50%; mask truncated completions; add a soft "
       "overlong penalty.",
       ("truncation_rate", "truncation_rise", "length_cap_share", "truncation_all", "pinned_rows",
        "pinned_share"), "SIGNATURES #15"),
    _R("length.collapse", Severity.WARNING, "Response length collapses",
       "Mean response length fell by an order of magnitude from the level it had reached: the "
       "policy emits (nearly) empty answers, usually after a too large update broke it, or it "
       "found that stopping early avoids a penalty. Rewards and gradients computed on such "
       "responses carry no signal.",
       "Roll back to the checkpoint before the onset and lower the learning rate 50%; check for a "
       "reward or penalty that a short answer escapes (format penalties, length penalties, KL "
       "summed over tokens).",
       ("collapse_factor", "collapse_critical", "collapse_floor"), "veRL GRPO failure cases; SIGNATURES #4"),
)


class LengthBias(Tracker):
    """Length-reward coupling from responses; growth and truncation from step aggregates."""

    name = "length_bias"
    area = "length"
    streams = ("step", "sample")
    requires = ("response_length_mean", "truncation_rate", "length", "response_length_max", "reward_mean",
                "reward", "truncated")
    starts_on = ("response_length_mean", "truncation_rate", "length")
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
            "length.truncation_all": Episodes(3, 5, gap=p.window, mode="max"),
            "length.collapse": Episodes(3, 5, gap=p.window, mode="max"),
        }
        self.len_ctx = Context(4)
        self.len_peak = -np.inf
        self.bs_len = BlockStats(p.window, p.block, keep=4 * (p.window // p.block))
        self.bs_rew = BlockStats(p.window, p.block, keep=4 * (p.window // p.block))
        self.base: dict[str, list[np.ndarray]] = {"len": [], "trunc": []}
        self.base_len: float | None = None
        self.base_trunc: float | None = None
        self.step_rows = 0
        # sample stream state
        self.runs = StepRuns()
        self.pool_rho = np.zeros(0)  # n-weighted rho and n of the last pool_steps - 1 steps
        self.pool_n = np.zeros(0)
        self.sample_steps = 0
        self.sample_rows = 0
        self.s_base_rho: list[float] = []
        self.s_base_len: list[float] = []
        # all finite (length, reward) pairs: n, means, centred sums (merged step by step)
        self.moments = [0.0] * 6
        self.sketch_h = np.zeros(0, dtype=np.uint64)
        self.sketch_l = np.zeros(0)
        self.sketch_r = np.zeros(0)
        # rows offered since the last trim, joined to the sketch by the next one; and the largest
        # hash the last trim kept, which a row must be under to enter (None: not yet full)
        self.sketch_new: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.sketch_bound: np.uint64 | None = None
        self.series: dict[str, list[np.ndarray]] = {"step": [], "rho": [], "r2": [], "trunc": []}
        # the mean length per row while nothing says where the cap is (no truncation rate, no
        # longest response, no max_length): read once at the end for a cap the mean keeps hitting
        self.pinned: dict[str, list[np.ndarray]] | None = (
            None if self.meta.max_length else {"row": [], "step": [], "len": []})

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
        rows, steps = batch.rows, batch.steps
        length = batch.col("response_length_mean")
        reward = batch.col("reward_mean")
        trunc = batch.col("truncation_rate")
        self.source_keys.setdefault("response_length_mean", "response_length_mean")
        if self.base_len is None:
            self._early_baseline(rows, length, trunc)
        self._growth(rows, steps, length, reward, batch.row0)
        lmax = batch.col("response_length_max")
        self._truncation(rows, steps, length, trunc, lmax)
        self._collapse(rows, steps, length)
        if self.pinned is not None:
            if np.isfinite(trunc).any() or np.isfinite(lmax).any():
                self.pinned = None  # the log says where the cap is
            else:
                for k, v in (("row", rows), ("step", steps), ("len", length)):
                    self.pinned[k].append(v.copy())
        return None

    def _early_baseline(self, rows: np.ndarray, length: np.ndarray, trunc: np.ndarray) -> None:
        """Median length and truncation rate over [probation, probation + baseline_rows)."""
        p = self.p
        sel = (rows >= p.probation) & (rows < p.probation + p.baseline_rows)
        self.base["len"].append(length[sel])
        self.base["trunc"].append(trunc[sel])
        if rows[-1] >= p.probation + p.baseline_rows - 1:
            bl = np.concatenate(self.base["len"])
            bt = np.concatenate(self.base["trunc"])
            bl, bt = bl[np.isfinite(bl)], bt[np.isfinite(bt)]
            self.base_len = median(bl) if len(bl) else float("nan")
            self.base_trunc = median(bt) if len(bt) else float("nan")

    def _growth(self, rows: np.ndarray, steps: np.ndarray, length: np.ndarray, reward: np.ndarray,
                row0: int) -> None:
        """length.growth (the length rising past its baseline while the reward stalls) and
        length.coupled_growth (with the reward)."""
        with np.errstate(divide="ignore", invalid="ignore"):  # lengths logged as 0 (no ratio: no finding)
            self._growth_inner(rows, steps, length, reward, row0)

    def _growth_inner(self, rows: np.ndarray, steps: np.ndarray, length: np.ndarray, reward: np.ndarray,
                      row0: int) -> None:
        p = self.p
        after = rows >= p.probation
        has_base = rows >= p.probation + p.baseline_rows
        base_len = self.base_len if self.base_len is not None else np.nan
        half = max(self.bs_len.nblocks // 2, 1)
        self.bs_len.update(length, row0)
        rec_l, prev_l = self.bs_len.trend(half)
        rising_len = (rec_l / prev_l) > p.rising_ratio
        _, sigma_r = self.bs_rew.update(reward, row0)
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

    def _truncation(self, rows: np.ndarray, steps: np.ndarray, length: np.ndarray, trunc: np.ndarray,
                    lmax: np.ndarray) -> None:
        """length.truncation: the share cut at the cap, high or risen over the early share, or a
        mean length at the cap."""
        p = self.p
        after = rows >= p.probation
        has_base = rows >= p.probation + p.baseline_rows
        base_tr = self.base_trunc if self.base_trunc is not None else np.nan
        # the share cut at the cap is a prior: judged from the first row (no probation); a rise
        # over the run's own early share needs the baseline
        tr_cond = (trunc > p.truncation_rate) | (
            after & has_base & (trunc > p.truncation_rise * base_tr) & (trunc > 0.05))
        cap = self.meta.max_length
        if cap:
            tr_cond |= np.isfinite(lmax) & (length >= p.length_cap_share * cap)
        self.ep["length.truncation"].update(rows, steps, tr_cond, trunc, {"length": length})
        self.ep["length.truncation_all"].update(rows, steps, trunc >= p.truncation_all, trunc,
                                                {"length": length})

    def _collapse(self, rows: np.ndarray, steps: np.ndarray, length: np.ndarray) -> None:
        """length.collapse: each row's length against the highest 5-row median level reached
        before it (the median keeps one long outlier from setting the reference; persistence
        keeps one short batch from being a collapse)."""
        p = self.p
        full, n0 = self.len_ctx.extend(length=length)
        # (from the first row: a collapse at the second logged row is judged against the first)
        level = window_median(full["length"], 5, 1)[n0:]
        peak = np.fmax.accumulate(np.concatenate([[self.len_peak], level]))
        self.len_peak = float(peak[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            fall = peak[:-1] / length
        empty = (length <= p.collapse_floor) & (fall >= 4.0)
        self.ep["length.collapse"].update(rows, steps, np.isfinite(fall) & ((fall >= p.collapse_factor) | empty),
                                          fall, {"length": length, "before": peak[:-1]})

    # -- sample stream ----------------------------------------------------------------------
    def _update_samples(self, batch: Batch) -> None:
        if not batch.has("length") and not self.sample_rows:
            return None
        self.active = True
        length, reward = batch.col("length"), batch.col("reward")
        n0 = self.sample_rows
        self.sample_rows += len(batch)
        self.source_keys.setdefault("length", "length")
        self.source_keys.setdefault("reward", "reward")
        ok = np.isfinite(length) & np.isfinite(reward)
        if ok.all():
            self._sketch(np.arange(n0, n0 + len(ok), dtype=np.uint64), length, reward)
        else:
            self._sketch(np.flatnonzero(ok).astype(np.uint64) + np.uint64(n0), length[ok], reward[ok])
        block = self.runs.push(batch.steps, {"l": length, "r": reward, "t": batch.col("truncated")})
        if block is not None:
            self._steps_done(block)
        return None

    def _sketch(self, rows: np.ndarray, length: np.ndarray, reward: np.ndarray) -> None:
        """Bottom-k sample by a hash of the row index: the same rows whatever the batching. The
        rows offered are held aside and joined to the sketch by :meth:`_trim_sketch` once the two
        hold twice the sample or :data:`_SKETCH_PARTS` batches are held (not copied into it batch
        by batch)."""
        with np.errstate(over="ignore"):
            h = (rows + np.uint64(1)) * _HASH
        if self.sketch_bound is not None:  # full: only a hash below the largest kept can enter
            new = h < self.sketch_bound
            h, length, reward = h[new], length[new], reward[new]
        if not len(h):
            return
        self.sketch_new.append((h, length, reward))
        held = sum(len(part[0]) for part in self.sketch_new)  # (at most _SKETCH_PARTS parts)
        if (len(self.sketch_h) + held > 2 * self.p.max_overall_samples
                or len(self.sketch_new) >= _SKETCH_PARTS):
            self._trim_sketch()

    def _trim_sketch(self) -> None:
        """Join the rows held aside to the sketch and keep the ``max_overall_samples`` smallest
        hashes (hashes of distinct rows differ: the same set however it was reached)."""
        if self.sketch_new:
            parts = [(self.sketch_h, self.sketch_l, self.sketch_r), *self.sketch_new]
            self.sketch_h, self.sketch_l, self.sketch_r = (np.concatenate([p[i] for p in parts]) for i in range(3))
            self.sketch_new = []
        cap = self.p.max_overall_samples
        if len(self.sketch_h) > cap:
            keep = np.argpartition(self.sketch_h, cap)[:cap]
            self.sketch_h, self.sketch_l, self.sketch_r = (
                self.sketch_h[keep], self.sketch_l[keep], self.sketch_r[keep])
        if len(self.sketch_h) >= cap:
            self.sketch_bound = self.sketch_h.max()

    def _steps_done(self, block: Block) -> None:
        """Judge the complete steps of a block: every response of each step counts."""
        p = self.p
        k, codes, c = block.k, block.codes, block.cols
        ok = np.isfinite(c["l"]) & np.isfinite(c["r"])
        every = bool(ok.all())
        lo, ro, co = (c["l"], c["r"], codes) if every else (c["l"][ok], c["r"][ok], codes[ok])
        ranked = segment_spearman(lo, ro, co, k)
        rho, n = ranked.pearson(), ranked.n
        raw = segment_moments(lo, ro, co, k)
        r = raw.pearson()
        self.moments = raw.merged_into(self.moments)
        mean_len = raw.mx if every else segment_mean(c["l"], codes, k)
        trunc = segment_mean(c["t"], codes, k)
        # pooled over the fewest trailing steps that hold pool_responses responses (at most
        # pool_steps), each step weighted by its responses; summed one offset at a time (not by
        # prefix sums), so a step's value does not depend on where the batches were cut
        w = np.where(np.isfinite(rho), n, 0).astype(float)
        wr = np.concatenate([self.pool_rho, np.where(w > 0, rho, 0.0) * w])
        wn = np.concatenate([self.pool_n, w])
        num, den = np.zeros(k), np.zeros(k)
        for j in range(min(p.pool_steps, len(wr))):  # step i pools wr[i - j] for j < pool_steps
            end = len(wr) - j
            lo = max(end - k, 0)
            more = den[k - (end - lo):] < p.pool_responses
            num[k - (end - lo):] += np.where(more, wr[lo:end], 0.0)
            den[k - (end - lo):] += np.where(more, wn[lo:end], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        keep = max(p.pool_steps - 1, 0)
        self.pool_rho, self.pool_n = wr[max(len(wr) - keep, 0):], wn[max(len(wn) - keep, 0):]
        idx = np.arange(self.sample_steps, self.sample_steps + k)
        self.sample_steps += k
        in_base = (idx >= p.probation) & (idx < p.probation + p.baseline_rows)
        if in_base.any():
            self.s_base_rho.extend(float(v) for v in pooled[in_base] if np.isfinite(v))
            self.s_base_len.extend(float(v) for v in mean_len[in_base] if np.isfinite(v))
        base_rho = median(self.s_base_rho) if self.s_base_rho else 0.0
        base_len = median(self.s_base_len) if self.s_base_len else np.nan
        base_done = idx >= p.probation + p.baseline_rows
        with np.errstate(invalid="ignore"):
            cond = base_done & (pooled > p.rho_threshold) & (pooled - base_rho > p.rho_increase)
            grown = mean_len / base_len
        r2 = r * r
        self.ep["length.reward_correlation"].update(
            idx, block.steps, cond, pooled,
            {"r2": r2, "length": mean_len, "length_over_baseline": grown, "responses": n.astype(float)})
        for name, v in (("step", block.steps), ("rho", rho), ("r2", r2), ("trunc", trunc)):
            self.series[name].append(v)
        if not self.step_rows:
            # truncation from the responses themselves when the step stream has no rate
            self.ep["length.truncation_samples"].update(
                idx, block.steps, (idx >= p.probation) & (trunc > p.truncation_rate), trunc,
                {"length": mean_len})

    # -- finish -------------------------------------------------------------------------
    def close(self) -> None:
        block = self.runs.flush()
        if block is not None:
            self._steps_done(block)

    def conclude(self) -> TrackerResult:
        summary: dict[str, object] = {"step_rows": self.step_rows,
                                      "sample_rows": self.sample_rows,
                                      "baseline_length": self.base_len}
        summary.update(self._correlation_summary())
        if self.sample_rows and not self.rows:
            self.rows = self.sample_steps
        self._emit_correlation()
        self._emit_length_findings()
        self._emit_pinned_at_cap()
        series = {}
        if self.series["step"]:
            st = np.concatenate(self.series["step"]).astype(np.int64)
            series = {"length_reward_spearman": (st, np.concatenate(self.series["rho"])),
                      "length_reward_r2": (st, np.concatenate(self.series["r2"]))}
        return self.result(summary, [], series)

    def _emit_pinned_at_cap(self) -> None:
        """length.truncation from the mean length alone: a batch's mean can equal the cap only
        when every response in it was cut, so a largest mean logged exactly again and again is the
        cap, and a mean that stays near it is a run bound by truncation."""
        p = self.p
        if not self.pinned or not self.pinned["len"]:
            return
        length = np.concatenate(self.pinned["len"]).astype(np.float64)
        finite = np.isfinite(length)
        if finite.sum() < 2 * p.pinned_rows:
            return
        cap = float(length[finite].max())
        at_cap = int((length == cap).sum())
        if at_cap < max(p.pinned_rows, p.truncation_rate * finite.sum()) or cap <= 0:
            return  # (every response cut on that share of rows: at least that share truncated)
        rows, steps = np.concatenate(self.pinned["row"]), np.concatenate(self.pinned["step"])
        level = window_median(length, 20, 10)  # a stretch, not a few long batches
        eps = Episodes(3, 5, gap=p.window, mode="max")
        eps.update(rows, steps, level >= p.pinned_share * cap, level / cap, {"length": level})
        tail = length[finite][-max(len(length) // 10, 3):]
        for ep in eps.finish():
            self.emit("length.truncation", ep,
                      f"the mean response length sits at {ep.peak:.0%} of {cap:g} tokens, the largest "
                      f"mean logged, which {at_cap} rows hit exactly (every response cut there: the "
                      f"cap), {step_span(ep.first_step, ep.last_step)}",
                      {"length_over_cap": ep.peak, "inferred_cap": cap, "rows_at_cap": at_cap,
                       "threshold": p.pinned_share,
                       "pinned_at_cap": bool(median(tail) >= p.pinned_share * cap),
                       "metrics": ["response_length_mean"]})

    def _correlation_summary(self) -> dict[str, object]:
        """Length against reward over every response: Pearson, Spearman on the sketch, and the
        reward gap between the longest and the shortest quarter."""
        summary: dict[str, object] = {}
        n, _, _, sxx, syy, sxy = self.moments
        if n:
            r = float(np.clip(sxy / np.sqrt(sxx * syy), -1, 1)) if sxx > 0 and syy > 0 else float("nan")
            self._trim_sketch()
            order = np.argsort(self.sketch_h)  # one order whatever the batching
            ls, rs = self.sketch_l[order], self.sketch_r[order]
            summary.update(overall_pearson=r, overall_r2=r * r if r == r else None,
                           responses_used=int(n), overall_spearman=spearman(ls, rs),
                           spearman_sample=len(ls), spearman_sample_share=len(ls) / n,
                           within_step_steps=self.sample_steps)
            if len(ls) >= 8:
                q1, q3 = quantiles(ls, [0.25, 0.75])
                long, short = rs[ls >= q3], rs[ls <= q1]
                if len(long) and len(short):
                    summary["reward_gap_long_short"] = float(long.mean() - short.mean())
        return summary

    def _emit_correlation(self) -> None:
        p = self.p
        for ep in self.ep["length.reward_correlation"].finish():
            grown = ep.extras.get("length_over_baseline", float("nan"))
            self.emit("length.reward_correlation", ep,
                      f"within-step Spearman(length, reward) reached {ep.peak:.2f} from step "
                      f"{ep.onset_step} (length explains {ep.extras.get('r2', float('nan')):.0%} "
                      f"of a step's reward variance; mean length "
                      + (f"{grown:.2f}x its baseline" if grown == grown else "unknown")
                      + f"), {step_span(ep.first_step, ep.last_step)}",
                      {"spearman": ep.peak, "r2": ep.extras.get("r2"),
                       "mean_length": ep.extras.get("length"), "length_over_baseline": grown,
                       "length_grew": bool(grown > p.growth_factor),
                       "responses_per_step": ep.extras.get("responses"),
                       "baseline_spearman": median(self.s_base_rho)
                       if self.s_base_rho else None,
                       "threshold": p.rho_threshold, "metrics": ["length", "reward"]})

    def _emit_length_findings(self) -> None:
        """length.growth and coupled_growth, length.truncation (the step and sample stream's, and
        nearly every response cut), length.collapse."""
        p = self.p
        for rule in ("length.growth", "length.coupled_growth"):
            for ep in self.ep[rule].finish():
                what = "while reward stalled" if rule == "length.growth" else "with reward"
                self.emit(rule, ep,
                          f"mean length grew to {ep.peak:.2f}x its baseline {what}, "
                          f"{step_span(ep.first_step, ep.last_step)}",
                          {"length_over_baseline": ep.peak, "length": ep.extras.get("length"),
                           "baseline_length": self.base_len, "threshold": p.growth_factor,
                           "reward_gain_iqr": ep.extras.get("reward_gain"),
                           "metrics": ["response_length_mean", "reward_mean"]})
        for rule in ("length.truncation", "length.truncation_samples", "length.truncation_all"):
            critical = rule == "length.truncation_all"
            for ep in self.ep[rule].finish():
                self.emit("length.truncation", ep,
                          f"truncation rate reached {ep.peak:.0%}"
                          + (" (nearly every response cut)" if critical else "")
                          + f", {step_span(ep.first_step, ep.last_step)}",
                          {"truncation_rate": ep.peak, "baseline": self.base_trunc,
                           "threshold": p.truncation_all if critical else p.truncation_rate,
                           "max_length": self.meta.max_length, "metrics": ["truncation_rate"]},
                          Severity.CRITICAL if critical else None)
        for ep in self.ep["length.collapse"].finish():
            self.emit("length.collapse", ep,
                      f"mean response length fell {ep.peak:.3g}x, from {ep.extras.get('before', 0):.4g} "
                      f"to {ep.extras.get('length', 0):.4g} tokens at step {ep.peak_step}, from step "
                      f"{ep.onset_step}",
                      {"fall_factor": ep.peak, "length": ep.extras.get("length"),
                       "level_before": ep.extras.get("before"), "threshold": p.collapse_factor,
                       "metrics": ["response_length_mean"]},
                      Severity.CRITICAL if ep.peak >= p.collapse_critical else None)

"""Whether the run still has a learning signal: dead groups, a reward pinned at its floor, zero
gradients.

Group methods (GRPO, RLOO, DAPO) learn from the spread of rewards inside a group of responses to
one prompt: a group whose responses all score the same has zero advantage and contributes no
gradient. TRL logs the share of such groups (``frac_reward_zero_std``); a batch reward std of
exactly zero, or a gradient norm of exactly zero, says the same for the whole batch. The null
model for a binary reward with accuracy p and group size G is E[f] = p^G + (1 - p)^G (0.43 for
G = 8, p = 0.9): a high share on an easy or a hopeless task is expected, so the finding says
which one it is (reward at its top, or at its floor) and what to do about it.

A reward that falls to a value every response shares (mean = min = max, or a zero std) below
where it was is pinned at its floor: the policy broke (empty or degenerate answers) and nothing
it samples scores differently any more.

References: SIGNATURES.md #12 (zero-variance groups; DAPO section 3.2, dynamic sampling), #4.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..stats.episodes import Episodes
from ..stats.order import median, percentiles
from .base import Tracker, TrackerResult

__all__ = ["Signal"]


@record
class SignalParams:
    """The signal tracker's thresholds (``[signal]`` in a config)."""

    dead_share: float = param(0.5, "frac_reward_zero_std at or above this: most groups carry no "
                              "learning signal (SIGNATURES #12).", le=1)
    dead_k: int = param(10, "Rows out of dead_m with most groups dead.")
    dead_m: int = param(20, "Persistence window of the dead-group condition (rows).")
    none_share: float = param(0.95, "frac_reward_zero_std at or above this (or a batch reward std "
                              "or gradient norm of exactly 0): no signal at all, critical.", le=1)
    none_k: int = param(5, "Rows out of dead_m without any signal (a quarter: zero gradients on "
                        "a third of the steps are caught).")
    critical_share: float = param(0.75, "Mean dead share over a stretch without signal (the share of "
                                  "tied batches where only a batch tie is logged) that, with the "
                                  "reward not improving, makes signal.dead_groups critical.", le=1)
    floor_rows: int = param(10, "Consecutive rows a reward must sit at its floor.")
    floor_critical_rows: int = param(50, "Rows at the floor that make signal.reward_floor critical.")
    relations: ClassVar[Relations] = (("dead_k", "<=", 1, "dead_m"),
                                      ("none_k", "<=", 1, "dead_m"),
                                      ("floor_rows", "<=", 1, "floor_critical_rows"))


_R = RuleSpec
RULES = (
    _R("signal.dead_groups", Severity.WARNING, "Groups carry no learning signal",
       "Most prompt groups (or the whole batch) have rewards that all tie, so their advantages "
       "are zero and they contribute no gradient; an exact-zero gradient norm says the same. "
       "Critical when no signal is left at all, most of the stretch is dead (critical_share) and "
       "the reward is not improving over it (a warning otherwise). A tie of the whole batch "
       "(reward std 0, gradient norm 0) is one draw per step, so it must hold on most rows of a "
       "window twice as long as a dead share's: one group of 6 per step ties often on an easy "
       "task. Group methods only (DPO and PPO have no "
       "groups). The finding says whether the reward sits at its top (the task is too easy) "
       "or its floor (too hard, or a broken verifier when it holds "
       "from the first step).",
       "Use dynamic sampling (over-sample and drop groups whose rewards all tie, as DAPO does); "
       "raise the group size (num_generations); match the task difficulty to the model (a "
       "curriculum); if the reward is at its floor from the first step, check the verifier and "
       "the answer format it expects.",
       ("dead_share", "dead_k", "dead_m", "none_share", "none_k"), "SIGNATURES #12; DAPO 3.2",
       formerly=("group.no_signal",)),
    _R("signal.reward_floor", Severity.WARNING, "Reward pinned at its floor",
       "The reward fell to a value every response shares (mean = min = max, or a zero std) and "
       "stayed there: the policy produces degenerate answers that all score the same, and the "
       "zero spread leaves nothing to learn from.",
       "Roll back to the checkpoint before the onset and lower the learning rate 50%; look at "
       "the samples at the onset (empty, truncated or repeated answers).",
       ("floor_rows", "floor_critical_rows"), "SIGNATURES #4, #12", formerly=("reward.floor",)),
)


class Signal(Tracker):
    """Dead groups, zero gradients and a reward pinned at its floor."""

    name = "signal"
    area = "reward"
    requires = ("frac_reward_zero_std", "reward_std", "reward_min", "grad_norm", "reward_mean", "reward_max")
    starts_on = ("frac_reward_zero_std", "reward_std", "reward_min", "grad_norm")
    rules = RULES
    Params = SignalParams

    def __init__(self, params: SignalParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: SignalParams = self.params
        self.p = p
        self.dead = Episodes(p.dead_k, p.dead_m, gap=p.dead_m, mode="max")
        self.none = Episodes(p.none_k, p.dead_m, gap=p.dead_m, mode="max")
        # a tie of the whole batch (reward std 0, or gradient norm 0) is one draw per step, not a
        # share of many groups: a step of one group of 6 ties often on an easy task, so it must
        # hold on most rows of the window, as a dead share does
        self.none_batch = Episodes(2 * p.dead_k, 2 * p.dead_m, gap=p.dead_m, mode="max")
        # (step, reward) and (step, dead share or 1/0 for a batch that tied or not) of the rows a
        # stretch without signal may still cover: those of the open stretches and the last rows
        # one could start on (see _keep); a closed stretch is summed up as it closes
        self.reward_parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.share_parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.recent_steps = np.zeros(0, dtype=np.int64)  # steps of the last 2 * dead_m rows
        #: (first step, last step) of each closed stretch without signal -> (improving, mean share)
        self.stretches: dict[tuple[int, int], tuple[bool, float]] = {}
        self.closed = {"none": 0, "none_batch": 0}
        self.floor = Episodes(p.floor_rows, p.floor_rows, gap=p.floor_rows, mode="min")
        self.best = -np.inf
        self.zero_grad_rows = 0

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not (self.active or self.logs_start(batch)):
            return None
        self.active = True
        self.rows += len(batch)
        p = self.p
        rows, steps = batch.rows, batch.steps
        f = batch.col("frac_reward_zero_std")
        mean, std = batch.col("reward_mean"), batch.col("reward_std")
        rmin, rmax, grad = batch.col("reward_min"), batch.col("reward_max"), batch.col("grad_norm")
        for name in ("frac_reward_zero_std", "reward_std", "grad_norm"):
            if batch.has(name):
                self.source_keys.setdefault(name, name)
        scale = np.fmax(np.abs(mean), 1.0)
        with np.errstate(invalid="ignore"):
            tie = (std <= 1e-9 * scale) | ((rmax - rmin) <= 1e-9 * scale)
            # groups exist only in group methods: a zero gradient of DPO or PPO is grad.vanish's
            group = self.meta.family in (None, "group")
            logged = np.isfinite(f)
            # where the dead share is logged it says how many groups carry signal: a gradient norm
            # of 0 beside a low share is a norm the trainer does not report (ZeRO-3, QLoRA)
            zero_grad = (grad == 0.0) & group & ~logged
            self.zero_grad_rows += int(zero_grad.sum())
            share = np.where(logged, f, np.where(group & tie, 1.0, np.nan))
            batch_tie = ~logged & (share >= p.none_share) | zero_grad
            # the best reward level reached before each row
            best = np.fmax.accumulate(np.concatenate([[self.best], mean]))
            self.best = float(best[-1])
            extras = {"reward_mean": mean, "reward_min": rmin, "reward_max": rmax,
                      "grad_norm": grad, "best": best[:-1]}
            value = np.where(zero_grad, 1.0, share)
            self.none.update(rows, steps, logged & (share >= p.none_share), value, extras)
            self.none_batch.update(rows, steps, batch_tie, value, extras)
            fin = np.isfinite(mean)
            if fin.any():
                self.reward_parts.append((steps[fin].astype(np.int64), mean[fin].astype(np.float64)))
            known = np.isfinite(value)
            if known.any():
                self.share_parts.append((steps[known].astype(np.int64), value[known].astype(np.float64)))
            # (a batch tie is judged by none_batch over its longer window)
            self.dead.update(rows, steps, logged & (share >= p.dead_share), share, extras)
            # the floor: every response scores the same, below the best level reached before
            below = mean < best[:-1] - 1e-6 * scale
            self.floor.update(rows, steps, tie & below & np.isfinite(mean), mean,
                              {"before": best[:-1]})
        self._keep(steps)
        return None

    def _keep(self, steps: np.ndarray) -> None:
        """Sum up the stretches without signal that closed, and forget the rows no stretch can
        cover any more: before the open stretches and before the last ``2 * dead_m`` rows (the
        longest window whose onset a later row may confirm). Memory: the open stretches' rows."""
        for name, det in (("none", self.none), ("none_batch", self.none_batch)):
            for ep in det.closed(self.closed[name]):
                self.stretches[(ep.first_step, ep.last_step)] = self._stretch(ep.first_step, ep.last_step)
            self.closed[name] = len(det.closed())
        self.recent_steps = np.concatenate([self.recent_steps, steps.astype(np.int64)])[-2 * self.p.dead_m:]
        starts = [s for s in (self.none.open_first_step, self.none_batch.open_first_step) if s is not None]
        keep_from = min([int(self.recent_steps[0]), *starts])
        self.reward_parts = self._since(self.reward_parts, keep_from)
        self.share_parts = self._since(self.share_parts, keep_from)

    @staticmethod
    def _since(parts: list[tuple[np.ndarray, np.ndarray]], step: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``parts`` without their rows before ``step`` (steps increase): no copy."""
        parts = [(s, v) for s, v in parts if len(s) and s[-1] >= step]
        if parts and parts[0][0][0] < step:
            k = int(np.searchsorted(parts[0][0], step))
            parts[0] = (parts[0][0][k:], parts[0][1][k:])
        return parts

    def _stretch(self, first: int, last: int) -> tuple[bool, float]:
        """Whether the reward improved over a stretch, and its mean dead share (1 when unknown)."""
        steps, reward = self._series(self.reward_parts)
        share_steps, share = self._series(self.share_parts)
        improving = self._improving(steps, reward, first, last)
        stretch = share[(share_steps >= first) & (share_steps <= last)]
        return improving, float(stretch.mean()) if len(stretch) else 1.0

    def conclude(self) -> TrackerResult:
        p = self.p
        none_eps = sorted([*self.none.finish(), *self.none_batch.finish()], key=lambda e: e.first_step)
        covered: list[tuple[int, int]] = []
        for ep in none_eps:
            if any(a <= ep.onset_step <= b for a, b in covered):
                continue  # the frac and the batch view of one stretch
            covered.append((ep.first_step, ep.last_step))
            improving, dead = self.stretches.get((ep.first_step, ep.last_step)) or self._stretch(
                ep.first_step, ep.last_step)
            ep.extras.update(improving=float(improving), stretch_share=dead)
            critical = not improving and dead >= p.critical_share
            self._emit_no_signal(ep, Severity.CRITICAL if critical else Severity.WARNING)
        for ep in self.dead.finish():
            if not any(a <= ep.onset_step <= b for a, b in covered):
                self._emit_no_signal(ep, None)
        for ep in self.floor.finish():
            before = ep.extras.get("before", float("nan"))
            self.emit("signal.reward_floor", ep,
                      f"reward fell to {ep.peak:.4g} (from {before:.4g}) and every response "
                      f"scores the same, {ep.n_rows} rows from step {ep.onset_step}",
                      {"reward": ep.peak, "best_before": before, "rows": ep.n_rows,
                       "threshold_rows": p.floor_rows, "metrics": ["reward_mean"]},
                      Severity.CRITICAL if ep.n_rows >= p.floor_critical_rows else None)
        return self.result({"rows": self.rows, "zero_grad_rows": self.zero_grad_rows})

    @staticmethod
    def _series(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])

    @staticmethod
    def _improving(steps: np.ndarray, reward: np.ndarray, first: int, last: int) -> bool:
        """Whether the reward rose over the stretch: the median of its last third above the median
        of its first third by a quarter of the stretch's spread (rows without signal teach
        nothing, but a run whose reward still climbs is learning from the rest)."""
        r = reward[(steps >= first) & (steps <= last)]
        if len(r) < 6:
            return False
        third = len(r) // 3
        early, late = median(r[:third]), median(r[-third:])
        high, low = percentiles(r, [90, 10])
        spread = high - low
        return late > early + 0.25 * spread and spread > 0

    def _emit_no_signal(self, ep: Any, severity: Severity | None) -> None:
        mean = ep.extras.get("reward_mean", float("nan"))
        rmin, rmax = ep.extras.get("reward_min", float("nan")), ep.extras.get("reward_max", float("nan"))
        best = ep.extras.get("best", float("nan"))
        if ep.extras.get("grad_norm") == 0.0 and ep.peak == 1.0:
            what = "gradient norm exactly 0"
        else:
            what = f"{ep.peak:.0%} of groups with tied rewards"
        tol = 1e-6 * max(abs(mean), 1.0)
        at_max = rmax == rmax and mean >= rmax - tol
        at_min = rmin == rmin and mean <= rmin + tol
        if at_min and best > mean:  # (every response equal: at the batch's max and min alike)
            cause = "every response gets the lowest reward: the policy broke"
        elif at_max and at_min:
            cause = "every response gets the same reward: it no longer separates the responses"
        elif at_max:
            cause = "every response gets the top reward: the task is too easy"
        elif at_min:
            cause = "every response gets the lowest reward from the first steps: a task too hard or a broken verifier"
        else:
            cause = "rewards tie within most groups"
        if ep.extras.get("improving"):
            cause += "; the reward still rises, so the other steps carry the learning"
        self.emit("signal.dead_groups", ep,
                  f"{what} at step {ep.peak_step} ({cause}), from step {ep.onset_step}",
                  {"share": ep.peak, "reward_mean": mean, "reward_min": rmin, "reward_max": rmax,
                   # every response equal (the batch's top and bottom alike) is the ceiling when the
                   # reward stands at its best level so far, else the floor
                   "at_ceiling": bool(at_max and (not at_min or not best > mean)),
                   "at_floor": bool(at_min and (not at_max or best > mean)),
                   "rows": ep.n_rows, "threshold": self.p.dead_share,
                   "metrics": ["frac_reward_zero_std", "reward_std", "grad_norm"]}, severity)

"""Configuration changes: the learning rate, KL coefficient, clip range and batch size as logged.

A setting that jumps in the middle of a run (a learning rate multiplied by 30 by a schedule or a
config error, a KL penalty switched off, a wider clip range, a smaller batch) is a *cause*: the
gradients, KL and reward move after it. This tracker reports each jump with its values before and
after, so the timeline can name it as the first domino and the recommendations can undo it.

A jump is a move by more than ``change_ratio`` between two consecutive logged values (a switch
from or to zero counts as an infinite factor) that is not part of a ramp: a warmup or a decay
moves in steps of similar size, so a move no larger than ``ramp_factor`` times a neighbouring
move in the same direction is a ramp, not a jump; and a learning rate that has risen on every
logged move since its first value is warming up, however few rows log the warm-up.

Severity follows the factor, in the direction that makes updates larger or noisier (the
learning rate and the clip range up; the KL coefficient and the batch size down): ``warning``
from ``warning_factor``, ``critical`` from ``critical_factor`` (a learning rate x30 is
critical). A move the other way is ``info`` unless it spans ``safe_warning_factor`` (a learning
rate cut 100x stalls the policy: ``warning``).

A setting logged with noise or jitter is one finding (``hyperparams.schedule_noisy``), not a change
per row: when most of its logged moves are by more than ``noisy_factor`` and most turn back (the
move reverses the direction of the one before), no schedule moves so, and no change of it can be
told from the next; its changes are counted in the summary, not reported one by one, and a noisy
learning rate's stretches out of the usual range are one episode. A schedule changes on every row
too (a warm-up, a cosine or linear decay), but in one direction per phase; an adaptive KL
controller turns often, by a few percent at most; a constant rate logged in float32 jitters in its
last digit: none of them is noise.

Columns: ``learning_rate``, ``kl_coef``, ``clip_range`` and ``batch_size`` (canonical names: the
schema maps a trainer's ``cliprange``, ``clip_eps``, ``train_batch_size`` ... to them; trainers
rarely log the last two per step, the canonical writer does), and ``epoch``.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ..findings import RuleSpec, Severity
from ..ranges import LORA_FACTOR, SizedRange, geometric_centre, lr_range
from ..spans import step_span
from ..stats.episodes import Episode, Episodes
from .base import Tracker, TrackerResult

__all__ = ["SETTINGS", "Hyperparams", "Setting"]


@record(frozen=True)
class Setting:
    """A followed setting: its parameter (the canonical column it is read from), its rule and
    wording."""

    parameter: str
    rule: str
    label: str
    risky_up: bool  # True where an increase makes updates larger or noisier


SETTINGS = (
    Setting("learning_rate", "hyperparams.lr_change", "learning rate", True),
    Setting("kl_coef", "hyperparams.kl_coef_change", "KL coefficient", False),
    Setting("clip_range", "hyperparams.clip_change", "clip range", True),
    Setting("batch_size", "hyperparams.batch_size_change", "batch size", False),
)


@record
class HyperparamsParams:
    """The hyperparameter tracker's thresholds (``[hyperparams]`` in a config)."""

    change_ratio: float = param(1.5, "A move by more than this factor between consecutive logged "
                                "values is a change (a smooth schedule moves less per step).")
    ramp_factor: float = param(2.0, "A move no larger than this many times a neighbouring move in "
                               "the same direction is part of a ramp (warmup, decay), not a change.")
    warning_factor: float = param(3.0, "A change by this factor in the risky direction (learning "
                                  "rate or clip range up, KL coefficient or batch size down) is a "
                                  "warning.")
    critical_factor: float = param(10.0, "A change by this factor in the risky direction is critical "
                                   "(a learning rate x30 is).")
    safe_warning_factor: float = param(100.0, "A change the other way is info, unless it spans this "
                                       "factor (a learning rate cut 100x stalls the policy).")
    max_changes: int = param(20, "Most findings per setting; further changes are counted in the "
                             "summary (a schedule that jumps every few steps).")
    noisy_factor: float = param(1.1, "A move by more than this factor counts towards noise "
                                "(hyperparams.schedule_noisy): an adaptive KL controller moves its "
                                "coefficient by 2% at most, float rounding far less.", gt=1)
    noisy_share: float = param(0.5, "A setting is noisy when more than this share of its logged "
                               "moves are by more than noisy_factor and more than this share of its "
                               "moves turn back (reverse the direction of the move before).", le=1)
    noisy_moves: int = param(20, "Logged moves of a setting needed before it is judged noisy.")
    lr_high: float = param(1e-3, "A learning rate above this is far outside what RL fine-tuning of a "
                           "7B language model uses (full fine-tuning 1e-6 to 1e-5, LoRA up to about "
                           "1e-4): hyperparams.lr_out_of_range. Scaled by (7B / N)^(1/3) where the run shows the "
                           "model's size N, and by 1/10 where it shows the whole model trains.")
    lr_critical: float = param(1e-2, "A learning rate above this makes hyperparams.lr_out_of_range critical.")
    lr_high_preference: float = param(1e-4, "lr_high for preference optimisation (DPO, IPO, KTO, ORPO): "
                                      "full fine-tuning uses 5e-7 to 5e-6 and LoRA up to about 5e-5 "
                                      "(TRL's DPO docs and the DPO, Zephyr and Tulu recipes).")
    lr_critical_preference: float = param(1e-3, "lr_critical for preference optimisation (200x the "
                                          "top of the full fine-tuning range).")
    lr_low: float = param(5e-8, "A learning rate that never rose above this is too low for anything "
                          "to move (10x below the smallest rates in use at 7B; scaled by "
                          "(7B / N)^(1/3) where the run shows the model's size N).")
    lr_rows: int = param(3, "Rows out of 5 the learning rate must be out of range (no probation; "
                         "judged from the first step).", le=5)
    warmup_moves: int = param(20, "Logged moves of the learning rate needed before a warm-up that "
                              "never ends is judged (hyperparams.lr_warmup_unfinished).")
    warmup_share: float = param(0.9, "Share of the learning rate's logged moves that must rise, with "
                                "none falling, for the warm-up to have lasted the whole run.", le=1)
    relations: ClassVar[Relations] = (("lr_low", "<", 1, "lr_high"),
                                      ("lr_high", "<=", 1, "lr_critical"),
                                      ("lr_low", "<", 1, "lr_high_preference"),
                                      ("lr_high_preference", "<=", 1, "lr_critical_preference"))


_R = RuleSpec
_SEVERITY_DOC = ("warning_factor", "critical_factor", "safe_warning_factor", "change_ratio", "ramp_factor")
RULES = (
    _R("hyperparams.lr_change", Severity.INFO, "Learning rate changed",
       "The logged learning rate jumped between two consecutive steps (not a warmup or decay "
       "ramp). A larger rate makes larger updates, which show first in the gradients and KL; a "
       "rate cut by orders of magnitude stops the policy from moving. Severity follows the factor.",
       "If the change was not intended, restore the learning rate to its value before the change "
       "and resume from a checkpoint before it; check the scheduler and the config.",
       _SEVERITY_DOC, formerly=("lr.change",)),
    _R("hyperparams.lr_out_of_range", Severity.WARNING, "Learning rate far outside the usual range",
       "The logged learning rate is far above (or, from the start, far below) the rates RL and "
       "preference fine-tuning of language models use, by family and model size (the usual ranges "
       "below: preference optimisation runs lower than RL; a smaller model trains faster, as "
       "(7B / N)^(1/3), where the run shows its size; LoRA about 10x higher, allowed unless the "
       "run shows the whole model trains): far above, the first updates break the policy (KL, "
       "trust region and entropy follow); far below, nothing moves. The thresholds are the "
       "parameters for a 7B model, scaled the same way. A prior of LM fine-tuning, judged from the "
       "first step; not applied to toy policies (param_count below 1e6).",
       "Set the learning rate in the usual range for the algorithm and the model's size (the "
       "finding gives it; for a 7B model 1e-6 to 1e-5 in full fine-tuning with PPO, GRPO or RLOO, "
       "5e-7 to 5e-6 with DPO, about 10x higher with LoRA); its geometric centre is the value to "
       "start from.",
       ("lr_high", "lr_critical", "lr_high_preference", "lr_critical_preference", "lr_low", "lr_rows"),
       "SIGNATURES #16, #20; TRL and veRL defaults; TRL DPO docs; the ranges section",
       formerly=("lr.out_of_range",)),
    _R("hyperparams.lr_warmup_unfinished", Severity.WARNING, "Learning-rate warm-up never finished",
       "The logged learning rate rose on nearly every logged step and never fell: the warm-up "
       "lasted the whole run, so the run trained below its configured peak rate throughout "
       "(warmup_steps or warmup_ratio longer than the run). A warning when the log ends at a "
       "whole epoch (the run completed its schedule); information when the log stops mid-epoch "
       "(a run stopped early inside its warm-up is not misconfigured). A rate still rising is "
       "never judged too low (hyperparams.lr_out_of_range waits for the warm-up to end).",
       "Shorten the warm-up to a few percent of the run (warmup_ratio 0.03-0.1, or warmup_steps "
       "below a tenth of the total steps) so the peak learning rate is reached early.",
       ("warmup_moves", "warmup_share"), "the schedulers of transformers and veRL", formerly=("lr.warmup_unfinished",)),
    _R("hyperparams.kl_coef_change", Severity.INFO, "KL coefficient changed",
       "The logged KL coefficient jumped (not an adaptive controller's gradual moves). A smaller "
       "coefficient, or none, lets the policy drift from the reference. Severity follows the factor.",
       "If the change was not intended, restore the KL coefficient to its value before the change; "
       "check the controller and the config.",
       _SEVERITY_DOC, formerly=("kl_coef.change",)),
    _R("hyperparams.clip_change", Severity.INFO, "Clip range changed",
       "The logged PPO clip range jumped. A wider range allows larger policy updates per step. "
       "Severity follows the factor.",
       "If the change was not intended, restore the clip range to its value before the change.",
       _SEVERITY_DOC, formerly=("clip.change",)),
    _R("hyperparams.batch_size_change", Severity.INFO, "Batch size changed",
       "The logged batch size jumped. A smaller batch gives noisier gradients and KL estimates. "
       "Severity follows the factor.",
       "If the change was not intended, restore the batch size to its value before the change.",
       _SEVERITY_DOC, formerly=("batch_size.change",)),
    _R("hyperparams.schedule_noisy", Severity.WARNING, "Setting logged with noise or jitter",
       "A learning rate, KL coefficient, clip range or batch size moved on most logged rows and "
       "turned back on most of them (more than noisy_share of its logged moves are by more than "
       "noisy_factor, and more than noisy_share reverse the move before): no schedule moves so "
       "(a warm-up or a decay changes every row, but in one direction per phase; an adaptive KL "
       "controller by a few percent), so the column is noise, rows of several param groups or "
       "runs interleaved, a metric mapped to the setting, or a controller that moves it by tens of "
       "percent a step (kl_ctl judges a KL controller). Its schedule changes cannot be told apart: "
       "they are counted in the summary, not reported one by one, and a noisy learning rate's "
       "stretches out of the usual range are one episode.",
       "Check what the column holds (analysis.json column_mapping names its source key): log the "
       "value the trainer used, once per step, for one set of parameters and from one run; if "
       "the value really jitters, find what sets it (the scheduler, the controller, the config).",
       ("noisy_factor", "noisy_share", "noisy_moves")),
)


@record
class _Follow:
    """Streaming state of one setting: the last three logged values (the newest move undecided)."""

    key: str | None = None
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0  # changes beyond ``max_changes``: counted, not kept
    first: float | None = None
    last: float | None = None
    logged: int = 0
    #: every logged move so far rose (a warm-up from the first row, however sparsely logged)
    warm: bool = True
    #: the steps of the first and last logged values
    span: tuple[int, int] | None = None
    #: the noise test: logged moves, those by more than ``noisy_factor``, those that turn back
    #: (reverse the direction of the non-zero move before), the direction of the last non-zero move
    moves: int = 0
    large: int = 0
    reversals: int = 0
    direction: float = 0.0


def _factor(before: float, after: float) -> float:
    """``after / before``; a move from or to zero is an infinite factor (or 1 when both are 0)."""
    if before == after:
        return 1.0
    if before == 0.0 or after == 0.0:
        return math.inf if after != 0.0 else 0.0
    return after / before


class Hyperparams(Tracker):
    """Jumps of the learning rate, KL coefficient, clip range and batch size, with their values."""

    name = "hyperparams"
    area = "config"
    requires = (*(s.parameter for s in SETTINGS), "epoch")
    starts_on = tuple(s.parameter for s in SETTINGS)
    rules = RULES
    # scored: a learning rate far out of range damages the run whatever follows (its area is "config")
    Params = HyperparamsParams

    def __init__(self, params: HyperparamsParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        self.p: HyperparamsParams = self.params
        self.follow = {s.parameter: _Follow() for s in SETTINGS}
        self.lr_ep = Episodes(self.p.lr_rows, 5, gap=5, mode="absmax")
        self.lr_max = 0.0
        #: the learning rate's last value and its logged moves (up, down), for the warm-up
        self.lr_prev = math.nan
        self.lr_moves = [0, 0, 0]
        self.lr_first_step: int | None = None
        self.last_epoch = math.nan

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if not len(batch):
            return None
        self.rows += len(batch)
        for s in SETTINGS:
            st = self.follow[s.parameter]
            if st.key is None:
                if not batch.has(s.parameter):
                    continue
                st.key = s.parameter
            v = batch.col(st.key)
            ok = np.isfinite(v)
            if not ok.any():
                continue
            self.active = True
            self.source_keys.setdefault(s.parameter, st.key)
            vals = v[ok].astype(np.float64)
            self._jitter(st, vals)
            steps = batch.steps[ok]
            if st.first is None:
                st.first = float(vals[0])
            st.last = float(vals[-1])
            st.span = (int(steps[0]) if st.span is None else st.span[0], int(steps[-1]))
            st.logged += len(vals)
            kept, dropped = self._decide(st, steps.astype(np.int64), vals, batch.rows[ok], final=False)
            st.changes += kept
            st.dropped += dropped
            if s.parameter == "learning_rate":
                rising = self._moves(vals, steps)
                if self.meta.lm_priors:
                    self._range(batch.rows[ok], steps, vals, rising)
        if batch.has("epoch"):
            epochs = batch.col("epoch")
            epochs = epochs[np.isfinite(epochs)]
            if len(epochs):
                self.last_epoch = float(epochs[-1])
        return None

    def _jitter(self, st: _Follow, vals: np.ndarray) -> None:
        """Count the noise test's moves of a setting (``vals``: its next logged values)."""
        v = vals if st.last is None else np.concatenate([[st.last], vals])
        d = np.diff(v)
        if not len(d):
            return
        before, after = v[:-1], v[1:]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # a move between values of one sign by its factor; to, from or across zero: any move
            size = np.where(before * after > 0, np.abs(np.log(after / before)), np.inf)
        st.moves += len(d)
        st.large += int(((d != 0) & (size > math.log(self.p.noisy_factor))).sum())
        signs = np.sign(d[d != 0])
        if st.direction:
            signs = np.concatenate([[st.direction], signs])
        if len(signs):
            st.reversals += int((signs[1:] != signs[:-1]).sum())
            st.direction = float(signs[-1])

    def _noisy(self, st: _Follow) -> bool:
        """Whether the setting is logged with noise or jitter (hyperparams.schedule_noisy)."""
        share = self.p.noisy_share
        return (st.moves >= self.p.noisy_moves and st.large > share * st.moves
                and st.reversals > share * st.moves)

    def _moves(self, lr: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Count the learning rate's moves (up, down, flat); which rows rose from the one before."""
        prev = np.concatenate([[self.lr_prev], lr[:-1]])
        rising = lr > prev
        moved = np.isfinite(prev)
        self.lr_moves[0] += int(rising.sum())
        self.lr_moves[1] += int((lr < prev).sum())
        self.lr_moves[2] += int((moved & (lr == prev)).sum())
        if self.lr_first_step is None:
            self.lr_first_step = int(steps[0])
        self.lr_prev = float(lr[-1])
        return rising

    def _range(self, rows: np.ndarray, steps: np.ndarray, lr: np.ndarray, rising: np.ndarray) -> None:
        """The learning rate against the priors: far above, or never in range from below."""
        seen = np.fmax.accumulate(np.concatenate([[self.lr_max], lr]))[1:]
        self.lr_max = float(seen[-1])
        lr_high, lr_low = self._lr_high()[0], self._lr_low()
        high = lr > lr_high
        # too low only while it has never been in range (a decay to zero at the end is not), and
        # not while it still rises: a warm-up starts low by design
        low = (seen < lr_low) & (lr > 0) & ~rising
        # log10 of how far out (positive above the range, negative below)
        with np.errstate(divide="ignore", invalid="ignore"):
            how = np.where(high, np.log10(lr / lr_high), np.where(low, np.log10(lr / lr_low), 0.0))
        self.lr_ep.update(rows, steps, high | low, how, {"lr": lr})

    def _decide(self, st: _Follow, steps: np.ndarray, vals: np.ndarray, rows: np.ndarray,
                final: bool) -> tuple[list[dict[str, Any]], int]:
        """``(changes kept, changes dropped)`` among the moves whose next move is known (all of
        them when ``final``); the first ``max_changes`` of a setting are kept, the rest counted.

        Not ``final`` (a batch): the last values are kept for the next batch's decisions. ``final``
        (the end, from ``finish``): the state is only read, so a later batch decides those moves
        again as it would have."""
        v = np.concatenate([np.asarray(st.values, dtype=np.float64), vals])
        stp = np.concatenate([np.asarray(st.steps, dtype=np.int64), steps])
        rw = np.concatenate([np.asarray(st.rows, dtype=np.int64), rows])
        # moves: d[i] = v[i + 1] - v[i]; the move into v[i] is decided once d[i] (the next) is known
        start = max(len(st.values) - 1, 1)  # the first undecided position in v
        stop = len(v) if final else len(v) - 1
        changes: list[dict[str, Any]] = []
        dropped = 0
        if stop > start:
            with np.errstate(divide="ignore", invalid="ignore"):
                before, after = v[start - 1 : stop - 1], v[start:stop]
                ratio = np.where((before > 0) & (after > 0), np.abs(np.log(after / before)), np.inf)
            jump = (ratio > math.log(self.p.change_ratio)) & (before != after)
            at = np.flatnonzero(jump) + start
            at = at[~(self._ramps(v, at) | self._warmup(st, v, at))]
            room = max(self.p.max_changes - len(st.changes) - st.dropped, 0)
            changes = [{"step": int(stp[i]), "previous_step": int(stp[i - 1]), "row": int(rw[i]),
                        "before": float(v[i - 1]), "after": float(v[i])} for i in at[:room]]
            dropped = max(len(at) - room, 0)
        if not final:
            keep = max(len(v) - 3, 0)
            st.warm = bool(st.warm and np.all(np.diff(v[: keep + 1]) > 0))
            st.values, st.steps, st.rows = v[keep:].tolist(), stp[keep:].tolist(), rw[keep:].tolist()
        return changes, dropped

    def _warmup(self, st: _Follow, v: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Whether each move into ``v[i]`` (``i`` in ``at``) continues a rise that every logged
        move of the setting made since its first value: a learning-rate warm-up, whose moves grow
        by large factors where it is logged a few times (3x from its first to its third row)."""
        if st is not self.follow["learning_rate"] or not st.warm:
            return np.zeros(len(at), dtype=bool)
        rising = np.logical_and.accumulate(np.concatenate([[True], np.diff(v) > 0]))
        return rising[at]

    def _ramps(self, v: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Whether each move into ``v[i]`` (``i`` in ``at``, all >= 1) is as large as a
        neighbouring move in its direction (the move into ``v[i - 1]`` or into ``v[i + 1]``)."""
        moves = np.diff(v)  # moves[k]: the move into v[k + 1]
        d = moves[at - 1]
        ramp = np.zeros(len(at), dtype=bool)
        with np.errstate(invalid="ignore", over="ignore"):
            for j, valid in ((at - 2, at >= 2), (at, at + 1 < len(v))):
                n = moves[np.where(valid, j, 0)] if len(moves) else np.zeros(len(at))
                ramp |= valid & (n != 0.0) & (np.sign(n) == np.sign(d)) & (np.abs(d) <= self.p.ramp_factor * np.abs(n))
        return ramp

    def severity(self, s: Setting, factor: float) -> Severity:
        """The documented severity of a change by ``factor`` of setting ``s``."""
        up = factor > 1.0
        size = factor if up else (math.inf if factor == 0.0 else 1.0 / factor)
        size *= 1.0 + 1e-9  # 1e-4 / 1e-6 is 99.99999999999999: a x100 cut is a x100 cut
        if up and not s.risky_up and math.isinf(size):
            return Severity.INFO  # switched on (a KL penalty, say): nothing grows riskier
        if up == s.risky_up:
            if size >= self.p.critical_factor:
                return Severity.CRITICAL
            if size >= self.p.warning_factor:
                return Severity.WARNING
            return Severity.INFO
        return Severity.WARNING if size >= self.p.safe_warning_factor else Severity.INFO

    def conclude(self) -> TrackerResult:
        summary: dict[str, Any] = {}
        for s in SETTINGS:
            st = self.follow[s.parameter]
            if st.key is None or st.first is None:
                continue
            # the last logged move has no next move: decide it now
            none = np.zeros(0, dtype=np.int64)
            last, dropped = self._decide(st, none, none.astype(np.float64), none, final=True)
            kept = st.changes + last
            summary[s.parameter] = {"key": st.key, "first": st.first, "last": st.last,
                                    "logged": st.logged, "changes": len(kept) + st.dropped + dropped}
            if self._noisy(st):  # one finding: changes of noise are no schedule's
                summary[s.parameter]["noisy"] = True
                self._emit_noisy(s, st, summary[s.parameter]["changes"])
                continue
            for c in kept:
                self._emit_change(s, st.key, c)
        lr_high, lr_critical = self._lr_high()
        lr_low, usual = self._lr_low(), self._sized()
        # the same for every episode (a noisy learning rate has thousands)
        above, below = f"above {lr_high:.2g}, far above", f"below {lr_low:.2g}, far below"
        same = {"prior_high": lr_high, "prior_low": lr_low, "critical": lr_critical,
                "suggested": self._usual_lr(), "usual_range": usual.words,
                "model_params": self.meta.model_params or self.meta.param_count}
        episodes, stretches = self.lr_ep.finish(), ""
        if len(episodes) > 1 and self._noisy(self.follow["learning_rate"]):
            # a noisy rate crosses the range's edge at random: its stretches out of range are one
            stretches = (f" (on {sum(e.n_rows for e in episodes):,} rows in {len(episodes):,} stretches"
                         f" to step {episodes[-1].last_step}: the rate is noisy)")
            episodes = [_merged(episodes)]
        for ep in episodes:
            lr = ep.extras.get("lr", float("nan"))
            high = ep.peak > 0
            self.emit("hyperparams.lr_out_of_range", ep,
                      f"learning rate {lr:.3g} at step {ep.peak_step} is {above if high else below}"
                      f" the usual range ({usual.words}), from step {ep.onset_step}{stretches}",
                      {"learning_rate": lr, **same, "metrics": ["learning_rate"]},
                      Severity.CRITICAL if high and lr >= lr_critical else None)
        self._warmup_unfinished()
        return self.result(summary, [])

    def _warmup_unfinished(self) -> None:
        up, down, flat = self.lr_moves
        moves = up + down + flat
        if moves < self.p.warmup_moves or down or up < self.p.warmup_share * moves:
            return
        st = self.follow["learning_rate"]
        completed = self.last_epoch >= 1 and abs(self.last_epoch - round(self.last_epoch)) < 0.01
        first, last_step = self.lr_first_step or 0, st.steps[-1] if st.steps else 0
        ep = Episode(onset_step=first, first_step=first, last_step=last_step, last_row=0, n_rows=moves + 1)
        ended = (f"the run ended at epoch {self.last_epoch:g}" if completed
                 else "the log ends inside the warm-up")
        self.emit("hyperparams.lr_warmup_unfinished", ep,
                  f"learning rate rose on {up} of {moves} logged moves and never fell "
                  f"({st.first:.3g} -> {st.last:.3g} at step {last_step}); {ended}: the warm-up "
                  "never finished, so the run trained below its peak rate throughout",
                  {"rising_moves": up, "moves": moves, "first": st.first, "last": st.last,
                   "last_epoch": self.last_epoch if math.isfinite(self.last_epoch) else None,
                   "completed_schedule": completed, "metrics": ["learning_rate"]},
                  None if completed else Severity.INFO)

    def _sized(self) -> SizedRange:
        """The usual learning rates for the run's family and model size (ranges)."""
        return lr_range(self.meta.family, self.meta.model_params or self.meta.param_count, self.meta.lora)

    def _lr_high(self) -> tuple[float, float]:
        """``(lr_high, lr_critical)`` for the run's family and model size: the parameters hold
        for a 7B model that may train LoRA adapters; they scale with the usual rates (smaller
        models train faster), and by 1/10 where the whole model is known to train."""
        r = self._sized()
        scale = r.factor / (LORA_FACTOR if self.meta.lora is False else 1.0)
        if self.meta.family == "preference":
            return self.p.lr_high_preference * scale, self.p.lr_critical_preference * scale
        return self.p.lr_high * scale, self.p.lr_critical * scale

    def _lr_low(self) -> float:
        return self.p.lr_low * self._sized().factor

    def _usual_lr(self) -> float:
        """The rate to set a rate far out of range to: the geometric centre of the usual full
        fine-tuning range for the run's family and size (a rate far out says nothing about where
        in the range it belongs; LoRA, when known, trains up to 10x higher)."""
        r = self._sized()
        return geometric_centre(r.low, r.usual_high if self.meta.lora else r.high)

    def _emit_noisy(self, s: Setting, st: _Follow, changes: int) -> None:
        """One finding for a setting logged with noise, in place of its changes."""
        first, last = st.span or (0, 0)
        ep = Episode(onset_step=first, first_step=first, last_step=last, last_row=st.rows[-1] if st.rows else 0,
                     n_rows=st.logged)
        self.emit("hyperparams.schedule_noisy", ep,
                  f"the {s.label} is logged with noise or jitter: it moved by more than "
                  f"x{self.p.noisy_factor:g} on {st.large:,} of {st.moves:,} logged moves and turned "
                  f"back on {st.reversals:,}; schedule changes cannot be told apart ({changes:,} "
                  "jumps, not reported one by one)",
                  {"series": s.parameter, "parameter": s.parameter, "moves": st.moves, "large_moves": st.large,
                   "reversals": st.reversals, "changes": changes, "first": st.first, "last": st.last,
                   "noisy_factor": self.p.noisy_factor, "noisy_share": self.p.noisy_share,
                   "metrics": [s.parameter]})

    def _emit_change(self, s: Setting, key: str, c: dict[str, Any]) -> None:
        factor = _factor(c["before"], c["after"])
        sev = self.severity(s, factor)
        ep = Episode(onset_step=c["step"], first_step=c["step"], last_step=c["step"],
                     last_row=c["row"], n_rows=1)
        if math.isinf(factor):
            what = f"{s.label} switched on at {step_span(c['step'], c['step'])}: 0 -> {c['after']:.3g}"
        elif factor == 0.0:
            what = f"{s.label} switched off at {step_span(c['step'], c['step'])}: {c['before']:.3g} -> 0"
        else:
            size = factor if factor >= 1.0 else 1.0 / factor
            times = ("x" if factor >= 1.0 else "/") + (f"{size:,.0f}" if size >= 10 else f"{size:.2g}")
            what = (f"{s.label} {times} at {step_span(c['step'], c['step'])}: "
                    f"{c['before']:.3g} -> {c['after']:.3g}")
        self.emit(s.rule, ep, what,
                  {"parameter": s.parameter, "before": c["before"], "after": c["after"],
                   "factor": factor if math.isfinite(factor) else None,
                   "risky": (factor > 1.0) == s.risky_up,
                   "previous_step": c["previous_step"], "change_ratio": self.p.change_ratio,
                   "warning_factor": self.p.warning_factor, "critical_factor": self.p.critical_factor,
                   "metrics": [s.parameter]},
                  severity=sev)


def _merged(episodes: list[Episode]) -> Episode:
    """Episodes as one, from the first's onset to the last's end; its peak is the largest."""
    top = max(episodes, key=lambda e: abs(e.peak) if e.peak == e.peak else -1.0)
    return Episode(onset_step=episodes[0].onset_step, first_step=episodes[0].first_step,
                   last_step=episodes[-1].last_step, last_row=episodes[-1].last_row,
                   n_rows=sum(e.n_rows for e in episodes), peak=top.peak, peak_step=top.peak_step,
                   value_sum=sum(e.value_sum for e in episodes),
                   value_count=sum(e.value_count for e in episodes), extras=dict(top.extras))

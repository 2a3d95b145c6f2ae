"""Recommendations: what to change, in the trainer's own keys, derived from the causal chain.

The findings say what went wrong; the timeline says which went wrong first (the *first domino*)
and what followed from it. Recommendations follow the same order:

1. the first domino and the chain that follows it (the root's remedy first: a learning rate
   multiplied by 30 is restored before anything else is tuned),
2. the other warning and critical findings, most severe first,
3. the issues of the window table (:mod:`forensics.analysis.trackers.health_check`), last: a window
   issue that no finding supports is never more urgent than ``short_term``.

Each source proposes actions (:data:`ACTIONS`: a rule's remedy as parameter changes; a test checks
every action against the words of its rule's remedy). The first source to touch a parameter sets
its direction and value; a later source moving it the same way adds its reason (``because``); one
moving it the other way is held back (``held_back``, with its reason). So no parameter is raised
and lowered in one report, and no recommendation contradicts the remedy of the finding it cites.

Values come from the log at the time: the value a changed setting had before the change
(``restore``), or the value logged at the relevant step (the finding's onset) times the factor.
Where the learning rate follows a smooth schedule, the factor applies to the schedule's peak (the
highest rate logged up to that step), which is what a config sets; where a setting jumped again
after the finding, to its last logged value (the value in force). Where the log does not show
the value, the run's own config (run.json) may; otherwise the change is given in words. The
config patch holds numbers only (a list of them for TRL's ``reward_weights``), under the keys of
the trainer that wrote the log (:mod:`forensics.analysis.trainer_keys`); a parameter the trainer
has no key for, or whose current value is unknown, is listed in words (``not_in_config``).

The same pass annotates the window table: a window lists the warning and critical findings whose
episodes overlap it, and its status is at least ``warn`` (``alert`` for a critical), so windows
and findings agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import algorithm_family
from ...records import record
from ..ranges import KL_RANGES
from ..spans import step_span
from ..stats.order import median, percentile
from ..trackers.health_check import (
    ISSUES,
    PRIORITIES,
    RULE_TABLE,
    HealthCheckParams,
    monitoring,
    window_ranges,
    window_text,
)
from ..trainer_keys import PARAMETERS, Trainer, set_key, trainer_for

if TYPE_CHECKING:
    from ..result import Analysis

__all__ = ["ACTIONS", "TEXT_ONLY", "Action", "advice_sections", "applicable_actions", "windows_with_findings"]


@record(frozen=True)
class Action:
    """One parameter change a rule's remedy asks for.

    ``direction``: ``lower`` / ``raise`` by ``factor``, ``set`` to ``value``, ``restore`` (the value
    before a logged change), ``restore_first`` (the run's first logged value) or ``suggested``
    (the value the finding's evidence suggests). ``when``: ``repeats`` (only when the rule fired
    more than once), ``no_kl_surge`` (only when no KL spike or runaway was found),
    ``reference_beta`` (only for preference losses whose beta weighs the distance to a reference
    model: not ORPO, SimPO, CPO) or
    ``unexplained`` (only when no other finding is linked to it as its cause: raising max_length
    for responses that grew because the policy broke treats the symptom). ``phrase``: the words
    of the remedy it stands for (a regex). ``applies_to``: the algorithm families or algorithms
    the change means something for (empty: all); a KL coefficient is not a preference loss's
    beta, and a preference loss's beta is not an RL run's KL weight.
    """

    parameter: str
    direction: str
    factor: float | None = None
    value: float | None = None
    when: str = ""
    phrase: str = ""
    applies_to: tuple[str, ...] = ()

    def fits(self, algorithm: str | None, family: str | None) -> bool:
        """Whether the change applies to a run of this algorithm (unknown: it may)."""
        if not self.applies_to or (algorithm is None and family is None):
            return True
        return algorithm in self.applies_to or family in self.applies_to


_LOWER_LR = Action("learning_rate", "lower", 0.8,
                   phrase=r"lower the learning rate 20%|learning rate 20-50% lower")
_HALVE_LR = Action("learning_rate", "lower", 0.5, phrase=r"lower the learning rate 50%")
#: a preference loss's beta (TRL maps it to the config's beta), where it weighs a KL-like term to
#: the reference: not in ORPO, SimPO or CPO, which have no reference (their beta scales the
#: preference term itself, and raising it pushes the pairs further apart)
_RAISE_BETA = Action("kl_coef", "raise", 2.0, when="reference_beta", phrase=r"raise beta \(x2\)",
                     applies_to=("preference",))
_RL = ("critic", "group")
_NO_REFERENCE = ("orpo", "simpo", "cpo")
#: Rule -> the parameter changes its remedy asks for (a remedy's other advice stays in words).
ACTIONS: dict[str, tuple[Action, ...]] = {
    "hyperparams.lr_change": (Action("learning_rate", "restore", phrase=r"restore the learning rate"),),
    "hyperparams.kl_coef_change": (Action("kl_coef", "restore", phrase=r"restore the KL coefficient"),),
    "hyperparams.clip_change": (Action("clip_range", "restore", phrase=r"restore the clip range"),),
    "hyperparams.batch_size_change": (Action("batch_size", "restore", phrase=r"restore the batch size"),),
    "kl.spike": (_LOWER_LR, Action("kl_coef", "raise", 1.2, when="repeats", applies_to=_RL,
                                   phrase=r"if spikes repeat, raise the KL coefficient 20%")),
    "kl.runaway": (Action("kl_coef", "raise", 1.2, applies_to=_RL, phrase=r"raise the KL coefficient 20%"),
                   _LOWER_LR),
    "kl_ctl.oscillation": (Action("kl_horizon", "raise", 2.0,
                                  phrase=r"lengthen the controller horizon \(e\.g\. double it\)"),),
    "kl.update_stalled": (Action("learning_rate", "restore_first",
                              phrase=r"raise it back to the value the run started with"),),
    "grad.nonfinite": (_LOWER_LR,),
    "grad.explode": (_LOWER_LR,),
    "grad.spike": (Action("learning_rate", "lower", 0.8, when="repeats",
                          phrase=r"lower the learning rate 20% or beta2 to 0.95 if spikes repeat"),
                   Action("max_grad_norm", "lower", 0.8, phrase=r"tighten gradient clipping 20%")),
    "grad.clip_saturation": (_LOWER_LR,),
    "length.growth": (_LOWER_LR,),
    "length.truncation": (Action("max_length", "raise", 1.5, when="unexplained", applies_to=_RL,
                                 phrase=r"raise max_length .*50%"),),
    "reward.decline": (_LOWER_LR, Action("kl_coef", "lower", 0.9, when="no_kl_surge", applies_to=_RL,
                                         phrase=r"lower the KL coefficient 10% if the penalty dominates")),
    "loss.nonfinite": (_LOWER_LR,),
    "loss.spike": (Action("learning_rate", "lower", 0.8, when="repeats",
                          phrase=r"lower the learning rate 20% and tighten gradient clipping 20% if "
                                 r"spikes repeat"),
                   Action("max_grad_norm", "lower", 0.8, when="repeats",
                          phrase=r"tighten gradient clipping 20% if spikes repeat")),
    "loss.oscillation": (_LOWER_LR, Action("max_grad_norm", "lower", 0.8,
                                           phrase=r"tighten gradient clipping 20%")),
    "loss.divergence": (_LOWER_LR,),
    "entropy.collapse": (Action("temperature", "raise", 1.1, phrase=r"raise the temperature 10%",
                                applies_to=_RL),
                         Action("clip_range_high", "set", value=0.28, applies_to=_RL,
                                phrase=r"clip-higher \(eps_high 0\.28\)")),
    "entropy.blowup": (_LOWER_LR,),
    "generation.repetition": (Action("temperature", "lower", 0.9, phrase=r"lower the temperature 10%",
                                     applies_to=_RL),),
    "kl.excessive": (Action("learning_rate", "lower", 0.1, phrase=r"lower the learning rate 10x"),),
    "hyperparams.lr_out_of_range": (Action("learning_rate", "suggested",
                               phrase=r"Set the learning rate in the usual range"),),
    "trust_region.exceeded": (_HALVE_LR,),
    "signal.reward_floor": (_HALVE_LR,),
    "length.collapse": (_HALVE_LR,),
    "pref.overfit": (_RAISE_BETA, _LOWER_LR),
    "pref.margin_blowup": (_RAISE_BETA, _LOWER_LR),
    "pref.likelihood_displacement": (_RAISE_BETA, _LOWER_LR),
}
#: Parameter changes a remedy mentions that stay in words, and why.
TEXT_ONLY: dict[tuple[str, str], str] = {
    ("grad.vanish", "learning_rate"): "a check of the schedule, not a change to make blindly",
    ("grad.clip_saturation", "max_grad_norm"): "raise it only if clipping is deliberately tight",
    ("grad.imbalance", "learning_rate"): "a separate optimizer for the value head, not a rate",
    ("reward.stagnation", "reward_weight"): "a converged run needs no change: stop early instead",
    ("reward.stagnation", "temperature"): "a converged run needs no change: stop early instead",
    ("loss.oscillation", "batch_size"): "the remedy gives no size",
    ("entropy.blowup", "temperature"): "an alternative to the learning rate, which is changed",
    ("entropy.low", "temperature"): "info: only if the reward plateaus",
    ("generation.format_regression", "reward_weight"): "trainers weigh rewards differently",
    ("kl.volatile", "learning_rate"): "info: context, not a problem",
    ("kl_ctl.oscillation", "learning_rate"): "an alternative to the horizon, which is changed",
    ("kl.spike", "clip_range"): "an alternative to the learning rate, which is changed",
    ("pref.not_learning", "learning_rate"): "the right range depends on full fine-tuning or LoRA",
}

#: Window issue -> the actions of its rule-table row (online use has the same table).
_WINDOW_ACTIONS = {r.issue: tuple(Action(a.parameter, a.direction, a.factor) for a in r.adjustments)
                   for r in RULE_TABLE}
_WINDOW_RULES = {r.issue: r for r in RULE_TABLE}
_KL_SURGE = ("kl.spike", "kl.runaway")
#: Rules that judge the machine, not the training (README: not scored, never "do now").
_MACHINE = ("throughput.",)
_SEV = {"info": 0, "warning": 1, "critical": 2}
#: Parameters that count (tokens, samples): a change gives a whole number.
_COUNTS = ("max_length", "batch_size")
#: Source columns a parameter is logged under (the hyperparams tracker's summary names the one used).
_LOGGED = {"learning_rate": "learning_rate", "kl_coef": "kl_coef"}


# -- reading the log ------------------------------------------------------------------------------
def _read_values(analysis: Analysis, wanted: dict[str, set[int]]) -> dict[str, dict[str, Any]]:
    """For each column: the last finite value at or before each wanted step (``at``), the highest
    value up to it (``peak``), the first and last finite values. One pass over the per-step
    store, a part at a time."""
    out: dict[str, dict[str, Any]] = {}
    names = [c for c in wanted if c in getattr(analysis.metrics, "names", {})]
    if not names:
        return out
    steps = {c: np.array(sorted(wanted[c]), dtype=np.int64) for c in names}
    for c in names:
        out[c] = {"at": {}, "peak": {}, "first": None, "last": None}
    for part in analysis.metrics.parts(names):
        ps = part["step"]
        for c in names:
            v = np.asarray(part[c], dtype=np.float64)
            ok = np.isfinite(v)
            if not ok.any():
                continue
            s, v = ps[ok], v[ok]
            rec = out[c]
            if rec["first"] is None:
                rec["first"] = float(v[0])
            rec["last"] = float(v[-1])
            idx = np.searchsorted(s, steps[c], side="right") - 1
            peaks = np.maximum.accumulate(v)
            for step, i in zip(steps[c].tolist(), idx.tolist()):
                if i >= 0:
                    rec["at"][step] = float(v[i])
                    rec["peak"][step] = max(rec["peak"].get(step, -math.inf), float(peaks[i]))
    return out


# -- what the log shows of the configuration ---------------------------------------------------------
def _series(analysis: Analysis, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The whole series of a few columns (and ``step``); {} when one is missing."""
    if not names or not all(n in getattr(analysis.metrics, "names", {}) for n in names):
        return {}
    # filled part by part into arrays allocated once: a million-step run's columns are held once
    # (float64, as the rules read them), not as parts and again as their concatenation
    out = {n: np.empty(analysis.metrics.n) for n in ("step", *names)}
    at = 0
    for part in analysis.metrics.parts(list(names)):
        k = len(part["step"])
        for n, column in out.items():
            column[at : at + k] = part[n]
        at += k
    return {n: column[:at] for n, column in out.items()}


def kl_coef_from_log(analysis: Analysis) -> tuple[float, str] | None:
    """The KL coefficient the log shows, and how it was read. TRL's PPO logs the penalty it adds
    to the reward, ``objective/non_score_reward`` = -kl_coef x ``objective/kl`` (per sequence); a
    GRPO log whose loss is beta x kl on every row (the policy term averages to zero with one
    update per batch) shows beta as loss / kl. The median ratio over rows with a KL away from 0."""
    cols = _series(analysis, ["objective/non_score_reward", "kl_seq"])
    if cols:
        ok = np.isfinite(cols["objective/non_score_reward"]) & np.isfinite(cols["kl_seq"]) & (
            np.abs(cols["kl_seq"]) > 1e-3)
        if ok.sum() >= 5:
            ratio = -cols["objective/non_score_reward"][ok] / cols["kl_seq"][ok]
            return _round(median(ratio)), "read from the log: -objective/non_score_reward / objective/kl"
    cols = _series(analysis, ["loss", "kl"])
    if cols:
        ok = np.isfinite(cols["loss"]) & np.isfinite(cols["kl"]) & (cols["kl"] > 1e-4)
        if ok.sum() >= 10:
            ratio = cols["loss"][ok] / cols["kl"][ok]
            mid = median(ratio)
            if mid > 0 and percentile(np.abs(ratio / mid - 1.0), 90) < 0.02:
                return float(f"{mid:.2g}"), ("read from the log: loss / kl, the same on every row "
                                             "(the loss is beta x kl)")
    return None


def _logged_cap(analysis: Analysis, findings: Sequence[Mapping[str, Any]]) -> tuple[float, str] | None:
    """The response length cap, where completions were cut: the longest completion logged."""
    if not any(f["rule"] == "length.truncation" for f in findings):
        return None
    cols = _series(analysis, ["response_length_max"])
    v = cols.get("response_length_max", np.zeros(0))
    v = v[np.isfinite(v)]
    if not len(v):
        return None
    return float(np.max(v)), "the longest completion logged (the cap the truncated ones hit)"


def _config_values(analysis: Analysis, findings: Sequence[Mapping[str, Any]], trainer: Trainer | None,
                   kl_read: tuple[float, str] | None) -> dict[str, tuple[float, str]]:
    """Values of settings the log shows indirectly, else the trainer's documented defaults."""
    out: dict[str, tuple[float, str]] = {}
    if trainer is not None:
        for parameter, value in trainer.defaults.items():
            out[parameter] = (float(value), f"assumed: {trainer.config}'s default (the log does not record it)")
    if kl_read is not None:  # the value the log shows wins over the trainer's default
        out["kl_coef"] = kl_read
    cap = _logged_cap(analysis, findings)
    if cap is not None:
        out["max_length"] = cap
    return out


@record
class _LengthReward:
    """A reward that pays for length: the reward series that tracks the mean length best."""

    component: str
    r: float
    first: float
    last: float


#: Length growth (last quarter's mean over the first's) and Pearson correlation with a reward
#: series over the run at which the reward is taken to pay for length. The TRL corpus: 0.996 and
#: 1.9x (a reward of 0.15 per word), 0.967 and 2.5x (a share-of-positive-words reward with no KL
#: penalty); the healthy runs: |r| <= 0.3 and 1.0x; a learning rate 200x too high: 0.74, 0.97x.
LENGTH_REWARD_R, LENGTH_REWARD_GROWTH = 0.9, 1.5


def length_reward(analysis: Analysis, findings: Sequence[Mapping[str, Any]]) -> _LengthReward | None:
    """Whether the reward pays for length: a ``length.reward_correlation`` finding, or a mean
    length that grew by half or more in step with the reward (or one of its components)."""
    for f in findings:
        if f["rule"] == "length.reward_correlation":
            ev = f.get("evidence") or {}
            return _LengthReward("reward", float(ev.get("rho", ev.get("rho_threshold", 1.0)) or 1.0),
                                 float("nan"), float("nan"))
    names = [n for n in getattr(analysis.metrics, "names", {}) if n == "reward_mean" or n.startswith("reward/")]
    cols = _series(analysis, ["response_length_mean", *names]) if names else {}
    if not cols:
        return None
    length = cols["response_length_mean"]
    q = max(len(length) // 4, 1)
    first, last = float(np.nanmean(length[:q])), float(np.nanmean(length[-q:]))
    if not (first > 0 and last >= LENGTH_REWARD_GROWTH * first):
        return None
    best: _LengthReward | None = None
    for n in names:
        ok = np.isfinite(length) & np.isfinite(cols[n])
        if ok.sum() < 10 or np.std(cols[n][ok]) == 0:
            continue
        r = float(np.corrcoef(length[ok], cols[n][ok])[0, 1])
        if r >= LENGTH_REWARD_R and (best is None or r > best.r or (r == best.r and n != "reward_mean")):
            best = _LengthReward(n, r, first, last)
    return best


# -- candidates -----------------------------------------------------------------------------------
@record
class _Candidate:
    """A recommended action before ranking: its priority, the rule or window issue it comes from,
    and the step its values are read at."""

    action: Action
    priority: str
    source: str  # a rule id or a window issue
    step: int  # the relevant step: where the value is read
    reason: str
    finding: dict[str, Any] | None = None
    chain_root: bool = False


def _descendants(root: str | None, links: list[dict[str, Any]]) -> set[str]:
    """The events reachable from ``root`` along the cause -> effect links."""
    out: set[str] = set()
    todo = [root] if root else []
    while todo:
        cur = todo.pop()
        for lk in links:
            if lk["cause"] == cur and lk["effect"] not in out:
                out.add(lk["effect"])
                todo.append(lk["effect"])
    return out


#: A spike rule and the rule of a sustained rise of the same signal: a spike that such a rise
#: follows is not isolated (it repeats as the rise), so its "if spikes repeat" changes apply.
_SUSTAINED = {"grad.spike": "grad.explode", "loss.spike": "loss.divergence", "kl.spike": "kl.runaway"}


def _repeats(rule: str, finding: Mapping[str, Any], counts: Mapping[str, int]) -> bool:
    ev = finding.get("evidence") or {}
    episodes = ev.get("episodes")
    return counts.get(rule, 0) > 1 or (isinstance(episodes, list) and len(episodes) > 1) or \
        (isinstance(ev.get("count"), (int, float)) and ev["count"] > 1) or counts.get(_SUSTAINED.get(rule, ""), 0) > 0


def applicable_actions(finding: Mapping[str, Any], findings: Sequence[Mapping[str, Any]],
                       root: bool = False, explained: bool = False,
                       algorithm: str | None = None, family: str | None = None) -> list[Action]:
    """The actions of a finding's remedy that apply in this run (its conditions hold, and the
    change means something for the run's algorithm); ``explained``: the timeline links another
    finding to it as its cause."""
    family = family or (algorithm_family(algorithm) if algorithm else None)
    counts: dict[str, int] = {}
    for f in findings:
        counts[f["rule"]] = counts.get(f["rule"], 0) + 1
    surge = any(f["rule"] in _KL_SURGE for f in findings)
    out = []
    for act in ACTIONS.get(finding["rule"], ()):
        if act.direction == "restore" and not root and not (finding.get("evidence") or {}).get("risky"):
            continue  # a change back toward safety (a cut after a jump) is not undone
        if act.when == "repeats" and not _repeats(finding["rule"], finding, counts):
            continue
        if act.when == "no_kl_surge" and surge:
            continue
        if act.when == "unexplained" and explained:
            continue
        if act.when == "reference_beta" and algorithm in _NO_REFERENCE:
            continue
        if not act.fits(algorithm, family):
            continue
        out.append(act)
    return out


#: Words in a remedy's clause that tie it to a kind of algorithm: group normalisation means
#: nothing to a run with a critic (GAE) and nothing to preference optimisation, R-DPO nothing to
#: an RL run.
_CLAUSE_FAMILIES = (
    (re.compile(r"scale_rewards|Dr\. GRPO|dr_grpo|\bgroups?\b|dynamic sampling|num_generations"), ("group",)),
    (re.compile(r"\bfor DPO\b|R-DPO|LD-DPO"), ("preference",)),
    (re.compile(r"\bcritic\b|value head|vf_coef|\bGAE\b"), ("critic",)),
    # preference optimisation has no advantages: a clause about them is for RL
    (re.compile(r"\badvantages?\b"), ("critic", "group")),
)


def fit_remedy(remedy: str, family: str | None) -> str:
    """``remedy`` without the clauses (``;``-separated) meant for another kind of algorithm; the
    remedy unchanged when the family is unknown or every clause is foreign.

    >>> fit_remedy("Use batch-level reward scaling (scale_rewards='batch') or none (Dr. GRPO); "
    ...            "add an epsilon floor to the std; clip advantages.", "critic")
    'Add an epsilon floor to the std; clip advantages.'
    """
    if family is None:
        return remedy
    clauses = [c.strip() for c in remedy.rstrip(".").split(";")]
    kept = [c for c in clauses if all(family in fams for rx, fams in _CLAUSE_FAMILIES if rx.search(c))]
    if not kept or len(kept) == len(clauses):
        return remedy
    text = "; ".join(kept)
    return text[0].upper() + text[1:] + "."


#: What a policy drifting from its reference shows when nothing holds it there.
_DRIFT = ("entropy.blowup", "length.growth", "length.coupled_growth", "length.reward_correlation",
          "kl.runaway", "kl.excessive", "kl.drift")
@record
class _Facts:
    """What the recommendations reason from besides the findings: the trainer, the algorithm,
    where the KL penalty sits (``none`` too when the log shows a coefficient of 0), the KL
    coefficient the log shows, and whether the reward pays for length."""

    trainer: Trainer | None = None
    algorithm: str | None = None
    family: str | None = None
    kl_penalty: str | None = None
    kl_read: tuple[float, str] | None = None
    length_reward: _LengthReward | None = None


def _kl_placement(trainer: Trainer | None) -> str:
    """Where the penalty the trainer's KL key sets sits: the reward for TRL PPO's kl_coef and
    veRL's kl_ctrl.kl_coef, the loss otherwise (GRPO's beta, veRL's kl_loss_coef)."""
    key = trainer.key("kl_coef") if trainer is not None else None
    return "reward" if key in ("kl_coef", "algorithm.kl_ctrl.kl_coef") else "loss"


def _kl_on(trainer: Trainer | None, hackable: bool) -> float:
    """The coefficient to turn a KL penalty on with: the typical value of the usual range for
    where it sits (TRL PPOConfig's 0.05 in the reward, 0.04 in the loss); with a reward the
    policy can hack (one that pays for length) the top of the range, since the reward pulls for
    as long as the run trains and the penalty alone holds the policy back."""
    r = KL_RANGES[_kl_placement(trainer)]
    return r.high if hackable else r.typical


def _kl_off(findings: list[dict[str, Any]], facts: _Facts) -> _Candidate | None:
    """With no KL penalty (beta = 0, or a coefficient of 0 in the log) and a policy drifting
    (entropy or length running away, a reward that pays for length), turn the penalty on: the
    first thing to try, before tuning."""
    if facts.kl_penalty != "none":
        return None
    drift = sorted((f for f in findings if f["rule"] in _DRIFT and f["severity"] != "info"),
                   key=lambda f: f["onset_step"])
    if not drift:
        return None
    f = drift[0]
    read = facts.kl_read
    what = "beta = 0" if read is None else f"KL coefficient {read[0]:g}, {read[1]}"
    hackable = facts.length_reward is not None
    why = "; the reward pays for length: the top of the usual range" if hackable else ""
    return _Candidate(Action("kl_coef", "set", value=_kl_on(facts.trainer, hackable)), "immediate", "kl_penalty_off",
                      int(f["onset_step"]), f"no KL penalty ({what}): nothing holds the policy near "
                      f"the reference while it drifts ({f['rule']} from step {f['onset_step']}){why}", None)


#: Rules whose remedy asks to check that the KL penalty is on.
_KL_LEVEL = ("kl.excessive", "kl.runaway")
#: The KL penalty (in the reward) this many times the score dominates the objective.
KL_DOMINATES = 5.0


def _kl_from_value(findings: list[dict[str, Any]], facts: _Facts, analysis: Analysis | None) -> list[_Candidate]:
    """Advice from the KL coefficient the log shows (item: coefficients read from the log are
    used): a KL far out with a coefficient below the typical value of the usual range for where
    the penalty sits (:data:`~forensics.analysis.ranges.KL_RANGES`) raises it to that; a penalty
    in the reward many times the score lowers the coefficient until they are level; a preference
    loss's beta below its range while the pairs do not separate goes back to the typical value.
    Zero with drift is :func:`_kl_off`'s."""
    if facts.kl_read is None or facts.kl_read[0] <= 0:
        return []
    coef, how = facts.kl_read
    if facts.family == "preference":
        return _beta_too_small(findings, coef, how)
    out = []
    far = [f for f in findings if f["rule"] in _KL_LEVEL and f["severity"] != "info"]
    on = KL_RANGES[_kl_placement(facts.trainer)].typical
    if far and coef < on:
        f = far[0]
        out.append(_Candidate(Action("kl_coef", "set", value=on), "short_term", "kl_coef_weak",
                              int(f["onset_step"]), f"the KL penalty is on but weak: coefficient {coef:g} ({how}), "
                              f"{on / coef:.2g}x below {on:g}, while {f['rule']} from step {f['onset_step']}"))
    share = _penalty_share(analysis) if analysis is not None else None
    serious = [f for f in findings if f["severity"] != "info"]
    if share is not None and share > KL_DOMINATES and serious:
        new = float(f"{coef / share:.2g}")
        out.append(_Candidate(Action("kl_coef", "set", value=new), "immediate", "kl_penalty_dominates",
                              int(serious[0]["onset_step"]), f"the KL penalty is {share:.0f}x the score over the "
                              f"second half of the run (coefficient {coef:g}, {how}): it, not the reward, "
                              f"drives the policy; {new:g} levels them"))
    return out


#: Rules that say a preference run's pairs are not being separated.
_NOT_SEPARATING = ("pref.not_learning",)


def _beta_too_small(findings: list[dict[str, Any]], beta: float, how: str) -> list[_Candidate]:
    """A preference loss whose beta (read from the log) is below the usual range while the
    pairs are not separated: the policy moves, but beta times that move is too small for the
    loss to feel it. Beta back to the range's typical value."""
    r = KL_RANGES["preference"]
    stuck = [f for f in findings if f["rule"] in _NOT_SEPARATING and f["severity"] != "info"]
    if not stuck or beta >= r.low:
        return []
    f = stuck[0]
    return [_Candidate(Action("kl_coef", "set", value=r.typical), "immediate", "beta_too_small",
                       int(f["onset_step"]), f"beta {beta:g} ({how}) is {r.low / beta:.2g}x below the usual "
                       f"range ({r.low:g} to {r.high:g}): the log-probabilities move, the implicit rewards "
                       f"(beta times that move) hardly do ({f['rule']} from step {f['onset_step']})", f)]


def beta_from_log(analysis: Analysis) -> tuple[float, str] | None:
    """A preference loss's beta as the log shows it: the implicit rewards are beta times the
    policy's log-probability change from the reference, so the change of the reward margin
    (chosen minus rejected) over the run, against the change of the log-probability margin, is
    beta (first tenth of the run to last: the margin is what the loss moves). None when the
    log-probability margin moved less than 0.1 nats (nothing to read it from)."""
    names = ["pref_reward_chosen", "pref_reward_rejected", "logp_chosen", "logp_rejected"]
    cols = _series(analysis, names)
    if not cols or len(cols["step"]) < 20:
        return None
    k = max(len(cols["step"]) // 10, 5)
    delta = {n: float(np.nanmean(cols[n][-k:]) - np.nanmean(cols[n][:k])) for n in names}
    dr = delta["pref_reward_chosen"] - delta["pref_reward_rejected"]
    dl = delta["logp_chosen"] - delta["logp_rejected"]
    if not (math.isfinite(dr) and math.isfinite(dl)) or abs(dl) < 0.1:
        return None
    beta = dr / dl
    if not beta > 0:
        return None
    return float(f"{beta:.1g}"), ("read from the log: the change of the reward margin over the change of the "
                                  "log-probability margin (rewards = beta x log-ratio)")


def _reward_weights_fix(findings: list[dict[str, Any]], facts: _Facts,
                        root: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A total reward that is minus its only reward function's score (``reward.sign_flip``):
    the weight the trainer gives it is -1 (the log shows total = -component), so the fix is a
    weight of +1, in the trainer's key (TRL's ``reward_weights``, a list: one function, one
    weight; the rule fires only where the reward has one function)."""
    f = next((f for f in findings if f["rule"] == "reward.sign_flip" and f["severity"] != "info"), None)
    key = facts.trainer.key("reward_weights") if facts.trainer else None
    if f is None or key is None:
        return None
    comp = (f.get("evidence") or {}).get("component", "the reward function")
    return {"parameter": "reward_weights", "direction": "raise", "change": "set", "factor": None,
            "current": [-1.0], "current_from": "read from the log: the total reward is minus " + comp,
            "new": [1.0], "priority": "immediate", "source": f["rule"], "step": int(f["onset_step"]),
            "reason": f.get("message", ""), "first_domino": root is not None and root["rule"] == f["rule"],
            "because": [], "held_back": [], "key": key, "command_line": f"--{key} 1.0",
            "text": f"reward weights: [-1] -> [1] (set), the weight of {comp}, the only reward function"}


def _penalty_share(analysis: Analysis) -> float | None:
    """|KL penalty| / |score|, medians over the second half of the run (TRL PPO's columns)."""
    cols = _series(analysis, ["objective/non_score_reward", "reward_mean"])
    if not cols:
        return None
    half = len(cols["step"]) // 2
    pen = np.abs(cols["objective/non_score_reward"][half:])
    score = np.abs(cols["reward_mean"][half:])
    ok = np.isfinite(pen) & np.isfinite(score)
    if ok.sum() < 5 or median(score[ok]) <= 1e-6:
        return None
    return float(median(pen[ok]) / median(score[ok]))


def _candidates(findings: list[dict[str, Any]], timeline: Mapping[str, Any],
                windows: list[dict[str, Any]], facts: _Facts, analysis: Analysis | None = None) -> list[_Candidate]:
    events = {e["id"]: e for e in timeline.get("events") or []}
    dom = timeline.get("first_domino") or {}
    chain = [events[i] for i in dom.get("chain", []) if i in events]
    effects = _descendants(dom.get("id"), timeline.get("links") or []) if dom.get("linked") else set()
    effect_findings = {events[i].get("finding_index") for i in effects if i in events}
    explained = {events[lk["effect"]].get("finding_index") for lk in timeline.get("links") or []
                 if lk.get("effect") in events}
    ordered: list[tuple[int, str, bool]] = []  # (finding index, priority, is the first domino)
    seen: set[int] = set()
    for pos, e in enumerate(chain):
        idx = e.get("finding_index")
        if idx is None or idx >= len(findings):
            continue
        seen.add(idx)
        ordered.append((idx, "immediate" if pos == 0 else "short_term", pos == 0))
    rest = sorted(((i, f) for i, f in enumerate(findings) if i not in seen and f["severity"] != "info"),
                  key=lambda t: (-_SEV.get(t[1]["severity"], 0), t[1]["onset_step"], t[1]["rule"]))
    for i, f in rest:  # a critical finding (or alarm) the first domino does not explain is urgent too
        urgent = _alarm(f) == "critical" and i not in effect_findings
        ordered.append((i, "immediate" if urgent else "short_term", False))
    out: list[_Candidate] = [c for c in (_kl_off(findings, facts),) if c is not None]
    root = findings[dom["finding_index"]] if dom.get("finding_index") is not None and \
        dom["finding_index"] < len(findings) else None
    for c in _kl_from_value(findings, facts, analysis):
        c.chain_root = c.finding is not None and c.finding is root  # the fix of the first domino
        out += [c] if c.priority == "immediate" else []
    for i, priority, root in ordered:
        f = findings[i]
        for act in applicable_actions(f, findings, root, i in explained, facts.algorithm, facts.family):
            out.append(_Candidate(act, priority, f["rule"], int(f["onset_step"]), f.get("message", ""),
                                  f, root))
    out += [c for c in _kl_from_value(findings, facts, analysis) if c.priority != "immediate"]
    first_window: dict[str, dict[str, Any]] = {}
    where: dict[str, list[Any]] = {}
    for w in windows if _advised(findings) else []:
        for issue in w.get("issues") or []:
            first_window.setdefault(issue, w)
            where.setdefault(issue, []).append(w["window"])
    for issue in sorted(first_window, key=lambda i: (PRIORITIES.index(_WINDOW_RULES[i].priority),
                                                   ISSUES.index(i))):
        rule = _WINDOW_RULES[issue]
        priority = "short_term" if rule.priority == "immediate" else rule.priority
        for act in _WINDOW_ACTIONS[issue]:
            out.append(_Candidate(act, priority, issue, int(first_window[issue]["last_step"]),
                                  f"{rule.description} ({window_text(where[issue])})"))
    return out


# -- resolving candidates into adjustments --------------------------------------------------------
def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _round(v: float) -> float:
    return float(f"{v:.6g}")


class _Values:
    """What the log and the run's config say a parameter's value is."""

    #: the config class of the trainer that wrote the log (GRPOConfig), when known
    trainer_config: str | None = None

    def __init__(self, analysis: Analysis, cands: list[_Candidate], columns: Mapping[str, str],
                 known: Mapping[str, tuple[float, str]] | None = None) -> None:
        self.columns = dict(columns)
        self.first_step = (getattr(analysis, "steps", None) or {}).get("first")
        #: the model's context in tokens (its config.json's max_position_embeddings), when shown
        self.context_length = next((float(v) for r in analysis.inputs
                                    for k, v in (getattr(r, "run_config", None) or {}).items()
                                    if k == "model.max_position_embeddings" and isinstance(v, (int, float))
                                    and not isinstance(v, bool) and v > 0), None)
        #: steps where each parameter changed in a jump (the hyperparams tracker's findings)
        self.changes: dict[str, list[int]] = {}
        for f in analysis.findings:
            if f.tracker == "hyperparams" and f.evidence.get("parameter"):
                # every jump, the grouped ones too (a x1,000 jump and the cut back three steps later)
                self.changes.setdefault(str(f.evidence["parameter"]), []).extend(
                    onset for _, _, onset in f.episode_ranges())
        wanted: dict[str, set[int]] = {}
        for c in cands:
            col = self.columns.get(c.action.parameter)
            if col:
                wanted.setdefault(col, set()).add(c.step)
        self.log = _read_values(analysis, wanted)
        meta = analysis.meta
        #: a preference loss's beta stands where an RL run's KL coefficient does (the same key in
        #: TRL's configs), and is called beta
        self.preference = meta.family == "preference"
        #: value and where it came from: the run's metadata, else what the log shows, else the
        #: trainer's default (``known``, from :func:`_config_values`)
        self.meta: dict[str, tuple[float, str]] = dict(known or {})
        for parameter, value in (("kl_coef", meta.beta if self.preference else meta.kl_coef_init),
                                 ("max_grad_norm", meta.max_grad_norm), ("max_length", meta.max_length),
                                 ("kl_horizon", meta.kl_horizon)):
            if value is not None:
                self.meta[parameter] = (float(value), "run metadata")

    def label(self, parameter: str) -> str:
        if parameter == "kl_coef" and self.preference:
            return "beta"
        return PARAMETERS.get(parameter, parameter)

    def logged(self, parameter: str) -> dict[str, Any] | None:
        col = self.columns.get(parameter)
        return self.log.get(col) if col else None

    def at(self, parameter: str, step: int) -> tuple[float | None, str]:
        """The current value at ``step`` and where it came from: the last logged value when the
        setting changed again after ``step`` (the value in force now)."""
        rec = self.logged(parameter)
        if rec and rec["last"] is not None and any(s > step for s in self.changes.get(parameter, ())):
            return rec["last"], "last logged value (it changed after the finding's onset)"
        if rec and step in rec["at"]:
            return rec["at"][step], f"logged at step {step}"
        if rec and rec["last"] is not None:
            return rec["last"], "last logged value"
        if parameter in self.meta:
            return self.meta[parameter]
        return None, ""


def _resolve(cands: list[_Candidate], values: _Values, trainer: Trainer | None,
             adaptive_kl: bool) -> list[dict[str, Any]]:
    chosen: dict[str, dict[str, Any]] = {}
    for c in cands:
        a = c.action
        adj = _adjustment(c, values, adaptive_kl)
        if adj is None:
            continue
        if a.parameter in chosen:
            first = chosen[a.parameter]
            if adj["direction"] == first["direction"] or "set" in (adj["direction"], first["direction"]):
                if c.source != first["source"] and c.source not in first["because"]:
                    first["because"].append(c.source)
            else:
                first["held_back"].append({"source": c.source, "direction": adj["direction"],
                                           "why": f"{first['source']} moves it the other way first"})
            continue
        key = trainer.key(a.parameter) if trainer else None
        adj["key"] = key if adj.get("new") is not None and not adj.pop("words_only", False) else None
        adj["command_line"] = trainer.command_line(a.parameter, adj["new"]) if trainer and adj["key"] else None
        chosen[a.parameter] = adj
    return list(chosen.values())


@record
class _Draft:
    """One adjustment being worked out: the values it moves between and how it is said."""

    current: float | None
    source: str | None
    direction: str
    change: str = ""
    new: float | None = None
    note: str = ""
    words_only: bool = False

    def towards(self, new: float, current: float | None) -> None:
        """Set the new value; the direction follows from where it lies against the current one."""
        self.new = new
        if current is not None:
            self.direction = "lower" if new < current else "raise"


def _restore(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """Back to the value before a change (a hyperparams finding's ``before``)."""
    ev = (c.finding or {}).get("evidence") or {}
    target, after = ev.get("before"), ev.get("after")
    rec = values.logged(c.action.parameter)
    now = rec["last"] if rec and rec["last"] is not None else after
    if target is None or now is None:
        return None
    if math.isclose(float(now), float(target), rel_tol=0.01):
        return None  # the run already went back to it
    d.current, d.source, d.change = _round(float(now)), "last logged value", "restore"
    d.towards(_round(float(target)), d.current)
    factor = ev.get("factor")
    if isinstance(factor, (int, float)) and factor > 0:
        size = factor if factor >= 1 else 1.0 / factor
        what = ("x" if factor >= 1 else "/") + (f"{size:,.0f}" if size >= 10 else f"{size:.2g}")
        d.note = f"the value before the {what} {'jump' if factor >= 1 else 'cut'} at {step_span(c.step, c.step)}"
    else:
        d.note = f"the value before the change at {step_span(c.step, c.step)}"
    return d


def _restore_first(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """Back to the value the run started with."""
    rec = values.logged(c.action.parameter)
    if not rec or rec["first"] is None or d.current is None:
        return None
    new = _round(rec["first"])
    if math.isclose(new, d.current, rel_tol=0.01):
        return None
    d.towards(new, d.current)
    d.change, d.note = "restore", "the value the run started with"
    return d


def _suggested(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """The value the finding's evidence suggests (the centre of the usual range)."""
    ev = (c.finding or {}).get("evidence") or {}
    new = ev.get("suggested")
    if not isinstance(new, (int, float)):
        return None
    d.towards(new, d.current)
    d.change = "set"
    d.note = f"the geometric centre of the usual range ({ev.get('usual_range', 'for full fine-tuning')})"
    return d


def _set(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """A fixed value the action names."""
    d.new, d.change = c.action.value, "set"
    if c.finding is None and c.source == "kl_penalty_off":
        d.note = f"{c.reason}; turn the penalty on"
    elif c.source == "beta_too_small":
        d.note = c.reason
    if d.new is not None:
        d.towards(d.new, d.current)
    return d


def _scale(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """The current value times the action's factor (the schedule's peak for a learning rate that
    decays; words only for a coefficient an adaptive controller sets)."""
    a = c.action
    factor = float(a.factor or 1.0)
    d.change = f"{(factor - 1.0) * 100:+.0f}%"
    rec = values.logged(a.parameter)
    if a.parameter == "learning_rate" and rec and c.step in rec["peak"] and d.current is not None \
            and not values.changes.get(a.parameter) and rec["peak"][c.step] > d.current * 1.05:
        d.current, d.source = rec["peak"][c.step], f"the schedule's peak up to step {c.step}"
        d.note = "scales the schedule's peak, which the config sets"
    current = d.current
    if current == 0.0:
        return None  # zero scales to zero: only a restore can move it
    if current is not None:
        # the value the text prints is the value the patch sets (3 significant digits: advice is
        # no more precise than that), never 5e-06 beside 4.99681e-06
        d.new = float(_fmt(current * factor))
        if a.parameter in _COUNTS:  # a number of tokens or samples: a whole number
            d.new = math.ceil(d.new) if factor > 1 else max(math.floor(d.new), 1)
    if a.parameter == "kl_coef" and adaptive_kl:
        # the controller moves the coefficient itself (the demo's went from 0.2 to 5): the
        # levers are its target and horizon
        last = rec["last"] if rec and rec["last"] is not None else None
        seen = "" if current is None else f" ({_fmt(current)} at step {c.step}" + (
            f", {_fmt(last)} at the end)" if last is not None and not math.isclose(last, current, rel_tol=0.01)
            else ")")
        d.note = f"an adaptive controller sets it{seen}: " + (
            "lower its KL target or shorten its horizon instead" if factor > 1 else
            "raise its KL target instead")
        d.new, d.words_only = None, True
    return d


def _room_or_scale(c: _Candidate, values: _Values, d: _Draft, adaptive_kl: bool) -> _Draft | None:
    """A cap that cut every answer from the start gets room for them (:func:`_room_for_answers`);
    anything else is scaled (:func:`_scale`)."""
    room = _room_for_answers(c, values, d.current)
    if room is None:
        return _scale(c, values, d, adaptive_kl)
    d.towards(room[0], d.current)
    d.change, d.note = "set", room[1]
    return d


_DRAFTS = {"restore": _restore, "restore_first": _restore_first, "suggested": _suggested, "set": _set}


def _adjustment(c: _Candidate, values: _Values, adaptive_kl: bool) -> dict[str, Any] | None:
    """The change one candidate asks for, with current and new values where they are known."""
    a = c.action
    current, source = values.at(a.parameter, c.step)
    d = _DRAFTS.get(a.direction, _room_or_scale)(c, values, _Draft(current, source, a.direction), adaptive_kl)
    if d is None:
        return None
    if d.current is not None:
        d.current = _round(d.current)
    text = f"{values.label(a.parameter)}: "
    if d.current is not None and d.new is not None:
        text += f"{_fmt(d.current)} -> {_fmt(d.new)} ({d.change})"
    elif d.new is not None:
        text += f"set to {_fmt(d.new)}"
    else:
        text += f"{d.direction} {d.change.lstrip('+-')}" if d.change not in ("set", "restore") else d.change
    if d.note:
        text += f", {d.note}"
    return {"parameter": a.parameter, "direction": d.direction, "change": d.change, "factor": a.factor,
            "current": d.current, "current_from": d.source or None, "new": d.new, "priority": c.priority,
            "source": c.source, "step": c.step, "reason": c.reason, "first_domino": c.chain_root,
            "because": [], "held_back": [], "text": text, "words_only": d.words_only}


#: The share of responses cut at a run's start from which (nearly) every response is cut.
ALL_CUT = 0.9
#: The response length cap of the trainers' configs by default (TRL 1.16 GRPOConfig and
#: RLOOConfig max_completion_length).
_DEFAULT_CAP = {"GRPOConfig": 512, "RLOOConfig": 512}


def _room_for_answers(c: _Candidate, values: _Values, current: float | None) -> tuple[float, str] | None:
    """A cap that cut (nearly) every response from the first steps, before the policy moved: it
    is below what the model writes, and the log cannot say how far (every length it shows is the
    cap). 50% more is a guess; the trainer's default cap is what its authors chose for any task,
    bounded by the model's context (max_position_embeddings in its config.json)."""
    f = c.finding or {}
    base = (f.get("evidence") or {}).get("baseline")  # the share cut at the start
    if base is None and f.get("first_step") is not None and f.get("first_step") == values.first_step:
        base = (f.get("evidence") or {}).get("truncation_rate")  # a log too short for a baseline
    if c.action.parameter != "max_length" or c.source != "length.truncation" or current is None or \
            not isinstance(base, (int, float)) or not base >= ALL_CUT:
        return None
    default = _DEFAULT_CAP.get(values.trainer_config or "")
    if default is None:
        return None
    context = values.context_length
    new = int(min(default, context)) if context else default
    if new <= current:
        return None
    where = (f"the model's context (max_position_embeddings {context:g}), below the trainer's default "
             f"{default}" if context and context < default else f"the trainer's default ({values.trainer_config})")
    return new, f"every response was cut from the first steps, so the log cannot say how long answers need: {where}"


#: A first domino this bad is fixed alone: a learning rate far outside any usual range, a jump
#: of it that the hyperparams tracker calls critical. Until it is fixed, the symptoms it causes
#: say nothing about the other settings.
_CATASTROPHIC = ("hyperparams.lr_out_of_range",)


def _alarm(f: Mapping[str, Any]) -> str:
    """A finding's severity as its tracker judged the signal (``tracker_severity``: before the
    consequence pass, which makes critical only what damaged the run)."""
    return str((f.get("evidence") or {}).get("tracker_severity") or f["severity"])


def _catastrophe(root: Mapping[str, Any] | None, cands: Sequence[_Candidate],
                 facts: _Facts) -> str | None:
    """The source of the recommendation that must be applied alone (the others wait until it
    is): a catastrophic first domino, a KL penalty that is off while the policy drifts, or a
    reward that pays for length (a cause outside the config); None when there is none."""
    if root is not None and (root["rule"] in _CATASTROPHIC or (
            root["rule"] == "hyperparams.lr_change" and _alarm(root) == "critical")):
        return str(root["rule"])
    if any(c.source == "kl_penalty_off" for c in cands):
        return "kl_penalty_off"
    if facts.length_reward is not None:
        return "reward_pays_for_length"
    return None


def _length_text(cause: _LengthReward, facts: _Facts, values: _Values) -> str:
    """The reward named as the cause, with fixes in the trainer's terms."""
    comp = cause.component
    name = comp.split("/", 1)[1] if comp.startswith("reward/") else "the reward"
    grew = "" if math.isnan(cause.first) else f", mean length {_fmt(cause.first)} -> {_fmt(cause.last)} tokens"
    key = facts.trainer.key("max_length") if facts.trainer else None
    cap, _ = values.at("max_length", 0)
    stop = (f"{key} ({_fmt(cap)} now)" if key and cap is not None else key or "the response length cap")
    fix = ("a length penalty (a per-token cost) or a length-normalised score in "
           + (f"the reward function `{name}`" if name != "the reward" else "the reward function"))
    if facts.family == "preference":
        fix = "length-balanced preference pairs or a length-regularised loss (R-DPO, LD-DPO)"
    return (f"The reward pays for length: {comp} rises with the mean response length (r = {cause.r:.2f} "
            f"over the run{grew}); the cause is the reward, not the optimiser. Change it: {fix}; "
            f"lowering {stop} only hides it (a stop-gap) [reward_pays_for_length]")


def _patch(adjustments: list[dict[str, Any]], trainer: Trainer | None) -> tuple[dict[str, Any], list[str], list[str]]:
    """The config patch, its command line, and the changes that stay in words."""
    patch: dict[str, Any] = {}
    command_line: list[str] = []
    words: list[str] = []
    for a in adjustments:
        if a["key"] is not None:
            set_key(patch, a["key"], a["new"], trainer is not None and trainer.style in ("dotted", "run.json"))
            if a["command_line"]:
                command_line.append(a["command_line"])
        else:
            why = ("no key in " + trainer.config) if trainer and trainer.key(a["parameter"]) is None else (
                "the current value is not known" if a["new"] is None else "see the note")
            words.append(f"{a['text']} ({why})")
    return patch, command_line, words


def _remedy(finding: Mapping[str, Any], facts: _Facts) -> str:
    """A finding's remedy in the run's terms: clauses for other algorithms dropped, and "check
    that the KL penalty is on" answered where the log shows the coefficient."""
    text = fit_remedy(str(finding["remedy"]), facts.family)
    if facts.kl_read is not None:
        coef, how = facts.kl_read
        said = (f"the KL penalty is on (coefficient {coef:g}, {how})" if coef > 0 else
                f"the KL penalty is off (coefficient 0, {how}): turn it on")
        text = re.sub(r"check that the KL penalty is on[^;.]*", said, text)
    return text


def _line(a: Mapping[str, Any], root: bool) -> str:
    also = f"; also {', '.join(a['because'][:4])}" if a["because"] else ""
    return f"{a['text']} [{a['source']}{', the first domino' if root else ''}{also}]"


def _advised(findings: list[dict[str, Any]]) -> bool:
    """Whether the run asks for advice at all: a warning or critical finding. The window table's
    issues alone (a plateau, a noisy window) are context, as info findings are, in a run the
    trackers call healthy: one voice per run."""
    return any(f["severity"] != "info" for f in findings)


def _issue_windows(windows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each window-check issue with the windows that raised it."""
    out: dict[str, list[Any]] = {}
    for w in windows:
        for issue in w.get("issues") or []:
            out.setdefault(issue, []).append(w["window"])
    return out


def _root_first(adjustments: list[dict[str, Any]], alone: str | None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(fix, later)``: with a catastrophic root cause (``alone``, its rule), the root's fix alone
    and the symptoms' remedies waiting for it; else every adjustment now."""
    if alone is None:
        return adjustments, []
    for a in adjustments:
        a["first_domino"] = a["source"] == alone
    return [a for a in adjustments if a["first_domino"]], [a for a in adjustments if not a["first_domino"]]


def _recommendations(cands: list[_Candidate], findings: list[dict[str, Any]], timeline: Mapping[str, Any],
                     windows: list[dict[str, Any]], facts: _Facts, values: _Values,
                     adaptive_kl: bool, params: HealthCheckParams | None = None) -> dict[str, Any]:
    """The ``recommendations`` section (see the module docstring)."""
    trainer = facts.trainer
    adjustments = _resolve(cands, values, trainer, adaptive_kl)
    dom = timeline.get("first_domino") or {}
    root = findings[dom["finding_index"]] if dom.get("finding_index") is not None and \
        dom["finding_index"] < len(findings) else None
    flip = _reward_weights_fix(findings, facts, root)
    if flip is not None:
        adjustments.insert(0, flip)
    alone = _catastrophe(root, cands, facts)
    fix, later = _root_first(adjustments, alone)
    patch, command_line, words = _patch(fix, trainer)
    later_patch, _, later_words = _patch(later, trainer)
    priorities: dict[str, list[str]] = {p: [] for p in PRIORITIES}
    if_persists = [_line(a, False) for a in later]
    if facts.length_reward is not None:
        priorities["immediate"].append(_length_text(facts.length_reward, facts, values))
    for a in sorted(fix, key=lambda a: not a["first_domino"]):  # the root's changes first
        where = priorities["immediate"] if alone is not None else priorities[a["priority"]]
        where.insert(0, _line(a, a["first_domino"])) if a["source"] == "kl_penalty_off" \
            else where.append(_line(a, a["first_domino"]))
        if a["first_domino"] and root is not None and a["source"] == root["rule"] and len(priorities["immediate"]) <= 2:
            priorities["immediate"].append(f"{_remedy(root, facts)} [{root['rule']}]")
    if root is not None and root["severity"] != "info" and not any(a["first_domino"] for a in adjustments) \
            and alone is None:
        # the machine's findings (throughput, resources) are not changes to the training
        when = "short_term" if root["rule"].startswith(_MACHINE) else "immediate"
        # the change to make, not the finding again (its message is the verdict's first line)
        priorities[when].insert(0, f"{_remedy(root, facts)} [{root['rule']}, the first domino]")
    issue_windows = _issue_windows(windows)
    for issue, ws in issue_windows.items() if _advised(findings) else []:
        rule = _WINDOW_RULES[issue]
        if not rule.adjustments:
            line = f"{rule.description} ({window_text(ws)}): {fit_remedy(rule.advice, facts.family)}"
            (if_persists if alone is not None else priorities[rule.priority]).append(line)
    last = windows[-1] if windows else {}
    return {
        "trainer": ({"name": trainer.name, "config": trainer.config} if trainer else None),
        "first_domino": ({k: root[k] for k in ("rule", "severity", "onset_step", "message", "remedy")}
                         if root is not None else None),
        "root_cause": alone,
        "adjustments": adjustments,
        "config_patch": patch,
        "command_line": command_line,
        "not_in_config": words,
        "priorities": priorities,
        "if_persists": if_persists,
        "if_persists_patch": later_patch,
        "if_persists_not_in_config": later_words,
        "issues": {k: window_ranges(issue_windows[k]) for k in ISSUES if k in issue_windows},
        "monitoring": monitoring(last, params or HealthCheckParams(), {a["parameter"] for a in adjustments}),
    }


def windows_with_findings(windows: list[dict[str, Any]], findings: Iterable[Mapping[str, Any]]
                          ) -> list[dict[str, Any]]:
    """Each window with the warning and critical findings whose episodes overlap it, and a status
    at least ``warn`` (``alert`` for a critical episode). A grouped finding counts by its
    episodes, each with its own severity: the gaps between them, and its information-level
    episodes, mark no window. A window no such finding overlaps is at most ``watch``: its own
    issues are context, and only the trackers (with their priors) raise alarms."""
    serious = []  # (rule, severity, first, last) of each serious episode
    for f in findings:
        if f.get("severity") not in ("warning", "critical"):
            continue
        for e in f.get("episodes") or [f]:
            sev = e.get("severity", f["severity"])
            if sev in ("warning", "critical"):
                serious.append((f["rule"], sev, int(e["first_step"]), int(e["last_step"])))
    order = {"ok": 0, "watch": 1, "warn": 2, "alert": 3}
    hits_of = _window_hits(windows, serious)
    out = []
    for w, (rules, critical) in zip(windows, hits_of, strict=True):
        w = dict(w)
        w["findings"] = rules
        worst = "alert" if critical else ("warn" if rules else "ok")
        own = w.get("status", "ok")
        if not rules and order.get(own, 0) > order["watch"]:
            own = "watch"  # one voice: the window check alone never alarms
        w["status"] = worst if order[worst] > order.get(own, 0) else own
        out.append(w)
    return out


#: Window-episode pairs above which :func:`_window_hits` compares them as arrays.
_MANY_PAIRS = 4096


def _window_hits(windows: list[dict[str, Any]], serious: list[tuple[str, str, int, int]]
                 ) -> list[tuple[list[str], bool]]:
    """For each window: the rules of the ``serious`` episodes ``(rule, severity, first, last)``
    overlapping it, in their order of first appearance, and whether one is critical. Many
    pairs (a noisy run's tens of thousands of episodes against every window) are compared as
    arrays, a window at a time, with the same result.

    >>> eps = [("kl.spike", "warning", 5, 8), ("grad.explode", "critical", 9, 30), ("kl.spike", "critical", 12, 12)]
    >>> _window_hits([{"first_step": 0, "last_step": 9}, {"first_step": 10, "last_step": 19},
    ...               {"first_step": 31, "last_step": 40}], eps)
    [(['kl.spike', 'grad.explode'], True), (['grad.explode', 'kl.spike'], True), ([], False)]
    """
    if len(windows) * len(serious) <= _MANY_PAIRS:
        out = []
        for w in windows:
            hits = [h for h in serious if h[2] <= w["last_step"] and h[3] >= w["first_step"]]
            out.append((list(dict.fromkeys(rule for rule, *_ in hits)), any(sev == "critical" for _, sev, *_ in hits)))
        return out
    names = list(dict.fromkeys(h[0] for h in serious))
    code = {name: i for i, name in enumerate(names)}
    rules = np.array([code[h[0]] for h in serious], dtype=np.int64)
    critical = np.array([h[1] == "critical" for h in serious], dtype=bool)
    first = np.array([h[2] for h in serious], dtype=np.int64)
    last = np.array([h[3] for h in serious], dtype=np.int64)
    out = []
    for w in windows:
        at = np.flatnonzero((first <= w["last_step"]) & (last >= w["first_step"]))
        seen = rules[at]
        _, where = np.unique(seen, return_index=True)  # each rule's first hit, in hit order below
        out.append(([names[c] for c in seen[np.sort(where)].tolist()], bool(critical[at].any())))
    return out


def _facts(analysis: Analysis, findings: list[dict[str, Any]]) -> _Facts:
    meta = analysis.meta
    source_keys = {k for m in analysis.mappings.values() for k in m.mapping}
    printed = {k for r in analysis.inputs for k in (getattr(r, "run_config", None) or {})}
    trainer = trainer_for([r.format for r in analysis.inputs], meta.algorithm, source_keys,
                          meta.config, analysis.context, printed)
    kl_read = (beta_from_log(analysis) if meta.algorithm not in _NO_REFERENCE else None) \
        if meta.family == "preference" else kl_coef_from_log(analysis)
    kl_penalty = meta.kl_penalty
    if kl_read is not None and kl_read[0] == 0.0 and kl_penalty in (None, "reward", "loss"):
        kl_penalty = "none"  # the trainer logs a penalty of 0 while the KL grows: the coefficient is 0
    return _Facts(trainer, meta.algorithm, meta.family or (algorithm_family(meta.algorithm) if meta.algorithm
                                                           else None),
                  kl_penalty, kl_read, length_reward(analysis, findings))


def advice_sections(analysis: Analysis, timeline: Mapping[str, Any]) -> dict[str, Any]:
    """The ``windows`` (annotated with the findings) and ``recommendations`` sections of a scan."""
    findings = [f.to_dict() for f in analysis.findings]
    table: list[dict[str, Any]] = []
    params = None
    columns = dict(_LOGGED)
    for r in analysis.results:
        if r.name == "windows":
            table = list(r.sections.get("windows") or [])
        if r.name == "hyperparams":
            for parameter, info in r.summary.items():
                if isinstance(info, dict) and info.get("key"):
                    columns[parameter] = info["key"]
    if "windows" in analysis.params:
        known = set(HealthCheckParams.__dataclass_fields__)
        params = HealthCheckParams(**{k: v for k, v in analysis.params["windows"].items() if k in known})
    windows = windows_with_findings(table, findings)
    facts = _facts(analysis, findings)
    cands = _candidates(findings, timeline, windows, facts, analysis)
    values = _Values(analysis, cands, columns, _config_values(analysis, findings, facts.trainer, facts.kl_read))
    values.trainer_config = facts.trainer.config if facts.trainer else None
    rec = _recommendations(cands, findings, timeline, windows, facts, values,
                           analysis.meta.kl_controller == "adaptive", params)
    return {"windows": windows, "recommendations": rec} if windows else {"recommendations": rec}

"""Health check per training window (epoch or block of steps) with recommended adjustments.

A practitioner reviewing a run builds a table per epoch (average reward, average loss, reward
variance, their trends), names what went wrong in each epoch and decides what to change. This
module does the same with a documented rule table, offline (the ``windows`` tracker feeds it the
windows of a scan) and online: a trainer calls :meth:`HealthCheck.after_epoch` with the epoch's
metrics (plain lists or numbers, no trainer dependency) and gets the adjustments back.

Issues detected per window (all relative to the run's own windows, never absolute constants)
-------------------------------------------------------------------------------------------

============================  ==================================================================
issue                         condition
============================  ==================================================================
``kl_rising``                 the window's median KL to the reference is ``kl_rise_factor``
                              times the previous window's or more
``loss_spiking``              a loss value in the window lies ``spike_z`` robust sigmas (IQR /
                              1.349 of the window) above the window's median
``loss_high``                 the window's loss median exceeds the median of the earlier
                              windows' medians by ``loss_high_z`` of their typical robust sigma,
                              and the loss moved up against the previous window (*)
``reward_declining``          the window's mean reward is lower than the previous window's by
                              more than ``flat_z`` standard errors
``reward_stagnant``           the mean reward moved by less than ``flat_z`` standard errors for
                              ``stagnant_windows`` windows in a row
``variance_high``             the window's reward variance exceeds ``variance_ratio`` x the
                              median variance of the earlier windows, and its standard deviation
                              exceeds ``variance_min_share`` of the range of window means
``overfitting``               reward and loss both moved up (significantly) against the previous
                              window
``exploration_needed``        the loss moved down (improving) while the reward stayed flat (*)
============================  ==================================================================

(*) Only where the loss is a progress signal: its window median is ``loss_level_sigmas`` robust
sigmas away from zero, and the algorithm is not a critic-free group method (GRPO, RLOO, DAPO:
their loss sits near zero and rises with beta * KL, SIGNATURES 1.1).

Rule table (:data:`RULE_TABLE`): issue -> adjustments
-----------------------------------------------------

======================  ============  ==========================================================
issue                   priority      adjustments
======================  ============  ==========================================================
``kl_rising``           immediate     KL coefficient +20%
``loss_spiking``        immediate     learning rate -20%, gradient clip -20%
``reward_declining``    immediate     KL coefficient -10%, learning rate -20%
``loss_high``           short_term    learning rate -20%
``overfitting``         short_term    KL coefficient +20%
``variance_high``       short_term    reward threshold +0.02, gradient clip -20%
``reward_stagnant``     medium_term   reward weight +15%
``exploration_needed``  medium_term   temperature +10%
======================  ============  ==========================================================

When several issues change the same parameter, the issue with the most urgent priority wins
(ties: table order); changes are never compounded. So a reward that declines while KL runs away
raises the KL coefficient (the decline is the runaway's effect) instead of lowering it.

Config keys: the patch uses the run's own key for each parameter when the trainer config
(``RunMeta.config``) has one (e.g. ``lr`` or ``actor_rollout_ref.actor.optim.lr``), with the new
value computed from the current one; when the current value is unknown the patch gives the
change as a string (``"x0.8"``, ``"+0.02"``).

>>> hc = HealthCheck(config={"lr": 1e-5})
>>> _ = hc.after_epoch({"reward": [0.50, 0.52, 0.51, 0.49], "loss": [1.0, 1.1, 0.9, 1.0]})
>>> rep = hc.after_epoch({"reward": [0.20, 0.22, 0.21, 0.19], "loss": [1.0, 1.1, 0.9, 1.0]})
>>> rep.issues
['reward_declining']
>>> [(a["parameter"], a["change"], a["config_key"], a["new"]) for a in rep.adjustments]
[('kl_coef', '-10%', None, None), ('learning_rate', '-20%', 'lr', 8e-06)]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import param
from .stats import IQR_TO_SIGMA

__all__ = [
    "ISSUES",
    "PRIORITIES",
    "RULE_TABLE",
    "Adjustment",
    "HealthCheck",
    "HealthCheckParams",
    "IssueRule",
    "WindowReport",
    "config_patch",
    "to_yaml",
    "window_stats",
]

PRIORITIES = ("immediate", "short_term", "medium_term")


@dataclass
class HealthCheckParams:
    flat_z: float = param(2.0, "A change of the window mean smaller than this many standard errors "
                          "is flat; larger is up or down.")
    spike_z: float = param(8.0, "A loss value this many robust sigmas above the window median is a "
                           "spike (SIGNATURES #20: healthy runs stay below 4.5).")
    loss_high_z: float = param(3.0, "Window loss median this many typical robust sigmas above the "
                               "earlier windows' median is too high for this run.")
    variance_ratio: float = param(2.0, "Window reward variance above this multiple of the earlier "
                                  "windows' median variance is high.")
    stagnant_windows: int = param(2, "Consecutive flat-reward windows that make the reward stagnant.")
    min_windows: int = param(2, "Earlier windows needed before run-relative checks (loss high, "
                             "variance high) are made.")
    variance_min_share: float = param(0.1, "Variance high also needs the reward's standard deviation "
                                      "above this share of the range of window means so far.", le=1)
    kl_rise_factor: float = param(2.0, "Window median KL this many times the previous window's is "
                                  "kl_rising.")
    loss_level_sigmas: float = param(2.0, "A window's loss is a progress signal only where |median| "
                                     "exceeds this many robust sigmas (a GRPO loss near zero is not).")


@dataclass(frozen=True)
class Adjustment:
    """One row of the rule table: change ``parameter`` by ``factor`` (or add ``delta``)."""

    parameter: str
    factor: float | None
    delta: float | None
    rationale: str
    expected_effect: str

    @property
    def change(self) -> str:
        if self.factor is not None:
            return f"{(self.factor - 1.0) * 100:+.0f}%"
        return f"{self.delta:+g}"


@dataclass(frozen=True)
class IssueRule:
    issue: str
    priority: str
    description: str
    adjustments: tuple[Adjustment, ...]


_A = Adjustment
#: The documented rule table: issue -> priority and adjustments (see the module docstring).
RULE_TABLE: tuple[IssueRule, ...] = (
    IssueRule("kl_rising", "immediate", "KL to the reference more than doubled", (
        _A("kl_coef", 1.2, None,
           "The policy is leaving the reference faster than the penalty holds it; a stronger "
           "penalty pulls it back before the reward is hacked or collapses.",
           "KL levels off within a window; reward growth may slow."),
    )),
    IssueRule("loss_spiking", "immediate", "loss spiked far above the window's level", (
        _A("learning_rate", 0.8, None,
           "Spikes mean single updates overshoot; a smaller step keeps them inside the trust region.",
           "Fewer and smaller loss spikes within one or two windows; slightly slower progress."),
        _A("max_grad_norm", 0.8, None,
           "A tighter gradient clip bounds the size of the update a bad batch can make.",
           "Spike magnitude capped; grad_norm clipped more often (keep it under ~5% of steps)."),
    )),
    IssueRule("reward_declining", "immediate", "mean reward fell significantly", (
        _A("kl_coef", 0.9, None,
           "A falling reward under a strong KL penalty means the penalty outweighs the task signal.",
           "Reward recovers within a window while KL rises moderately; watch KL for a runaway."),
        _A("learning_rate", 0.8, None,
           "A falling reward often follows too-large policy updates; a smaller step stabilises them.",
           "Reward stops falling; recovery is gradual."),
    )),
    IssueRule("loss_high", "short_term", "loss level too high for this run", (
        _A("learning_rate", 0.8, None,
           "A loss above the run's own level suggests the optimiser overshoots its minimum.",
           "Loss returns toward the run's earlier level over the next windows."),
    )),
    IssueRule("overfitting", "short_term", "reward and loss rising together", (
        _A("kl_coef", 1.2, None,
           "Reward rising with the loss is the over-optimisation signature: the policy exploits the "
           "reward while drifting from the reference; a stronger KL penalty holds it back.",
           "KL to the reference flattens; reward growth slows but generalises better."),
    )),
    IssueRule("variance_high", "short_term", "reward variance high", (
        _A("reward_threshold", None, 0.02,
           "Filtering the lowest-reward samples removes the noisiest part of the signal.",
           "Lower reward variance per window; slightly fewer samples per update."),
        _A("max_grad_norm", 0.8, None,
           "High reward variance gives high-variance gradients; a tighter clip bounds their effect.",
           "Steadier updates; reward variance falls over the next windows."),
    )),
    IssueRule("reward_stagnant", "medium_term", "reward not improving", (
        _A("reward_weight", 1.15, None,
           "A flat reward with a healthy loss means the reward signal is too weak relative to the "
           "other terms (KL, entropy, auxiliary rewards).",
           "Reward resumes rising within two windows; check that no component saturates."),
    )),
    IssueRule("exploration_needed", "medium_term", "loss improving but reward flat", (
        _A("temperature", 1.1, None,
           "The optimiser still makes progress on its loss but the samples no longer discover "
           "higher-reward behaviour: sampling is too narrow.",
           "More diverse completions and higher entropy; reward variance rises first, then reward."),
    )),
)
ISSUES = tuple(r.issue for r in RULE_TABLE)
#: Algorithms whose loss is not a progress signal (SIGNATURES 1.1: a GRPO loss starts near zero and
#: rises with beta * KL): loss_high, overfitting and exploration_needed are not judged for them.
LOSS_NOT_PROGRESS = ("grpo", "rloo", "dapo", "dr_grpo", "gspo")
_RULES = {r.issue: r for r in RULE_TABLE}

#: Trainer-config keys each parameter may be stored under, most common first (dotted = nested).
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("learning_rate", "lr", "actor_rollout_ref.actor.optim.lr", "actor.optim.lr",
                      "optim.lr", "optimizer.lr", "policy_learning_rate"),
    "kl_coef": ("kl_coef", "beta", "init_kl_coef", "kl_penalty_coef",
                "actor_rollout_ref.actor.kl_loss_coef", "algorithm.kl_ctrl.kl_coef", "kl_ctl.kl_coef"),
    "max_grad_norm": ("max_grad_norm", "grad_clip", "actor_rollout_ref.actor.grad_clip",
                      "clip_grad_norm", "gradient_clipping"),
    "temperature": ("temperature", "actor_rollout_ref.rollout.temperature", "generation.temperature",
                    "sampling.temperature"),
    "reward_weight": ("reward_weight", "reward_weights", "reward_scale", "reward.weight"),
    "reward_threshold": ("reward_threshold", "min_reward", "reward_filter_threshold",
                         "reward.threshold"),
}


# -- window statistics ---------------------------------------------------------------------------
def _arr(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    a = np.atleast_1d(np.asarray(values, dtype=float)).ravel()
    return a[np.isfinite(a)]


def window_stats(reward: Any = None, loss: Any = None, kl: Any = None
                 ) -> dict[str, float | int | None]:
    """Summary of one window's per-step values (lists, arrays or single numbers).

    ``reward_var`` is the sample variance (ddof=1, as pandas ``var``); ``loss_sigma`` the robust
    sigma (IQR / 1.349) and ``loss_max_z`` the largest robust z of a loss value in the window.

    >>> s = window_stats([1.0, 2.0, 3.0], [0.5, 0.5, 0.6, 0.5])
    >>> s["reward_mean"], s["reward_var"], s["n_loss"]
    (2.0, 1.0, 4)
    """
    r, lo, k = _arr(reward), _arr(loss), _arr(kl)
    out: dict[str, float | int | None] = {"n_reward": len(r), "n_loss": len(lo)}
    out["kl_median"] = float(np.median(k)) if len(k) else None
    out["reward_mean"] = float(np.mean(r)) if len(r) else None
    out["reward_var"] = float(np.var(r, ddof=1)) if len(r) > 1 else None
    out["loss_mean"] = float(np.mean(lo)) if len(lo) else None
    out["loss_var"] = float(np.var(lo, ddof=1)) if len(lo) > 1 else None
    if len(lo):
        med = float(np.median(lo))
        q75, q25 = np.quantile(lo, [0.75, 0.25])
        sigma = float(q75 - q25) / IQR_TO_SIGMA
        scale = max(sigma, 1e-3 * abs(med), 1e-12)
        out["loss_median"] = med
        out["loss_sigma"] = sigma
        out["loss_max_z"] = float((lo.max() - med) / scale) if len(lo) >= 8 else None
    else:
        out["loss_median"] = out["loss_sigma"] = out["loss_max_z"] = None
    return out


def _direction(cur: Mapping[str, Any], prev: Mapping[str, Any] | None, what: str,
               flat_z: float) -> tuple[float | None, str | None]:
    """Change of the window mean against the previous window, and up / down / flat."""
    if prev is None:
        return None, None
    m1, m0 = cur.get(f"{what}_mean"), prev.get(f"{what}_mean")
    if m1 is None or m0 is None:
        return None, None
    delta = float(m1) - float(m0)
    v1, v0 = cur.get(f"{what}_var"), prev.get(f"{what}_var")
    n1, n0 = int(cur.get(f"n_{what}") or 0), int(prev.get(f"n_{what}") or 0)
    if v1 is None or v0 is None or n1 < 2 or n0 < 2:
        return delta, None
    se = math.sqrt(float(v1) / n1 + float(v0) / n0)
    if se <= 0.0:  # two constant windows: equal ones say nothing (e.g. normalised rewards)
        return delta, None if delta == 0.0 else ("up" if delta > 0 else "down")
    z = delta / se
    return delta, "flat" if abs(z) < flat_z else ("up" if z > 0 else "down")


# -- config lookup -------------------------------------------------------------------------------
def _lookup(config: Mapping[str, Any], dotted: str) -> tuple[bool, Any, bool]:
    """``(found, value, nested)`` for a dotted key, flat (``"a.b"`` as one key) or nested."""
    if dotted in config:
        return True, config[dotted], False
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None, False
        node = node[part]
    return True, node, "." in dotted


def _find_key(parameter: str, config: Mapping[str, Any], meta_values: Mapping[str, Any]
              ) -> tuple[str | None, Any, bool]:
    for key in CONFIG_KEYS.get(parameter, (parameter,)):
        found, value, nested = _lookup(config, key)
        if found:
            return key, value, nested
    if meta_values.get(parameter) is not None:
        return parameter, meta_values[parameter], False
    return None, None, False


def _apply(adj: Adjustment, current: Any) -> Any:
    """New value from the current one (numbers and lists of numbers); None when unknown."""
    if isinstance(current, bool):
        return None
    if isinstance(current, (int, float)):
        new = current * adj.factor if adj.factor is not None else current + (adj.delta or 0.0)
        return float(f"{new:.6g}")
    if isinstance(current, list) and current and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in current):
        return [_apply(adj, v) for v in current]
    return None


def _set_nested(patch: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = patch
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


# -- reports -------------------------------------------------------------------------------------
@dataclass
class WindowReport:
    """What the health check says about one window."""

    window: Any
    stats: dict[str, Any]
    reward_trend: float | None
    loss_trend: float | None
    reward_direction: str | None
    loss_direction: str | None
    issues: list[str]
    status: str
    adjustments: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _status(issues: Iterable[str]) -> str:
    pri = {_RULES[i].priority for i in issues}
    if "immediate" in pri:
        return "alert"
    if "short_term" in pri:
        return "warn"
    if "medium_term" in pri:
        return "watch"
    return "ok"


class HealthCheck:
    """Per-window issue detection and the adjustments the rule table maps them to.

    Parameters
    ----------
    config : the trainer's config (flat or nested dict); adjustments use its keys and values.
    params : :class:`HealthCheckParams` (thresholds).
    meta_values : fallback current values by parameter name (e.g. ``max_grad_norm`` from run.json).

    Use online: ``report = hc.after_epoch({"reward": rewards_this_epoch, "loss": losses})``; then
    ``report.adjustments``. :meth:`recommendations` summarises every window seen so far.
    """

    def __init__(self, config: Mapping[str, Any] | None = None,
                 params: HealthCheckParams | None = None,
                 meta_values: Mapping[str, Any] | None = None,
                 algorithm: str | None = None) -> None:
        self.algorithm = (algorithm or "").lower()
        self.config = dict(config or {})
        self.params = params or HealthCheckParams()
        self.meta_values = dict(meta_values or {})
        self.windows: list[WindowReport] = []

    def after_epoch(self, metrics: Mapping[str, Any], epoch: Any = None) -> WindowReport:
        """Judge one epoch from its per-step metrics (``reward``/``reward_mean``, ``loss``/``policy_loss``)."""
        reward = metrics.get("reward_mean", metrics.get("reward"))
        loss = metrics.get("loss", metrics.get("policy_loss"))
        window = epoch if epoch is not None else len(self.windows)
        return self.add_window(window, window_stats(reward, loss, metrics.get("kl")))

    def add_window(self, window: Any, stats: dict[str, Any]) -> WindowReport:
        """Judge a window from :func:`window_stats` against the windows before it."""
        p = self.params
        prev = self.windows[-1].stats if self.windows else None
        r_delta, r_dir = _direction(stats, prev, "reward", p.flat_z)
        l_delta, l_dir = _direction(stats, prev, "loss", p.flat_z)
        issues: list[str] = []
        earlier = [w.stats for w in self.windows]
        kl_now, kl_prev = stats.get("kl_median"), (prev or {}).get("kl_median")
        if kl_now is not None and kl_prev is not None and kl_prev > 0 and \
                kl_now >= p.kl_rise_factor * kl_prev:
            issues.append("kl_rising")
        if stats.get("loss_max_z") is not None and stats["loss_max_z"] >= p.spike_z:
            issues.append("loss_spiking")
        if r_dir == "down":
            issues.append("reward_declining")
        # the loss as a progress signal: not for critic-free group methods, not near zero
        informative = self.algorithm not in LOSS_NOT_PROGRESS and stats.get("loss_median") is not None \
            and abs(stats["loss_median"]) > p.loss_level_sigmas * float(stats.get("loss_sigma") or 0.0)
        if informative and len(earlier) >= p.min_windows and l_dir == "up":
            meds = [w["loss_median"] for w in earlier if w.get("loss_median") is not None]
            sigs = [w["loss_sigma"] for w in earlier if w.get("loss_sigma") is not None]
            if len(meds) >= p.min_windows and sigs:
                ref, sig = float(np.median(meds)), float(np.median(sigs))
                if stats["loss_median"] > ref + p.loss_high_z * max(sig, 1e-12):
                    issues.append("loss_high")
        if informative and r_dir == "up" and l_dir == "up":
            issues.append("overfitting")
        if stats.get("reward_var") is not None and len(earlier) >= p.min_windows:
            vs = [w["reward_var"] for w in earlier if w.get("reward_var") is not None]
            means = [w["reward_mean"] for w in [*earlier, stats] if w.get("reward_mean") is not None]
            spread = max(means) - min(means) if means else 0.0
            if len(vs) >= p.min_windows and stats["reward_var"] > p.variance_ratio * max(
                    float(np.median(vs)), 1e-12) and math.sqrt(stats["reward_var"]) > (
                    p.variance_min_share * spread):
                issues.append("variance_high")
        dirs = [w.reward_direction for w in self.windows[-(p.stagnant_windows - 1):]] \
            if p.stagnant_windows > 1 else []
        if r_dir == "flat" and all(d == "flat" for d in dirs) and len(dirs) == p.stagnant_windows - 1:
            issues.append("reward_stagnant")
        if informative and l_dir == "down" and r_dir == "flat":
            issues.append("exploration_needed")
        issues = [i for i in ISSUES if i in issues]  # table order
        rep = WindowReport(window, dict(stats), r_delta, l_delta, r_dir, l_dir, issues,
                           _status(issues))
        rep.adjustments = self.adjustments_for(issues)
        self.windows.append(rep)
        return rep

    def adjustments_for(self, issues: Iterable[str], windows: Mapping[str, list[Any]] | None = None
                        ) -> list[dict[str, Any]]:
        """Map issues to adjustments (one per parameter; the most urgent issue wins)."""
        chosen: dict[str, dict[str, Any]] = {}
        issue_list = [i for i in ISSUES if i in set(issues)]
        ordered = sorted(issue_list, key=lambda i: (PRIORITIES.index(_RULES[i].priority),
                                                    ISSUES.index(i)))
        for issue in ordered:
            rule = _RULES[issue]
            for adj in rule.adjustments:
                if adj.parameter in chosen:
                    chosen[adj.parameter]["also_raised_by"].append(issue)
                    continue
                key, current, nested = _find_key(adj.parameter, self.config, self.meta_values)
                chosen[adj.parameter] = {
                    "parameter": adj.parameter,
                    "config_key": key,
                    "nested_key": nested,
                    "change": adj.change,
                    "factor": adj.factor,
                    "delta": adj.delta,
                    "current": current,
                    "new": _apply(adj, current),
                    "issue": issue,
                    "also_raised_by": [],
                    "priority": rule.priority,
                    "rationale": adj.rationale,
                    "expected_effect": adj.expected_effect,
                }
                if windows is not None:
                    chosen[adj.parameter]["windows"] = list(windows.get(issue, []))
        return list(chosen.values())

    def recommendations(self) -> dict[str, Any]:
        """The ``recommendations`` section: adjustments, config patch, priorities, monitoring."""
        where: dict[str, list[Any]] = {}
        for w in self.windows:
            for issue in w.issues:
                where.setdefault(issue, []).append(w.window)
        adjustments = self.adjustments_for(where, where)
        priorities: dict[str, list[str]] = {p: [] for p in PRIORITIES}
        for a in adjustments:
            ws = a.get("windows") or []
            span = f" (windows {ws[0]}-{ws[-1]})" if len(ws) > 1 else (f" (window {ws[0]})" if ws else "")
            priorities[a["priority"]].append(
                f"{a['parameter']} {a['change']}: {_RULES[a['issue']].description}{span}")
        return {
            "issues": {k: where[k] for k in ISSUES if k in where},
            "adjustments": adjustments,
            "config_patch": config_patch(adjustments),
            "priorities": priorities,
            "monitoring": self.monitoring(adjustments),
            "rule_table": [{"issue": r.issue, "priority": r.priority, "description": r.description,
                            "adjustments": [f"{a.parameter} {a.change}" for a in r.adjustments]}
                           for r in RULE_TABLE],
        }

    def monitoring(self, adjustments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What to watch after applying the adjustments, with thresholds from this run."""
        p = self.params
        out: list[dict[str, Any]] = []
        last = self.windows[-1].stats if self.windows else {}
        if last.get("loss_median") is not None:
            sig = max(float(last.get("loss_sigma") or 0.0), 1e-12)
            out.append({"metric": "loss",
                        "threshold": f"> {last['loss_median'] + p.spike_z * sig:.4g} "
                                     f"(window median + {p.spike_z:g} robust sigma)",
                        "why": "a loss spike means an update overshot; act before it repeats"})
        if last.get("reward_mean") is not None:
            n = max(int(last.get("n_reward") or 1), 1)
            se = math.sqrt(float(last.get("reward_var") or 0.0) / n)
            out.append({"metric": "reward_mean",
                        "threshold": f"< {last['reward_mean'] - p.flat_z * se * math.sqrt(2):.4g} "
                                     f"(window mean falls {p.flat_z:g} standard errors)",
                        "why": "a falling reward after an adjustment means it went the wrong way"})
        if last.get("reward_var") is not None:
            out.append({"metric": "reward_var",
                        "threshold": f"> {p.variance_ratio * float(last['reward_var']):.4g} "
                                     f"({p.variance_ratio:g}x the last window)",
                        "why": "rising variance means a noisier signal and larger gradient variance"})
        params = {a["parameter"] for a in adjustments}
        if "kl_coef" in params:
            out.append({"metric": "kl", "threshold": "> 1.5x target, or robust z of log KL > 6",
                        "why": "a changed KL coefficient moves KL; watch for a runaway or a stall"})
        if "max_grad_norm" in params:
            out.append({"metric": "grad_norm", "threshold": "clipped on > 5% of the last 300 steps",
                        "why": "a tighter clip that saturates sets the step size instead of the LR"})
        if "temperature" in params or "reward_weight" in params:
            out.append({"metric": "entropy", "threshold": "< 0.3x early level, or > 1.5x",
                        "why": "temperature and reward weight shift exploration; collapse or "
                               "blow-up means it went too far"})
        return out


def config_patch(adjustments: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's config keys with new values; ``"x0.8"``/``"+0.02"`` where the value is unknown.

    >>> config_patch([{"parameter": "learning_rate", "config_key": "actor.optim.lr",
    ...                "nested_key": True, "new": 8e-7, "factor": 0.8, "delta": None}])
    {'actor': {'optim': {'lr': 8e-07}}}
    """
    patch: dict[str, Any] = {}
    for a in adjustments:
        key = a.get("config_key") or a["parameter"]
        value = a.get("new")
        if value is None:
            value = f"x{a['factor']:g}" if a.get("factor") is not None else f"{a['delta']:+g}"
        if a.get("nested_key"):
            _set_nested(patch, key, value)
        else:
            patch[key] = value
    return patch


# -- YAML (a small emitter: no PyYAML dependency) ------------------------------------------------
def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            return ".nan" if v != v else (".inf" if v > 0 else "-.inf")
        return repr(v) if isinstance(v, float) else str(v)
    s = str(v)
    # double-quoted JSON-style strings are valid YAML and escape everything that needs it
    import json

    return json.dumps(s, ensure_ascii=False)


def to_yaml(data: Any, indent: int = 0) -> str:
    """Emit dicts, lists and scalars as block YAML (strings double-quoted).

    >>> print(to_yaml({"lr": 8e-07, "tags": ["a", 1], "empty": {}}), end="")
    lr: 8e-07
    tags:
      - "a"
      - 1
    empty: {}
    """
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(data, Mapping):
        if not data:
            return pad + "{}\n"
        for k, v in data.items():
            key = _yaml_scalar(str(k)) if not str(k).replace("_", "").replace(".", "").isalnum() \
                else str(k)
            if isinstance(v, Mapping) and v:
                lines.append(f"{pad}{key}:\n" + to_yaml(v, indent + 1).rstrip("\n"))
            elif isinstance(v, (list, tuple)) and v:
                lines.append(f"{pad}{key}:\n" + to_yaml(list(v), indent + 1).rstrip("\n"))
            elif isinstance(v, Mapping):
                lines.append(f"{pad}{key}: {{}}")
            elif isinstance(v, (list, tuple)):
                lines.append(f"{pad}{key}: []")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(v)}")
    elif isinstance(data, (list, tuple)):
        if not data:
            return pad + "[]\n"
        for v in data:
            if isinstance(v, (Mapping, list, tuple)) and v:
                body = to_yaml(v, indent + 1)
                first, _, rest = body.lstrip(" ").partition("\n")
                lines.append(f"{pad}- {first}" + (f"\n{rest.rstrip(chr(10))}" if rest.strip() else ""))
            else:
                empty = "{}" if isinstance(v, Mapping) else "[]"
                lines.append(f"{pad}- {_yaml_scalar(v) if not isinstance(v, (Mapping, list, tuple)) else empty}")
    else:
        lines.append(pad + _yaml_scalar(data))
    return "\n".join(lines) + "\n"

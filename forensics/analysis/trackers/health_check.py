"""Health check per training window (epoch or block of steps), judged against the earlier windows.

A practitioner reviewing a run builds a table per epoch (average reward, average loss, reward
variance, their trends), names what went wrong in each epoch and decides what to change. This
module does the same with a documented rule table, offline (the ``windows`` tracker feeds it the
windows of a scan) and online: a trainer calls :meth:`HealthCheck.after_epoch` with the epoch's
metrics (plain lists or numbers, no trainer dependency) and gets the issues and adjustments back.

A window is summarised by mergeable moments (:class:`forensics.analysis.stats.moments.Moments`) of its
reward, loss and log KL. Each window is judged against a *bounded* summary of the earlier ones:
the previous window, the last ``memory`` windows' means, variances and window-to-window moves,
and running sums for the autocorrelation. The work per window is constant, whatever the number
of windows (``HealthCheck.work`` counts it).

When a mean moved significantly
-------------------------------
A move of a window mean against the previous window is *up* or *down* only when it is larger than
both

* ``flat_z`` standard errors of the difference of the two means, where the standard error
  accounts for autocorrelation (training metrics are smooth: a window of ``n`` rows with lag-1
  autocorrelation ``phi`` holds about ``n (1 - phi) / (1 + phi)`` independent values; ``phi`` is
  pooled over the windows so far and corrected for its small-window bias), and
* ``jump_z`` times the root mean square of the last ``memory`` window-to-window moves (what this
  run's windows usually do, slow drifts of autocorrelated noise included);

otherwise it is *flat*. Until ``min_windows`` windows came before, a window's direction is not
judged (there is nothing to compare its moves with).

Issues
------

Each issue is one row of :data:`RULE_TABLE` (an :class:`IssueRule`): the condition it checks,
its priority, the adjustments it asks for and its advice, declared together; ``forensics rules``
and ``docs/rules.md`` list them beside the rules (tracker ``windows``). The conditions marked (*)
hold only where the loss is a progress signal: its window mean is ``loss_level_sigmas`` standard
deviations away from zero, and the algorithm is not a critic-free group method (GRPO, RLOO,
DAPO: their loss sits near zero and rises with beta * KL, SIGNATURES 1.1).

When several issues change the same parameter, the most urgent one wins (ties: table order) and
a change is never compounded; an issue that would move a parameter the other way is held back.
In a scan, :mod:`forensics.analysis.diagnosis.recommendations` ranks these below the findings and their
causal chain.

Config keys (online use): an adjustment names the key of the trainer config passed in when the
config holds one of the parameter's keys (:data:`forensics.analysis.trainer_keys.CONFIG_KEYS`, the
one table of trainer config keys), with the new value computed
from the config's value; otherwise the adjustment is given in words (``text``), never under a
made-up key.

>>> hc = HealthCheck(config={"lr": 1e-5})
>>> rng = np.random.default_rng(0)
>>> for epoch in range(5):
...     rep = hc.after_epoch({"reward": 0.5 + rng.normal(0, 0.01, 50), "loss": 1 + rng.normal(0, 0.01, 50)})
>>> rep = hc.after_epoch({"reward": 0.2 + rng.normal(0, 0.01, 50), "loss": 1 + rng.normal(0, 0.01, 50)})
>>> rep.issues, rep.status
(['reward_declining'], 'alert')
>>> [(a["parameter"], a["change"], a["config_key"], a["new"]) for a in rep.adjustments]
[('learning_rate', '-20%', 'lr', 8e-06)]
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

import numpy as np

from ...config import algorithm_family, param
from ...records import record
from ..stats.moments import Moments
from ..trainer_keys import PARAMETERS, config_keys, set_key

__all__ = [
    "ISSUES",
    "PRIORITIES",
    "RULE_TABLE",
    "SERIES",
    "Adjustment",
    "HealthCheck",
    "HealthCheckParams",
    "IssueRule",
    "WindowReport",
    "config_patch",
    "summary",
    "window_ranges",
    "window_stats",
    "window_text",
]

PRIORITIES = ("immediate", "short_term", "medium_term")
#: The series a window is judged on.
SERIES = ("reward", "loss", "log_kl")


@record
class HealthCheckParams:
    """The window check's thresholds (``[windows]`` in a config)."""

    flat_z: float = param(3.0, "A move of a window mean within this many standard errors (corrected "
                          "for autocorrelation) of the previous window's is flat.")
    jump_z: float = param(5.0, "...and a move up or down must also exceed this many times the root "
                          "mean square of the run's recent window-to-window moves.")
    min_windows: int = param(4, "Earlier windows needed before a window's moves are judged.")
    memory: int = param(16, "Earlier windows each window is compared with (a bounded summary: "
                        "constant work per window).")
    spike_min_rows: int = param(20, "Loss values a window needs before its spike is judged (the "
                                "losses tracker judges spikes in short windows).")
    spike_z: float = param(8.0, "A loss value this many standard deviations of the window's other "
                           "values above their mean is a spike (SIGNATURES #20: healthy runs stay "
                           "below 4.5 robust sigmas).")
    variance_ratio: float = param(2.0, "Window reward variance above this multiple of the recent "
                                  "windows' median variance is high (and significant, see jump_z).")
    variance_min_share: float = param(0.1, "Variance high also needs the reward's standard deviation "
                                      "above this share of the range of window means so far.", le=1)
    kl_rise_factor: float = param(2.0, "A significant rise of KL to this many times the previous "
                                  "window's (geometric mean) is kl_rising.")
    loss_level_sigmas: float = param(2.0, "A window's loss is a progress signal only where |mean| "
                                     "exceeds this many standard deviations (a GRPO loss near zero "
                                     "is not).")
    plateau_windows: int = param(8, "Windows over which a reward that does not rise is a plateau.", ge=3)
    plateau_t: float = param(2.0, "The reward moves (no plateau) when the slope of the last "
                             "plateau_windows window means exceeds this many standard errors.")


@record(frozen=True)
class Adjustment:
    """One row of the rule table: change ``parameter`` by ``factor``."""

    parameter: str
    factor: float
    rationale: str
    expected_effect: str

    @property
    def change(self) -> str:
        return f"{(self.factor - 1.0) * 100:+.0f}%"

    @property
    def direction(self) -> str:
        return "raise" if self.factor > 1.0 else "lower"


@record(frozen=True)
class IssueRule:
    """One window issue: when it holds (``condition``), how urgent it is, what to change."""

    issue: str
    priority: str
    description: str
    condition: str
    adjustments: tuple[Adjustment, ...]
    advice: str = ""

    @property
    def remedy(self) -> str:
        """The adjustments in words (``learning rate -20%``), then the advice."""
        changes = ", ".join(f"{PARAMETERS.get(a.parameter, a.parameter)} {a.change}" for a in self.adjustments)
        return ". ".join(t for t in (changes, self.advice) if t) or "none"


_A = Adjustment
#: The documented rule table: issue -> priority and adjustments (see the module docstring).
RULE_TABLE: tuple[IssueRule, ...] = (
    IssueRule("kl_rising", "immediate", "KL to the reference rose sharply",
              "log KL moved up and the window's geometric-mean KL is kl_rise_factor times the "
              "previous window's or more.", (
        _A("kl_coef", 1.2,
           "The policy is leaving the reference faster than the penalty holds it; a stronger "
           "penalty pulls it back before the reward is hacked or collapses.",
           "KL levels off within a window; reward growth may slow."),
    )),
    IssueRule("loss_spiking", "immediate", "a loss value spiked far above the window's others",
              "The window's largest loss lies spike_z standard deviations of the window's other "
              "loss values above their mean (windows of spike_min_rows values or more).", (
        _A("learning_rate", 0.8,
           "Spikes mean single updates overshoot; a smaller step keeps them inside the trust region.",
           "Fewer and smaller loss spikes within one or two windows; slightly slower progress."),
        _A("max_grad_norm", 0.8,
           "A tighter gradient clip bounds the size of the update a bad batch can make.",
           "Spike magnitude capped; grad_norm clipped more often (keep it under ~5% of steps)."),
    )),
    IssueRule("reward_declining", "immediate", "mean reward fell significantly",
              "The mean reward moved down.", (
        _A("learning_rate", 0.8,
           "A falling reward often follows too-large policy updates; a smaller step stabilises them.",
           "Reward stops falling; recovery is gradual."),
    ), "Roll back to the checkpoint at the best level; if KL surged, see the KL findings first."),
    IssueRule("loss_high", "short_term", "loss rose above the recent windows' level",
              "The mean loss moved up to above every one of the last memory windows (*).", (
        _A("learning_rate", 0.8,
           "A loss above the run's own level suggests the optimiser overshoots its minimum.",
           "Loss returns toward the run's earlier level over the next windows."),
    )),
    IssueRule("overfitting", "short_term", "reward and loss rising together",
              "Reward and loss both moved up (*).", (
        _A("kl_coef", 1.2,
           "Reward rising with the loss is the over-optimisation signature: the policy exploits the "
           "reward while drifting from the reference; a stronger KL penalty holds it back.",
           "KL to the reference flattens; reward growth slows but generalises better."),
    )),
    IssueRule("variance_high", "short_term", "reward variance high",
              "The reward variance exceeds variance_ratio x the median of the last memory windows' "
              "and jump_z standard errors of the log variance, and its standard deviation exceeds "
              "variance_min_share of the range of window means so far.", (
        _A("max_grad_norm", 0.8,
           "High reward variance gives high-variance gradients; a tighter clip bounds their effect.",
           "Steadier updates; reward variance falls over the next windows."),
    )),
    IssueRule("reward_plateau", "medium_term", "reward on a plateau",
              "Over the last plateau_windows windows the mean reward neither rose nor fell (slope "
              "within plateau_t standard errors of 0).", (),
              "Stop early if the run has converged; otherwise check the entropy (collapse) and "
              "the share of groups whose responses all score alike."),
    IssueRule("exploration_needed", "medium_term", "loss improving but reward flat",
              "The loss moved down while the reward stayed flat (*).", (
        _A("temperature", 1.1,
           "The optimiser still makes progress on its loss but the samples no longer discover "
           "higher-reward behaviour: sampling is too narrow.",
           "More diverse completions and higher entropy; reward variance rises first, then reward."),
    )),
)
ISSUES = tuple(r.issue for r in RULE_TABLE)
_RULES = {r.issue: r for r in RULE_TABLE}

# -- window statistics ---------------------------------------------------------------------------
def _median(values: Iterable[float]) -> float:
    """``float(np.median(values))`` of the few values a window is judged by, in Python (numpy's
    call costs more than sorting a few dozen numbers): the middle value, or the mean of the two
    middle ones, as numpy computes it.

    >>> _median([3.0, 1.0, 2.0]), _median([4, 1, 3, 2]), _median([1.0, float("nan")])
    (2.0, 2.5, nan)
    """
    v = sorted(values)
    n = len(v)
    if not n:  # numpy's answer for none (without its warning)
        return math.nan
    total = sum(v)
    if total != total and any(x != x for x in v):  # NaN among them (a sum is NaN for inf - inf too)
        return math.nan
    mid = n // 2
    return float(v[mid]) if n % 2 else (float(v[mid - 1]) + float(v[mid])) / 2.0


def _arr(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    return np.atleast_1d(np.asarray(values, dtype=float)).ravel()


def _log_positive(kl: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(kl > 0, np.log(np.where(kl > 0, kl, 1.0)), np.nan)


def window_stats(reward: Any = None, loss: Any = None, kl: Any = None) -> dict[str, Moments]:
    """The moments a window is judged on, from its per-step values (lists, arrays or numbers).

    >>> m = window_stats([1.0, 2.0, 3.0], [0.5, 0.5, 0.6, 0.5], [0.1, 0.1])
    >>> m["reward"].mean, m["reward"].var, m["loss"].n, round(float(np.exp(m["log_kl"].mean)), 3)
    (2.0, 1.0, 4.0, 0.1)
    """
    return {"reward": Moments.of(_arr(reward)), "loss": Moments.of(_arr(loss)),
            "log_kl": Moments.of(_log_positive(_arr(kl)))}


def summary(m: Mapping[str, Moments]) -> dict[str, float | int | None]:
    """The readable statistics of a window: counts, means, variances, KL, the loss spike score."""
    r, lo, k = m["reward"], m["loss"], m["log_kl"]
    return {"n_reward": int(r.n), "reward_mean": r.mean, "reward_var": r.var,
            "n_loss": int(lo.n), "loss_mean": lo.mean, "loss_var": lo.var, "loss_max_z": lo.max_z(),
            "kl": math.exp(k.mean) if k.mean is not None else None}


# -- reports -------------------------------------------------------------------------------------
@record
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


@record
class _Memory:
    """The bounded summary of the earlier windows a window is judged against."""

    size: int
    plateau: int
    moves: dict[str, deque[float]] = field(default_factory=dict)
    means: dict[str, deque[float]] = field(default_factory=dict)
    reward_vars: deque[float] = field(default_factory=deque)
    reward_means: deque[float] = field(default_factory=deque)
    lag: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # (lag-1 autocorrelation, n)
    mean_range: list[float] = field(default_factory=lambda: [math.inf, -math.inf])

    def __post_init__(self) -> None:
        self.moves = {s: deque(maxlen=self.size) for s in SERIES}
        self.means = {s: deque(maxlen=self.size) for s in SERIES}
        self.reward_vars = deque(maxlen=self.size)
        self.reward_means = deque(maxlen=self.plateau)
        self.lag = {s: deque(maxlen=self.size) for s in SERIES}


class HealthCheck:
    """Per-window issue detection and the adjustments the rule table maps them to.

    Parameters
    ----------
    config
        the trainer's config (flat or nested dict); adjustments use its keys and values.
    params
        :class:`HealthCheckParams` (thresholds).
    algorithm
        the run's algorithm (a group method's loss is not a progress signal).

    Use online: ``report = hc.after_epoch({"reward": rewards_this_epoch, "loss": losses})``; then
    ``report.adjustments``. :meth:`recommendations` summarises every window seen so far.
    ``work`` counts the values each window was compared with (constant per window).
    """

    def __init__(self, config: Mapping[str, Any] | None = None,
                 params: HealthCheckParams | None = None,
                 algorithm: str | None = None, judge_loss: bool | None = None) -> None:
        self.algorithm = (algorithm or "").lower()
        #: whether the window's loss is judged (spikes, rises): a scan passes the losses tracker's
        #: own rule (forensics.analysis.context.loss_is_progress), so a window never alerts on a
        #: loss the trackers set aside; online, every loss but a group method's surrogate
        self.judge_loss = algorithm_family(self.algorithm) != "group" if judge_loss is None else judge_loss
        self.config = dict(config or {})
        self.params = params or HealthCheckParams()
        self.windows: list[WindowReport] = []
        self.work = 0
        p = self.params
        self._mem = _Memory(max(p.memory, 1), max(p.plateau_windows, 2))
        self._prev: dict[str, Moments] | None = None

    def after_epoch(self, metrics: Mapping[str, Any], epoch: Any = None) -> WindowReport:
        """Judge one epoch from its per-step metrics (``reward``/``reward_mean``, ``loss``/``policy_loss``, ``kl``)."""
        reward = metrics.get("reward_mean", metrics.get("reward"))
        loss = metrics.get("loss", metrics.get("policy_loss"))
        window = epoch if epoch is not None else len(self.windows)
        return self.add_window(window, window_stats(reward, loss, metrics.get("kl")))

    # -- the judge -------------------------------------------------------------------------
    def _phi(self, name: str) -> float:
        """Lag-1 autocorrelation of a series: the median over the recent windows (a window with a
        trend inside does not sway it), corrected for the bias of short windows (an estimate from
        n values falls short of phi by about (1 + 3 phi) / n)."""
        lags = self._mem.lag[name]
        if not lags:
            return 0.0
        self.work += len(lags)
        phi = _median([r for r, _ in lags])
        n = max(_median([n for _, n in lags]), 2.0)
        return float(min(max(phi + (1.0 + 3.0 * max(phi, 0.0)) / n, 0.0), 0.99))

    @staticmethod
    def _mean_var(m: Moments, phi: float) -> float:
        """Variance of a window mean under lag-1 autocorrelation ``phi``: fewer independent
        values, and a within-window variance that falls short of the process's."""
        var = m.var or 0.0
        short = (1.0 + phi) / ((1.0 - phi) * m.n)
        return var / max(1.0 - short, 0.1) * (1.0 + phi) / ((1.0 - phi) * m.n)

    def _move(self, name: str, cur: Moments, prev: Moments | None) -> tuple[float | None, str | None]:
        """The move of the window mean against the previous window, and up / down / flat."""
        if prev is None or cur.mean is None or prev.mean is None:
            return None, None
        delta = cur.mean - prev.mean
        moves = self._mem.moves[name]
        if len(self.windows) < self.params.min_windows or cur.n < 2 or prev.n < 2 or not moves:
            return delta, None
        phi = self._phi(name)
        se = math.sqrt(self._mean_var(cur, phi) + self._mean_var(prev, phi))
        rms = math.sqrt(sum(d * d for d in moves) / len(moves))
        self.work += len(moves)
        p = self.params
        if abs(delta) > p.flat_z * se and abs(delta) > p.jump_z * rms and delta != 0.0:
            return delta, "up" if delta > 0 else "down"
        return delta, "flat"

    def _plateau(self, directions: dict[str, str | None]) -> bool:
        """The last ``plateau_windows`` reward means do not rise (slope t below ``plateau_t``)."""
        y = self._mem.reward_means
        if len(y) < self._mem.plateau or directions["reward"] is None or directions["reward"] == "down":
            return False
        self.work += len(y)
        x = np.arange(len(y), dtype=np.float64)
        v = np.asarray(y, dtype=np.float64)
        xc = x - x.mean()
        slope = float(xc @ (v - v.mean()) / (xc @ xc))
        resid = v - v.mean() - slope * xc
        se = math.sqrt(float(resid @ resid) / (len(v) - 2) / float(xc @ xc))
        if se == 0.0:
            return slope == 0.0
        return abs(slope) / se < self.params.plateau_t

    def _variance_high(self, r: Moments) -> bool:
        """The window's reward variance far above the median of earlier windows' (a jump beyond
        its sampling noise, given the autocorrelation), and large against the range of means."""
        p, mem = self.params, self._mem
        if r.var is None or len(mem.reward_vars) < p.min_windows:
            return False
        self.work += len(mem.reward_vars)
        ref = _median(mem.reward_vars)
        phi = self._phi("reward")
        neff = r.n * (1 - phi) / (1 + phi)
        se_log = math.sqrt(2.0 / max(neff - 1.0, 1.0))
        spread = mem.mean_range[1] - mem.mean_range[0]
        return bool(r.var > p.variance_ratio * max(ref, 1e-12)
                    and math.log(r.var / max(ref, 1e-300)) > p.jump_z * se_log
                    and math.sqrt(r.var) > p.variance_min_share * spread)

    def _remember(self, cur: dict[str, Moments], moves: dict[str, float | None]) -> None:
        """The current window joins the bounded summary."""
        mem = self._mem
        for s in SERIES:
            move = moves[s]
            if move is not None:
                mem.moves[s].append(move)
            mean = cur[s].mean
            if mean is not None:
                mem.means[s].append(mean)
        if cur["reward"].var is not None:
            mem.reward_vars.append(cur["reward"].var)
        self._prev = cur

    def add_window(self, window: Any, moments: Mapping[str, Moments]) -> WindowReport:
        """Judge a window (its :func:`window_stats`) against the bounded summary of earlier ones."""
        p, mem = self.params, self._mem
        cur = {s: moments.get(s) or Moments() for s in SERIES}
        prev = self._prev
        for s in SERIES:  # the autocorrelation: the current window counts
            if cur[s].n > 2:
                mem.lag[s].append((cur[s].lag1, cur[s].n))
        moves: dict[str, float | None] = {}
        dirs: dict[str, str | None] = {}
        for s in SERIES:
            moves[s], dirs[s] = self._move(s, cur[s], prev[s] if prev else None)
        r, lo = cur["reward"], cur["loss"]
        if r.mean is not None:
            mem.reward_means.append(r.mean)
            mem.mean_range = [min(mem.mean_range[0], r.mean), max(mem.mean_range[1], r.mean)]
        issues: list[str] = []
        if dirs["log_kl"] == "up" and (moves["log_kl"] or 0.0) >= math.log(p.kl_rise_factor):
            issues.append("kl_rising")
        z = lo.max_z() if lo.n >= p.spike_min_rows and self.judge_loss else None
        if z is not None and z >= p.spike_z:
            issues.append("loss_spiking")
        if dirs["reward"] == "down":
            issues.append("reward_declining")
        sd = math.sqrt(lo.var) if lo.var else 0.0
        informative = self.judge_loss and lo.mean is not None and abs(lo.mean) > p.loss_level_sigmas * sd
        if informative and dirs["loss"] == "up" and mem.means["loss"] and \
                lo.mean > max(mem.means["loss"]):  # type: ignore[operator]
            self.work += len(mem.means["loss"])
            issues.append("loss_high")
        if informative and dirs["reward"] == "up" and dirs["loss"] == "up":
            issues.append("overfitting")
        if self._variance_high(r):
            issues.append("variance_high")
        if self._plateau(dirs):
            issues.append("reward_plateau")
        if informative and dirs["loss"] == "down" and dirs["reward"] == "flat":
            issues.append("exploration_needed")
        issues = [i for i in ISSUES if i in issues]  # table order
        self._remember(cur, moves)
        rep = WindowReport(window, summary(cur), moves["reward"], moves["loss"], dirs["reward"],
                           dirs["loss"], issues, _status(issues))
        rep.adjustments = self.adjustments_for(issues)
        self.windows.append(rep)
        return rep

    # -- adjustments (online use) ---------------------------------------------------------
    def adjustments_for(self, issues: Iterable[str], windows: Mapping[str, list[Any]] | None = None
                        ) -> list[dict[str, Any]]:
        """Map issues to adjustments: one per parameter, the most urgent issue first; an issue
        that would move a parameter the other way is held back (``held_back``)."""
        chosen: dict[str, dict[str, Any]] = {}
        wanted = set(issues)
        ordered = sorted((i for i in ISSUES if i in wanted),
                         key=lambda i: (PRIORITIES.index(_RULES[i].priority), ISSUES.index(i)))
        for issue in ordered:
            rule = _RULES[issue]
            for adj in rule.adjustments:
                if adj.parameter in chosen:
                    c = chosen[adj.parameter]
                    c["also_raised_by" if c["direction"] == adj.direction else "held_back"].append(issue)
                    continue
                key, current, nested = _find_key(adj.parameter, self.config)
                new = _scaled(current, adj.factor)
                chosen[adj.parameter] = {
                    "parameter": adj.parameter, "direction": adj.direction, "change": adj.change,
                    "factor": adj.factor, "config_key": key if new is not None else None,
                    "nested_key": nested, "current": current, "new": new, "issue": issue,
                    "also_raised_by": [], "held_back": [], "priority": rule.priority,
                    "rationale": adj.rationale, "expected_effect": adj.expected_effect,
                }
                if windows is not None:
                    chosen[adj.parameter]["windows"] = window_ranges(windows.get(issue, []))
        return list(chosen.values())

    def recommendations(self) -> dict[str, Any]:
        """The windows' issues, adjustments, config patch, priorities and monitoring (online use;
        a scan ranks its findings first: :mod:`forensics.analysis.diagnosis.recommendations`)."""
        where: dict[str, list[Any]] = {}
        for w in self.windows:
            for issue in w.issues:
                where.setdefault(issue, []).append(w.window)
        adjustments = self.adjustments_for(where, where)
        priorities: dict[str, list[str]] = {p: [] for p in PRIORITIES}
        for a in adjustments:
            priorities[a["priority"]].append(
                f"{a['parameter']} {a['change']}: {_RULES[a['issue']].description}"
                f" ({window_text(where[a['issue']])})")
        for issue, ws in where.items():
            rule = _RULES[issue]
            if not rule.adjustments:
                priorities[rule.priority].append(f"{rule.description} ({window_text(ws)}): {rule.advice}")
        patch, text = config_patch(adjustments)
        return {
            "issues": {k: window_ranges(where[k]) for k in ISSUES if k in where},
            "adjustments": adjustments,
            "config_patch": patch,
            "not_in_config": text,
            "priorities": priorities,
            "monitoring": self.monitoring(adjustments),
        }

    def monitoring(self, adjustments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What to watch after applying the adjustments, with thresholds from this run."""
        return monitoring(self.windows[-1].stats if self.windows else {}, self.params,
                          {a["parameter"] for a in adjustments})


def monitoring(last: Mapping[str, Any], p: HealthCheckParams, params: set[str]) -> list[dict[str, Any]]:
    """What to watch after a change, with thresholds from the last window's statistics."""
    out: list[dict[str, Any]] = []
    if last.get("loss_mean") is not None and last.get("loss_var"):
        sd = math.sqrt(float(last["loss_var"]))
        out.append({"metric": "loss", "threshold": f"> {last['loss_mean'] + p.spike_z * sd:.4g}",
                    "why": f"{p.spike_z:g} standard deviations above the last window's mean: an "
                           "update overshot; act before it repeats"})
    if last.get("reward_mean") is not None and last.get("reward_var"):
        n = max(int(last.get("n_reward") or 1), 1)
        se = math.sqrt(float(last["reward_var"]) / n)
        out.append({"metric": "reward_mean",
                    "threshold": f"< {last['reward_mean'] - p.flat_z * se * math.sqrt(2):.4g}",
                    "why": "a window mean this low fell significantly: the change went the wrong way"})
    if last.get("reward_var"):
        out.append({"metric": "reward_var",
                    "threshold": f"> {p.variance_ratio * float(last['reward_var']):.4g}",
                    "why": f"{p.variance_ratio:g}x the last window: a noisier signal and larger "
                           "gradient variance"})
    if "kl_coef" in params or "learning_rate" in params:
        out.append({"metric": "kl", "threshold": "> 1.5x the target, or a spike (kl.spike)",
                    "why": "a changed KL coefficient or learning rate moves KL; watch for a runaway "
                           "or a stall"})
    if "max_grad_norm" in params:
        out.append({"metric": "grad_norm", "threshold": "clipped on > 5% of the last 300 steps",
                    "why": "a tighter clip that saturates sets the step size instead of the LR"})
    if "temperature" in params:
        out.append({"metric": "entropy", "threshold": "< 0.3x the early level, or > 1.5x",
                    "why": "the temperature shifts exploration; collapse or blow-up means it went "
                           "too far"})
    return out


def window_ranges(windows: list[Any]) -> list[Any]:
    """Consecutive integer windows as ``[first, last]`` ranges (a long run has tens, not
    thousands, of entries); other labels as they are."""
    out: list[Any] = []
    for w in windows:
        if isinstance(w, int) and out and isinstance(out[-1], list) and out[-1][1] == w - 1:
            out[-1][1] = w
        elif isinstance(w, int):
            out.append([w, w])
        else:
            out.append(w)
    return out


def window_text(windows: list[Any]) -> str:
    """``window 3``, ``windows 3-5, 9``.

    >>> window_text([3, 4, 5, 9])
    'windows 3-5, 9'
    """
    parts = [f"{r[0]}-{r[1]}" if isinstance(r, list) and r[0] != r[1] else str(r[0] if isinstance(r, list) else r)
             for r in window_ranges(windows)]
    return ("window " if len(windows) == 1 else "windows ") + ", ".join(parts)


# -- config lookup (online use) -------------------------------------------------------------------
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


def _find_key(parameter: str, config: Mapping[str, Any]) -> tuple[str | None, Any, bool]:
    for key in config_keys(parameter) or (parameter,):
        found, value, nested = _lookup(config, key)
        if found:
            return key, value, nested
    return None, None, False


def _scaled(current: Any, factor: float) -> float | None:
    """``current * factor`` to 6 significant digits; None unless ``current`` is a number."""
    if isinstance(current, bool) or not isinstance(current, (int, float)) or not math.isfinite(current):
        return None
    return float(f"{current * factor:.6g}")


def config_patch(adjustments: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The config keys with their new values (numbers only), and the adjustments that have no key
    or no known current value, in words.

    >>> config_patch([{"parameter": "learning_rate", "config_key": "actor.optim.lr",
    ...                "nested_key": True, "new": 8e-7, "change": "-20%"},
    ...               {"parameter": "temperature", "config_key": None, "new": None, "change": "+10%"}])
    ({'actor': {'optim': {'lr': 8e-07}}}, ['temperature +10%'])
    """
    patch: dict[str, Any] = {}
    text: list[str] = []
    for a in adjustments:
        key, value = a.get("config_key"), a.get("new")
        if key is None or value is None:
            text.append(f"{a['parameter']} {a['change']}")
        else:
            set_key(patch, key, value, bool(a.get("nested_key")))
    return patch, text

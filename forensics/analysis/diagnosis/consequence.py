"""Severity from consequence: the one place a finding becomes critical, and where an excursion
that came and went becomes information.

Trackers judge each signal alone and emit information or warnings (a tracker's own alarm, such as
"nearly every response cut", is kept as ``tracker_severity`` in the evidence). Only the whole set
of findings, with the course of the reward, says whether the run was damaged, so this pass runs
once, in ``Scan.finish``, over all of them:

* **An isolated excursion is information.** An episode of a spike-type finding (``EXCURSIONS``:
  one bad batch in the gradient norm, the loss or the KL) that spans at most ``blip_rows`` rows (a
  few updates), ended well before the log does (``recover_rows`` rows of calm after it), and was
  followed by no sustained finding of another tracker starting near it (``near_rows``) is
  information, unless the finding recurs (more than ``recur_max`` alarming episodes within
  ``recur_rows`` rows) or reached ``unheard_of_ratio`` times the run's level; a finding whose
  every alarm is such an event says it recovered. Optimizers absorb a bad batch, even one 50-100x
  the run's level; spikes that recur, last, or are followed by damage keep the tracker's warning.
* **Critical only from damage the pass can name.** A finding becomes critical when its damage
  check (``DAMAGE``) names a consequence, which goes into its evidence (``consequence``) and its
  message: non-finite values; a symptom sustained to the end of the log (``damage_share`` of the
  run or more) whose consequence holds there: the reward pinned at its floor or falling, entropy
  or length collapsed while the reward does not improve and has not converged at the best level
  the run reached (convergence is not collapse), responses still cut at the cap in a third or
  more or while the reward stalls, the KL out of its band to the end, no gradient reaching the
  policy, a preference loss above ln 2 to the end. A tracker's own alarm is never enough.
* **Convergence is not collapse.** Entropy falling far below its early level, or groups whose
  rewards tie (``CONVERGENCE``), while the reward climbed over the run and holds the best level it
  reached is a run settling (ties at the ceiling: the prompts are solved): information. Ties at
  the reward's floor never are.
* **Training-only preference signals.** A preference loss near 0 with the pairs won, or margins
  growing (``TRAINING_PAIRS``), read on the training pairs alone while the chosen responses keep
  their likelihood, is memorisation of those pairs: information that asks for an evaluation.
* **A chance rate is not an event.** A warning whose brief episodes recur evenly through a long
  run (every fifth of it, none with more than twice the mean, covering under 2% of it) is the
  series' chance rate: information, so a long noisy run does not open with it.
* **A start-up phase is not a fault.** Truncation that is high in the first rows and has fallen
  below its threshold for the rest of the run (the model learnt the cap) is information.

Severity changes are recorded in the evidence (``severity_from``, ``consequence``), so a reader can
see the tracker's own verdict and why it moved; the tracker scores are recomputed after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from typing import Any

from ...records import record
from ..findings import Finding, Severity
from ..stats.course import Course

__all__ = ["DAMAGE", "EXCURSIONS", "Consequences", "apply_consequences"]

#: Rules that report one excursion of a signal (a spike): information when isolated and recovered.
EXCURSIONS = frozenset({"grad.spike", "grad.explode", "loss.spike", "kl.spike"})

#: Rules about a policy settling, which a run converging shows too (information then).
CONVERGENCE = frozenset({"entropy.collapse", "signal.dead_groups"})
#: Preference rules read from the training pairs alone (information unless the chosen responses
#: lose likelihood too).
TRAINING_PAIRS = frozenset({"pref.overfit", "pref.margin_blowup"})
#: ln 2: a preference loss when the policy equals its reference; above it the policy prefers the
#: rejected responses.
LN2 = math.log(2.0)
#: Share of responses cut at the cap at the end of the log that is damage by itself.
TRUNCATION_DAMAGE = 1.0 / 3.0


@record(frozen=True)
class Consequences:
    """The run's extent, in steps and rows, against which episodes are placed, and the course of
    the series the damage checks read (``courses``: canonical name -> :class:`Course`)."""

    first_step: int
    last_step: int
    rows: int
    courses: Mapping[str, Course] = field(default_factory=dict)
    #: the algorithm family ("critic", "group", "preference"; None: unknown)
    family: str | None = None
    recover_rows: int = 5
    #: rows an excursion may last and still be one event
    blip_rows: int = 5
    #: more than ``recur_max`` alarming excursions within ``recur_rows`` rows of one another recur
    recur_max: int = 2
    recur_rows: int = 100
    #: a spike this many times the run's level is no event, however short (no healthy run logs it)
    unheard_of_ratio: float = 1e3
    near_rows: int = 10
    damage_share: float = 0.2
    damage_min_rows: int = 10
    #: a warning recurring evenly through a run this long is judged against its chance rate
    base_rate_rows: int = 10_000
    base_rate_parts: int = 5
    base_rate_share: float = 0.02

    @property
    def spacing(self) -> float:
        """Steps per logged row (a log every 20 steps has 20)."""
        if self.rows <= 1:
            return 1.0
        return max((self.last_step - self.first_step) / (self.rows - 1), 1.0)

    def rows_between(self, a: int, b: int) -> float:
        return (b - a) / self.spacing

    @property
    def reward(self) -> Course | None:
        return self.courses.get("reward_mean")


#: The series the damage checks read from the per-step store.
COURSE_COLUMNS = ("reward_mean", "reward_max", "truncation_rate", "response_length_mean", "loss", "kl", "kl_seq")


class StoreCourses(Mapping[str, Course]):
    """The course of each of :data:`COURSE_COLUMNS` the per-step store holds, read from it when a
    damage check first asks (``get``), one column at a time.

    A million-step run's course is 16 MB (its steps and values): reading all seven columns at
    once held them, and the frame they came from, at the peak of every large scan with a
    warning (the million-step gauss bench log peaked at 382-384 MB so, at 336-343 MB now),
    though a check reads one or two of them. A column with too few values has no course
    (absent, as ``Course.of`` gives None).

    >>> from forensics.analysis.store import MetricsStore
    >>> store = MetricsStore()
    >>> import numpy as np
    >>> store.append(np.arange(20), {"reward_mean": np.linspace(0.0, 1.0, 20),
    ...                              "loss": np.r_[np.ones(3), np.full(17, np.nan)]})
    >>> courses = StoreCourses(store)
    >>> round(courses["reward_mean"].end, 3), "loss" in courses, sorted(courses)
    (0.947, False, ['reward_mean'])
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._names = [n for n in COURSE_COLUMNS if n in store.names]
        self._read: dict[str, Course | None] = {}

    def __getitem__(self, name: str) -> Course:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._read:
            columns = self._store.frame([name])
            self._read[name] = Course.of(columns["step"], columns[name])
        course = self._read[name]
        if course is None:
            raise KeyError(name)
        return course

    def __iter__(self) -> Iterator[str]:
        return (n for n in self._names if n in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# --- damage: what a sustained finding did to the run -------------------------------------------

def _pinned_below_ceiling(r: Course, c: Consequences) -> bool:
    """The reward ends on one repeated value that is not the top the batches reached (the best
    response's reward, where it is logged): every batch scores the same, below what it could."""
    if not r.pinned:
        return False
    top = c.courses.get("reward_max")
    return top is None or r.end < top.best


def _reward_stalls(f: Finding, c: Consequences) -> str | None:
    """The reward's state that makes a sustained symptom damage, or None (it improves, or holds
    the best level it climbed to: converging)."""
    r = c.reward
    if r is None:
        return None
    if _pinned_below_ceiling(r, c):
        return f"the reward is pinned at {r.end:.4g} (every batch scores the same)"
    if r.falls_from(f.onset_step):
        return f"the reward fell from {r.level_at(f.onset_step):.4g} to {r.end:.4g}"
    if r.converged() or r.improved(f.onset_step):
        return None
    return f"the reward did not improve ({r.level_at(f.onset_step):.4g} at onset, {r.end:.4g} at the end)"


def _collapse(what: str) -> Callable[[Finding, Consequences], str | None]:
    def check(f: Finding, c: Consequences) -> str | None:
        if c.reward is None:
            return f"{what} collapsed and no reward is logged to show the run still learns"
        stalls = _reward_stalls(f, c)
        return f"{what} collapsed and {stalls}" if stalls else None
    return check


def _truncation(f: Finding, c: Consequences) -> str | None:
    rate = c.courses.get("truncation_rate")
    if rate is not None and rate.end >= TRUNCATION_DAMAGE:
        return f"{rate.end:.0%} of responses are still cut at the cap at the end of the log"
    if rate is None and f.evidence.get("pinned_at_cap"):
        return "the mean response length is pinned at the length cap to the end of the log"
    stalls = _reward_stalls(f, c)
    return f"responses are cut at the cap and {stalls}" if stalls else None


def _dead_groups(f: Finding, c: Consequences) -> str | None:
    if f.evidence.get("at_floor"):
        return "every response gets the lowest reward: no group carries a learning signal"
    stalls = _reward_stalls(f, c)
    return f"most groups carry no learning signal and {stalls}" if stalls else None


def _preference_loss_above_ln2(f: Finding, c: Consequences) -> str | None:
    """A preference loss that ends above ln 2: the policy prefers the rejected responses."""
    loss = c.courses.get("loss")
    if c.family == "preference" and loss is not None and loss.end > LN2:
        return (f"the preference loss is still above ln 2 at the end ({loss.end:.3g}): the policy "
                "prefers the rejected responses")
    return None


def _kl_out(f: Finding, c: Consequences) -> str | None:
    """The KL left its band and is still out when the log ends: at or above the level it had
    when it left (or above the prior it broke), over ``damage_share`` of the run. Whether it is
    still rising does not matter: a KL that levels off far out is still out."""
    kl = c.courses.get("kl") or c.courses.get("kl_seq")
    if kl is None:
        return "the KL left its band and stayed out" if _sustained(f, c) else None
    onset = min(onset for _, _, onset in f.episode_ranges())
    if c.rows_between(onset, c.last_step) + 1 < max(c.damage_min_rows, c.damage_share * c.rows):
        return None
    left = kl.level_at(onset)
    if kl.end >= left:
        return f"the KL left its band at step {onset} ({left:.3g}) and is still out at the end ({kl.end:.3g})"
    return None


def _always(consequence: str) -> Callable[[Finding, Consequences], str | None]:
    return lambda f, c: consequence


#: Rules whose sustained condition can damage the run, each with the check that names the damage
#: (None: not damaged). Non-finite values are damage wherever they stand (``NON_FINITE_RULES``).
DAMAGE: dict[str, Callable[[Finding, Consequences], str | None]] = {
    "entropy.collapse": _collapse("entropy"),
    "length.collapse": _collapse("the response length"),
    "signal.reward_floor": _always("the reward is pinned at its floor"),
    "reward.decline": _always("the reward fell and did not recover"),
    "reward.proxy_gain": _always("the reward rises while the task's correctness stays at its floor"),
    "length.truncation": _truncation,
    "kl.excessive": _kl_out,
    "kl.runaway": _kl_out,
    "kl_ctl.wrong_direction": _always("the controller drives the KL away from its target"),
    "signal.dead_groups": _dead_groups,
    "grad.vanish": _always("no gradient reaches the policy"),
    "grad.explode": _always("the gradient norm stays far above its level"),
    "pref.not_learning": _always("the policy never moved from its reference"),
    "pref.reference_mismatch": _preference_loss_above_ln2,
    "loss.divergence": _preference_loss_above_ln2,
}
#: Rules whose damage check reads the end of the log itself, whatever the finding's own range: a
#: reference that is not the policy's start (judged on the first rows by design), a KL that left
#: its band (its runaway episode ends when it stops rising, not when it comes back).
OWN_EXTENT = frozenset({"pref.reference_mismatch", "kl.excessive", "kl.runaway"})
#: Rules whose every finding is damage: a non-finite value reached the update.
NON_FINITE_RULES = frozenset({"grad.nonfinite", "loss.nonfinite"})


def _sustained_after(first: int, last: int, f: Finding, others: list[Finding], c: Consequences) -> list[str]:
    """Rules of other trackers' sustained warning-or-worse findings whose onset falls near the
    excursion ``[first, last]`` of ``f`` (a condition already under way before it is not its
    consequence)."""
    lo = first - c.near_rows * c.spacing
    hi = last + c.near_rows * c.spacing
    out = []
    for g in others:
        if g is f or g.tracker == f.tracker or g.rule in EXCURSIONS or g.severity is Severity.INFO:
            continue
        if any(lo <= onset <= hi for _, _, onset in g.episode_ranges()):
            out.append(g.rule)
    return sorted(set(out))


def _set(f: Finding, severity: Severity, consequence: str, message: str) -> None:
    """Move ``f`` to ``severity`` for ``consequence``: every episode to information, or the last
    one (the episode still open at the end of the log) to critical."""
    f.evidence.setdefault("severity_from", f.severity.value)
    f.evidence["consequence"] = consequence
    f.severity = severity
    if f.episodes:
        for ep in f.episodes if severity is Severity.INFO else [max(f.episodes, key=lambda e: e["last_step"])]:
            ep["severity"] = severity.value
    f.message += message


def _isolated(first: int, last: int, f: Finding, c: Consequences, findings: list[Finding]) -> bool:
    """Whether the excursion over ``[first, last]`` is one event: a few rows long, recovered well
    before the log ends, and followed by no sustained finding of another tracker."""
    if c.rows_between(first, last) + 1 > c.blip_rows:
        return False  # several updates in a row: the policy moved, not one bad batch
    if c.rows_between(last, c.last_step) < c.recover_rows:
        return False  # still under way, or too close to the end to know
    return not _sustained_after(first, last, f, findings, c)


def _recurs(starts: list[int], c: Consequences) -> bool:
    """Whether more than ``recur_max`` of the excursions starting at ``starts`` fall within
    ``recur_rows`` rows: a run that keeps spiking is unstable, not hit by one bad batch."""
    starts = sorted(starts)
    j = 0
    for i, s in enumerate(starts):
        while c.rows_between(starts[j], s) > c.recur_rows:
            j += 1
        if i - j + 1 > c.recur_max:
            return True
    return False


def _downgrade(f: Finding, c: Consequences, findings: list[Finding]) -> None:
    """An excursion's isolated, recovered episodes become information (the whole finding when
    every alarm in it does)."""
    if f.rule not in EXCURSIONS or f.severity is Severity.INFO:
        return
    if (f.evidence.get("peak_ratio") or 0.0) >= c.unheard_of_ratio:
        return  # a magnitude no healthy run logs
    episodes = f.episodes or [{"first_step": f.first_step, "last_step": f.last_step,
                               "severity": f.severity.value}]
    alarms = [e for e in episodes if e["severity"] != Severity.INFO.value]
    if _recurs([int(e["first_step"]) for e in alarms], c):
        return
    calm = [e for e in alarms if _isolated(int(e["first_step"]), int(e["last_step"]), f, c, findings)]
    if len(calm) < len(alarms):
        for e in calm:
            e["severity"] = Severity.INFO.value
        return
    _set(f, Severity.INFO, "isolated: recovered, nothing else moved",
         f"; {'each' if len(alarms) > 1 else 'it'} recovered within {c.blip_rows} rows and nothing "
         "else moved (an isolated excursion)")


def _startup(f: Finding, c: Consequences) -> None:
    """Truncation that fell away after the first rows: the model learnt the cap."""
    rate = c.courses.get("truncation_rate")
    if f.rule != "length.truncation" or f.severity is Severity.INFO or rate is None:
        return
    last = max(last for _, last, _ in f.episode_ranges())
    if c.rows_between(f.first_step, c.first_step) > c.near_rows or \
            c.rows_between(last, c.last_step) < (1 - c.damage_share) * c.rows or rate.end >= 0.05:
        return
    _set(f, Severity.INFO, "start-up: the share fell as the model learnt the cap",
         f"; a start-up phase: the share fell to {rate.end:.0%} by the end")


def _converging(f: Finding, c: Consequences) -> None:
    """Entropy settling, or groups tying, while the reward climbed and holds the best level it
    reached is a run converging (the prompts are being solved), not a collapse."""
    r = c.reward
    if f.rule == "reward.stagnation" and r is not None and r.converged() and "saturation" not in f.message:
        f.message += (f"; a plateau at the best level the run reached after climbing from {r.start:.4g} "
                      "(saturation), not a run that never learnt")
        return
    if f.rule not in CONVERGENCE or f.severity is Severity.INFO or r is None or f.evidence.get("at_floor"):
        return
    if "floor" in f.evidence:  # entropy below the floor of any exploring policy: no settling there
        return
    if f.rule == "signal.dead_groups":
        # ties are saturation only at the ceiling: the groups tie at the batch's top, or the ties
        # began once the reward had climbed to its best level and held it
        ceiling = f.evidence.get("at_ceiling") or r.near_best(f.onset_step)
        if not (ceiling and r.improved() and r.near_best() and not _pinned_below_ceiling(r, c)):
            return
        _set(f, Severity.INFO, "saturation: the groups tie at the top as the prompts are solved",
             f"; the reward climbed from {r.start:.4g} to {r.end:.4g} and holds its best level: the "
             "groups tie because the prompts are solved (saturation); harder prompts, or dropping "
             "solved ones (dynamic sampling), restore the signal")
        return
    if not r.converged():
        return
    _set(f, Severity.INFO, "converging: the reward climbed and holds its best level",
         f"; the reward climbed from {r.start:.4g} to {r.end:.4g} and holds its best level: the run "
         "is converging, not collapsing")


def _training_pairs_only(f: Finding, findings: list[Finding]) -> None:
    """A preference loss near 0 with the pairs won (or margins growing) on the training pairs
    alone is memorisation of those pairs: over-optimisation needs the chosen responses to lose
    likelihood (pref.likelihood_displacement) or an evaluation to diverge."""
    if f.rule not in TRAINING_PAIRS or f.severity is Severity.INFO:
        return
    if any(g.rule == "pref.likelihood_displacement" and g.severity is not Severity.INFO for g in findings):
        return
    _set(f, Severity.INFO, "training pairs only: memorisation, not shown to be over-optimisation",
         "; on the training pairs only, with the chosen responses keeping their likelihood: "
         "memorisation of the training pairs, not over-optimisation; evaluate on held-out pairs "
         "(eval_steps) to tell")


def _base_rate(f: Finding, c: Consequences) -> None:
    """A warning that recurs at a steady rate through a long run, each time briefly, is the
    series' chance rate, not an event: information. Judged on runs of ``base_rate_rows`` rows or
    more, split in ``base_rate_parts``: the episodes fall in every part at a like rate (none holds
    more than twice the mean) and cover under ``base_rate_share`` of the run."""
    if f.severity is not Severity.WARNING or c.rows < c.base_rate_rows or len(f.episodes) < 2 * c.base_rate_parts:
        return
    span = max(c.last_step - c.first_step, 1)
    counts = [0] * c.base_rate_parts
    covered = 0.0
    for first, last, _ in f.episode_ranges():
        counts[min(int((first - c.first_step) / span * c.base_rate_parts), c.base_rate_parts - 1)] += 1
        covered += c.rows_between(first, last) + 1
    mean = sum(counts) / len(counts)
    if min(counts) == 0 or max(counts) > 2 * mean or covered > c.base_rate_share * c.rows:
        return
    _set(f, Severity.INFO, "chance rate: recurs evenly through a long run",
         f"; its {len(f.episodes)} episodes recur evenly through the run ({min(counts)}-{max(counts)} in each "
         f"fifth) and cover {covered / c.rows:.1%} of it: the chance rate of a noisy series, not an event")


def _sustained(f: Finding, c: Consequences) -> bool:
    """Whether ``f``'s latest episode lasts to the end of the log over ``damage_share`` of it."""
    first, last, _ = max(f.episode_ranges(), key=lambda r: r[1])
    if c.rows_between(last, c.last_step) >= c.recover_rows:
        return False  # it ended: recovered
    return c.rows_between(first, last) + 1 >= max(c.damage_min_rows, c.damage_share * c.rows)


def _judge(f: Finding, c: Consequences) -> None:
    if f.tracker == "custom":
        return  # a user's own rule keeps the severity it declares
    if f.severity is Severity.CRITICAL:  # (a finding made before trackers stopped raising it)
        f.evidence.setdefault("tracker_severity", Severity.CRITICAL.value)
        f.severity = Severity.WARNING
    if f.severity is Severity.INFO:
        return
    if f.rule in NON_FINITE_RULES:
        consequence: str | None = "non-finite values reached the update"
    elif f.rule in DAMAGE and (f.rule in OWN_EXTENT or _sustained(f, c)):
        consequence = DAMAGE[f.rule](f, c)
    else:
        consequence = None
    if consequence is not None:
        _set(f, Severity.CRITICAL, consequence, f"; still so when the log ends (step {c.last_step}): "
             f"{consequence}, so the run is damaged" if f.rule not in NON_FINITE_RULES
             else f"; {consequence}: the run is damaged")


def apply_consequences(findings: list[Finding], c: Consequences) -> list[Finding]:
    """Move severities by consequence (see the module doc); return the findings changed."""
    before = {id(f): f.severity for f in findings}
    for f in findings:
        _converging(f, c)
        _startup(f, c)
        _training_pairs_only(f, findings)
    for f in findings:
        _downgrade(f, c, findings)
        _base_rate(f, c)
    for f in findings:
        _judge(f, c)
    return [f for f in findings if f.severity is not before[id(f)]]


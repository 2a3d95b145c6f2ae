"""Timeline: every finding on one axis ordered by onset, with likely cause-and-effect links.

A failing run usually shows a chain: a learning-rate change, then exploding gradients, then a KL
runaway, then a reward collapse. The loudest finding is often the last domino; the post-mortem
should name the first. The links below are *likely* causes, drawn from how RLHF training fails
(see SIGNATURES.md); they are hypotheses to check first, not proofs.

Link rule
---------
An event ``C`` is linked as a likely cause of an event ``E`` when a row of :data:`CAUSAL_RULES`
matches (``C.rule`` matches its cause pattern and ``E.rule`` its effect pattern, shell-style
globs), ``E`` is a warning or critical (an info finding is context, not a symptom; it can
still be a cause), and ``0 <= E.onset - C.onset <= max_lag`` where
``max_lag = max(rule lag in steps, LAG_FRACTION x the run's step span)``. An event never causes
itself, and two events of the same rule are never linked. When several events of one rule could
cause ``E``, only the latest (the smallest lag) is linked, so repeated spikes do not multiply the
links.

Events are the findings, configuration changes among them: the ``hyperparams`` tracker reports a
learning rate, KL coefficient, clip range or batch size that jumps (``hyperparams.lr_change``,
``hyperparams.kl_coef_change``, ``hyperparams.clip_change``, ``hyperparams.batch_size_change``)
with its values before and after, so a change can be the first domino; a learning rate outside
the usual range for the algorithm (``hyperparams.lr_out_of_range``) can cause any training
symptom at any lag. A finding whose episodes were
grouped (repeated spikes) takes part from its first serious episode (warning or critical): an
isolated one-step spike of information level earlier in the run is not the start of the fault.

First domino
------------
Among the events that cause something and are caused by nothing, the earliest onset (ties: the
one with the most direct effects, the more severe, then the rule id); in a damaged run (a critical
finding) only those from which a chain of links leads to the damage, else the earliest critical
finding: a warning that explains none of the damage (noise early in a long run) is never it. Its
``chain`` follows links from it, each time to the earliest effect (ties: the more severe), in
causal order: severity follows damage (the consequence pass), which comes last in a chain. When
nothing links, the first domino is the earliest critical finding, else the earliest warning, with
no chain.

Rule table (cause -> effect, lag in steps, why):

======================================  ========================================  ====
cause                                   effect                                    lag
======================================  ========================================  ====
hyperparams.lr_change                   grad.explode, grad.spike, grad.nonfinite,  50
                                        grad.clip_saturation
hyperparams.lr_change                   kl.spike, kl.runaway, loss.*              100
hyperparams.clip_change,                grad.*, kl.spike, kl.runaway, loss.*      100
hyperparams.batch_size_change
hyperparams.kl_coef_change              kl.runaway, kl.drift, kl.off_target       200
adv.*                                   grad.*                                    50
grad.explode, grad.spike, grad.nonf.    kl.spike, kl.runaway, kl.drift            100
grad.explode, grad.nonfinite            loss.*, reward.*, signal.reward_floor     200
kl_ctl.wrong_direction, stuck, law_m.   kl.runaway, kl.drift, kl.off_target       200
hyperparams.lr_change                   kl.update_stalled, reward.stagnation      100
hyperparams.lr_change                   hyperparams.lr_out_of_range               1
hyperparams.lr_out_of_range             any training symptom                      run
grad.explode, grad.nonfinite,           length.growth, length.truncation          200
kl.excessive, trust_region.exceeded
kl.excessive, trust_region.exceeded     entropy.*, length.collapse, reward.*,     300
                                        signal.reward_floor
length.collapse, signal.reward_floor    signal.reward_floor, signal.dead_groups   300
entropy.collapse, entropy.low           signal.dead_groups                        300
kl.spike, kl.runaway                    reward.*, signal.reward_floor             200
loss.*                                  reward.*, signal.reward_floor             200
length.reward_correlation               length.growth                             200
length.growth, length.coupled_growth    length.truncation                         200
entropy.collapse                        reward.stagnation, reward.plateau         300
entropy.collapse                        length.*                                  300
======================================  ========================================  ====
"""

from __future__ import annotations

import fnmatch
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from ...records import record

if TYPE_CHECKING:
    from ..result import Analysis

__all__ = ["CAUSAL_RULES", "LAG_FRACTION", "CausalRule", "build_timeline", "timeline_from_dict",
           "timeline_section"]

#: The lag allowed for a link is at least this share of the run's step span.
LAG_FRACTION = 0.05

_SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


def glob_match(name: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase(name, pattern)``, without a regular expression for the patterns of
    the tables here (a name, or a prefix and ``*``): ``fnmatchcase`` compiles one per pattern, a
    few milliseconds of every scan's first timeline. Any other pattern goes to ``fnmatchcase``.

    >>> glob_match("grad.spike", "grad.*"), glob_match("kl.high", "kl.high"), glob_match("kl", "kl.*")
    (True, True, False)
    """
    if "?" not in pattern and "[" not in pattern:
        star = pattern.find("*")
        if star < 0:
            return name == pattern
        if star == len(pattern) - 1:
            return name.startswith(pattern[:-1])
    return fnmatch.fnmatchcase(name, pattern)


@record(frozen=True)
class CausalRule:
    """One row of the rule table: cause patterns, effect patterns, max lag in steps, why."""

    causes: tuple[str, ...]
    effects: tuple[str, ...]
    max_lag: int
    why: str

    def matches(self, cause: str, effect: str) -> bool:
        return self.has_cause(cause) and self.has_effect(effect)

    def has_cause(self, rule: str) -> bool:
        return any(glob_match(rule, p) for p in self.causes)

    def has_effect(self, rule: str) -> bool:
        return any(glob_match(rule, p) for p in self.effects)


_GRAD_BAD = ("grad.explode", "grad.spike", "grad.nonfinite")
#: What a learning rate far outside its usual range shows as, sooner or later.
#: The reward's findings: its own tracker's, and the floor the signal tracker sees it pinned at.
_REWARD = ("reward.*", "signal.reward_floor")
_TRAINING_SYMPTOMS = ("kl.*", "trust_region.exceeded", "grad.*", "loss.*", "entropy.*",
                      "length.*", *_REWARD, "signal.dead_groups", "pref.*")
#: The run's whole length, as a lag (a setting in force from the start can cause what comes late).
WHOLE_RUN = 10**12

#: The documented rule table (module docstring); order is only for display.
CAUSAL_RULES: tuple[CausalRule, ...] = (
    CausalRule(("hyperparams.lr_change",), (*_GRAD_BAD, "grad.clip_saturation"), 50,
               "a learning-rate change makes larger updates, which show first in the gradients"),
    CausalRule(("hyperparams.lr_change",), ("kl.spike", "kl.runaway", "loss.*"), 100,
               "a larger learning rate moves the policy faster away from the reference"),
    CausalRule(("hyperparams.clip_change", "hyperparams.batch_size_change"),
               ("grad.*", "kl.spike", "kl.runaway", "loss.*"), 100,
               "a wider clip range or a smaller batch makes larger or noisier updates"),
    CausalRule(("hyperparams.kl_coef_change",), ("kl.runaway", "kl.drift", "kl.off_target"), 200,
               "a weaker KL penalty lets the policy drift from the reference"),
    CausalRule(("adv.*",), ("grad.*",), 50,
               "badly scaled advantages scale the policy gradient directly"),
    CausalRule(_GRAD_BAD, ("kl.spike", "kl.runaway", "kl.drift"), 100,
               "an oversized update moves the policy away from the reference in one step"),
    CausalRule(("grad.explode", "grad.nonfinite"), ("loss.*", *_REWARD), 200,
               "exploding or non-finite gradients corrupt the weights; loss and reward follow"),
    # saturation, overshoot and oscillation are symptoms of KL being off target, not causes
    CausalRule(("kl_ctl.wrong_direction", "kl_ctl.stuck", "kl_ctl.law_mismatch", "kl_ctl.runaway"),
               ("kl.runaway", "kl.drift", "kl.off_target"), 200,
               "a KL controller that does not pull back lets KL drift out of its band"),
    CausalRule(("hyperparams.lr_change",), ("kl.update_stalled", "reward.stagnation"), 100,
               "a learning rate cut by orders of magnitude stops the policy from moving"),
    CausalRule(("hyperparams.lr_change",), ("hyperparams.lr_out_of_range",), 1,
               "the jump took the learning rate out of its usual range"),
    CausalRule(("hyperparams.lr_out_of_range",), _TRAINING_SYMPTOMS, WHOLE_RUN,
               "a learning rate far outside the usual range makes every update too large (or too "
               "small to move the policy)"),
    CausalRule(("grad.explode", "grad.nonfinite", "kl.excessive", "trust_region.exceeded"),
               ("length.growth", "length.truncation"),
               200, "a policy broken by oversized updates rambles to the length cap"),
    CausalRule(("kl.excessive", "trust_region.exceeded"), ("entropy.*", "length.collapse", *_REWARD), 300,
               "a policy pushed far from the reference degenerates: it stops exploring, its "
               "responses collapse, its reward falls or is hacked"),
    CausalRule(("length.collapse", "signal.reward_floor"), ("signal.reward_floor", "signal.dead_groups"), 300,
               "collapsed responses all score the same (the floor): groups carry no signal"),
    CausalRule(("entropy.collapse", "entropy.low"), ("signal.dead_groups",), 300,
               "a policy that no longer explores samples the same response for every prompt"),
    CausalRule(("kl.spike", "kl.runaway"), _REWARD, 200,
               "a policy far from the reference degrades (or hacks) the reward"),
    CausalRule(("loss.*",), _REWARD, 200,
               "a diverging loss is a failing optimisation; the reward follows"),
    CausalRule(("length.reward_correlation",), ("length.growth",), 200,
               "a reward that pays for length makes responses grow"),
    CausalRule(("length.growth", "length.coupled_growth"), ("length.truncation",), 200,
               "growing responses hit the maximum length and are cut"),
    CausalRule(("entropy.collapse",), ("reward.stagnation", "reward.plateau"), 300,
               "a policy that stopped exploring stops finding better responses"),
    CausalRule(("entropy.collapse",), ("length.*",), 300,
               "a collapsed policy repeats itself; lengths drift"),
)


def build_timeline(findings: list[dict[str, Any]], step_span: int = 0) -> dict[str, Any]:
    """Order events by onset, link likely causes to effects, name the first domino.

    ``findings`` are finding dicts (``Finding.to_dict``); ``step_span`` is the run's last minus
    first step.
    """
    raw = [dict(f, kind="finding", finding_index=i, onset_step=_serious_onset(f))
           for i, f in enumerate(findings)]
    raw.sort(key=lambda e: (int(e["onset_step"]), -_SEV_RANK.get(e["severity"], 0), e["rule"],
                            int(e["first_step"])))
    events = []
    for i, e in enumerate(raw):
        ev = {"id": f"e{i}", "rule": e["rule"], "severity": e["severity"], "kind": e["kind"],
              "onset_step": int(e["onset_step"]), "first_step": int(e["first_step"]),
              "last_step": int(e["last_step"]), "message": e.get("message", "")}
        if "finding_index" in e:
            ev["finding_index"] = e["finding_index"]
        events.append(ev)
    floor = int(LAG_FRACTION * max(step_span, 0))
    links: list[dict[str, Any]] = []
    # which rows of the table each rule id can be a cause and an effect in: matched once per id
    # (never per pair of events: a thousand user rules that fire once each stay linear)
    by_rule: dict[str, list[dict[str, Any]]] = {}  # rule id -> its events, in order
    for ev in events:
        by_rule.setdefault(ev["rule"], []).append(ev)
    as_cause = {rid: {k for k, r in enumerate(CAUSAL_RULES) if r.has_cause(rid)} for rid in by_rule}
    as_effect = {rid: {k for k, r in enumerate(CAUSAL_RULES) if r.has_effect(rid)} for rid in by_rule}
    causes_of: dict[int, list[str]] = {}  # table row -> the rule ids that are causes in it
    for rid, rows in as_cause.items():
        for k in rows:
            causes_of.setdefault(k, []).append(rid)
    onsets = {rid: [ev["onset_step"] for ev in evs] for rid, evs in by_rule.items()}  # sorted
    for e in events:
        if _SEV_RANK.get(e["severity"], 0) < 1 or not as_effect[e["rule"]]:
            continue
        candidates = dict.fromkeys(rid for k in sorted(as_effect[e["rule"]]) for rid in causes_of.get(k, ()))
        for rid in candidates:
            if rid == e["rule"]:
                continue
            j = bisect_right(onsets[rid], e["onset_step"]) - 1  # the latest cause of this rule before e
            if j < 0:
                continue
            c = by_rule[rid][j]
            lag = e["onset_step"] - c["onset_step"]
            rows = as_cause[rid] & as_effect[e["rule"]]
            rule = next((CAUSAL_RULES[k] for k in sorted(rows) if lag <= max(CAUSAL_RULES[k].max_lag, floor)), None)
            if rule is not None:
                links.append({"cause": c["id"], "effect": e["id"], "cause_rule": rid, "effect_rule": e["rule"],
                              "lag": lag, "why": rule.why})
    order = {ev["id"]: i for i, ev in enumerate(events)}
    links.sort(key=lambda lk: (order[lk["cause"]], order[lk["effect"]]))
    return {"events": events, "links": links, "first_domino": _first_domino(events, links),
            "rules": [{"causes": list(r.causes), "effects": list(r.effects), "max_lag": r.max_lag,
                       "why": r.why} for r in CAUSAL_RULES],
            "lag_fraction": LAG_FRACTION}


def _serious_onset(f: dict[str, Any]) -> int:
    """A finding's onset for the timeline: that of its first warning or critical episode when its
    episodes were grouped (a serious finding headed by earlier information-level episodes)."""
    onset = int(f["onset_step"])
    eps = f.get("episodes") or []
    if _SEV_RANK.get(f.get("severity", ""), 0) >= 1:
        serious = [int(e["onset_step"]) for e in eps
                   if isinstance(e, dict) and _SEV_RANK.get(e.get("severity", ""), 0) >= 1
                   and isinstance(e.get("onset_step"), int)]
        if serious:
            return max(onset, min(serious))
    return onset


def _reaches(start: str, links: list[dict[str, Any]], targets: set[str]) -> bool:
    """Whether a chain of links leads from ``start`` to one of ``targets`` (itself included)."""
    seen, todo = {start}, [start]
    while todo:
        cur = todo.pop()
        if cur in targets:
            return True
        for lk in links:
            if lk["cause"] == cur and lk["effect"] not in seen:
                seen.add(lk["effect"])
                todo.append(lk["effect"])
    return False


def _first_domino(events: list[dict[str, Any]], links: list[dict[str, Any]]) -> dict[str, Any] | None:
    by_id = {e["id"]: e for e in events}
    causes = {lk["cause"] for lk in links}
    effects = {lk["effect"] for lk in links}
    damage = {e["id"] for e in events if e["severity"] == "critical"}
    # where the run is damaged, the first domino is a cause of the damage: an earlier warning that
    # leads to none (noise in a long run, say) is not where it started
    roots = [by_id[i] for i in causes - effects if not damage or _reaches(i, links, damage)]
    if not roots:
        serious = [e for e in events if _SEV_RANK.get(e["severity"], 0) >= (2 if damage else 1)]
        if not serious:
            return None
        first = serious[0]
        return {**_named(first), "chain": [first["id"]], "chain_rules": [first["rule"]], "linked": False}
    # at the same onset, the root that explains most (direct effects) comes first: a learning-rate
    # change at step 100 is the first domino, not a symptom that starts at the same step
    n_effects = {i: sum(1 for lk in links if lk["cause"] == i) for i in causes}
    roots.sort(key=lambda e: (e["onset_step"], -n_effects[e["id"]], -_SEV_RANK.get(e["severity"], 0),
                              e["rule"]))
    root = roots[0]
    chain = [root["id"]]
    seen = {root["id"]}
    current = root["id"]
    while True:
        nxt = [by_id[lk["effect"]] for lk in links if lk["cause"] == current
               and lk["effect"] not in seen]
        if not nxt:
            break
        nxt.sort(key=lambda e: (e["onset_step"], -_SEV_RANK.get(e["severity"], 0), e["rule"]))  # causal order
        current = nxt[0]["id"]
        chain.append(current)
        seen.add(current)
    return {**_named(root), "chain": chain, "chain_rules": [by_id[i]["rule"] for i in chain],
            "linked": True}


def _named(e: dict[str, Any]) -> dict[str, Any]:
    """What names the first domino: its event id, rule, onset, severity, message and finding."""
    out = {k: e[k] for k in ("id", "rule", "onset_step", "severity", "message")}
    if "finding_index" in e:
        out["finding_index"] = e["finding_index"]
    return out


def timeline_section(analysis: Analysis) -> dict[str, Any]:
    """The ``timeline`` section of the analysis JSON: the timeline of a finished analysis."""
    st = analysis.steps
    span = (st["last"] - st["first"]) if st.get("first") is not None else 0
    return build_timeline([f.to_dict() for f in analysis.findings], span)


def timeline_from_dict(d: dict[str, Any]) -> dict[str, Any]:
    """The timeline of a saved analysis dict (its own section if it has one)."""
    if isinstance(d.get("timeline"), dict):
        return d["timeline"]
    st = d.get("steps") or {}
    span = (st["last"] - st["first"]) if st.get("first") is not None and st.get("last") is not None else 0
    return build_timeline(d.get("findings", []), span)

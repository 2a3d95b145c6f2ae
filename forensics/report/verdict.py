"""The verdict: in one line whether the run is healthy or what broke, where it started, what to do.

Every report opens with it (the terminal summary, the Markdown summary and the HTML's first
screen), from the same inputs: the findings, the timeline's first domino and the
recommendations. It reads the analysis dict only, so a saved ``analysis.json`` gives the same
verdict.

What each report shows of the advice follows one rule, :func:`advice`: the do-now list with the
config patch and command line of exactly its changes; every other recommendation after it, under
its priority, with the changes those ask for as a patch of their own (to apply only if the fault
persists). No report prints the two patches as one: that is ``recommendations.yaml``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis.findings import recurrence_message

__all__ = ["LATER", "advice", "evidence_rows", "start_of", "verdict"]


def _titles() -> dict[str, str]:
    from ..analysis.catalogue import rule_titles

    return rule_titles()


def not_checked(cov: Mapping[str, Any], keys: int = 12) -> list[str]:
    """What the analysis could not judge, in words: the logged columns it did not recognise and
    the trackers that did not run, with their reasons.

    >>> not_checked({"columns": {"unmapped": 2, "unmapped_keys": ["a", "b"]},
    ...              "trackers": {"advantages": {"active": False, "reason": "needs adv_mean"}}})
    ['2 logged column(s) not recognised: a, b', 'advantages not run: needs adv_mean']
    """
    out = []
    cols = cov.get("columns") or {}
    if cols.get("unmapped"):
        names = list(cols.get("unmapped_keys") or [])
        more = f" and {len(names) - keys} more" if len(names) > keys else ""
        shown = ", ".join(str(k) for k in names[:keys]) + more
        out.append(f"{cols['unmapped']} logged column(s) not recognised: {shown}")
    for name, entry in (cov.get("trackers") or {}).items():
        if isinstance(entry, dict) and not entry.get("active"):
            out.append(f"{name} not run: {entry.get('reason', '')}")
    return out


def _counts(crit: int, warn: int) -> str:
    """The alarms in words, for the headline.

    >>> _counts(1, 0), _counts(1, 2), _counts(0, 1), _counts(0, 3)
    ('1 critical finding', '1 critical and 2 warning findings', '1 warning finding', '3 warning findings')
    """
    parts = ([f"{crit} critical"] if crit else []) + ([f"{warn} warning"] if warn or not crit else [])
    return " and ".join(parts) + (" finding" if crit + warn == 1 else " findings")


def start_of(finding: Mapping[str, Any]) -> str:
    """What a run starts with, for the headline: the finding's message, or for a finding of
    several episodes its first episode's, with how many there were and the largest (the
    finding's own message names the largest, which may come long after the start).

    >>> eps = [{"onset_step": 5, "first_step": 5, "message": "x rose to 2 at step 5"},
    ...        {"onset_step": 90, "first_step": 90, "message": "x rose to 9 at step 90"}]
    >>> start_of({"message": "2 episodes; the largest: x rose to 9 at step 90", "episodes": eps})
    'x rose to 2 at step 5, the first of 2 episodes (the largest: x rose to 9 at step 90)'
    >>> start_of({"message": "2 episodes; the largest: x rose to 2 at step 5", "episodes": eps})
    'x rose to 2 at step 5, the first and largest of 2 episodes'
    """
    message = str(finding.get("message", ""))
    episodes = [e for e in finding.get("episodes") or [] if isinstance(e, Mapping) and e.get("message")]
    if len(episodes) < 2:
        return message
    first = min(episodes, key=lambda e: (e.get("onset_step", 0), e.get("first_step", 0)))
    largest = message.removeprefix(recurrence_message(len(episodes), ""))
    if largest == first["message"]:
        return f"{first['message']}, the first and largest of {len(episodes)} episodes"
    return f"{first['message']}, the first of {len(episodes)} episodes (the largest: {largest})"


def verdict(findings: list[Mapping[str, Any]], timeline: Mapping[str, Any] | None,
            recommendations: Mapping[str, Any] | None,
            coverage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``state`` (healthy / warning / critical / unchecked), ``headline``, the first domino in
    words (``domino``, with its finding), ``checked`` (what the analysis could judge, from its
    coverage) and the advice as every report shows it (:func:`advice`): ``do_now`` (the immediate
    recommendations) with ``do_now_patch`` and ``do_now_command_line`` (the config changes those
    name, no others), then ``later``, ``later_patch`` and ``later_command_line``.

    >>> verdict([], {}, None)["headline"]
    'Healthy: no warning or critical finding.'
    >>> verdict([], {}, None, {"checked": False, "columns": {"unmapped": 4}})["state"]
    'unchecked'
    """
    out = _verdict(findings, timeline, recommendations, coverage)
    out.update(advice(out["do_now"], recommendations))
    return out


def _verdict(findings: list[Mapping[str, Any]], timeline: Mapping[str, Any] | None,
             recommendations: Mapping[str, Any] | None, coverage: Mapping[str, Any] | None) -> dict[str, Any]:
    crit = sum(1 for f in findings if f.get("severity") == "critical")
    warn = sum(1 for f in findings if f.get("severity") == "warning")
    out: dict[str, Any] = {"state": "critical" if crit else ("warning" if warn else "healthy"),
                           "critical": crit, "warning": warn, "domino": None, "domino_finding": None,
                           "chain": [], "do_now": []}
    cov = coverage or {}
    if cov:
        judging = list(cov.get("trackers_judging") or [])
        out["checked"] = (f"{len(judging)} trackers on {(cov.get('columns') or {}).get('mapped', 0)} "
                          "recognised column(s)" + (f" ({', '.join(judging)})" if judging else ""))
        out["not_checked"] = not_checked(cov)
    if not crit and not warn and cov.get("checked") is False:
        cols = cov.get("columns") or {}
        unread = cols.get("unmapped", 0)
        read = [c for c in cols.get("mapped_names") or [] if c != "step"]
        out["state"] = "unchecked"
        out["headline"] = (
            ("Not judged: none of the core training signals (reward, KL, gradient norm, loss, entropy, "
             f"response length) was read, only {', '.join(read)}." if read else
             f"Nothing checked: none of the {unread} logged column(s) is a training metric forensics knows.")
            + " This is not a healthy verdict; name the keys with the canonical names (forensics rules "
            "--metrics, --map KEY=NAME).")
        return out
    if not crit and not warn:
        info = len(findings)
        judged = ""
        if cov.get("trackers"):
            # a clean verdict is as wide as what was checked: say how much that was
            judged = (f" {len(cov.get('trackers_judging') or [])} of {len(cov['trackers'])} trackers "
                      "could judge this log.")
        out["headline"] = "Healthy: no warning or critical finding." + judged + (
            f" {info} info finding{'s give' if info != 1 else ' gives'} context." if info else "")
        return out
    tl = timeline or {}
    dom = tl.get("first_domino") or {}
    idx = dom.get("finding_index")
    root = findings[idx] if isinstance(idx, int) and 0 <= idx < len(findings) else None
    titles = _titles()
    events = {e["id"]: e for e in tl.get("events") or []}
    after = [events[i]["rule"] for i in dom.get("chain", [])[1:] if i in events]
    out["chain"] = [titles.get(r, r) for r in after]
    counts = _counts(crit, warn)
    if root is not None:
        out["domino"] = f"{root['message']} ({root['rule']}, {root['severity']})"
        out["domino_finding"] = dict(root)
        then = ""
        if out["chain"]:
            names = [t.lower() for t in out["chain"]]
            then = "; then " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0])
        out["headline"] = f"{'Broken' if crit else 'Warning'}: it starts with {start_of(root)}{then}. ({counts})"
    else:
        out["headline"] = f"{'Broken' if crit else 'Warning'}: {counts}."
    pri = (recommendations or {}).get("priorities") or {}
    now = list(pri.get("immediate") or [])
    if not now and root is not None and root.get("remedy"):
        now = [root["remedy"]]
    if not now:
        now = list(pri.get("short_term") or [])[:2]
    out["do_now"] = now
    return out


#: The priorities of the recommendations, in the words every report gives them after the do-now
#: list (a catastrophe's symptoms, ``if_persists``, wait with the "next" ones).
LATER = (("immediate", "now"), ("short_term", "next, if it persists"), ("medium_term", "later"))


def advice(do_now: list[str], recommendations: Mapping[str, Any] | None) -> dict[str, Any]:
    """What every report shows of the advice: ``do_now`` with ``do_now_patch`` and
    ``do_now_command_line`` (the changes it names, no others: :func:`do_now_changes`); then
    ``later``, each other recommendation under its priority's words (:data:`LATER`), with
    ``later_patch`` and ``later_command_line``: the rest of the config patch and command line, a
    catastrophe's waiting changes (``if_persists_patch``) included. Together the two patches are
    the whole advice; no report prints them as one.

    >>> rec = {"priorities": {"immediate": ["lr: 0.03 -> 0.001 [lr]"], "short_term": ["clip: 1 -> 0.5 [g]"]},
    ...        "adjustments": [{"text": "lr: 0.03 -> 0.001", "source": "lr", "key": "lr"},
    ...                        {"text": "clip: 1 -> 0.5", "source": "g", "key": "clip"}],
    ...        "config_patch": {"lr": 0.001, "clip": 0.5}}
    >>> a = advice(["lr: 0.03 -> 0.001 [lr]"], rec)
    >>> a["do_now_patch"], a["later"], a["later_patch"]
    ({'lr': 0.001}, [('next, if it persists', ['clip: 1 -> 0.5 [g]'])], {'clip': 0.5})
    """
    rec = recommendations or {}
    patch, rest, command_line = _do_now_split(do_now, rec)
    pri = rec.get("priorities") or {}
    waiting = {"short_term": list(rec.get("if_persists") or [])}
    later = [(words, [x for x in [*(pri.get(key) or []), *waiting.get(key, [])] if x not in do_now])
             for key, words in LATER]
    return {"do_now": list(do_now), "do_now_patch": patch, "do_now_command_line": command_line,
            "later": [(words, items) for words, items in later if items],
            "later_patch": _merged(rest, rec.get("if_persists_patch") or {}),
            "later_command_line": [c for c in rec.get("command_line") or [] if c not in command_line]}


def _merged(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two config patches as one (tables merged; ``a`` holds no key ``b`` sets otherwise)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = _merged(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def do_now_changes(do_now: list[str], recommendations: Mapping[str, Any] | None
                   ) -> tuple[dict[str, Any], list[str]]:
    """The part of the config patch (and of its command line) that the do-now list asks for: the
    keys of the adjustments it names (a line that starts with the change's text and names its
    source), and no change left for later ("next, if it persists").

    >>> rec = {"adjustments": [
    ...   {"text": "lr: 0.03 -> 0.001", "source": "hyperparams.lr_change", "key": "config.lr",
    ...    "command_line": "--lr 0.001"},
    ...   {"text": "kl: raise", "source": "kl.spike", "key": "kl_coef", "command_line": None}],
    ...   "config_patch": {"config": {"lr": 0.001}, "kl_coef": 0.2}}
    >>> do_now_changes(["lr: 0.03 -> 0.001 [hyperparams.lr_change, the first domino]"], rec)
    ({'config': {'lr': 0.001}}, ['--lr 0.001'])
    """
    part, _, command_line = _do_now_split(do_now, recommendations or {})
    return part, command_line


def _do_now_split(do_now: list[str], rec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The config patch in two, the part the do-now list asks for and the rest, and the do-now
    part's command line (see :func:`do_now_changes`)."""
    named = [a for a in rec.get("adjustments") or [] if a.get("key") and any(
        line.startswith(str(a.get("text"))) and f"[{a.get('source')}" in line for line in do_now)]
    part, rest = _split(rec.get("config_patch") or {}, {str(a["key"]) for a in named})
    return part, rest, [a["command_line"] for a in named if a.get("command_line")]


def _split(patch: Mapping[str, Any], keys: set[str], prefix: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """A config patch (flat, or dotted keys as nested tables) in two: the entries under ``keys``
    and the others, empty tables dropped from both.

    >>> _split({"config": {"lr": 0.001, "clip": 0.5}, "kl_coef": 0.2}, {"config.lr"})
    ({'config': {'lr': 0.001}}, {'config': {'clip': 0.5}, 'kl_coef': 0.2})
    """
    part: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for k, v in patch.items():
        if prefix + k in keys:
            part[k] = v
        elif isinstance(v, Mapping):
            inside, outside = _split(v, keys, f"{prefix}{k}.")
            if inside:
                part[k] = inside
            if outside:
                rest[k] = outside
        else:
            rest[k] = v
    return part, rest


def _rank(key: str) -> int:
    """Observed values first, the thresholds they crossed next, bookkeeping last."""
    if key in ("before", "after", "factor", "previous_step") or key.startswith(("peak", "value", "min", "max")):
        return 0
    if key in ("source_keys", "risky", "parameter", "metrics"):
        return 3
    if "threshold" in key or key.endswith(("_factor", "_ratio", "_z")):
        return 2
    return 1


def evidence_rows(evidence: Mapping[str, Any] | None, limit: int | None = None) -> list[tuple[str, str]]:
    """A finding's evidence as (name, value) rows in words, observed values first: numbers to 4
    significant digits, lists and objects compacted (the HTML shows it as a small table, not raw
    JSON). ``limit`` keeps the first rows.

    >>> evidence_rows({"warning_factor": 3, "before": 0.001, "after": 0.03, "source_keys": {"learning_rate": "lr"}})
    [('before', '0.001'), ('after', '0.03'), ('warning factor', '3'), ('source keys', 'learning_rate: lr')]
    """
    keys = sorted((evidence or {}), key=lambda k: (_rank(str(k)), list(evidence or {}).index(k)))
    rows = [(str(k).replace("_", " "), _value((evidence or {})[k])) for k in keys]
    return rows[:limit] if limit is not None else rows


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k}: {_value(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        shown = [_value(x) for x in v[:8]]
        return ", ".join(shown) + (f", … ({len(v)} in all)" if len(v) > 8 else "")
    return "–" if v is None else str(v)

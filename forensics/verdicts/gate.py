"""The CI gate: a policy file says which findings and health scores fail a run.

Policy file (TOML; every key optional)::

    fail_on = "critical"            # lowest severity that fails: "info", "warning", "critical"
                                    # or "none" (only fail_rules and min_health fail)
    fail_rules = ["grad.nonfinite"] # rules that fail at any severity (globs allowed: "grad.*")
    allow_unchecked = false         # pass a log in which no training metric was recognised

    [min_health]                    # scores in [0, 1]; a missing score (None) is not checked
    overall = 0.7
    stability = 0.6
    convergence = 0.5
    [min_health.areas]
    kl = 0.5

    [overrides]                     # per rule (or glob): a new severity, or "ignore"
    "kl.drift" = "ignore"
    "grad.spike" = "critical"

    [[allow]]                       # allow-list: matching findings never fail the gate
    rule = "stream.step_replay"
    [[allow]]
    rule = "kl.spike"
    steps = [790, 820]              # only findings whose range lies inside these steps
    reason = "known bad batch, see issue 12"

Evaluation: each finding gets its overridden severity (or is dropped when ignored); a finding
fails the gate when its severity is at least ``fail_on`` or its rule is in ``fail_rules``, unless
an ``allow`` entry matches its rule and (when given) contains its step range. Each health score
below its minimum fails the gate. A log in which no training metric was recognised (the
analysis' ``coverage.checked`` is false) fails the gate unless ``allow_unchecked`` is true: "no
findings" on a log nothing could read is not a verdict of health. Unknown keys, severities or rule ids are a
:class:`~forensics.errors.ConfigError` (exit 2): a typo must not silently pass a gate. A rule's old id
(``RuleSpec.formerly``: ``lr.change`` is now ``hyperparams.lr_change``) still names it, and a glob
matches a rule by its old id as by its new one; each old id read is a ``warning:`` line that names
the new id.

Without a policy file the gate applies :func:`default_policy`: fail on a critical finding, and
fail when nothing was checked.

Outputs: text, JSON, JUnit XML (one test case per rule of the catalogue: a failure for each
failing rule, ``skipped`` with the reason for each rule that could not run on this log, such as
a tracker with none of its metrics logged or a KL check without a KL target; health checks in a
second suite) and GitHub Actions workflow commands: an ``::error`` for each failure (at most
:data:`GITHUB_MAX_ERRORS`, the last one counting the rest: GitHub shows 10 a step) and one
``::notice`` that sums up everything else.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import warnings
from dataclasses import field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from ..analysis.findings import RuleRenamed, Severity
from ..config import Allowed, read_toml, show_value
from ..errors import ConfigError, InputError, did_you_mean
from ..records import record

__all__ = ["DEFAULT_POLICY", "GateResult", "Policy", "default_gate", "default_policy", "evaluate", "load_policy",
           "render_github", "render_json", "render_junit", "render_text", "rule_catalogue"]

_TOP_KEYS = {"fail_on", "fail_rules", "min_health", "overrides", "allow", "allow_unchecked"}
_HEALTH_KEYS = {"overall", "stability", "convergence", "areas"}


@record(frozen=True)
class Allow:
    rule: str
    steps: tuple[int, int] | None = None
    reason: str = ""

    def matches(self, f: dict[str, Any]) -> bool:
        if not rule_matches(f["rule"], self.rule):
            return False
        if self.steps is None:
            return True
        return self.steps[0] <= int(f["first_step"]) and int(f["last_step"]) <= self.steps[1]


@record
class Policy:
    """A parsed gate policy (see the module docstring for the file format)."""

    fail_on: Severity | None = Severity.CRITICAL
    fail_rules: tuple[str, ...] = ()
    min_health: dict[str, float] = field(default_factory=dict)
    min_areas: dict[str, float] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    allow: tuple[Allow, ...] = ()
    #: pass a run in which no training metric was recognised (nothing checked)
    allow_unchecked: bool = False
    source: str = ""

    def severity_of(self, rule: str, severity: str) -> str | None:
        """The severity after overrides; ``None`` when the rule is ignored."""
        for pattern, value in self.overrides.items():
            if rule_matches(rule, pattern):
                return None if value == "ignore" else value
        return severity


#: What ``forensics gate`` applies without ``--policy``.
DEFAULT_POLICY = "default policy: fail on a critical finding; fail when nothing was checked"


def default_policy() -> Policy:
    """The gate's policy without a policy file: ``fail_on = "critical"``, ``allow_unchecked =
    false``, no minimum health score.

    >>> p = default_policy(); p.fail_on.value, p.allow_unchecked, p.min_health
    ('critical', False, {})
    """
    return Policy(fail_on=Severity.CRITICAL, allow_unchecked=False, source=DEFAULT_POLICY)


def default_gate(findings: list[dict[str, Any]], coverage: dict[str, Any]) -> str:
    """What ``forensics gate`` says of these findings without a policy file: "pass" or "fail"."""
    result = evaluate({"findings": findings, "health": {}, "coverage": coverage}, default_policy())
    return "pass" if result.passed else "fail"


#: Rules that need a KL target in the unit of the logged KL (the band, saturation and
#: controller-direction checks): without one they cannot run.
NEEDS_KL_TARGET = ("kl.off_target", "kl_ctl.wrong_direction", "kl_ctl.overshoot", "kl_ctl.saturated")


def skipped_rules(analysis: dict[str, Any], catalogue: list[tuple[str, str, str]]) -> dict[str, str]:
    """``rule -> why it could not run on this log``: every rule of a tracker that did not run
    (the coverage section says why), and the KL checks that need a target the run did not give."""
    coverage = analysis.get("coverage") or {}
    trackers = coverage.get("trackers") or {}
    out: dict[str, str] = {}
    for rule, tracker, _sev in catalogue:
        entry = trackers.get(tracker)
        if isinstance(entry, dict) and entry.get("active") is False:
            out[rule] = f"tracker {tracker} did not run: {entry.get('reason') or 'not applicable to this log'}"
    kl = (analysis.get("trackers") or {}).get("kl_schedule") or {}
    if kl.get("active") and (kl.get("summary") or {}).get("target") is None:
        note = next((n for n in kl.get("notes") or [] if "target" in n.lower()),
                    "no KL target given (run.json, [run] kl_target or --kl-target)")
        for rule in NEEDS_KL_TARGET:
            out.setdefault(rule, note)
    return out


def rule_catalogue() -> list[tuple[str, str, str]]:
    """``(rule id, tracker, default severity)`` for every rule forensics knows."""
    from ..analysis.trackers import all_rules

    return [(r.id, t, r.severity.value) for t, r in all_rules()]  # type: ignore[attr-defined]


#: What a minimum health score accepts.
MIN_SCORE = Allowed(float, ge=0, le=1)


def health_areas() -> list[str]:
    """The health areas a run can score (``[min_health.areas]`` keys): the areas of the trackers
    that have rules and score them (a tracker without rules is a view; the configuration-change
    tracker's findings count in the areas they affect)."""
    from ..analysis.trackers import TRACKERS

    return sorted({cls.area for cls in TRACKERS.values() if cls.rules and cls.scored})


@functools.cache
def _former_ids() -> dict[str, tuple[str, ...]]:
    """Rule id -> the ids it had before (``RuleSpec.formerly``)."""
    from ..analysis.trackers import all_rules

    return {r.id: r.formerly for _, r in all_rules() if r.formerly}


def rule_matches(rule: str, pattern: str) -> bool:
    """Whether a policy's rule pattern (an id or a glob) names ``rule``: by its id, or by an id
    the rule had before (a policy written for ``update.*`` still names ``kl.update_stalled``)."""
    return fnmatch.fnmatchcase(rule, pattern) or any(
        fnmatch.fnmatchcase(old, pattern) for old in _former_ids().get(rule, ()))


def _check_pattern(pattern: Any, known: set[str], where: str) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where} = {show_value(pattern)}: expected a non-empty rule id (globs allowed)")
    if pattern.startswith("custom."):  # a config's own [[rules]]: known when the scan reads the config
        return pattern
    from ..analysis.trackers import renamed_rules, rule_renamed_note

    old = {o: n for o, n in renamed_rules().items() if fnmatch.fnmatchcase(o, pattern)}
    if not any(fnmatch.fnmatchcase(r, pattern) for r in known) and not old:
        raise ConfigError(f"{where}: unknown rule {pattern!r}{did_you_mean(pattern, known)} (see `forensics rules`)")
    by_old_id = [f"{o} -> {n}" for o, n in sorted(old.items()) if not fnmatch.fnmatchcase(n, pattern)]
    if pattern in old:
        warnings.warn(rule_renamed_note(pattern, old[pattern], where), RuleRenamed, stacklevel=2)
    elif by_old_id:  # a glob that names rules by their old ids only
        warnings.warn(f"{where}: {pattern!r} matches deprecated rule ids ({', '.join(by_old_id)}): it "
                      "still names those rules; name them by their new ids to keep them when the old "
                      "ids go", RuleRenamed, stacklevel=2)
    return pattern


def parse_policy(data: dict[str, Any], source: str = "", known_rules: set[str] | None = None) -> Policy:
    """Validate a policy mapping (a parsed TOML file); every error is a :class:`ConfigError`
    naming ``source``, the key, the value and what is allowed."""
    at = f"{source}: " if source else ""
    known = known_rules if known_rules is not None else {r for r, _, _ in rule_catalogue()}
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{at}unknown policy keys: {', '.join(sorted(unknown))}"
                          f"{did_you_mean(sorted(unknown)[0], _TOP_KEYS)} "
                          f"(allowed: {', '.join(sorted(_TOP_KEYS))})")
    fail_on_raw = data.get("fail_on", "critical")
    fail_on: Severity | None
    if fail_on_raw == "none":
        fail_on = None
    else:
        try:
            fail_on = Severity.parse(fail_on_raw)
        except ValueError:
            raise ConfigError(f"{at}fail_on = {show_value(fail_on_raw)}: expected one of 'info', 'warning', "
                              "'critical', 'none'") from None
    rules = data.get("fail_rules", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{at}fail_rules = {show_value(rules)}: expected a list of rule ids")
    fail_rules = tuple(_check_pattern(r, known, f"{at}fail_rules[{i}]") for i, r in enumerate(rules))
    mh = data.get("min_health", {})
    if not isinstance(mh, dict):
        raise ConfigError(f"{at}min_health = {show_value(mh)}: expected a table")
    if set(mh) - _HEALTH_KEYS:
        bad = sorted(set(mh) - _HEALTH_KEYS)[0]
        raise ConfigError(f"{at}[min_health] has no key {bad!r}{did_you_mean(bad, _HEALTH_KEYS)}; "
                          f"allowed: {', '.join(sorted(_HEALTH_KEYS))}")
    min_health = {k: float(MIN_SCORE.check(v, f"{at}min_health.{k}")) for k, v in mh.items() if k != "areas"}
    areas = mh.get("areas", {})
    if not isinstance(areas, dict):
        raise ConfigError(f"{at}min_health.areas = {show_value(areas)}: expected a table of area = score")
    valid_areas = health_areas()
    for k in areas:
        if k not in valid_areas:
            raise ConfigError(f"{at}[min_health.areas] {k!r} is not a health area; valid: "
                              + ", ".join(valid_areas))
    min_areas = {k: float(MIN_SCORE.check(v, f"{at}min_health.areas.{k}")) for k, v in areas.items()}
    ov = data.get("overrides", {})
    if not isinstance(ov, dict):
        raise ConfigError(f"{at}overrides = {show_value(ov)}: expected a table of rule = severity or \"ignore\"")
    overrides: dict[str, str] = {}
    from ..analysis.trackers import renamed_rules

    renamed = renamed_rules()
    by_rule: dict[str, str] = {}  # the rule each exact id names now -> the key that named it
    for pattern in ov:
        rule: str = renamed.get(str(pattern), str(pattern))
        if rule in by_rule and by_rule[rule] != pattern:
            # the old and the new id of one rule: which setting wins would be the keys' order
            raise ConfigError(f"{at}overrides names rule {rule!r} twice: as {by_rule[rule]!r} and as "
                              f"{pattern!r} (its {'old' if pattern in renamed else 'new'} id); keep one")
        by_rule[rule] = pattern
    for pattern, value in ov.items():
        _check_pattern(pattern, known, f"{at}overrides")
        if value == "ignore":
            overrides[pattern] = "ignore"
            continue
        try:
            overrides[pattern] = Severity.parse(value).value
        except (ValueError, AttributeError):
            raise ConfigError(f"{at}overrides.{pattern} = {show_value(value)}: expected 'info', 'warning', "
                              "'critical' or 'ignore'") from None
    allow_unchecked = data.get("allow_unchecked", False)
    if not isinstance(allow_unchecked, bool):
        raise ConfigError(f"{at}allow_unchecked = {show_value(allow_unchecked)}: expected true or false")
    allow_raw = data.get("allow", [])
    if not isinstance(allow_raw, list):
        raise ConfigError(f"{at}allow = {show_value(allow_raw)}: expected an array of tables ([[allow]])")
    allow = []
    for i, a in enumerate(allow_raw):
        if not isinstance(a, dict) or set(a) - {"rule", "steps", "reason"} or "rule" not in a:
            raise ConfigError(f"{at}allow[{i}] = {show_value(a)}: takes rule (required), "
                              "steps = [first, last], reason")
        steps = a.get("steps")
        if steps is not None:
            if (not isinstance(steps, list) or len(steps) != 2
                    or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
                    or steps[0] > steps[1]):
                raise ConfigError(f"{at}allow[{i}].steps = {show_value(steps)}: expected [first, last], "
                                  "two integers, first <= last")
            steps = (steps[0], steps[1])
        reason = a.get("reason", "")
        if not isinstance(reason, str):
            raise ConfigError(f"{at}allow[{i}].reason = {show_value(reason)}: expected a string")
        allow.append(Allow(_check_pattern(a["rule"], known, f"{at}allow[{i}].rule"), steps, reason))
    return Policy(fail_on, fail_rules, min_health, min_areas, overrides, tuple(allow), allow_unchecked,
                  source)


def load_policy(path: Path | str) -> Policy:
    """Read and validate a policy TOML file (:class:`ConfigError` when invalid or unreadable)."""
    path = Path(path)
    return parse_policy(read_toml(path, "policy file"), str(path))


@record
class GateResult:
    """The verdict: failing findings, failing health checks, and per-rule detail."""

    passed: bool
    failing: list[dict[str, Any]]
    allowed: list[dict[str, Any]]
    ignored: list[dict[str, Any]]
    passing: list[dict[str, Any]]
    health_checks: list[dict[str, Any]]
    rules: list[tuple[str, str, str]]
    run: str = ""
    #: rules that could not run on this log, and why (JUnit ``skipped``)
    skipped: dict[str, str] = field(default_factory=dict)
    policy: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "run": self.run,
            "failing_findings": self.failing,
            "allowed_findings": self.allowed,
            "ignored_findings": self.ignored,
            "other_findings": self.passing,
            "health_checks": self.health_checks,
            "skipped_rules": dict(sorted(self.skipped.items())),
            "policy": self.policy,
        }


def evaluate(analysis: dict[str, Any], policy: Policy) -> GateResult:
    """Apply ``policy`` to an analysis dict (``Analysis.to_dict()`` or a loaded analysis.json)."""
    if not isinstance(analysis.get("findings"), list) or not isinstance(analysis.get("health"), dict):
        raise InputError("not an analysis: no findings or health")
    failing, allowed, ignored, passing = [], [], [], []
    for f in analysis["findings"]:
        sev = policy.severity_of(f["rule"], f["severity"])
        if sev is None:
            ignored.append(dict(f))
            continue
        g = dict(f, severity=sev, original_severity=f["severity"])
        fails = ((policy.fail_on is not None and Severity.parse(sev).rank >= policy.fail_on.rank)
                 or any(rule_matches(f["rule"], p) for p in policy.fail_rules))
        if not fails:
            passing.append(g)
            continue
        allow = next((a for a in policy.allow if a.matches(f)), None)
        if allow is not None:
            allowed.append(dict(g, allow_reason=allow.reason))
        else:
            failing.append(g)
    health = analysis["health"]
    checks = []
    for name, minimum in sorted(policy.min_health.items()):
        value = health.get(name)
        checks.append({"name": f"health.{name}", "value": value, "minimum": minimum,
                       "passed": value is None or value >= minimum})
    areas = health.get("areas") or {}
    for name, minimum in sorted(policy.min_areas.items()):
        value = areas.get(name)
        checks.append({"name": f"health.areas.{name}", "value": value, "minimum": minimum,
                       "passed": value is None or value >= minimum})
    coverage = analysis.get("coverage")
    if isinstance(coverage, dict) and coverage.get("checked") is False:
        # no recognised training metric: "no findings" is not a verdict of health
        checks.append({"name": "coverage.checked", "value": 0.0, "minimum": 1.0,
                       "passed": policy.allow_unchecked})
    catalogue = rule_catalogue()
    known = {r for r, _, _ in catalogue}
    for f in analysis["findings"]:
        if f["rule"] not in known:
            catalogue.append((f["rule"], f.get("tracker", ""), f["severity"]))
            known.add(f["rule"])
    run = (analysis.get("run") or {}).get("name") or ", ".join(
        i.get("path", "") for i in analysis.get("inputs", []))
    passed = not failing and all(c["passed"] for c in checks)
    failing_rules = {f["rule"] for f in failing}
    skipped = {r: why for r, why in skipped_rules(analysis, catalogue).items() if r not in failing_rules}
    return GateResult(passed, failing, allowed, ignored, passing, checks, catalogue, run, skipped,
                      policy.source or "policy")


def _steps(f: dict[str, Any]) -> str:
    return f"steps {f['first_step']}-{f['last_step']}"


def render_text(result: GateResult) -> str:
    lines = [f"gate {'PASSED' if result.passed else 'FAILED'}" + (f": {result.run}" if result.run else "")]
    if result.policy:
        lines.append(f"  ({result.policy})")
    for f in result.failing:
        lines.append(f"  FAIL  [{f['severity']}] {f['rule']} ({_steps(f)}): {f['message']}")
    for c in result.health_checks:
        if not c["passed"]:
            if c["name"] == "coverage.checked":
                lines.append("  FAIL  nothing checked: no training metric in the log was recognised "
                             "(allow_unchecked = true in the policy passes such a run)")
            else:
                lines.append(f"  FAIL  {c['name']} = {c['value']:.3f} < minimum {c['minimum']:.3f}")
    for f in result.allowed:
        why = f" ({f['allow_reason']})" if f.get("allow_reason") else ""
        lines.append(f"  allowed [{f['severity']}] {f['rule']} ({_steps(f)}){why}")
    for f in result.passing:
        lines.append(f"  ok    [{f['severity']}] {f['rule']} ({_steps(f)}): below the failing severity")
    if result.ignored:
        lines.append(f"  ignored by policy: {', '.join(sorted({f['rule'] for f in result.ignored}))}")
    for c in result.health_checks:
        if c["passed"]:
            value = "n/a" if c["value"] is None else f"{c['value']:.3f}"
            lines.append(f"  ok    {c['name']} = {value} (minimum {c['minimum']:.3f})")
    return "\n".join(lines)


def render_json(result: GateResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=True)


def render_junit(result: GateResult) -> str:
    """JUnit XML: suite ``forensics.rules`` (one test case per rule), suite ``forensics.analysis.health``."""
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in result.failing:
        by_rule.setdefault(f["rule"], []).append(f)
    root = ET.Element("testsuites", name="forensics gate")
    skipped = {r: why for r, why in result.skipped.items() if r not in by_rule}
    rules = ET.SubElement(root, "testsuite", name="forensics.rules", tests=str(len(result.rules)),
                          failures=str(len(by_rule)), errors="0",
                          skipped=str(sum(1 for r, _, _ in result.rules if r in skipped)))
    for rule, tracker, _sev in result.rules:
        case = ET.SubElement(rules, "testcase", classname=f"forensics.{tracker or 'rules'}", name=rule)
        found = by_rule.get(rule)
        if rule in skipped:
            ET.SubElement(case, "skipped", message=skipped[rule])
        elif found:
            fail = ET.SubElement(case, "failure", type=found[0]["severity"],
                                 message=f"{len(found)} failing finding(s): {found[0]['message']}")
            fail.text = "\n".join(f"[{f['severity']}] {_steps(f)}: {f['message']}\nremedy: "
                                  f"{f.get('remedy', '')}" for f in found)
    health = ET.SubElement(root, "testsuite", name="forensics.analysis.health",
                           tests=str(len(result.health_checks)),
                           failures=str(sum(not c["passed"] for c in result.health_checks)),
                           errors="0", skipped=str(sum(c["value"] is None for c in result.health_checks)))
    for c in result.health_checks:
        case = ET.SubElement(health, "testcase", classname="forensics.analysis.health", name=c["name"])
        if c["value"] is None:
            ET.SubElement(case, "skipped", message="score not available for this run")
        elif not c["passed"]:
            ET.SubElement(case, "failure", type="health",
                          message=f"{c['name']} = {c['value']:.3f} < minimum {c['minimum']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


#: Error annotations GitHub shows for one step (it drops the rest, as it does past 10 warnings
#: and 10 notices): the gate writes at most this many, the last one counting what it left out.
GITHUB_MAX_ERRORS = 10


def _health_message(c: dict[str, Any]) -> str:
    if c["name"] == "coverage.checked":
        return "nothing checked: no training metric in the log was recognised (allow_unchecked = true passes it)"
    return f"{c['name']} = {c['value']:.3f} is below the minimum {c['minimum']:.3f}"


def render_github(result: GateResult) -> str:
    """GitHub Actions workflow commands: an ``::error`` per failure (at most
    :data:`GITHUB_MAX_ERRORS`, the last one counting the failures left out) and one ``::notice``
    with the verdict and the findings that did not fail (never more than GitHub shows a step)."""
    errors = []
    for f in result.failing:
        title = _gh_prop(f"forensics {f['rule']} ({_steps(f)})")
        errors.append(f"::error title={title}::{_gh_data(f['message'] + ' - ' + f.get('remedy', ''))}")
    for c in result.health_checks:
        if not c["passed"]:
            errors.append(f"::error title={_gh_prop('forensics ' + c['name'])}::{_gh_data(_health_message(c))}")
    if len(errors) > GITHUB_MAX_ERRORS:
        left = len(errors) - (GITHUB_MAX_ERRORS - 1)
        errors = errors[:GITHUB_MAX_ERRORS - 1] + [
            f"::error title=forensics gate::{left} more failure(s) not annotated (GitHub shows "
            f"{GITHUB_MAX_ERRORS} a step): see the gate's text, JSON or JUnit output"]
    rest = [f for f in result.passing + result.allowed if f["severity"] != "info"]
    verdict = "passed" if result.passed else "failed"
    summary = (f"gate {verdict}: {len(result.failing)} failing finding(s), "
               f"{sum(not c['passed'] for c in result.health_checks)} failing health check(s)")
    if rest:
        shown = "; ".join(f"[{f['severity']}] {f['rule']} ({_steps(f)})" for f in rest[:20])
        summary += f"; {len(rest)} finding(s) below the failing severity or allowed: {shown}" + (
            "; ..." if len(rest) > 20 else "")
    if result.skipped:
        summary += f"; {len(result.skipped)} rule(s) could not run on this log"
    return "\n".join([*errors, f"::notice title=forensics gate::{_gh_data(summary)}"])

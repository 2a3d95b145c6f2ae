"""Fuzz cases for what users configure and what forensics reads back: the config TOML, run.json,
gate policies, saved analyses and the command-line numbers.

Mostly single-field mutations: every tracker parameter, run field, scan option and policy key
set to 0, -1, NaN, infinities, huge numbers, the wrong type, or a typo'd name; every node of a
real saved analysis deleted or given the wrong type; plus damaged files (not UTF-8, nested too
deep, a 5,000-digit number, cut short). A case expects exit 2 (or 3) where the value is nonsense
whatever the parameter's declared range (the expectation never asks the schema under test);
elsewhere any clean exit passes, and only internal errors, crashes and written inputs fail.

``generate(rng, n)`` yields ``n`` cases: a seeded sample of the systematic cases when ``n`` is
smaller than their number (the fast slice in ``make test``), else all of them and then random
two- and three-field mutations.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
from collections.abc import Iterator
from typing import Any

from .case import Case

__all__ = ["generate", "systematic"]

LOG = "{dir}/steps.jsonl"
#: Values that are nonsense for every number, whatever its range.
NOT_A_NUMBER: list[tuple[str, Any]] = [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf),
                                       ("text", "x"), ("true", True), ("list", [1]), ("table", {"a": 1})]


@functools.lru_cache(maxsize=1)
def step_log() -> bytes:
    """A small healthy run (120 steps), the same bytes for every seed."""
    rng = random.Random(7)
    rows = []
    for step in range(120):
        rows.append({"step": step, "kl": round(0.05 * math.exp(rng.gauss(0, 0.1)), 6), "kl_coef": 0.05,
                     "grad_norm": round(0.8 * math.exp(rng.gauss(0, 0.15)), 6),
                     "advantage_mean": round(rng.gauss(0, 0.01), 6), "advantage_std": round(1 + rng.gauss(0, 0.02), 6),
                     "reward_mean": round(0.2 + 0.4 * step / 120 + rng.gauss(0, 0.03), 6),
                     "response_length_mean": round(200 + rng.gauss(0, 8), 3), "entropy": round(1.5 - step / 400, 4),
                     "loss": round(0.5 + rng.gauss(0, 0.05), 6)})
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@functools.lru_cache(maxsize=1)
def saved_analysis() -> dict[str, Any]:
    """A real analysis of :func:`step_log` (as ``analysis.json`` stores it)."""
    import numpy as np

    from forensics.analysis.engine import Scan
    from forensics.io.readers import ReadReport
    from forensics.io.readers.arrow import rows_to_raw
    from forensics.report.files import to_json

    rows = [json.loads(line) for line in step_log().decode().splitlines()]
    rows[60]["grad_norm"] = 40.0  # one finding at least
    scan = Scan()
    scan.feed(rows_to_raw(rows, np.arange(1, len(rows) + 1)), ReadReport("steps.jsonl"))
    return json.loads(to_json(scan.finish().to_dict()))


class Digits(str):
    """A number too long to convert (5,000 digits; Python refuses more than 4,300), as text."""


DIGITS = Digits("1" + "0" * 5000)


def toml_value(v: Any) -> str:
    """``v`` in TOML (NaN and infinities as TOML spells them)."""
    if isinstance(v, Digits):
        return str.__str__(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _config_case(name: str, toml: str | bytes, expect: int | None, *extra: str) -> Case:
    data = toml.encode() if isinstance(toml, str) else toml
    return Case(f"config/{name}", {"steps.jsonl": step_log(), "c.toml": data},
                ("scan", LOG, "--config", "{dir}/c.toml", "-o", "{dir}/out", "-q", *extra), expect)


def _tracker_params() -> list[tuple[str, str, Any]]:
    from forensics.analysis.trackers import TRACKERS

    return [(t, f.name, f.default) for t, cls in TRACKERS.items() for f in dataclasses.fields(cls.Params)]


def _number_mutations(default: Any) -> list[tuple[str, Any, int | None]]:
    """(label, value, expected exit) for a numeric parameter with this default."""
    out: list[tuple[str, Any, int | None]] = [(label, v, 2) for label, v in NOT_A_NUMBER
                                              if not (label == "nan" and isinstance(default, float)
                                                      and math.isnan(default))]
    out += [("zero", 0, None), ("huge", 10**30, None), ("tiny", 1e-300, None), ("default", default, 0)]
    if isinstance(default, int):
        out += [("minus1", -1, 2), ("fraction", 2.5, 2), ("1e18", 1e18, 2), ("digits", DIGITS, 2)]
    elif default == default:  # a finite float: the opposite sign is nonsense
        out += [("opposite", -1.0 if default > 0 else 1.0, 2 if default != 0 else None)]
    return out


def config_cases() -> Iterator[Case]:
    """Every tracker parameter mutated, one at a time; typo'd names; [run], [scan] and the file."""
    for tracker, name, default in _tracker_params():
        if isinstance(default, str):
            muts: list[tuple[str, Any, int | None]] = [("int", 5, 2), ("true", True, 2), ("list", ["a"], 2),
                                                       ("empty", "", None), ("default", default, 0)]
            if name.endswith("_pattern"):
                muts += [("unbalanced", "(", 2), ("badclass", "[a-", 2), ("repeat", "*x", 2)]
        else:
            muts = _number_mutations(default)
        for label, value, expect in muts:
            text = f"[{tracker}]\n{name} = {toml_value(value)}\n"
            yield _config_case(f"{tracker}.{name}={label}", text, expect)
        yield _config_case(f"{tracker}.{name}=typo", f"[{tracker}]\n{name}x = 1\n", 2)
    for tracker in sorted({t for t, _, _ in _tracker_params()}):
        yield _config_case(f"[{tracker}]=typo", f"[{tracker}s]\nwindow = 10\n", 2)
        yield _config_case(f"[{tracker}]=int", f"{tracker} = 5\n", 2)
    for field, value, expect in RUN_MUTATIONS:
        yield _config_case(f"[run].{field}={value!r:.30}", f"[run]\n{field} = {toml_value(value)}\n", expect)
    for text, expect in [("[scan]\nbatch_rows = 0\n", 2), ("[scan]\nbatch_rows = -1\n", 2),
                         ("[scan]\nbatch_rows = 2.5\n", 2), ('[scan]\nbatch_rows = "10"\n', 2),
                         ("[scan]\nbatch_rows = true\n", 2), ("[scan]\nbatch_rows = 1000000000000\n", 2),
                         ("[scan]\nbatch_rows = 1\n", 0), ('[scan]\nstrict = "yes"\n', 2), ("[scan]\nstrict = 1\n", 2),
                         ("[scan]\nstrcit = true\n", 2), ("scan = 5\n", 2), ("run = 5\n", 2), ("run = [1]\n", 2),
                         ("[kl_schedule\n", 2), ("= 5\n", 2), ("x = " + "[" * 5000 + "]" * 5000 + "\n", 2),
                         ("[run]\nkl_target = " + "9" * 5000 + "\n", 2), ("", 0), ("# only a comment\n", 0)]:
        yield _config_case(f"file:{text[:24]!r}", text, expect)
    yield _config_case("file:not-utf8", b'[run]\nname = "\xff\xfe"\n', 2)
    yield _config_case("file:utf8-bom", b"\xef\xbb\xbf[kl_schedule]\nspike_z = 8.0\n", 0)
    yield _config_case("file:binary", bytes(range(256)), 2)
    yield Case("config/missing-file", {"steps.jsonl": step_log()},  # an absent input: 3, as every input
               ("scan", LOG, "--config", "{dir}/nope.toml", "-o", "{dir}/out", "-q"), 3)
    yield Case("config/a-folder", {"steps.jsonl": step_log(), "c.toml/x": b""},
               ("scan", LOG, "--config", "{dir}/c.toml", "-o", "{dir}/out", "-q"), 3)


#: (run field, value, expected exit): the same for ``[run]`` in a config and for run.json.
RUN_MUTATIONS: list[tuple[str, Any, int | None]] = [
    *((f, v, 2) for f in ("kl_target", "kl_horizon", "kl_batch_size", "max_grad_norm", "max_length",
                          "param_count", "peak_flops", "kl_coef_init")
      for v in (math.nan, math.inf, -1.0, True, "6", [6])),
    *((f, 0, 2) for f in ("kl_target", "kl_horizon", "kl_batch_size", "max_grad_norm", "max_length")),
    ("kl_target", 6.0, 0), ("kl_coef_init", 0, 0), ("max_length", 1e300, None),
    ("kl_target_unit", "tokens", 2), ("kl_target_unit", 5, 2), ("kl_target_unit", "sequence", 0),
    ("kl_controller", "pid", 2), ("kl_controller", True, 2), ("kl_controller", "fixed", 0),
    ("algorithm", "grpoo", 2), ("algorithm", 5, 2), ("algorithm", "", 2), ("algorithm", "GRPO", 0),
    ("algorithm", ["ppo"], 2), ("advantage_normalization", 1, 2), ("advantage_normalization", "yes", 2),
    ("advantage_normalization", False, 0), ("name", 5, 2), ("name", "my run", 0), ("config", "x", 2),
    ("config", 5, 2), ("config", [1], 2), ("config", {"lr": 1e-5, "beta": "x"}, 0),
    ("some_unknown_key", {"deep": [1, 2]}, 2), ("kl_targt", 6.0, 2),
]


def _meta_case(name: str, data: bytes, expect: int | None) -> Case:
    return Case(f"run.json/{name}", {"steps.jsonl": step_log(), "run.json": data},
                ("scan", "{dir}", "-o", "{dir}/out", "-q"), expect)


def run_json_cases() -> Iterator[Case]:
    """run.json beside the log: every field mutated (exit 2), the file damaged (exit 3)."""
    for field, value, expect in RUN_MUTATIONS:
        text = json.dumps({"algorithm": "grpo", field: value}, allow_nan=True)
        yield _meta_case(f"{field}={value!r:.30}", text.encode(), expect)
    yield _meta_case("kl_target=1e400", b'{"kl_target": 1e400}', 2)
    yield _meta_case("kl_target=-Infinity", b'{"kl_target": -Infinity}', 2)
    for label, data in [("list", b"[1, 2]"), ("string", b'"ppo"'), ("truncated", b'{"kl_target": 6'),
                        ("empty", b""), ("not-utf8", b'{"name": "\xff"}'), ("binary", bytes(range(256))),
                        ("nested", b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
                        ("digits", b'{"kl_target": ' + b"9" * 5000 + b"}"),
                        ("digits-in-config", b'{"config": {"seed": ' + b"1" * 5000 + b"}}")]:
        yield _meta_case(label, data, 3)
    yield Case("run.json/--meta-missing", {"steps.jsonl": step_log()},
               ("scan", LOG, "--meta", "{dir}/nope.json", "-o", "{dir}/out", "-q"), 3)
    yield Case("run.json/--meta-folder", {"steps.jsonl": step_log(), "m/x": b""},
               ("scan", LOG, "--meta", "{dir}/m", "-o", "{dir}/out", "-q"), 3)


# -- gate policies ------------------------------------------------------------------------------

POLICY_MUTATIONS: list[tuple[str, int | None]] = [
    ('fail_on = "fatal"\n', 2), ("fail_on = 5\n", 2), ("fail_on = true\n", 2), ("fail_on = []\n", 2),
    ('fail_onn = "critical"\n', 2), ('fail_rules = "grad.explode"\n', 2), ("fail_rules = [5]\n", 2),
    ('fail_rules = ["grad.exploded"]\n', 2), ('fail_rules = [""]\n', 2), ("min_health = 5\n", 2),
    ("[min_health]\noverall = 1.5\n", 2), ("[min_health]\noverall = nan\n", 2), ("[min_health]\noverall = -0.1\n", 2),
    ('[min_health]\noverall = "0.9"\n', 2), ("[min_health]\noverall = true\n", 2),
    ("[min_health]\noveral = 0.5\n", 2), ("[min_health]\nareas = [1]\n", 2),
    ("[min_health.areas]\ngradient = 0.99\n", 2), ("[min_health.areas]\nkl = inf\n", 2),
    ("[min_health.areas]\nkl = 2\n", 2), ('[min_health.areas]\nkl = "x"\n', 2), ("overrides = 5\n", 2),
    ('[overrides]\n"grad.explode" = "loud"\n', 2), ('[overrides]\n"grad.explode" = 5\n', 2),
    ('[overrides]\n"grad.nope" = "ignore"\n', 2), ("allow = 5\n", 2), ("[[allow]]\nsteps = [1, 2]\n", 2),
    ("[[allow]]\nrule = 5\n", 2), ('[[allow]]\nrule = "grad.explode"\nsteps = [5, 1]\n', 2),
    ('[[allow]]\nrule = "grad.explode"\nsteps = [1]\n', 2),
    ('[[allow]]\nrule = "grad.explode"\nsteps = ["a", "b"]\n', 2),
    ('[[allow]]\nrule = "grad.explode"\nreason = 5\n', 2), ('[[allow]]\nrule = "grad.explode"\nwhy = "x"\n', 2),
    ("[[allow]]\nrule = \"grad.explode\"\nsteps = [1.5, 2]\n", 2), ("x = " + "[" * 5000 + "]" * 5000 + "\n", 2),
    ('fail_on = "critical"\n', None), ('fail_on = "none"\n', None), ('fail_on = "info"\n', None),
    ('fail_rules = ["grad.*"]\n[min_health]\noverall = 0.0\n[min_health.areas]\ngradients = 1.0\n', None),
    ('[overrides]\n"grad.*" = "ignore"\n[[allow]]\nrule = "kl.*"\nsteps = [0, 10]\nreason = "known"\n', None),
]


def policy_cases() -> Iterator[Case]:
    """Every policy key given nonsense (exit 2) or sense (exit 0 or 1), against a saved analysis."""
    saved = json.dumps(saved_analysis()).encode()
    for i, (text, expect) in enumerate(POLICY_MUTATIONS):
        yield Case(f"policy/{i}:{text[:30]!r}", {"r/analysis.json": saved, "p.toml": text.encode()},
                   ("gate", "{dir}/r/analysis.json", "--policy", "{dir}/p.toml"), expect)
    yield Case("policy/not-utf8", {"r/analysis.json": saved, "p.toml": b'fail_on = "\xff"\n'},
               ("gate", "{dir}/r/analysis.json", "--policy", "{dir}/p.toml"), 2)


# -- saved analyses -----------------------------------------------------------------------------

#: The damaged shapes the issue lists (and their relatives): each is exit 3 for report, gate, diff.
DAMAGED: list[tuple[str, Any]] = [
    ("findings[0].severity", "DEL"), ("findings[0].onset_step", "DEL"), ("findings[0].rule", "DEL"),
    ("findings[0].first_step", "DEL"), ("findings[0].message", "DEL"), ("findings", "x"),
    ("findings", {"a": 1}), ("findings[0]", "x"), ("findings[0].severity", "fatal"),
    ("findings[0].severity", 2), ("findings[0].first_step", "10"), ("findings[0].first_step", 1.5),
    ("findings[0].last_step", -(10**9)), ("health", "x"), ("health", "DEL"), ("health.overall", "0.9"),
    ("health.overall", 7), ("health.areas", [1]), ("health.areas.kl", "x"), ("run", "x"), ("run", [1]),
    ("run.kl_target", "6"), ("inputs", "x"), ("inputs", {"a": 1}), ("inputs[0]", 5), ("inputs[0].path", 5),
    ("inputs[0].rows_read", "10"), ("plots", "x"), ("plots", [1]), ("plots.series", [1]),
    ("plots.series.kl.x", "x"), ("plots.series.kl.y", [1, 2]), ("steps", 5), ("steps.first", "0"),
    ("timeline", "x"), ("timeline.events", {"a": 1}), ("timeline.events[0].onset_step", "DEL"),
    ("timeline.links", 5), ("trackers", [1]), ("trackers.kl_schedule.notes", "x"),
    ("findings_by_severity", 5), ("schema_version", "2.0"), ("schema_version", "DEL"), ("schema_version", 1),
    ("windows", "x"), ("recommendations", [1]), ("params", [1]), ("params.kl_schedule.band_low", "x"),
    ("column_mapping", 5), ("tool", "x"),
]

_KINDS: list[tuple[str, Any]] = [("del", "DEL"), ("null", None), ("str", "x"), ("int", 5), ("neg", -1),
                                 ("float", 1.5), ("bool", True), ("list", [1]), ("table", {"a": 1}),
                                 ("huge", 10**30), ("empty-list", []), ("empty-table", {})]


def _nodes(x: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:2]):  # the first two of a list stand for the rest
            yield from _nodes(v, (*path, i))


def _parse(path: str) -> tuple[Any, ...]:
    out: list[Any] = []
    for part in path.replace("]", "").replace("[", ".").split("."):
        out.append(int(part) if part.lstrip("-").isdigit() else part)
    return tuple(out)


def mutated(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with the node at ``path`` set to ``value`` (or deleted: ``"DEL"``)."""
    out = json.loads(json.dumps(data))
    node = out
    for p in path[:-1]:
        node = node[p]
    if value == "DEL":
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


def _saved_case(name: str, damaged: bytes, command: str, expect: int | None) -> Case:
    good = json.dumps(saved_analysis()).encode()
    files = {"r/analysis.json": damaged, "ok/analysis.json": good, "p.toml": b'fail_on = "critical"\n'}
    argv = {"report": ("report", "{dir}/r/analysis.json", "-o", "{dir}/html"),
            "gate": ("gate", "{dir}/r/analysis.json", "--policy", "{dir}/p.toml"),
            "diff": ("diff", "{dir}/ok/analysis.json", "{dir}/r/analysis.json")}[command]
    return Case(f"saved/{command}/{name}", files, argv, expect)


COMMANDS = ("report", "gate", "diff")


def saved_cases() -> Iterator[Case]:
    """The damaged shapes (exit 3), then every node of a real analysis mutated (a clean exit)."""
    base = saved_analysis()
    for i, (path, value) in enumerate(DAMAGED):
        data = json.dumps(mutated(base, _parse(path), value)).encode()
        yield _saved_case(f"{path}={value!r:.20}", data, COMMANDS[i % 3], 3)
    for i, (label, data) in enumerate([
            ("truncated", json.dumps(base).encode()[:500]), ("empty", b""), ("list", b"[]"),
            ("not-utf8", b'{"schema_version": "1.0\xff"}'), ("nested", b"[" * 50_000 + b"]" * 50_000),
            ("digits", b'{"schema_version": "1.0", "findings": [], "health": {"overall": ' + b"1" * 5000 + b"}}"),
            ("nan-score", json.dumps({**base, "health": {"overall": math.nan}}).encode())]):
        yield _saved_case(f"file:{label}", data, COMMANDS[i % 3], 3)
    for j, path in enumerate(_nodes(base)):
        for k, (label, value) in enumerate(_KINDS):
            if (j + k) % 4:  # a quarter of node x kind, spread over all nodes and kinds
                continue
            data = json.dumps(mutated(base, path, value)).encode()
            yield _saved_case(f"{'.'.join(map(str, path))}={label}", data, COMMANDS[(j + k) % 3], None)


# -- command-line numbers -----------------------------------------------------------------------

CLI_NUMBERS: list[tuple[str, tuple[str, ...]]] = [
    ("--kl-target", ("scan", LOG, "-o", "{dir}/out", "-q")),
    ("--batch-rows", ("scan", LOG, "-o", "{dir}/out", "-q")),
    ("--top", ("scan", LOG, "-o", "{dir}/out", "-q")),
    ("--tolerance", ("diff", LOG, LOG)),
    ("--interval", ("watch", LOG, "--once")),
    ("--timeout", ("watch", LOG, "--once")),
]


def cli_cases() -> Iterator[Case]:
    for option, argv in CLI_NUMBERS:
        for value, expect in [("nan", 2), ("inf", 2), ("-inf", 2), ("x", 2), ("1e400", 2), ("", 2),
                              ("-1", 2), ("0", None), ("1e-300", None), ("9" * 5000, 2), ("1" * 30, None),
                              ("0x10", 2), ("1_000", None), (" 5 ", None)]:
            yield Case(f"cli/{option}={value[:20]!r}", {"steps.jsonl": step_log()}, (*argv, option, value), expect)


def systematic() -> list[Case]:
    """Every single-field case of every family, in a fixed order."""
    return [*config_cases(), *run_json_cases(), *policy_cases(), *saved_cases(), *cli_cases()]


def _combination(rng: random.Random, i: int) -> Case:
    """Two or three tracker parameters mutated at once (relations between them get exercised)."""
    params = _tracker_params()
    tracker = rng.choice(sorted({t for t, _, _ in params}))
    mine = [(n, d) for t, n, d in params if t == tracker and not isinstance(d, str)]
    lines = []
    for name, default in rng.sample(mine, min(len(mine), rng.randint(2, 3))):
        if isinstance(default, int):
            value: Any = rng.choice([0, 1, 2, 3, 5, 10, 50, 100, 1000, rng.randint(-5, 10**6)])
        else:
            value = rng.choice([0.0, 1e-9, 0.5, 1.0, 2.0, 100.0, -1.0, math.nan, rng.uniform(-10, 10)])
        lines.append(f"{name} = {toml_value(value)}")
    return _config_case(f"combo{i}/{tracker}:" + ",".join(lines), f"[{tracker}]\n" + "\n".join(lines) + "\n", None)


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` cases: a seeded sample of :func:`systematic` when ``n`` is smaller, else all of it and
    random multi-field combinations after."""
    cases = systematic()
    if n <= len(cases):
        yield from rng.sample(cases, n)
        return
    yield from cases
    for i in range(n - len(cases)):
        yield _combination(rng, i)

"""The CI gate: policy parsing, every exit code, JUnit XML and GitHub annotations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.errors import ConfigError
from forensics.verdicts.gate import _gh_prop, evaluate, parse_policy, render_github, render_junit, rule_catalogue

from .conftest import RLDK, healthy_rows, write_jsonl
from .synth import grad_explosion, kl_spike


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Saved analyses: a healthy run, one with a critical gradient explosion, one whose KL left its
    level for eight rows (a warning: longer than an isolated excursion), the RLDK log (its
    five-row KL spike recovered with nothing else moving: information)."""
    base = tmp_path_factory.mktemp("gate")
    out = {}
    for name, rows in (("healthy", healthy_rows(300)), ("explode", grad_explosion()),
                       ("spiky", kl_spike(width=8))):
        log = write_jsonl(base / f"{name}.jsonl", rows)
        res = run("scan", str(log), "-o", str(base / name), "-q")
        assert res.exit_code == 0, res.output
        out[name] = base / name / "analysis.json"
        out[name + "_log"] = log
    res = run("scan", str(RLDK), "-o", str(base / "rldk"), "-q")
    out["rldk"] = base / "rldk" / "analysis.json"
    return out


def policy(tmp_path: Path, text: str) -> str:
    p = tmp_path / "policy.toml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_pass_exits_0(runs: dict[str, Path], tmp_path: Path) -> None:
    res = run("gate", str(runs["healthy"]), "--policy", policy(tmp_path, 'fail_on = "critical"\n'))
    assert res.exit_code == 0, res.output
    assert "gate PASSED" in res.output


def test_scans_a_log_path_too(runs: dict[str, Path], tmp_path: Path) -> None:
    res = run("gate", str(runs["explode_log"]), "--policy", policy(tmp_path, 'fail_on = "critical"\n'))
    assert res.exit_code == 1, res.output
    assert "grad.explode" in res.output


def test_fail_on_severity_exits_1(runs: dict[str, Path], tmp_path: Path) -> None:
    res = run("gate", str(runs["explode"]), "--policy", policy(tmp_path, 'fail_on = "critical"\n'))
    assert res.exit_code == 1
    assert "gate FAILED" in res.output and "FAIL  [critical] grad.explode" in res.output
    # a lasting KL excursion is a warning: passes at critical, fails at warning
    assert run("gate", str(runs["spiky"]), "--policy", policy(tmp_path, 'fail_on = "critical"')).exit_code == 0
    assert run("gate", str(runs["spiky"]), "--policy", policy(tmp_path, 'fail_on = "warning"')).exit_code == 1
    # the RLDK log's spike recovered with nothing else moving: information, failing only at info
    assert run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, 'fail_on = "warning"')).exit_code == 0
    assert run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, 'fail_on = "info"')).exit_code == 1


def test_fail_rules_at_any_severity(runs: dict[str, Path], tmp_path: Path) -> None:
    text = 'fail_on = "none"\nfail_rules = ["kl.*"]\n'
    assert run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, text)).exit_code == 1


def test_fail_on_min_health_exits_1(runs: dict[str, Path], tmp_path: Path) -> None:
    d = json.loads(runs["spiky"].read_text())
    overall = d["health"]["overall"]
    text = f'fail_on = "none"\n[min_health]\noverall = {min(1.0, overall + 0.01)}\n'
    res = run("gate", str(runs["spiky"]), "--policy", policy(tmp_path, text))
    assert res.exit_code == 1 and "health.overall" in res.output
    text = f'fail_on = "none"\n[min_health]\noverall = {overall - 0.01}\n[min_health.areas]\nkl = 0.99\n'
    res = run("gate", str(runs["spiky"]), "--policy", policy(tmp_path, text))
    assert res.exit_code == 1 and "health.areas.kl" in res.output
    text = 'fail_on = "none"\n[min_health]\nconvergence = 0.99\n'  # no reward logged: not checked
    if d["health"]["convergence"] is None:
        assert run("gate", str(runs["spiky"]), "--policy", policy(tmp_path, text)).exit_code == 0


def test_allow_list_passes(runs: dict[str, Path], tmp_path: Path) -> None:
    d = json.loads(runs["explode"].read_text())
    f = next(f for f in d["findings"] if f["rule"] == "grad.explode")
    text = ('fail_on = "critical"\n[[allow]]\nrule = "grad.explode"\n'
            f'steps = [{f["first_step"] - 1}, {f["last_step"] + 1}]\nreason = "known"\n')
    res = run("gate", str(runs["explode"]), "--policy", policy(tmp_path, text))
    assert res.exit_code == 0, res.output
    assert "allowed [critical] grad.explode" in res.output
    # an allow-list entry whose steps do not cover the finding does not help
    text = 'fail_on = "critical"\n[[allow]]\nrule = "grad.explode"\nsteps = [0, 1]\n'
    assert run("gate", str(runs["explode"]), "--policy", policy(tmp_path, text)).exit_code == 1


def test_overrides_ignore_and_remap(runs: dict[str, Path], tmp_path: Path) -> None:
    text = 'fail_on = "critical"\n[overrides]\n"grad.*" = "ignore"\n'
    assert run("gate", str(runs["explode"]), "--policy", policy(tmp_path, text)).exit_code == 0
    text = 'fail_on = "critical"\n[overrides]\n"kl.spike" = "critical"\n'
    assert run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, text)).exit_code == 1


@pytest.mark.parametrize("text", [
    "fail_on = ",                                   # not TOML
    'fail_on = "severe"\n',                         # unknown severity
    'fail_onn = "critical"\n',                      # unknown key
    'fail_rules = ["kl.spikes"]\n',                 # unknown rule
    '[overrides]\n"kl.spike" = "loud"\n',           # bad override
    '[min_health]\noverall = 1.5\n',                # out of range
    '[[allow]]\nsteps = [1, 2]\n',                  # allow without rule
    '[[allow]]\nrule = "kl.spike"\nsteps = [5, 1]\n',
])
def test_invalid_policy_exits_2(runs: dict[str, Path], tmp_path: Path, text: str) -> None:
    res = run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, text))
    assert res.exit_code == 2, res.output
    assert "Error:" in res.output and "Traceback" not in res.output


def test_missing_policy_exits_3(runs: dict[str, Path], tmp_path: Path) -> None:
    """An absent input, as every absent input (README, exit codes)."""
    assert run("gate", str(runs["rldk"]), "--policy", str(tmp_path / "nope.toml")).exit_code == 3


def test_unreadable_input_exits_3(tmp_path: Path) -> None:
    pol = policy(tmp_path, 'fail_on = "critical"\n')
    assert run("gate", str(tmp_path / "missing.jsonl"), "--policy", pol).exit_code == 3
    garbage = tmp_path / "x.txt"
    garbage.write_text("hello\n")
    assert run("gate", str(garbage), "--policy", pol).exit_code == 3
    bad = tmp_path / "analysis.json"
    bad.write_text('{"schema_version": "1.0", "truncated": ')
    res = run("gate", str(bad), "--policy", pol)
    assert res.exit_code == 3 and "Traceback" not in res.output


def test_junit_one_testcase_per_rule(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "gate.xml"
    res = run("gate", str(runs["explode"]), "--policy", policy(tmp_path, 'fail_on = "critical"\n'
                                                                        '[min_health]\noverall = 0.99\n'),
              "--format", "junit", "--output", str(out))
    assert res.exit_code == 1
    root = ET.parse(out).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    rules = suites["forensics.rules"]
    names = [c.get("name") for c in rules.iter("testcase")]
    catalogue = [r for r, _, _ in rule_catalogue()]
    assert names[: len(catalogue)] == catalogue and len(set(names)) == len(names)
    failed = [c.get("name") for c in rules.iter("testcase") if c.find("failure") is not None]
    assert "grad.explode" in failed and "kl.runaway" not in failed
    assert int(rules.get("failures")) == len(failed)
    health = [c for c in suites["forensics.analysis.health"].iter("testcase")]
    assert health[0].get("name") == "health.overall" and health[0].find("failure") is not None


def test_junit_and_github_escape_log_text() -> None:
    d = {"findings": [{"rule": "kl.spike", "severity": "critical", "first_step": 1, "last_step": 2,
                       "onset_step": 1, "message": 'bad <x> & "y"\nsecond line: 100%, ok',
                       "remedy": "r", "tracker": "kl_schedule"}],
         "health": {"overall": 0.5, "stability": None, "convergence": None, "areas": {}}}
    result = evaluate(d, parse_policy({"fail_on": "warning", "min_health": {"overall": 0.9}}))
    ET.fromstring(render_junit(result))  # well-formed despite the markup in the message
    gh = render_github(result).splitlines()
    assert gh[0].startswith("::error title=forensics kl.spike (steps 1-2)::")
    assert "%0A" in gh[0] and "100%25%2C" not in gh[0] and "100%25, ok" in gh[0]
    assert any(line.startswith("::error title=forensics health.overall::") for line in gh)
    assert all(re.match(r"^::(error|warning|notice) title=[^:]*::", line) for line in gh)
    assert _gh_prop("a,b:c%") == "a%2Cb%3Ac%25"


def test_github_format_and_json(runs: dict[str, Path], tmp_path: Path) -> None:
    pol = policy(tmp_path, 'fail_on = "critical"\n')
    res = run("gate", str(runs["spiky"]), "--policy", pol, "--format", "github")
    assert res.exit_code == 0
    # passing warnings go into the one summary notice, never one annotation each
    assert res.output.startswith("::notice title=forensics gate::gate passed") and "kl.spike (steps " in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = run("gate", str(runs["explode"]), "--policy", pol, "--format", "json")
    data = json.loads(res.output)
    assert data["passed"] is False and data["failing_findings"][0]["rule"] == "grad.explode"


def test_example_policy_is_valid() -> None:
    from forensics.verdicts.gate import load_policy

    p = load_policy(Path(__file__).resolve().parent.parent / "examples" / "gate-policy.toml")
    assert p.fail_on is not None and p.allow
    with pytest.raises(ConfigError):
        parse_policy({"allow": [{"rule": "nope.nope"}]})


@pytest.mark.parametrize(("text", "expected"), [
    ("[min_health.areas]\ngradient = 0.99\n",
     "[min_health.areas] 'gradient' is not a health area; valid: advantages, config, generation, gradients, kl,"),
    ("[min_health]\noverall = nan\n", "min_health.overall = nan: expected a finite number from 0 to 1"),
    ('[min_health]\nstability = "0.5"\n', "min_health.stability = '0.5'"),
    ("[min_health.areas]\nkl = inf\n", "min_health.areas.kl = inf"),
    ("[min_health]\noveral = 0.5\n", "[min_health] has no key 'overal'"),
    ("fail_on = 5\n", "fail_on = 5: expected one of 'info', 'warning', 'critical', 'none'"),
    ("fail_rules = [5]\n", "fail_rules[0] = 5: expected a non-empty rule id"),
    ('[[allow]]\nrule = "kl.spike"\nreason = 5\n', "allow[0].reason = 5: expected a string"),
    ('[overrides]\n"kl.spike" = 3\n', "overrides.kl.spike = 3"),
    ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "policy file cannot be parsed"),
])
def test_policy_errors_name_the_file_the_key_and_what_is_allowed(runs: dict[str, Path], tmp_path: Path,
                                                                  text: str, expected: str) -> None:
    pol = policy(tmp_path, text)
    res = run("gate", str(runs["rldk"]), "--policy", pol)
    assert res.exit_code == 2, res.output
    assert f"{pol}: " in res.output and expected in res.output, res.output


def test_a_non_utf8_policy_is_a_usage_error(runs: dict[str, Path], tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_bytes(b'fail_on = "critical"\n# \xff\n')
    res = run("gate", str(runs["rldk"]), "--policy", str(pol))
    assert res.exit_code == 2 and f"{pol}:2: policy file is not UTF-8 text" in res.output


def test_health_areas_are_the_areas_scans_score(runs: dict[str, Path]) -> None:
    from forensics.verdicts.gate import health_areas

    scored = json.loads(runs["rldk"].read_text())["health"]["areas"]
    assert set(scored) <= set(health_areas())
    assert "training" not in health_areas()  # the windows tracker is a view, not an area


def test_a_rule_named_by_its_old_and_new_id_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """Two settings for one rule (`lr.change` is now `hyperparams.lr_change`): refused, as TOML
    refuses a repeated key, never the first key winning in silence."""
    text = 'fail_on = "critical"\n[overrides]\n"lr.change" = "ignore"\n"hyperparams.lr_change" = "critical"\n'
    res = run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, text))
    assert res.exit_code == 2, res.output
    assert "names rule 'hyperparams.lr_change' twice" in res.output and "keep one" in res.output
    # the same setting under both ids is refused too (one of them is redundant at best)
    text = 'fail_on = "critical"\n[overrides]\n"lr.change" = "ignore"\n"hyperparams.lr_change" = "ignore"\n'
    assert run("gate", str(runs["rldk"]), "--policy", policy(tmp_path, text)).exit_code == 2

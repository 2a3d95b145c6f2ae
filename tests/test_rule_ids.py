"""A rule's id leads to its home: the prefix names the module that declares it; old ids still
work (gate policies, saved analyses) with a warning that names the new id."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.analysis.findings import RuleRenamed
from forensics.analysis.trackers import all_rules, current_rule_id, renamed_rules
from forensics.cli import main
from forensics.verdicts.gate import evaluate, parse_policy
from forensics.verdicts.saved import load_analysis

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "forensics" / "analysis"
#: a reference run whose learning rate is far too small: its policy updates stall
STALLED_RUN = ROOT / "fixtures" / "runs" / "ppo_lr_tiny"


def declared_rules() -> dict[str, Path]:
    """Rule id -> the file that declares it (a ``RuleSpec(...)`` or ``_R(...)`` call whose first
    argument is the id), read from the source."""
    out: dict[str, Path] = {}
    for path in ANALYSIS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("RuleSpec", "_R") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                assert node.args[0].value not in out, f"{node.args[0].value} declared twice"
                out[node.args[0].value] = path
    return out


def names_its_module(rule: str, module: Path) -> bool:
    """``kl_ctl.stuck`` -> kl_schedule.py, ``adv.bias`` -> advantages.py: the module's name
    begins with the prefix's first word."""
    return module.stem.startswith(rule.split(".")[0].split("_")[0])


def test_the_prefix_check_can_fail() -> None:
    assert names_its_module("grad.spike", Path("grad_norms.py"))
    assert names_its_module("kl_ctl.stuck", Path("kl_schedule.py"))
    assert not names_its_module("lr.change", Path("hyperparams.py"))
    assert not names_its_module("reward.floor", Path("signal.py"))


def test_every_rule_id_prefix_names_the_module_that_declares_it() -> None:
    declared = declared_rules()
    assert {r.id for _, r in all_rules()} <= set(declared)
    wrong = {rule: path.name for rule, path in declared.items() if not names_its_module(rule, path)}
    assert wrong == {}


def test_old_ids_lead_to_current_rules() -> None:
    renamed = renamed_rules()
    current = {r.id for _, r in all_rules()}
    assert len(renamed) == 11 and renamed["update.stalled"] == "kl.update_stalled"
    assert set(renamed.values()) <= current and not set(renamed) & current
    with pytest.warns(RuleRenamed, match="'lr.change' is deprecated.*'hyperparams.lr_change'"):
        assert current_rule_id("lr.change") == "hyperparams.lr_change"
    assert current_rule_id("grad.spike") == "grad.spike"


def _finding(rule: str, severity: str = "warning") -> dict:
    return {"rule": rule, "severity": severity, "first_step": 10, "last_step": 20, "onset_step": 10,
            "message": "m"}


def test_an_old_id_in_a_gate_policy_still_works_and_warns() -> None:
    with pytest.warns(RuleRenamed, match="fail_rules.*'update.stalled'.*'kl.update_stalled'"):
        policy = parse_policy({"fail_on": "none", "fail_rules": ["update.stalled"]}, "p.toml")
    result = evaluate({"findings": [_finding("kl.update_stalled")], "health": {}}, policy)
    assert [f["rule"] for f in result.failing] == ["kl.update_stalled"]
    with pytest.warns(RuleRenamed) as said:
        policy = parse_policy({"overrides": {"lr.*": "ignore"}, "allow": [{"rule": "policy.trust_region"}]})
    assert [str(w.message) for w in said] == [
        "overrides: 'lr.*' matches deprecated rule ids (lr.change -> hyperparams.lr_change, lr.out_of_range "
        "-> hyperparams.lr_out_of_range, lr.warmup_unfinished -> hyperparams.lr_warmup_unfinished): it still "
        "names those rules; name them by their new ids to keep them when the old ids go",
        "allow[0].rule: rule id 'policy.trust_region' is deprecated, read as 'trust_region.exceeded': use "
        "'trust_region.exceeded' instead"]
    result = evaluate({"findings": [_finding("hyperparams.lr_out_of_range", "critical"),
                                    _finding("trust_region.exceeded", "critical"),
                                    _finding("grad.explode", "critical")], "health": {}}, policy)
    assert [f["rule"] for f in result.ignored] == ["hyperparams.lr_out_of_range"]
    assert [f["rule"] for f in result.allowed] == ["trust_region.exceeded"]
    assert [f["rule"] for f in result.failing] == ["grad.explode"]


def test_new_ids_and_plain_globs_do_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    parse_policy({"fail_rules": ["hyperparams.*", "kl.update_stalled", "grad.*"]})
    assert not [w for w in recwarn if issubclass(w.category, RuleRenamed)]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A scan of the stalled run, and the same analysis as an older forensics saved it (the old id)."""
    base = tmp_path_factory.mktemp("rule_ids")
    res = run("scan", str(STALLED_RUN), "-o", str(base / "new"), "-q")
    assert res.exit_code == 0, res.output
    new = base / "new" / "analysis.json"
    assert "kl.update_stalled" in {f["rule"] for f in json.loads(new.read_text())["findings"]}
    (base / "old").mkdir()
    shutil.copy(base / "new" / "metrics.csv", base / "old" / "metrics.csv")
    old = base / "old" / "analysis.json"
    old.write_text(new.read_text().replace('"kl.update_stalled"', '"update.stalled"'))
    return {"new": new, "old": old, "base": base}


def test_a_saved_analysis_with_old_ids_reads_them_as_the_new_ones(saved: dict[str, Path]) -> None:
    with pytest.warns(RuleRenamed, match="analysis.json: rule id 'update.stalled'.*'kl.update_stalled'"):
        data = load_analysis(saved["old"])
    assert "update.stalled" not in {f["rule"] for f in data["findings"]}
    assert data["findings"] == json.loads(saved["new"].read_text())["findings"]


def test_diff_against_an_old_saved_analysis_matches_renamed_findings(saved: dict[str, Path]) -> None:
    res = run("diff", str(saved["old"].parent), str(saved["new"].parent), "--format", "json")
    assert res.exit_code == 0, res.output
    assert "warning:" in res.stderr and "'kl.update_stalled'" in res.stderr
    d = json.loads(res.stdout)
    assert d["findings"]["new"] == [] and d["findings"]["resolved"] == []


def test_gate_cli_prints_one_warning_line_per_old_id(saved: dict[str, Path]) -> None:
    policy = saved["base"] / "policy.toml"
    policy.write_text('fail_on = "none"\nfail_rules = ["update.stalled"]\n')
    res = run("gate", str(saved["old"]), "--policy", str(policy))
    assert res.exit_code == 1, res.output
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, res.stderr  # the policy's old id, the saved analysis' old id
    assert all("'kl.update_stalled'" in w for w in warnings)
    assert "kl.update_stalled" in res.stdout


def test_the_window_issues_are_listed_like_rules(tmp_path: Path) -> None:
    """The health check's eight issues are in ``forensics rules`` (text and JSON) and in the
    catalogue, each with its condition and what to change."""
    from forensics.analysis.trackers.health_check import ISSUES, RULE_TABLE

    assert len(ISSUES) == 8
    text = run("rules").output
    data = json.loads(run("rules", "--format", "json").output)
    catalogue = (ROOT / "docs" / "rules.md").read_text()
    assert [i["id"] for i in data["window_issues"]] == list(ISSUES)
    for rule in RULE_TABLE:
        assert rule.condition and rule.remedy
        assert f"  {rule.issue}  [{rule.priority}]  {rule.description}" in text
        assert f"| `{rule.issue}` | {rule.priority} | **{rule.description}.** {rule.condition} |" in catalogue
    assert "learning rate -20%, gradient clipping threshold -20%" in \
        {i["id"]: i["remedy"] for i in data["window_issues"]}["loss_spiking"]


def test_labels_with_old_ids_still_score(tmp_path: Path) -> None:
    """A labelled corpus written before the rename (a manifest's expected_rules) counts the
    renamed rule's alarms, with a warning."""
    from forensics.verdicts.evaluation import evaluate as evaluate_runs
    from forensics.verdicts.evaluation import scan_runs

    shutil.copytree(STALLED_RUN, tmp_path / "ppo_lr_tiny")
    manifest = tmp_path / "ppo_lr_tiny" / "manifest.json"
    m = json.loads(manifest.read_text())
    assert m["expected_rules"][0] == "kl.update_stalled"
    manifest.write_text(json.dumps({**m, "expected_rules": ["update.stalled", *m["expected_rules"][1:]]}))
    with pytest.warns(RuleRenamed, match="manifest.json: rule id 'update.stalled'"):
        (run,) = scan_runs(tmp_path)
    assert run.expected_rules == m["expected_rules"]
    assert evaluate_runs([run]).detected == 1

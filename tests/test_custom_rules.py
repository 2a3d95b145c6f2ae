"""Your own rules, as data: ``[[rules]]`` in a config (or in rules files it names) run over any
column in scan, watch and gate like the built-in rules; the three examples fire on the logs they
describe and stay quiet on a healthy one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics import Scan, scan_path
from forensics.cli import main
from forensics.config import load_config
from forensics.errors import ConfigError
from forensics.live.watch import Watcher

from .conftest import healthy_rows, write_jsonl

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def custom(a, rule: str) -> list:
    return [f for f in a.findings if f.rule == rule]


def proxy_vs_gold_rows(hacked: bool) -> list[dict]:
    rows = healthy_rows(400, seed=5)
    rng = np.random.default_rng(5)
    for r in rows:
        i = r["step"]
        r["reward_mean"] = 0.1 * 1.005 ** i + rng.normal(0, 0.002)  # the proxy rises, 28% per 50 steps
        gold = 0.4 if hacked else 0.1 * 1.005 ** i                 # the gold metric: flat, or rising too
        r["gold_accuracy"] = gold + rng.normal(0, 0.002)
    return rows


def test_proxy_reward_rising_while_gold_stays_flat(tmp_path: Path) -> None:
    cfg = EXAMPLES / "rules-proxy-vs-gold.toml"
    hacked = scan_path(write_jsonl(tmp_path / "h.jsonl", proxy_vs_gold_rows(True)), config_path=cfg)
    (f,) = custom(hacked, "custom.proxy_vs_gold")
    assert f.severity.value == "warning" and f.onset_step <= 120 and f.last_step >= 390
    assert "gold_accuracy stays flat" in f.message and f.remedy.startswith("Compare samples")
    honest = scan_path(write_jsonl(tmp_path / "o.jsonl", proxy_vs_gold_rows(False)), config_path=cfg)
    assert custom(honest, "custom.proxy_vs_gold") == []


def test_a_custom_metric_floor(tmp_path: Path) -> None:
    rows = healthy_rows(200, seed=6)
    for r in rows:
        r["format_accuracy"] = 0.9 if r["step"] < 120 else 0.3
    rows[60]["format_accuracy"] = 0.1  # one bad step: under persist, not a finding
    a = scan_path(write_jsonl(tmp_path / "s.jsonl", rows), config_path=EXAMPLES / "rules-metric-floor.toml")
    (f,) = custom(a, "custom.format_floor")
    assert f.severity.value == "critical" and (f.onset_step, f.last_step) == (120, 199)


def test_a_throughput_floor_on_a_mapped_key(tmp_path: Path) -> None:
    rows = healthy_rows(200, seed=7)
    for r in rows:
        r["gen_tokens_per_s"] = 3000.0 if not 80 <= r["step"] < 110 else 1200.0
    a = scan_path(write_jsonl(tmp_path / "s.jsonl", rows), config_path=EXAMPLES / "rules-throughput-floor.toml")
    (f,) = custom(a, "custom.throughput_floor")
    assert (f.onset_step, f.first_step, f.last_step) == (80, 80, 109)
    assert f.evidence["peak"] == pytest.approx(1200.0)


def test_a_spike_and_a_drop(tmp_path: Path) -> None:
    rows = healthy_rows(300, seed=8)
    rng = np.random.default_rng(8)
    for r in rows:
        r["my_loss"] = 1.0 + rng.normal(0, 0.01) + (5.0 if r["step"] == 200 else 0.0)
        r["my_score"] = 1.0 if r["step"] < 150 else 0.5
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[rules]]\nid = "loss_spike"\nmetric = "my_loss"\nkind = "spike"\nz = 8.0\nwindow = 30\n'
                   '[[rules]]\nid = "score_drop"\nmetric = "my_score"\nkind = "drop"\npercent = 30.0\nwindow = 20\n')
    a = scan_path(write_jsonl(tmp_path / "s.jsonl", rows), config_path=cfg)
    (spike,) = custom(a, "custom.loss_spike")
    assert spike.onset_step == 200 and spike.last_step == 200
    # the message quotes the metric's value there, the robust z beside it (not the z as a "peak")
    value = rows[200]["my_loss"]
    assert f"my_loss {value:.4g} at step 200; robust z " in spike.message, spike.message
    assert spike.evidence["value"] == pytest.approx(value, rel=1e-5) and spike.evidence["peak_is"] == "robust z"
    (drop,) = custom(a, "custom.score_drop")
    assert 150 <= drop.onset_step <= 153
    assert "my_score 0.5 at step" in drop.message and "%)" in drop.message


@pytest.mark.parametrize(("toml", "error"), [
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "above"\nthreshhold = 1.0\n', "did you mean 'threshold'"),
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "above"\n', "kind = 'above' needs threshold"),
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "abve"\nthreshold = 1.0\n', "expected one of 'above'"),
    ('[[rules]]\nid = "x"\nkind = "above"\nthreshold = 1.0\n', "metric is required"),
    ('[[rules]]\nid = "X Y"\nmetric = "kl"\nkind = "above"\nthreshold = 1.0\n', "expected a name"),
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "spike"\nwindow = 1\n', "window = 1: expected an integer"),
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "above"\nthreshold = 1.0\nand = {metric = "y", kind = "flat"}\n',
     "and: kind = 'flat' needs percent"),
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "above"\nthreshold = 1.0\nseverity = "fatal"\n', "severity"),
    ('[rules]\nid = "x"\n', "expected [[rules]] tables"),
])
def test_rules_are_validated_like_every_config_value(tmp_path: Path, toml: str, error: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError, match=None) as exc:
        Scan(load_config(cfg))  # checked when a scan is built, before anything is read
    assert error in str(exc.value) and str(cfg) in str(exc.value)
    log = write_jsonl(tmp_path / "s.jsonl", healthy_rows(30))
    res = CliRunner().invoke(main, ["scan", str(log), "--config", str(cfg), "-o", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 2 and error in res.output


def test_custom_rules_run_in_watch_and_gate_and_are_listed(tmp_path: Path) -> None:
    rows = healthy_rows(200, seed=6)
    for r in rows:
        r["format_accuracy"] = 0.9 if r["step"] < 120 else 0.3
    log = write_jsonl(tmp_path / "s.jsonl", rows)
    cfg = EXAMPLES / "rules-metric-floor.toml"
    out: list[str] = []
    Watcher(log, config=load_config(cfg), echo=out.append).run(once=True)
    assert any("custom.format_floor" in line for line in out)
    res = CliRunner().invoke(main, ["gate", str(log), "--config", str(cfg), "--format", "json"])
    assert res.exit_code == 1 and "custom.format_floor" in res.output
    listed = CliRunner().invoke(main, ["rules", "--config", str(cfg)], catch_exceptions=False)
    assert listed.exit_code == 0 and "custom.format_floor  [critical]" in listed.output
    data = json.loads(CliRunner().invoke(main, ["rules", "--config", str(cfg), "--format", "json"]).output)
    assert any(r["id"] == "custom.format_floor" and r["tracker"] == "custom" for r in data["rules"])


def test_a_healthy_log_fires_none_of_the_examples(tmp_path: Path) -> None:
    rows = healthy_rows(300, seed=9)
    for r in rows:
        r["format_accuracy"], r["gen_tokens_per_s"], r["gold_accuracy"] = 0.9, 3000.0, r["reward_mean"]
    log = write_jsonl(tmp_path / "s.jsonl", rows)
    for name in ("rules-proxy-vs-gold.toml", "rules-metric-floor.toml", "rules-throughput-floor.toml"):
        a = scan_path(log, config_path=EXAMPLES / name)
        assert not [f for f in a.findings if f.rule.startswith("custom.")], name


def test_a_gate_policy_can_name_a_custom_rule(tmp_path: Path) -> None:
    rows = healthy_rows(200, seed=7)
    for r in rows:
        r["gen_tokens_per_s"] = 3000.0 if not 80 <= r["step"] < 110 else 1200.0
    log = write_jsonl(tmp_path / "s.jsonl", rows)
    pol = tmp_path / "p.toml"
    pol.write_text('fail_on = "none"\nfail_rules = ["custom.throughput_floor"]\n')
    res = CliRunner().invoke(main, ["gate", str(log), "--policy", str(pol), "--config",
                                    str(EXAMPLES / "rules-throughput-floor.toml")])
    assert res.exit_code == 1 and "custom.throughput_floor" in res.output, res.output


def _team_config(folder: Path, own: str = "") -> Path:
    """A config beside a rules file of its own (named relatively) that also names an example's
    rules file by its absolute path."""
    (folder / "team.rules.toml").write_text((EXAMPLES / "rules-metric-floor.toml").read_text())
    cfg = folder / "forensics.toml"
    cfg.write_text(f'rules_files = ["team.rules.toml", "{EXAMPLES / "rules-throughput-floor.toml"}"]\n'
                   f'{own}\n[run]\nalgorithm = "grpo"\n')
    return cfg


def _floors_log(folder: Path) -> Path:
    rows = healthy_rows(200, seed=6)
    for r in rows:
        r["format_accuracy"] = 0.9 if r["step"] < 120 else 0.3
        r["gen_tokens_per_s"] = 3000.0 if not 80 <= r["step"] < 110 else 1200.0
        r["my_loss"] = 1.0 if r["step"] != 50 else 9.0
    return write_jsonl(folder / "s.jsonl", rows)


def test_a_rules_file_beside_the_config_runs_in_scan_gate_and_rules(tmp_path: Path) -> None:
    own = '[[rules]]\nid = "loss_cap"\nmetric = "my_loss"\nkind = "above"\nthreshold = 5.0\n'
    cfg = _team_config(tmp_path, own)
    log = _floors_log(tmp_path)
    a = scan_path(log, config_path=cfg)
    fired = {f.rule: (f.first_step, f.last_step) for f in a.findings if f.rule.startswith("custom.")}
    assert fired == {"custom.loss_cap": (50, 50), "custom.format_floor": (120, 199),
                     "custom.throughput_floor": (80, 109)}
    assert a.to_dict()["run"]["algorithm"] == "grpo"  # the config's own tables still apply
    res = CliRunner().invoke(main, ["gate", str(log), "--config", str(cfg), "--format", "json"])
    assert res.exit_code == 1, res.output
    assert all(r in res.output for r in fired)
    listed = CliRunner().invoke(main, ["rules", "--config", str(cfg)], catch_exceptions=False).output
    assert all(r in listed for r in fired)


@pytest.mark.parametrize(("rules_file", "line", "error"), [
    ('[[rules]]\nid = "x"\nmetric = "kl"\nkind = "above"\nthreshhold = 1.0\n', None, "did you mean 'threshold'"),
    ('[run]\nalgorithm = "ppo"\n', None, "holds [[rules]] tables only, not 'run'"),
    ('[[rule]]\nid = "x"\n', None, "not 'rule' (did you mean 'rules'"),
    ('# nothing yet\n', None, "declares no [[rules]] table"),
    ('[[rules]]\nid = "format_floor"\nmetric = "kl"\nkind = "above"\nthreshold = 1.0\n', None,
     "rule 'custom.format_floor' is also declared in"),
    (None, 'rules_files = "absent.toml"\n', "rules_files: 'absent.toml' is not a file"),
    (None, "rules_files = 3\n", "rules_files = 3: expected a path or a list of paths"),
])
def test_a_bad_rules_file_is_a_usage_error_naming_it(tmp_path: Path, rules_file: str | None, line: str | None,
                                                      error: str) -> None:
    cfg = tmp_path / "forensics.toml"
    if rules_file is not None:
        (tmp_path / "extra.rules.toml").write_text(rules_file)
        cfg.write_text((EXAMPLES / "rules-metric-floor.toml").read_text().replace(
            "[[rules]]", 'rules_files = "extra.rules.toml"\n\n[[rules]]', 1))
    else:
        cfg.write_text(line or "")
    with pytest.raises(ConfigError) as exc:
        Scan(load_config(cfg))
    assert error in str(exc.value), str(exc.value)
    in_file = rules_file is not None and "also declared" not in error
    assert str(tmp_path / ("extra.rules.toml" if in_file else "forensics.toml")) in str(exc.value)
    log = write_jsonl(tmp_path / "s.jsonl", healthy_rows(30))
    for args in (["scan", str(log), "-o", str(tmp_path / "o"), "-q"], ["gate", str(log)]):
        res = CliRunner().invoke(main, [*args, "--config", str(cfg)])
        assert res.exit_code == 2 and error in res.output, (args[0], res.output)


def test_a_rule_over_a_metric_the_log_does_not_have_says_so(tmp_path: Path) -> None:
    """Like a --map whose key is absent: the rule id, the metric and the closest columns, in the
    coverage and the terminal; an error under --strict; never a silent rule that cannot fire."""
    rows = healthy_rows(100, seed=7)
    for r in rows:
        r["tokens_per_sec"] = 2500.0
    log = write_jsonl(tmp_path / "s.jsonl", rows)
    cfg = tmp_path / "rules.toml"
    cfg.write_text('[[rules]]\nid = "tps_floor"\nmetric = "tokens_per_s"\nkind = "below"\nthreshold = 2000.0\n')
    a = scan_path(log, config_path=cfg)
    assert a.coverage["columns"]["rule_metrics_not_found"] == [
        {"rule": "custom.tps_floor", "metric": "tokens_per_s", "closest": ["tokens_per_sec"]}]
    res = CliRunner().invoke(main, ["scan", str(log), "--config", str(cfg), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0 and ("warning: rule custom.tps_floor reads 'tokens_per_s': the log has no such "
                                   "column (closest: 'tokens_per_sec'); the rule judges nothing") in res.output
    strict = CliRunner().invoke(main, ["scan", str(log), "--config", str(cfg), "--strict", "-o", str(tmp_path / "p")])
    assert strict.exit_code == 2 and "an error under --strict" in strict.output
    # a rule over a column the log has says nothing of the kind
    cfg.write_text('[[rules]]\nid = "tps_floor"\nmetric = "tokens_per_sec"\nkind = "below"\nthreshold = 2000.0\n')
    assert "rule_metrics_not_found" not in scan_path(log, config_path=cfg).coverage["columns"]


def test_a_spike_window_holds_bounded_memory() -> None:
    """``window = 100000`` on 130k rows passed 6 GB (4,096 windows copied at a time); the windows
    judged at once are bounded by cells now. Measured with tracemalloc (numpy reports to it)."""
    import tracemalloc

    import numpy as np

    from forensics.analysis.trackers.custom import parse_rules

    cond = parse_rules([{"id": "s", "metric": "kl", "kind": "spike", "window": 20_000}])[0].conditions[0]
    full = np.random.default_rng(0).normal(size=22_000)
    full[-1] = 50.0
    tracemalloc.start()
    try:
        hit, _ = cond._spike(full, 20_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert hit[-1] and not hit[:-1].any()
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MB"  # 2,000 windows of 20,000 rows at once: 640 MB

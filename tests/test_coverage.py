"""Coverage: the analysis says how much of the log was checked; nothing checked is not healthy."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main

from .conftest import RLDK


def own_keys_log(tmp_path: Path) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"tick": i, "policy/kl_est": 0.01 * i,
                                        "my_reward": 0.5, "g_norm2": 1.0}) + "\n" for i in range(50)))
    return path


def test_nothing_recognised_is_said_plainly_and_fails_the_gate(tmp_path: Path) -> None:
    log = own_keys_log(tmp_path)
    cov = scan_path(log).coverage
    assert cov["checked"] is False and cov["columns"]["unmapped"] == 4
    assert "none of its metrics is logged" in cov["trackers"]["kl_schedule"]["reason"]
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0 and "NOTHING CHECKED" in res.output and "my_reward" in res.output
    policy = tmp_path / "p.toml"
    policy.write_text('fail_on = "critical"\n')
    gate = CliRunner().invoke(main, ["gate", str(tmp_path / "o" / "analysis.json"), "--policy", str(policy)])
    assert gate.exit_code == 1 and "nothing checked" in gate.output
    policy.write_text('fail_on = "critical"\nallow_unchecked = true\n')
    gate = CliRunner().invoke(main, ["gate", str(tmp_path / "o" / "analysis.json"), "--policy", str(policy)])
    assert gate.exit_code == 0, gate.output


def test_a_recognised_log_lists_what_was_checked(tmp_path: Path) -> None:
    a = scan_path(RLDK)
    cov = a.to_dict()["coverage"]
    assert cov["checked"] and "kl_schedule" in cov["trackers_judging"]
    assert cov["trackers"]["preference"] == {
        "active": False,
        "reason": "none of its metrics is logged (needs one of: pref_margin, pref_accuracy, "
                  "pref_reward_chosen, logp_chosen, log_odds_ratio)"}
    res = CliRunner().invoke(main, ["scan", str(RLDK), "-o", str(tmp_path / "o")])
    assert "checked: " in res.output and "kl_schedule" in res.output


def test_the_pages_say_what_was_not_checked(tmp_path: Path) -> None:
    """The HTML and Markdown reports list the columns not recognised and the trackers not run,
    each with its reason (veRL's console: 35 columns forensics does not read, no KL logged, a
    learning rate printed as 0.000)."""
    from forensics.report import write_reports

    log = Path(__file__).resolve().parents[1] / "fixtures" / "real-logs" / \
        "verl_v04_console_qwen2_7b_math_megatron.log"
    write_reports(scan_path(log), tmp_path)
    for name in ("report.html", "report.md"):
        text = (tmp_path / name).read_text().replace("\\_", "_")
        assert "logged column(s) not recognised: " in text and "global_seqlen/" in text, name
        assert "kl_schedule not run: none of its metrics is logged" in text, name
        assert "hyperparams not run: learning_rate logged but without a usable value" in text, name

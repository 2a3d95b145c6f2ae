"""What a newcomer hits (issue: a log it barely read is never "Healthy"): the CSV of a custom loop
with its own key names, read as far as it can be, never called healthy on what it could not read,
and told which --map lines would read the rest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main


def custom_csv(path: Path, gnorm: bool = True) -> Path:
    """``iteration,gnorm,policy/kl_divergence,my_reward,lr``: the gradient norm explodes about 70x
    from row 150 and the KL climbs to 1.5."""
    rng = np.random.default_rng(39)
    head = ["iteration", *(["gnorm"] if gnorm else []), "policy/kl_divergence", "my_reward", "lr"]
    lines = [",".join(head)]
    for i in range(200):
        g = rng.uniform(0.8, 1.2) * (70 if i >= 150 else 1)
        kl = 0.02 + (1.5 * (i - 120) / 80 if i > 120 else 0)
        cells = [str(i), *([f"{g:.4f}"] if gnorm else []), f"{kl:.4f}", f"{0.5 + 0.001 * i + rng.normal(0, 0.02):.4f}",
                 "1e-5"]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_trainers_spellings_are_learnt(tmp_path: Path) -> None:
    a = scan_path(custom_csv(tmp_path / "run.csv"))
    mapping = a.mappings[str(tmp_path / "run.csv")].mapping
    assert mapping["iteration"] == "step" and mapping["gnorm"] == "grad_norm" and mapping["lr"] == "learning_rate"
    explode = [f for f in a.findings if f.rule == "grad.explode"]
    assert explode and explode[0].severity.value == "critical" and 150 <= explode[0].onset_step <= 155


def test_unrecognised_columns_are_named_with_the_map_that_reads_them(tmp_path: Path) -> None:
    log = custom_csv(tmp_path / "run.csv")
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert ("not recognised, most likely: policy/kl_divergence -> kl, my_reward -> reward_mean?"
            in res.output), res.output
    assert "to read them: --map policy/kl_divergence=kl --map my_reward=reward_mean" in res.output
    # applied, the KL is judged too: it left its band and stayed out
    mapped = CliRunner().invoke(main, ["scan", str(log), "--map", "policy/kl_divergence=kl", "--map",
                                       "my_reward=reward_mean", "-o", str(tmp_path / "out2")])
    d = json.loads((tmp_path / "out2" / "analysis.json").read_text())
    assert mapped.exit_code == 0 and "suggested_maps" not in d["coverage"]["columns"]
    assert any(f["rule"].startswith("kl.") and f["severity"] != "info" for f in d["findings"])


def test_a_log_with_no_core_signal_is_not_judged(tmp_path: Path) -> None:
    """Only the learning rate read: not Healthy, no overall score, the default gate fails."""
    log = custom_csv(tmp_path / "run.csv", gnorm=False)
    a = scan_path(log)
    assert a.coverage["checked"] is False and a.coverage["columns"]["core_signals"] == []
    assert a.health["overall"] is None
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0 and "NOT JUDGED: none of the core training signals" in res.output
    assert "verdict: Not judged" in res.output and "Healthy" not in res.output
    assert "--map policy/kl_divergence=kl" in res.output
    assert CliRunner().invoke(main, ["gate", str(log)]).exit_code == 1


def test_a_fleet_lists_a_run_it_could_not_judge(tmp_path: Path) -> None:
    """The fleet's summary says "not judged" for a run with no core signal (no score to print)."""
    import shutil

    (tmp_path / "runs" / "mine").mkdir(parents=True)
    custom_csv(tmp_path / "runs" / "mine" / "steps.csv", gnorm=False)
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ppo_healthy_s0",
                    tmp_path / "runs" / "healthy")
    res = CliRunner().invoke(main, ["fleet", str(tmp_path / "runs"), "-o", str(tmp_path / "fleet"),
                                    "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "mine: not judged, 0 critical, 0 warning" in res.output

"""Run diff: alignment, new/resolved findings, KS tests, divergence step, regression exit code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.verdicts.diff import first_divergence

from .conftest import healthy_rows, write_jsonl

RAMP_AT = 250


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def kl_ramp_rows() -> list[dict]:
    """The healthy run (same seed), but KL ramps up from RAMP_AT and spikes once."""
    rows = healthy_rows(400, seed=0)
    for i, r in enumerate(rows[RAMP_AT:]):
        r["kl"] *= 1.0 + 0.08 * i
    rows[300]["kl"] *= 5
    return rows


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("diff")
    return {"a": write_jsonl(base / "a.jsonl", healthy_rows(400, seed=0)),
            "b": write_jsonl(base / "b.jsonl", kl_ramp_rows()),
            "base": base}


def test_regression_is_found_and_exits_1(logs: dict[str, Path]) -> None:
    res = run("diff", str(logs["a"]), str(logs["b"]), "--format", "json")
    assert res.exit_code == 1, res.output
    d = json.loads(res.output)
    assert d["aligned_steps"] == 400
    new = {f["rule"] for f in d["findings"]["new"]}
    assert any(r.startswith("kl.") for r in new)
    assert d["regression"]["regressed"] and d["regression"]["reasons"]
    assert d["metrics"]["kl"]["ks_pvalue"] < 1e-6
    assert d["metrics"]["grad_norm"]["ks_pvalue"] == pytest.approx(1.0)
    assert set(d["metrics"]) >= {"kl", "reward_mean", "grad_norm", "entropy", "response_length_mean"}
    step = d["divergence"]["kl"]["step"]
    assert step is not None and RAMP_AT <= step <= RAMP_AT + 30
    assert d["divergence"]["reward_mean"]["step"] is None
    assert d["first_divergence"] == {"metric": "kl", "step": step}
    assert d["health"]["overall"]["delta"] <= 0
    assert d["final_reward"]["delta"] == pytest.approx(0.0, abs=1e-6)


def test_identical_runs_exit_0(logs: dict[str, Path]) -> None:
    res = run("diff", str(logs["a"]), str(logs["a"]))
    assert res.exit_code == 0, res.output
    assert "no regression" in res.output and "0 new, 0 resolved" in res.output
    assert "first divergence" not in res.output


def test_resolved_findings_do_not_regress(logs: dict[str, Path]) -> None:
    res = run("diff", str(logs["b"]), str(logs["a"]), "--format", "json")
    d = json.loads(res.output)
    assert res.exit_code == 0, res.output
    assert d["findings"]["new"] == [] and d["findings"]["resolved"]


def test_saved_reports_use_metrics_csv(logs: dict[str, Path]) -> None:
    base = logs["base"]
    for name in ("a", "b"):
        assert run("scan", str(logs[name]), "-o", str(base / f"out_{name}"), "-q").exit_code == 0
    res = run("diff", str(base / "out_a"), str(base / "out_b" / "analysis.json"), "--format", "json")
    assert res.exit_code == 1
    d = json.loads(res.output)
    assert d["series_source"] == {"a": "metrics.csv", "b": "metrics.csv"}
    assert RAMP_AT <= d["divergence"]["kl"]["step"] <= RAMP_AT + 30
    res = run("diff", str(base / "out_a"), str(logs["b"]))
    assert res.exit_code == 1 and "REGRESSION" in res.output and "first divergence: kl" in res.output


def test_tolerance_and_unreadable(logs: dict[str, Path], tmp_path: Path) -> None:
    assert run("diff", str(logs["a"]), str(tmp_path / "nope.jsonl")).exit_code == 3
    assert run("diff", str(logs["a"]), str(logs["a"]), "--tolerance", "-1").exit_code == 2
    for bad in ("nan", "inf", "1.5"):  # NaN would hide every regression (no drop exceeds it)
        res = run("diff", str(logs["a"]), str(logs["b"]), "--tolerance", bad)
        assert res.exit_code == 2 and "is not a finite number from 0 to 1" in res.output
    from forensics.errors import ConfigError
    from forensics.verdicts.diff import RunData, diff_runs

    empty = RunData("a", {"findings": [], "health": {}})
    with pytest.raises(ConfigError, match="tolerance = nan"):
        diff_runs(empty, empty, float("nan"))


def test_first_divergence_needs_consecutive_steps() -> None:
    s = np.arange(300)
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 300), rng.normal(0, 1, 300)
    assert first_divergence(a, b, s)["step"] is None  # two noisy runs of the same process
    b2 = b.copy()
    b2[100] += 50  # one outlier is not a divergence
    assert first_divergence(a, b2, s)["step"] is None
    b2[200:] += 20
    assert first_divergence(a, b2, s)["step"] == 200

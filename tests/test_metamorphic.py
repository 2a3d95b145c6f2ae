"""Metamorphic checks (forensics.verdicts.metamorphic): verdicts that must not change when a log is
changed in ways that change nothing about the training it records. The table is `make eval`'s;
the exceptions are named here and in the README with why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forensics.verdicts.evaluation import corpus_available, corpus_logs
from forensics.verdicts.metamorphic import TRANSFORMS, check_log, check_logs, shares

from .conftest import FIXTURES, healthy_rows

CORPORA = [FIXTURES / "runs", FIXTURES / "trl", FIXTURES / "real"]

#: Healthy logs whose verdict a transformation changes, and why (the test fails when one of them
#: stops changing: then remove it).
HEALTHY_EXCEPTIONS = {
    ("verl_grpo_deepseek7b-gsm8k_healthy-gradspikes.log", "cut_50"):
        "cut at row 559, two rows after a 12x gradient spike (rows 557-558): an excursion in the "
        "last rows of a log cannot be told from the start of a lasting one, so it stays a warning",
}
#: The least share of verdicts (healthy or the rule families, and the gate) each transformation
#: keeps over the three corpora: the families of faulty runs move where a symptom lasts a few rows
#: (at half the rows a persistence window of k rows spans twice the steps).
FLOORS = {"drop_2nd": 0.8, "drop_5th": 0.9, "cut_50": 0.95, "cut_75": 1.0, "reward_x3": 1.0,
          "reward_plus1": 1.0, "renamed": 1.0, "tie_row": 1.0, "restart": 1.0}


@pytest.fixture(scope="module")
def checks() -> list[dict]:
    logs = [log for root in CORPORA if corpus_available(root) for log in corpus_logs(root)]
    return check_logs(logs)


def test_every_gate_decision_survives_every_transformation(checks: list[dict]) -> None:
    flipped = {(c["name"], t): (c["verdict"][2], v[2]) for c in checks for t, v in c["changed"].items()
               if v[2] != c["verdict"][2]}
    assert not flipped


def test_healthy_verdicts_survive_except_the_named(checks: list[dict]) -> None:
    healthy = [c for c in checks if c["verdict"][0]]
    assert len(healthy) >= 12
    changed = {(c["name"], t) for c in healthy for t in c["changed"]}
    assert changed == set(HEALTHY_EXCEPTIONS) & {(c["name"], t) for c in checks for t in c["results"]}


def test_each_transformation_keeps_its_share(checks: list[dict]) -> None:
    absent = [str(root.relative_to(FIXTURES.parent)) for root in CORPORA if not corpus_available(root)]
    if absent:  # the floors are shares of the three corpora: a part of them is another population
        pytest.skip(f"the floors are over the three corpora and {', '.join(absent)} is not here "
                    "(its logs are the shared real logs, ../shared/real-logs)")
    got = shares(checks)
    low = {t: row["invariant"] for t, row in got.items()
           if row["invariant"] is not None and row["invariant"] < FLOORS[t]}
    assert not low, {t: got[t]["changed"] for t in low}
    assert {t for t, row in got.items() if row["logs"]} == set(TRANSFORMS)


# --- the transformations themselves ------------------------------------------------------------

def _frame() -> pd.DataFrame:
    rows = healthy_rows(60)
    for r in rows:
        r["reward/format"] = 0.5
        r["frac_reward_zero_std"] = 0.1
        r["reward_std"] = 0.3
    return pd.DataFrame(rows)


def test_rows_are_dropped_and_cut() -> None:
    df, info = _frame(), {"healthy": True, "family": "group"}
    assert len(TRANSFORMS["drop_2nd"](df, info)) == 30 and len(TRANSFORMS["drop_5th"](df, info)) == 48
    assert len(TRANSFORMS["cut_50"](df, info)) == 30 and len(TRANSFORMS["cut_75"](df, info)) == 45
    assert TRANSFORMS["cut_50"](df, {"healthy": False, "family": "group"}) is None  # a fault may start later


def test_the_reward_is_scaled_and_shifted() -> None:
    df, info = _frame(), {"healthy": True, "family": "group"}
    x3, plus1 = TRANSFORMS["reward_x3"](df, info), TRANSFORMS["reward_plus1"](df, info)
    assert np.allclose(x3["reward_mean"], 3 * df["reward_mean"]) and np.allclose(x3["reward/format"], 1.5)
    assert np.allclose(plus1["reward_mean"], df["reward_mean"] + 1) and np.allclose(plus1["reward/format"], 0.5)
    assert np.allclose(plus1["reward_std"], df["reward_std"])  # a shift moves no spread


def test_a_tie_row_and_a_restart() -> None:
    df, info = _frame(), {"healthy": True, "family": "group"}
    tied = TRANSFORMS["tie_row"](df, info)
    assert len(tied) == 61 and tied["step"].is_monotonic_increasing and tied["step"].is_unique
    row = tied.iloc[30]
    assert row["reward_std"] == 0 and row["frac_reward_zero_std"] == 1 and row["grad_norm"] < 0.01
    assert TRANSFORMS["tie_row"](df, {"healthy": True, "family": "critic"}) is None  # groups only
    twice = TRANSFORMS["restart"](df, info)
    assert len(twice) == 120 and list(twice["step"][60:]) == list(df["step"])


def test_renamed_keys_are_mapped_back(tmp_path: Path) -> None:
    info: dict = {"healthy": True, "family": "group"}
    out = TRANSFORMS["renamed"](_frame(), info)
    assert "my kl" in out and "kl" not in out and info["columns"]["my kl"] == "kl"
    assert info["columns"]["my step"] == "step"


def test_a_log_is_checked_against_its_own_read_back(tmp_path: Path) -> None:
    """A healthy run keeps its verdict under every applicable transformation; the table says so."""
    from .conftest import write_jsonl

    log = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(300))
    c = check_log(log)
    assert c["verdict"] == (True, (), "pass")
    assert all(v in (True, None) for v in c["results"].values()), c["changed"]
    assert c["results"]["tie_row"] is None  # no algorithm known: not a group method

"""Detection quality on the labelled corpus recorded by the reference trainer (fixtures/runs).

Healthy runs must have no warning or critical finding; every injected fault must be found by one
of its expected rules within its horizon. The table (`make eval`) is printed with -s.
"""

from __future__ import annotations

import pytest

from forensics.verdicts.evaluation import Quality, evaluate, load_runs, render_table, scan_runs

from .conftest import FIXTURES

RUNS = FIXTURES / "runs"


@pytest.fixture(scope="module")
def quality() -> Quality:
    return evaluate(scan_runs(RUNS))


def test_corpus_is_complete() -> None:
    manifests = [m for _, m in load_runs(RUNS)]
    healthy = [m for m in manifests if m["fault"] is None]
    assert len(healthy) >= 4
    assert {m["algorithm"] for m in healthy} >= {"ppo", "grpo"}
    assert len([m for m in manifests if m["fault"]]) >= 10


def test_healthy_runs_are_clean(quality: Quality) -> None:
    dirty = [r for r in quality.runs if r["fault"] is None and r["false_alarms"]]
    assert not dirty, render_table(quality)


def test_every_fault_is_detected_within_its_horizon(quality: Quality) -> None:
    missed = [r["name"] for r in quality.runs if r["fault"] is not None and not r["detected"]]
    assert not missed, render_table(quality)
    print("\n" + render_table(quality))


def test_no_alarm_before_onset(quality: Quality) -> None:
    early = {r["name"]: r["false_alarms"] for r in quality.runs
             if r["fault"] is not None and r["false_alarms"]}
    assert not early, render_table(quality)

"""The detection-quality scorer, on hand-made labels with known answers."""

from __future__ import annotations

import pytest

from forensics.verdicts.evaluation import LabelledRun, evaluate, render_table


def alarm(rule: str, onset: int, severity: str = "warning") -> dict:
    return {"rule": rule, "severity": severity, "onset_step": onset, "first_step": onset,
            "last_step": onset + 3}


def test_scores_known_cases() -> None:
    runs = [
        LabelledRun("healthy-1", None, None, [], 50, 500, [alarm("kl.spike", 100),
                                                          alarm("x.info", 10, "info")]),
        LabelledRun("healthy-2", None, None, [], 50, 500, []),
        LabelledRun("spike", "lr_high", 200, ["grad.explode", "kl.spike"], 40, 300,
                    [alarm("kl.spike", 205), alarm("grad.explode", 210), alarm("adv.bias", 150),
                     alarm("grad.imbalance", 230)]),
        LabelledRun("missed", "kl_off", 100, ["kl.runaway"], 50, 300,
                    [alarm("kl.runaway", 400)]),
    ]
    q = evaluate(runs)
    assert q.faults == 2 and q.detected == 1
    # healthy steps: 1000 from healthy runs + the pre-window parts of the faulty runs
    assert q.healthy_steps == 1000 + 190 + 87
    assert q.false_alarms == 2  # kl.spike in healthy-1, adv.bias before the window
    assert q.rules["kl.spike"].tp == 1 and q.rules["kl.spike"].fp == 1
    assert q.rules["kl.spike"].precision == pytest.approx(0.5)
    assert q.rules["grad.explode"].recall == 1.0 and q.rules["kl.runaway"].recall == 0.0
    assert q.rules["grad.explode"].delays == [10]
    spike = next(r for r in q.runs if r["name"] == "spike")
    assert spike["first_rule"] == "kl.spike" and spike["primary_first"] is False
    assert spike["other"] == ["grad.imbalance"]
    assert 0 < q.nab < 100
    table = render_table(q)
    assert "MISSED" in table and "FALSE ALARMS" in table


def test_nab_perfect_and_null() -> None:
    perfect = evaluate([LabelledRun("a", "f", 100, ["r"], 40, 200, [alarm("r", 90)])])
    assert perfect.nab == 100.0  # detection at the left edge of the window: t0 - 0.25 b
    null = evaluate([LabelledRun("a", "f", 100, ["r"], 40, 200, [])])
    assert null.nab == 0.0

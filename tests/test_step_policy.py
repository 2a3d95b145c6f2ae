"""Resumed runs: steps that repeat or go back are detected, reported and handled (keep-first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from forensics import scan_path
from forensics.analysis.engine import StepOrder

from .conftest import healthy_rows, write_jsonl


def test_resume_keeps_first_record_and_reports(tmp_path: Path) -> None:
    rows = healthy_rows(120)
    first_attempt = rows[:100]
    resumed = [dict(r, kl=r["kl"] * 1.01) for r in rows[80:120]]  # resumed from step 80
    p = write_jsonl(tmp_path / "s.jsonl", first_attempt + resumed)
    a = scan_path(p)
    assert a.steps["rows"] == 120
    assert a.inputs[0].skipped["step replayed"] == 20
    assert a.steps["replays"] == [{"line": 101, "from_step": 99, "to_step": 80, "rows": 20,
                                   "last_step": 99, "restart": False}]
    f = [f for f in a.findings if f.rule == "stream.step_replay"]
    assert len(f) == 1 and f[0].evidence["went_back_to"] == 80
    # the first attempt's values are the ones analysed
    frame = a.metrics_frame()
    assert np.isclose(frame["kl"][85], rows[85]["kl"], rtol=1e-6)


def test_step_order_across_batches() -> None:
    order = StepOrder()
    k1 = order.apply(np.array([0, 1, 2, 3]), np.array([1, 2, 3, 4]))
    k2 = order.apply(np.array([2, 3]), np.array([5, 6]))
    k3 = order.apply(np.array([3, 4, 4, 5]), np.array([7, 8, 9, 10]))
    assert k1.all() and not k2.any()
    assert k3.tolist() == [False, True, False, True]
    assert [(r.line, r.from_step, r.to_step, r.rows) for r in order.replays] == [
        (5, 3, 2, 3), (9, 4, 4, 1)]


def test_a_counter_that_restarts_at_the_first_step_is_a_new_run(tmp_path: Path) -> None:
    """Three runs appended to one log (Tinker's metrics.jsonl, LABELS.md #40: steps 0; 0-5;
    0-44): the runs are split, not merged, and the last one is analysed; the ones before it are
    set aside and reported. A resume from a later step stays keep-first (above)."""
    rows = healthy_rows(45)
    third = [dict(r, kl=r["kl"] * 3.0) for r in rows]  # the last run's own values
    log = write_jsonl(tmp_path / "metrics.jsonl", rows[:1] + rows[:6] + third)
    a = scan_path(log)
    assert (a.steps["rows"], a.steps["first"], a.steps["last"]) == (45, 0, 44)
    assert np.allclose(a.metrics_frame()["kl"], [r["kl"] for r in third], rtol=1e-6)
    r = a.inputs[0]
    assert (r.rows_read, r.rows_kept) == (52, 45)
    assert r.skipped["an earlier run in the same log"] == 6 and r.skipped["step replayed"] == 1
    restarts = [f for f in a.findings if f.rule == "stream.step_replay" and f.evidence.get("restart")]
    assert len(restarts) == 1 and "a new run appended to the log" in restarts[0].message
    assert restarts[0].evidence["line"] == 8 and restarts[0].evidence["rows_set_aside"] == 6
    assert not [f for f in a.findings if f.rule == "stream.rows_skipped"]  # set aside, not lost
    # the same split in batches of any size
    for batch in (1, 5, 13):
        b = scan_path(log, batch_rows=batch)
        assert (b.steps["rows"], b.inputs[0].skipped["an earlier run in the same log"]) == (45, 6)

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
                                   "last_step": 99}]
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

"""The analysis does not depend on how the streams are cut into batches (property test)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis.engine import Scan
from forensics.io.readers import ReadReport
from forensics.io.readers.arrow import rows_to_raw

from . import synth
from .conftest import healthy_rows


def _pathological_run() -> tuple[list[dict], list[dict]]:
    rows = healthy_rows(260, seed=11)
    for r in rows[120:125]:
        r["kl"] *= 6
    for r in rows[200:]:
        r["grad_norm"] *= 40
    for r in rows[150:]:
        r["advantage_mean"] += 0.5
    rows[90]["grad_norm"] = float("nan")
    for i, r in enumerate(rows[170:]):
        r["truncation_rate"] = min(0.5, 0.01 + 0.01 * i)
    return rows, synth.length_hacking_samples(steps=80, per_step=6, at=40)


STEPS, SAMPLES = _pathological_run()


def _analyse(cuts_steps: list[int], cuts_samples: list[int]) -> dict:
    scan = Scan()
    rep, srep = ReadReport("steps"), ReadReport("samples")
    for rows, cuts, feed, report in ((STEPS, cuts_steps, scan.feed, rep),
                                     (SAMPLES, cuts_samples, scan.feed_samples, srep)):
        bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
        for a, b in pairwise(bounds):
            report.rows_read += b - a
            report.rows_kept += b - a
            feed(rows_to_raw(rows[a:b], np.arange(a + 1, b + 1)), report)
    d = scan.finish().to_dict()
    d.pop("inputs")
    return d


ONE_BATCH = _analyse([], [])


def test_reference_run_has_findings() -> None:
    rules = {f["rule"] for f in ONE_BATCH["findings"]}
    assert {"kl.spike", "grad.explode", "grad.nonfinite", "adv.bias", "length.truncation",
            "length.reward_correlation"} <= rules


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(STEPS)), max_size=12),
       st.lists(st.integers(0, len(SAMPLES)), max_size=12))
def test_random_cuts_give_identical_analysis(cuts_steps: list[int], cuts_samples: list[int]) -> None:
    assert _analyse(cuts_steps, cuts_samples) == ONE_BATCH


def test_one_row_batches_give_identical_analysis() -> None:
    assert _analyse(list(range(len(STEPS))), list(range(0, len(SAMPLES), 7))) == ONE_BATCH

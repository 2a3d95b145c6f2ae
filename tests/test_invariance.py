"""The analysis does not depend on how the streams are cut into batches (property test)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

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
REFERENCE_RUN = Path(__file__).resolve().parent.parent / "fixtures" / "runs" / "ppo_healthy_s0"


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


def test_the_kl_controllers_fitted_gain_is_the_same_to_the_last_bit_however_cut() -> None:
    """The adaptive controller's gain is fitted from sums over every row. They are added in row
    order, so no batch cut (and no memory alignment, which sets how numpy's pairwise sum groups
    the terms) moves its last bit: a scan is a pure function of its input, in a long-lived
    worker too."""
    from forensics.analysis.engine import scan_path

    def gain(batch_rows: int) -> float:
        d = scan_path(REFERENCE_RUN, batch_rows=batch_rows).to_dict()
        return d["trackers"]["kl_schedule"]["summary"]["controller_gain_estimate"]

    whole = gain(100_000)
    assert whole > 0.1  # the controller fitted: a PPO run with an adaptive KL coefficient
    assert {gain(n) for n in (1, 7, 64, 333)} == {whole}

"""The fast, seeded slice of the fuzz suite (``make fuzz`` runs the full one), and properties of
the canonical layer checked with hypothesis: whatever the rows hold, every row is kept or skipped
with a reason and every value is kept or set aside with its key and line."""

from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.io.canonical import Canonicalizer, step_value
from forensics.io.readers import ReadReport
from forensics.io.readers.arrow import rows_to_raw

from .fuzz import inputs
from .fuzz.harness import FAILURES, run_cases

#: Cases in the slice: every family of tests/fuzz/inputs.py at least once (about 30 s on 2 cores).
SLICE = 160


def test_fuzz_slice_has_no_failures() -> None:
    cases = list(inputs.generate(random.Random(20240601), SLICE))
    assert len({c.name.split("/")[0] for c in cases}) >= 6  # every family is in
    results = list(run_cases(cases, workers=2, timeout=60))
    assert len(results) == SLICE
    bad = [(r.outcome, r.case.name, r.detail) for r in results if r.outcome in FAILURES]
    assert bad == []
    outcomes = {r.outcome for r in results}
    assert {"ok", "input"} <= outcomes  # hostile input is read, or refused with a clear error


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "inf", "1e-3", "oops", "tensor(0.5, device='cuda:0')", "", " 7 ", "1_000"]),
    st.text(max_size=8), st.lists(st.integers(), max_size=2))
_rows = st.lists(st.dictionaries(st.sampled_from(["step", "kl", "reward_mean", "grad_norm", "grad_norm_policy",
                                                  "x", "note"]), _scalars, max_size=5), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(_rows, st.integers(min_value=1, max_value=7))
def test_every_row_and_value_is_accounted_for(rows: list[dict[str, object]], batch: int) -> None:
    report = ReadReport("rows.jsonl")
    canon = Canonicalizer()
    kept = 0
    for a in range(0, len(rows), batch):
        part = rows[a:a + batch]
        raw = rows_to_raw(part, np.arange(a + 1, a + len(part) + 1))
        report.rows_read += len(raw)
        out, keep = canon(raw, report)
        kept += int(keep.sum())
        assert out.steps.dtype == np.int64 and len(out.steps) == len(part)
        for name, col in out.columns.items():
            assert col.dtype == np.float64 and len(col) == len(part), name
    # every row is kept or skipped with a reason: none lost
    assert kept + report.rows_skipped == len(rows)
    if canon.step_from_rows is False:
        for i, row in enumerate(rows):
            step, _ = step_value(row["step"]) if row.get("step") is not None else (None, "")
            if step is None:
                assert any(issue.line == i + 1 for issue in report.issues) or len(report.issues) >= 200
    # a canonical name has one source
    targets = list(canon.mapping.mapping.values())
    assert len(targets) == len(set(targets))


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=30)))
def test_step_value_is_exact_or_says_why(value: object) -> None:
    step, why = step_value(value)
    if step is None:
        assert why.startswith("step ")
        return
    assert why == "" and -(2**63) <= step < 2**63
    if isinstance(value, int) and not isinstance(value, bool):
        assert step == value
    if isinstance(value, float):
        assert math.isfinite(value) and step == value


#: The slice run again in one child process with the JSONL reader's first chunk cut to 256 bytes
#: and polars loaded: every file is then read in many chunks, each parsed in several blocks.
SMALL_CHUNKS = r"""
import random, sys
import polars  # noqa: F401  (the reader then tries polars on every chunk after the first)
import forensics.io.readers.jsonl as jsonl
jsonl._FIRST_CHUNK = 256
from tests.fuzz import inputs
from tests.fuzz.harness import FAILURES, run_case
bad = []
for case in inputs.generate(random.Random(int(sys.argv[1])), int(sys.argv[2])):
    r = run_case(case, timeout=60)
    if r.outcome in FAILURES:
        bad.append((r.outcome, case.name, r.detail[:200]))
print(bad)
"""


def test_fuzz_slice_read_in_small_chunks_crashes_nothing() -> None:
    """The chunking and the parses' blocks in every arrangement: pyarrow's JSON reader crashed
    the process (SIGSEGV) on a column holding numbers in one block and a list in another, a
    case the small files of the slice, each one block, could not reach."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", SMALL_CHUNKS, "3", str(SLICE)], capture_output=True, text=True,
                         cwd=root, timeout=600, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.strip().splitlines()[-1] == "[]"

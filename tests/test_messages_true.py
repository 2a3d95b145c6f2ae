"""Messages true to the log: every number a message quotes right before "at step N" is the value a
logged (or derived) column holds at step N, to the digits printed; no ratio against a near-zero
scale ("0.00x"); the episodes of one finding never overlap or nest. Checked on every finding of
every real log (fixtures/real) and of the TRL corpus."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from forensics.analysis.engine import scan_path
from forensics.verdicts.evaluation import corpus_available, labelled_logs_root

from .conftest import FIXTURES

#: a number (optionally a percentage, optionally a unit) quoted right before "at step N"
QUOTE = re.compile(r"(?<![\w.])(-?\d[\d,]*\.?\d*(?:e[+-]?\d+)?)(%?)(?: [a-z]+(?:/[a-z]+)?)?,? at step (\d+)")


def _logs() -> list[Path]:
    out = sorted((FIXTURES / "trl").glob("*/trainer_state.json"))
    real = FIXTURES / "real"
    if corpus_available(real):
        out += sorted(p for p in labelled_logs_root(real).iterdir() if p.name != "LABELS.md")
    return out


def _matches(value: float, printed: str, x: float) -> bool:
    """``x`` rounds to ``value`` at the significant digits ``printed`` shows."""
    if not math.isfinite(x):
        return False
    if value == 0:
        return abs(x) < 1e-9
    digits = len(printed.replace("-", "").replace(".", "").replace(",", "").split("e")[0].lstrip("0")) or 1
    return abs(x - value) <= 0.51 * 10 ** (math.floor(math.log10(abs(value))) - digits + 1)


def _bad_quotes(path: Path) -> list[str]:
    analysis = scan_path(path)
    table = analysis.metrics.frame()
    steps = table["step"]
    bad = []
    for f in analysis.findings:
        for message in [f.message, *(e["message"] for e in f.episodes)]:
            assert "0.00x" not in message, message
            if "median of" in message:  # a smoothed level, named as such
                continue
            for printed, pct, step in QUOTE.findall(message):
                value = float(printed.replace(",", "")) / (100 if pct else 1)
                rows = np.flatnonzero(steps == int(step))
                if not len(rows) or not any(_matches(value, printed, float(col[rows[0]]))
                                            for name, col in table.items() if name != "step"):
                    bad.append(f"{path.name}: {f.rule}: {message}")
        ranges = sorted(f.episode_ranges())
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), (path.name, f.rule, ranges)
    return bad


@pytest.mark.parametrize("path", _logs(), ids=lambda p: p.parent.name if p.name == "trainer_state.json" else p.name)
def test_quoted_values_are_the_logged_ones(path: Path) -> None:
    assert not _bad_quotes(path)

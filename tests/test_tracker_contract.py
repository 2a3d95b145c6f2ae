"""The tracker contract: ``finish`` only reads a tracker's state, so it gives the same result
twice, at any point of the stream, and ``Scan.peek`` needs no copy of the trackers."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from forensics.analysis.engine import Scan, scan_path
from forensics.analysis.trackers import TRACKERS
from forensics.analysis.trackers.base import TrackerResult
from forensics.io.readers import ReadReport
from forensics.io.readers.arrow import rows_to_raw

from . import test_training_health as health
from .test_invariance import ONE_BATCH, SAMPLES, STEPS

ROOT = Path(__file__).resolve().parent.parent
#: every pathological fixture run (the healthy ones fire little): together they fire most rules
RUNS = sorted(p for d in ("runs", "trl") for p in (ROOT / "fixtures" / d).iterdir()
              if p.is_dir() and "healthy" not in p.name)


def _dump(r: TrackerResult) -> str:
    series = {k: [np.asarray(a).tolist() for a in v] for k, v in r.series.items()}
    return json.dumps({"findings": [f.to_dict() for f in r.findings], "score": r.score,
                       "summary": r.summary, "notes": r.notes, "sections": r.sections,
                       "series": series, "coverage": sorted(r.coverage.values())},
                      sort_keys=True, default=str)


def _scanned(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Scan, Any]:
    """The finished scan of ``path`` and its analysis."""
    seen: list[Scan] = []
    finish = Scan.finish

    def spy(self: Scan) -> Any:
        seen.append(self)
        return finish(self)

    monkeypatch.setattr(Scan, "finish", spy)
    analysis = scan_path(path)
    monkeypatch.setattr(Scan, "finish", finish)
    return seen[0], analysis


@pytest.mark.parametrize("run", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_finish_twice_gives_identical_results(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan, first = _scanned(run, monkeypatch)
    for tracker in scan.trackers:
        assert _dump(tracker.finish()) == _dump(tracker.finish()), tracker.name
    # consequence (severity from the whole set of findings) is judged once per finish, on fresh
    # findings: a second finish does not judge the judged ones again
    again = scan.finish()
    assert json.dumps(again.to_dict(), default=str) == json.dumps(first.to_dict(), default=str)


def _synthetic() -> Scan:
    """The training-health pathologies with a sample stream of responses (generation's input)."""
    scan = Scan(trackers=[n for n in TRACKERS if n != "hyperparams"])
    rep, srep = ReadReport("steps"), ReadReport("samples")
    rows, samples = health._pathological_rows(), health.sample_rows(120, 5, seed=3)
    for r in samples[200:400]:  # the format breaks for a while
        r["completion"] = "no format " * 5
    scan.feed(rows_to_raw(rows, np.arange(1, len(rows) + 1)), rep)
    scan.feed_samples(rows_to_raw(samples, np.arange(1, len(samples) + 1)), srep)
    return scan


def test_finish_twice_on_the_synthetic_run() -> None:
    scan = _synthetic()
    first = json.dumps(scan.finish().to_dict(), default=str)
    for tracker in scan.trackers:
        assert _dump(tracker.finish()) == _dump(tracker.finish()), tracker.name
    assert json.dumps(scan.finish().to_dict(), default=str) == first


def test_the_runs_exercise_every_tracker() -> None:
    fired = {f.tracker for f in _synthetic().finish().findings}
    for run in RUNS:
        fired |= {f.tracker for f in scan_path(run).findings}
    assert set(TRACKERS) - {"windows"} <= fired  # the windows only summarise


def _fed(peek_at: tuple[int, ...]) -> dict[str, Any]:
    """The invariance run fed in pieces, peeking after each."""
    scan = Scan()
    rep, srep = ReadReport("steps"), ReadReport("samples")
    cuts = sorted({0, *peek_at, len(STEPS)})
    for a, b in pairwise(cuts):
        rep.rows_read += b - a
        rep.rows_kept += b - a
        scan.feed(rows_to_raw(STEPS[a:b], np.arange(a + 1, b + 1)), rep)
        if b < len(STEPS):
            scan.peek()
    srep.rows_read = srep.rows_kept = len(SAMPLES)
    for a in range(0, len(SAMPLES), 50):
        scan.feed_samples(rows_to_raw(SAMPLES[a:a + 50], np.arange(a + 1, a + 51)), srep)
        scan.peek()
    d = scan.finish().to_dict()
    d.pop("inputs")
    return d


def test_peeking_does_not_disturb_the_scan() -> None:
    assert _fed((60, 121, 203, 250)) == ONE_BATCH


def test_every_tracker_leaves_finish_to_the_base_class() -> None:
    for cls in TRACKERS.values():
        assert "finish" not in vars(cls), f"{cls.name}: the base class's finish starts the findings afresh"


def test_only_the_findings_that_may_head_their_group_keep_their_evidence() -> None:
    """A tracker drops the evidence of an episode's finding once a higher-ranked one of the same
    rule and series shows up (a noisy run has tens of thousands): the grouped findings are those
    of the evidence kept whole, for any mix of severities, magnitudes, ties and overlaps."""
    import copy
    import random

    from forensics.analysis.findings import RuleSpec, Severity, clean_evidence, group_recurrences
    from forensics.analysis.stats.episodes import Episode
    from forensics.analysis.trackers.base import Tracker

    class Noisy(Tracker):
        name, area = "noisy", "training"
        rules = (RuleSpec("noisy.a", Severity.WARNING, "a", "a", "a"),
                 RuleSpec("noisy.b", Severity.INFO, "b", "b", "b"))

        def __init__(self) -> None:
            super().__init__(params=object())

    rng = random.Random(11)
    for _ in range(200):
        tracker = Noisy()
        kept, whole, coverage, magnitude = [], [], {}, {}
        for i in range(rng.randint(1, 40)):
            first = rng.randint(0, 300)
            peak = rng.choice([1.0, 2.0, 5.0, float("nan"), float(rng.randint(0, 9))])
            ep = Episode(onset_step=first, first_step=first, last_step=first + rng.randint(0, 30),
                         last_row=0, n_rows=rng.randint(1, 9), peak=peak)
            evidence = {"value": rng.random(), "i": i, **({"series": rng.choice("xy")} if rng.random() < 0.7 else {})}
            severity = rng.choice([None, Severity.INFO, Severity.WARNING, Severity.CRITICAL])
            f = tracker.emit(rng.choice(["noisy.a", "noisy.b"]), ep, f"episode {i}", evidence, severity)
            kept.append(f)
            full = copy.copy(f)
            # a tracker's critical is kept as a hint (only the consequence pass makes one)
            full.evidence = dict(evidence, **({"tracker_severity": "critical"}
                                              if severity is Severity.CRITICAL else {}))
            whole.append(full)
            coverage[id(full)] = tracker._coverage[id(f)]
            if id(f) in tracker._magnitude:
                magnitude[id(full)] = tracker._magnitude[id(f)]
        held = [f for f in kept if set(f.evidence) - {"series"}]
        assert len(held) <= len(kept) and (len(kept) < 8 or len(held) < len(kept))
        got = tracker.result({}).findings
        want, _ = group_recurrences(whole, coverage, magnitude)
        for f in want:  # as Tracker.result leaves them
            f.evidence = clean_evidence(f.evidence)
        assert sorted(json.dumps(f.to_dict(), sort_keys=True) for f in got) == \
            sorted(json.dumps(f.to_dict(), sort_keys=True) for f in want)

"""What every tracker's test module checks, on the tracker's own seeded stream (river's shape:
golden detection steps per detector), and the streams the modules share.

A tracker's module defines a subclass of :class:`TrackerSuite` with

* ``NAME``: the tracker;
* ``stream()``: a seeded :class:`Stream` on which the tracker fires;
* ``GOLDEN``: ``(rule, severity, onset_step, first_step, last_step)`` of every finding on it;
* ``FIRES``: ``(rule, source)`` for every rule of the tracker, what makes it fire: a fixture run (``"runs/name"``,
  scanned with every tracker) or a function returning a :class:`Stream` (scanned with this one).

and gets the golden steps, batch invariance (the same findings, summary and sections whatever the
batch sizes), a pure ``finish`` (twice gives the same result) and the rules' documentation (every
rule in ``docs/rules.md`` and fired here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from forensics.analysis.engine import Scan, scan_path
from forensics.analysis.result import Analysis
from forensics.analysis.trackers import TRACKERS
from forensics.config import RunMeta
from forensics.io.readers import ReadReport
from forensics.io.readers.arrow import rows_to_raw

from ..test_training_health import scan

ROOT = Path(__file__).resolve().parents[2]
RULES_DOC = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")


@dataclass
class Stream:
    """Step rows, optional sample rows and the run's metadata."""

    rows: list[dict[str, Any]]
    samples: list[dict[str, Any]] | None = None
    meta: RunMeta = field(default_factory=RunMeta)


Source = str | Callable[[], Stream]


def analyse(name: str, s: Stream, sizes: Any = None, sample_sizes: Any = None) -> Analysis:
    """``s`` scanned by tracker ``name`` alone, in batches of ``sizes`` (None: one batch)."""
    return scan(s.rows, sizes, s.samples, sample_sizes, s.meta, trackers=(name,))


def golden(a: Analysis) -> list[tuple[str, str, int, int, int]]:
    return [(f.rule, f.severity.value, f.onset_step, f.first_step, f.last_step) for f in a.findings]


def fired(name: str, source: Source) -> set[str]:
    """The rules that fire on ``source``: a fixture run or a stream."""
    if isinstance(source, str):
        return {f.rule for f in scan_path(ROOT / "fixtures" / source).findings}
    return {f.rule for f in analyse(name, source()).findings}


def fed(name: str, s: Stream) -> Scan:
    """A scan by tracker ``name`` alone, fed ``s`` in one batch a stream, not finished."""
    sc = Scan(None, s.meta, (name,))
    sc.feed(rows_to_raw(s.rows, np.arange(1, len(s.rows) + 1)), ReadReport("steps.jsonl"))
    if s.samples:
        sc.feed_samples(rows_to_raw(s.samples, np.arange(1, len(s.samples) + 1)), ReadReport("samples.jsonl"))
    return sc


def _dump(a: Analysis) -> str:
    result = {"findings": [f.to_dict() for f in a.findings],
              "results": [(r.summary, r.sections, r.score) for r in a.results]}
    return json.dumps(result, sort_keys=True, default=str)


class TrackerSuite:
    NAME: ClassVar[str]
    GOLDEN: ClassVar[tuple[tuple[str, str, int, int, int], ...]]
    FIRES: ClassVar[tuple[tuple[str, Source], ...]]

    @staticmethod
    def stream() -> Stream:
        raise NotImplementedError

    def test_golden_detection_steps(self) -> None:
        assert golden(analyse(self.NAME, self.stream())) == list(self.GOLDEN)

    def test_batch_invariance(self) -> None:
        s = self.stream()
        rng = np.random.default_rng(len(self.NAME))
        sizes, sample_sizes = rng.integers(1, 40, 400).tolist(), rng.integers(1, 17, 400).tolist()
        assert _dump(analyse(self.NAME, s, sizes, sample_sizes)) == _dump(analyse(self.NAME, s))

    def test_finish_twice_gives_identical_results(self) -> None:
        sc = fed(self.NAME, self.stream())
        first = _dump(sc.finish())
        (tracker,) = sc.trackers
        once, twice = (json.dumps({"findings": [f.to_dict() for f in r.findings], "score": r.score,
                                   "summary": r.summary, "sections": r.sections}, sort_keys=True, default=str)
                       for r in (tracker.finish(), tracker.finish()))
        assert once == twice
        assert _dump(sc.finish()) == first

    def test_rules_documented(self) -> None:
        cls = TRACKERS[self.NAME]
        fields = set(cls.Params.__dataclass_fields__)
        for r in cls.rules:
            assert re.fullmatch(r"[a-z_]+\.[a-z_]+", r.id) and r.remedy and r.explanation, r.id
            assert set(r.params) <= fields, (r.id, set(r.params) - fields)
            assert f"| `{r.id}` |" in RULES_DOC, f"{r.id} is not in docs/rules.md"
        assert {rule for rule, _ in self.FIRES} == {r.id for r in cls.rules}, "every rule needs a stream that fires it"

    def test_every_rule_fires(self) -> None:
        missing = [rule for rule, source in self.FIRES if rule not in fired(self.NAME, source)]
        assert not missing, f"{self.NAME}: these rules did not fire on their stream: {missing}"


def health_run() -> Stream:
    """The training-health pathologies (a loss spike, a reward decline, a slower step, memory
    growth, a collapsing entropy, policy-loss noise, a non-finite value loss) over seven epochs,
    with per-response samples."""
    from ..test_training_health import _pathological_rows, sample_rows

    return Stream(_pathological_rows(), sample_rows(120, 5, seed=3))

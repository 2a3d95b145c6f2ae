"""Every rule ``forensics rules`` lists is pinned: its tracker has a test module here whose
``FIRES`` makes it fire, and some test names it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from forensics.analysis.trackers import TRACKERS, all_rules

TESTS = Path(__file__).resolve().parent.parent


def test_every_tracker_has_its_test_module() -> None:
    for name in [*TRACKERS, "stream"]:
        assert (TESTS / "trackers" / f"test_{name}.py").is_file(), f"no tests/trackers/test_{name}.py"


def test_every_rule_has_a_stream_that_fires_it() -> None:
    for tracker, rule in all_rules():
        module = importlib.import_module(f"tests.trackers.test_{tracker}")
        fires = getattr(module, "FIRES", None)
        if fires is None:  # a tracker's suite class carries them
            fires = next(v.FIRES for k, v in vars(module).items() if k.startswith("Test"))
        assert rule.id in dict(fires), f"{rule.id}: tests/trackers/test_{tracker}.py has no stream that fires it"


def test_every_rule_is_named_by_a_test() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in TESTS.rglob("test_*.py"))
    unnamed = [r.id for _, r in all_rules() if not re.search(rf"[\"']{re.escape(r.id)}[\"']", text)]
    assert not unnamed, f"rules no test names: {unnamed}"

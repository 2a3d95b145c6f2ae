"""The stream's own rules (not a tracker's): a step that went back (a resumed run replaying
steps) and rows skipped while reading."""

from __future__ import annotations

import json
import re
from pathlib import Path

from forensics.analysis.engine import scan_path
from forensics.analysis.stream import STREAM_RULES

from ..conftest import healthy_rows
from .common import RULES_DOC, fired

#: the second is fired by the malformed lines of the test below
FIRES = (("stream.step_replay", "runs/ppo_resume_repeat"), ("stream.rows_skipped", "malformed lines"))


def test_step_replay_fires() -> None:
    assert "stream.step_replay" in fired("stream", dict(FIRES)["stream.step_replay"])


def test_rows_skipped_fires_with_golden_steps(tmp_path: Path) -> None:
    lines = [json.dumps(r) for r in healthy_rows(50)]
    lines[9] = '{"step": 9, "kl": 0.05,'
    lines[19] = "[1, 2, 3]"
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    got = [(f.rule, f.severity.value, f.first_step, f.last_step, f.evidence["rows_skipped"])
           for f in scan_path(p).findings if f.tracker == "stream"]
    assert got == [("stream.rows_skipped", "warning", 0, 49, 2)]


def test_rules_documented() -> None:
    assert set(dict(FIRES)) == {r.id for r in STREAM_RULES}
    for r in STREAM_RULES:
        assert re.fullmatch(r"[a-z_]+\.[a-z_]+", r.id) and r.remedy and r.explanation
        assert f"| `{r.id}` |" in RULES_DOC

"""RLDK's event stream: one JSON object per metric and step, pivoted into one row per step.

RLDK's ``EventWriter`` (``rldk.emit``) appends ``{"time": "2025-01-02T03:04:05.678Z", "step": 12,
"name": "kl", "value": 0.031, "run_id": "run-1735787045", "tags": {...}, "meta": {...}}`` lines.
Consecutive events of one step become one row under their names (``kl``, ``reward_mean``...; the
schema maps them like any key), with ``time`` (the step's first event, as seconds since the epoch)
as the row's timestamp. An event whose name the held row already has starts a new row of the same
step, so a step logged twice shows up as a replay, never as an overwrite. Events of another
``run_id`` than the first are skipped with their line (one run per analysis). The parser is
line-oriented: ``forensics watch`` follows a growing event file (a step's row is released when the
next step begins, or when the file stops growing).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ..readers.base import ReadReport
from ._common import LineParser, LineSource, Rows, first_object

__all__ = ["RldkEventsParser", "RldkEventsSource", "detect"]

_EVENT_KEYS = {"time", "step", "name", "value", "run_id", "tags", "meta"}


def detect(path: Path, head: bytes) -> bool:
    """The first JSON object is an event: ``step``, ``name`` (text) and ``value``, nothing else
    but ``time``, ``run_id``, ``tags`` and ``meta``.

    >>> detect(Path("e.jsonl"), b'{"time": "2025-01-01T00:00:00Z", "step": 1, "name": "kl", "value": 0.1}\\n')
    True
    >>> detect(Path("s.jsonl"), b'{"step": 1, "kl": 0.1}\\n')
    False
    """
    obj = first_object(head)
    return (obj is not None and {"step", "name", "value"} <= set(obj) and set(obj) <= _EVENT_KEYS
            and isinstance(obj["name"], str))


def _epoch_seconds(text: Any) -> float | None:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class RldkEventsParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.held: tuple[int, dict[str, Any]] | None = None
        self.held_step: Any = None
        self.run_id: Any = None
        self.events = 0
        self.other_runs: dict[str, int] = {}

    def line(self, lineno: int, text: str) -> Rows:
        obj = self.json_object(lineno, text)
        if obj is None:
            return []
        if not isinstance(obj.get("name"), str) or "step" not in obj or "value" not in obj:
            self.bad(lineno, "not an event (needs step, name and value)")
            return []
        run_id = obj.get("run_id")
        if self.run_id is None:
            self.run_id = run_id
        elif run_id is not None and run_id != self.run_id:
            self.other_runs[str(run_id)] = self.other_runs.get(str(run_id), 0) + 1
            self.report.rows_read += 1
            self.report.skip(lineno, f"event of another run (run_id {run_id!r}; this analysis reads "
                                     f"{self.run_id!r})", "another run")
            return []
        self.events += 1
        name, step = obj["name"], obj["step"]
        out: Rows = []
        if self.held is not None and (step != self.held_step or name in self.held[1]):
            out.append(self.held)
            self.held = None
        if self.held is None:
            row: dict[str, Any] = {"step": step}
            t = _epoch_seconds(obj.get("time"))
            if t is not None:
                row["time"] = t
            self.held, self.held_step = (lineno, row), step
        self.held[1][name] = obj["value"]
        return out

    def flush(self) -> Rows:
        out = [self.held] if self.held is not None else []
        self.held = None
        return out

    def finish_notes(self) -> None:
        self.report.notes.append(f"RLDK events: {self.events} event(s) (one metric each) pivoted into step rows"
                                 + (f"; run {self.run_id!r}" if self.run_id is not None else ""))
        if self.other_runs:
            self.report.notes.append("events of other runs skipped: " + ", ".join(
                f"{k} ({n})" for k, n in sorted(self.other_runs.items())[:5]))


class RldkEventsSource(LineSource):
    format_name = "rldk-events"
    parser_class = RldkEventsParser

"""LLaMA-Factory ``trainer_log.jsonl`` (its LogCallback), one object per logging event::

    {"current_steps": 10, "total_steps": 5100, "loss": 0.852, "accuracy": 0.5, "lr": 9.8e-09,
     "epoch": 0.0196, "percentage": 0.2, "elapsed_time": "0:07:44", "remaining_time": "2 days, 17:43:55"}

``current_steps`` is the step. ``elapsed_time``/``remaining_time`` (``str(timedelta)``) become
seconds. ``accuracy`` is LLaMA-Factory's copy of the trainer's ``rewards/accuracies`` (only the
preference stages, DPO/ORPO/SimPO, log it): it is read under that name, so the run reads as
preference optimisation; ``reward`` comes from the PPO stage only. Rows that carry only
``eval_loss``/``predict_loss`` are evaluation rows: they join the training row of the same step
as their own columns, or stay out of the step stream with a note.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..readers.base import ReadReport
from ._common import ApartRows, LineParser, LineSource, Rows, first_object

__all__ = ["LlamaFactoryParser", "LlamaFactorySource", "detect", "timedelta_seconds"]

_TD = re.compile(r"^(?:(?P<d>-?\d+) days?, )?(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d(?:\.\d+)?)$")
_EVAL_KEYS = ("eval_", "predict_")
_META = {"current_steps", "total_steps", "epoch", "percentage", "elapsed_time", "remaining_time"}
#: LLaMA-Factory's names for the trainer keys it copies (callbacks.py LogCallback.on_log).
_COPIED = {"accuracy": "rewards/accuracies"}


def timedelta_seconds(text: str) -> float | None:
    """Seconds of a ``str(datetime.timedelta)``.

    >>> timedelta_seconds("0:07:44"), timedelta_seconds("2 days, 17:43:55")
    (464.0, 236635.0)
    """
    m = _TD.match(text.strip())
    if m is None:
        return None
    if len(m.group("d") or "") > 12:  # more days than a run lasts (and than int() takes)
        return None
    days = int(m.group("d") or 0)
    return days * 86400 + int(m.group("h")) * 3600 + int(m.group("m")) * 60 + float(m.group("s"))


def detect(path: Path, head: bytes) -> bool:
    obj = first_object(head)
    return obj is not None and "current_steps" in obj and "total_steps" in obj


class LlamaFactoryParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.evals = ApartRows("evaluation row(s) (eval_loss/predict_loss only)")
        self.held: tuple[int, dict[str, Any]] | None = None
        self.times = 0
        self.renamed: set[str] = set()

    def line(self, lineno: int, text: str) -> Rows:
        obj = self.json_object(lineno, text)
        if obj is None:
            return []
        step = obj.get("current_steps")
        if not isinstance(step, int) or isinstance(step, bool):
            self.bad(lineno, "row has no integer current_steps", "row has no step")
            return []
        row: dict[str, Any] = {"step": step}
        for k, v in obj.items():
            if k == "current_steps":
                continue
            if k in ("elapsed_time", "remaining_time") and isinstance(v, str):
                secs = timedelta_seconds(v)
                if secs is not None:
                    self.times += 1
                    v = secs
            if k in _COPIED and _COPIED[k] not in obj:
                self.renamed.add(k)
                k = _COPIED[k]
            row[k] = v
        metrics = [k for k in row if k not in _META and k != "step"]
        if metrics and all(k.startswith(_EVAL_KEYS) for k in metrics):
            if self.held is not None and self.held[1]["step"] == step:
                for k in metrics:
                    self.held[1].setdefault(k, row[k])
                self.evals.merged += 1
            else:
                self.evals.hold(lineno, step, {k: row[k] for k in metrics})
            return []
        self.evals.attach(step, row)
        out = self.flush()
        self.held = (lineno, row)
        return out

    def flush(self) -> Rows:
        """The held row (it waits for an evaluation row of its step)."""
        out, self.held = ([self.held] if self.held is not None else []), None
        return out

    def finish_notes(self) -> None:
        if self.times:
            self.report.notes.append("elapsed_time and remaining_time converted from h:mm:ss to seconds")
        for k in sorted(self.renamed):
            self.report.notes.append(f"{k} read as {_COPIED[k]}: LLaMA-Factory copies it from the trainer's "
                                     f"{_COPIED[k]} (a preference run: DPO, ORPO, SimPO)")
        self.evals.notes(self.report)


class LlamaFactorySource(LineSource):
    format_name = "llamafactory"
    parser_class = LlamaFactoryParser

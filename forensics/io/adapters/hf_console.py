"""Hugging Face Trainer console: ``{'loss': 0.0, 'grad_norm': 0.57, ..., 'epoch': 2.5}`` lines.

``ProgressCallback`` writes ``str(logs)`` through tqdm, so the lines are Python dicts with bare
``nan``/``inf``, interleaved with ``\\r`` progress bars; recent TRL versions print every value as
a quoted string (``'loss': '0.6931'``), read as the number it spells. The dicts carry no step.
An offline scan first surveys the file and gives each dict its global step where the console
proves it (:func:`step_interval`):

* the training bar (``5/283 [03:48<...]``) is printed before every dict, with one total, and its
  positions are ``L, 2L, 3L...``: dict ``i`` is step ``L*i``;
* else, for a run that finished (its summary dict is printed), the bar's total ``N`` and the
  number of dicts ``R`` allow one logging interval ``L`` only (``N // L == R``), and every
  printed ``epoch`` agrees with step ``L*i`` to its printed precision.

Otherwise (and in ``forensics watch``, which cannot look ahead) rows are numbered 1, 2, 3... in
file order (one per logging event, ``logging_steps`` optimizer steps apart), and the report
says so. A dict with its own ``step`` (LLaMA-Factory PPO) keeps it. Evaluation dicts
(``eval_*``) and the final summary (``train_runtime``) are kept out of the step stream, as in
``trainer_state.json``.
"""

from __future__ import annotations

import re
from dataclasses import field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ...records import record
from ..readers.base import ReadReport
from ._common import ANSI, ApartRows, LineParser, LineSource, Rows, iter_lines, parse_number
from ._pydict import parse_pydict
from .hf_trainer_state import classify

__all__ = ["HFConsoleParser", "HFConsoleSource", "StepSurvey", "detect", "step_interval"]

_DICT = re.compile(r"(\{'[\w/\-.@]+': .*\})\s*$")
#: a tqdm frame: ``{l_bar}{bar}| k/N [elapsed<remaining, rate]``
_FRAME = re.compile(r"\|\s*(?P<k>\d+)/(?P<n>\d+) \[")


def detect(path: Path, head: bytes) -> bool:
    if head.lstrip().startswith(b"{\""):
        return False
    text = head.decode("utf-8", errors="replace")
    return any(_DICT.search(frag) and ("'loss'" in frag or "'learning_rate'" in frag or "'epoch'" in frag)
               for line in text.splitlines() for frag in line.split("\r"))


@record
class StepSurvey:
    """What a first pass over a console saw of each training dict: the progress frame printed
    since the previous dict, and the printed epoch; and the summary's epoch."""

    frames: list[tuple[int, int] | None] = field(default_factory=list)
    epochs: list[float | None] = field(default_factory=list)
    final_epoch: float | None = None


def step_interval(s: StepSurvey) -> tuple[int, str] | None:
    """``(L, how)``: dict ``i`` (1-based) is global step ``L*i``; ``None`` when the console does
    not prove it.

    >>> step_interval(StepSurvey([(5, 283), (10, 283)], [0.02, 0.04]))[0]
    5
    >>> step_interval(StepSurvey([(0, 102), (1, 102)], [0.01, 0.02])) is None
    True
    >>> step_interval(StepSurvey([(620, 1875)] + [None] * 92, [round(i / 93.75, 2) for i in range(1, 94)], 1.0))[0]
    20
    """
    rows = len(s.frames)
    if rows == 0:
        return None
    frames = [f for f in s.frames if f is not None]
    totals = {n for _, n in frames}
    if len(frames) == rows and len(totals) == 1:
        every = frames[0][0]
        if every >= 1 and all(k == every * i for i, (k, _) in enumerate(frames, 1)):
            return every, f"the training progress bar (k/{frames[0][1]}) printed before every dict"
    if len(totals) != 1 or not s.final_epoch or s.final_epoch <= 0:
        return None
    total = totals.pop()
    fits = [L for L in range(total // (rows + 1) + 1, total // rows + 1) if total // L == rows]
    if len(fits) != 1 or not _epochs_agree(s.epochs, fits[0], total / s.final_epoch):
        return None
    return fits[0], (f"{rows} dicts over the {total} steps of a finished run (progress bar k/{total}), "
                     f"every printed epoch agreeing")


def _epochs_agree(epochs: list[float | None], every: int, per_epoch: float) -> bool:
    """Every printed epoch is step ``every*i`` over ``per_epoch`` steps an epoch, to its printed
    precision and 1% (the Trainer counts an epoch in micro-batches, so its steps per epoch may
    differ from ``N / epochs`` by a step or two; a wrong interval misses by ``every`` steps)."""
    known = [(i, e) for i, e in enumerate(epochs, 1) if e is not None]
    if len(known) * 2 < len(epochs):
        return False
    return all(abs(e - every * i / per_epoch) <= _half_unit(e) + 0.01 * every * i / per_epoch
               for i, e in known)


def _half_unit(x: float) -> float:
    """Half a unit of the last printed decimal of ``x`` (``0.01`` -> 0.005)."""
    exponent = Decimal(repr(x)).as_tuple().exponent
    return 0.5 * 10.0 ** exponent + 1e-12 if isinstance(exponent, int) else 0.0


class HFConsoleParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False, every: tuple[int, str] | None = None) -> None:
        super().__init__(report, strict)
        self.ignored = 0
        self.n = 0
        self.evals = ApartRows("evaluation dict(s) (eval_*)")
        self.summary = 0
        self.with_step = 0
        self.quoted = 0
        self.not_metrics = 0
        self.every = every
        self.survey = StepSurvey()
        self.frame: tuple[int, int] | None = None

    def line(self, lineno: int, text: str) -> Rows:
        out: Rows = []
        found = False
        for frag in ANSI.sub("", text).split("\r"):
            m = _DICT.search(frag)
            if m is None:
                self._frame(frag)
                continue
            found = True
            obj = parse_pydict(m.group(1))
            if obj is None:
                self.bad(lineno, "logged dict cannot be parsed")
                continue
            row = self._dict(lineno, self._numbers(obj))
            if row is not None:
                out.append(row)
            self.frame = None
        if not found:
            self.ignored += 1
        return out

    def _frame(self, frag: str) -> None:
        frames = list(_FRAME.finditer(frag))
        if frames:
            self.frame = (int(frames[-1].group("k")), int(frames[-1].group("n")))

    def _numbers(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Values printed as quoted strings (recent TRL) read as the numbers they spell."""
        for k, v in obj.items():
            if isinstance(v, str):
                num = parse_number(v)
                if num is not None:
                    obj[k] = num
                    self.quoted += 1
        return obj

    def _dict(self, lineno: int, obj: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if not any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj.values()):
            self.not_metrics += 1  # a dict the script printed (a dataset sample), not a log
            return None
        kind = classify(obj)
        if kind == "summary":
            self.summary += 1
            epoch = obj.get("epoch")
            self.survey.final_epoch = float(epoch) if isinstance(epoch, (int, float)) else None
            return None
        if kind == "eval":
            self.evals.apart.append((lineno, self.n * self.every[0] if self.every else self.n, obj))
            return None
        step = obj.get("step")  # LLaMA-Factory PPO logs its (0-based) step; the Trainer does not
        if isinstance(step, int) and not isinstance(step, bool):
            self.with_step += 1
        else:
            self.n += 1
            step = self.n * self.every[0] if self.every else self.n
            epoch = obj.get("epoch")
            self.survey.frames.append(self.frame)
            self.survey.epochs.append(float(epoch) if isinstance(epoch, (int, float)) else None)
        return lineno, {**obj, "step": step}

    def finish_notes(self) -> None:
        notes = self.report.notes
        if self.n and self.every:
            notes.append(f"{self.n} logged dict(s) carry no step: dict i is global step {self.every[0]}*i, "
                         f"from {self.every[1]}")
        elif self.n:
            notes.append(f"{self.n} logged dict(s) carry no step: numbered 1, 2, 3... in file order (one per "
                         "logging event, logging_steps optimizer steps apart; the console does not prove "
                         "the global step)")
        if self.quoted:
            notes.append(f"{self.quoted} value(s) printed as quoted strings ('0.6931') read as numbers")
        if self.not_metrics:
            notes.append(f"{self.not_metrics} printed dict(s) without a numeric value ignored (not metrics: "
                         "dataset samples, settings)")
        if self.summary:
            notes.append(f"{self.summary} final summary dict(s) (train_runtime) excluded")
        if self.ignored:
            notes.append(f"{self.ignored} non-metric line(s) ignored (progress bars, messages)")
        self.evals.notes(self.report)


class HFConsoleSource(LineSource):
    """An offline scan surveys the file first, for the global steps (:func:`step_interval`)."""

    format_name = "hf-console"
    parser_class = HFConsoleParser

    def make_parser(self) -> LineParser:
        survey = HFConsoleParser(ReadReport(str(self.path), format=self.format_name))
        for lineno, text in iter_lines(self.path):
            if text is not None:
                survey.line(lineno, text)
        return HFConsoleParser(self.report, self.strict, step_interval(survey.survey))

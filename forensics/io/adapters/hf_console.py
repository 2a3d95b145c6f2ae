"""Hugging Face Trainer console: ``{'loss': 0.0, 'grad_norm': 0.57, ..., 'epoch': 2.5}`` lines.

``ProgressCallback`` writes ``str(logs)`` through tqdm, so the lines are Python dicts with bare
``nan``/``inf``, interleaved with ``\\r`` progress bars. They carry no step: rows are numbered
1, 2, 3... in file order (one per logging event, so a row is ``logging_steps`` optimizer steps
apart), and the report says so; a dict with its own ``step`` (LLaMA-Factory PPO)
keeps it. Evaluation dicts (``eval_*``) and the final summary
(``train_runtime``) are kept out of the step stream, as in ``trainer_state.json``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..readers.base import ReadReport
from ._common import ANSI, ApartRows, LineParser, LineSource, Rows
from ._pydict import parse_pydict
from .hf_trainer_state import classify

__all__ = ["HFConsoleParser", "HFConsoleSource", "detect"]

_DICT = re.compile(r"(\{'[\w/\-.@]+': .*\})\s*$")


def detect(path: Path, head: bytes) -> bool:
    if head.lstrip().startswith(b"{\""):
        return False
    text = head.decode("utf-8", errors="replace")
    return any(_DICT.search(frag) and ("'loss'" in frag or "'learning_rate'" in frag or "'epoch'" in frag)
               for line in text.splitlines() for frag in line.split("\r"))


class HFConsoleParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.ignored = 0
        self.n = 0
        self.evals = ApartRows("evaluation dict(s) (eval_*)")
        self.summary = 0
        self.with_step = 0

    def line(self, lineno: int, text: str) -> Rows:
        out: Rows = []
        found = False
        for frag in ANSI.sub("", text).split("\r"):
            m = _DICT.search(frag)
            if m is None:
                continue
            found = True
            obj = parse_pydict(m.group(1))
            if obj is None:
                self.bad(lineno, "logged dict cannot be parsed")
                continue
            kind = classify(obj)
            if kind == "summary":
                self.summary += 1
                continue
            if kind == "eval":
                self.evals.apart.append((lineno, self.n, obj))
                continue
            step = obj.get("step")  # LLaMA-Factory PPO logs its (0-based) step; the Trainer does not
            if isinstance(step, int) and not isinstance(step, bool):
                self.with_step += 1
            else:
                self.n += 1
                step = self.n
            out.append((lineno, {**obj, "step": step}))
        if not found:
            self.ignored += 1
        return out

    def finish_notes(self) -> None:
        if self.n:
            self.report.notes.append(f"{self.n} logged dict(s) carry no step: numbered 1, 2, 3... in file order "
                                     "(one per logging event, logging_steps optimizer steps apart)")
        if self.summary:
            self.report.notes.append(f"{self.summary} final summary dict(s) (train_runtime) excluded")
        if self.ignored:
            self.report.notes.append(f"{self.ignored} non-metric line(s) ignored (progress bars, messages)")
        self.evals.notes(self.report)


class HFConsoleSource(LineSource):
    format_name = "hf-console"
    parser_class = HFConsoleParser

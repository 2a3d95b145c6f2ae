"""OpenRLHF console: ``✨ Global step N: {python dict}`` lines (logger.info, v0.8.1 and later).

Keys are the trainer's status dict (``policy_loss``, ``kl`` (per-token mean), ``reward``,
``return`` (sum of token rewards, KL penalty included), ``response_length``, ``actor_lr``...,
``rollout/*`` and ``timing/*`` in newer versions). The launch command, where the log holds it
(``python3 -m openrlhf.cli.train_ppo_ray --advantage_estimator rloo --actor_learning_rate 5e-7
...``, on one line or over backslash continuations), is kept as the run's config. Everything else
on the console is ignored and counted in a note.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..readers.base import ReadReport
from ._common import ANSI, LineParser, LineSource, Rows
from ._pydict import parse_pydict
from .run_config import ConfigCapture

__all__ = ["OpenRLHFParser", "OpenRLHFSource", "detect"]

_LINE = re.compile(r"Global step (?P<step>\d+): (?P<dict>\{.*\})\s*$")


def detect(path: Path, head: bytes) -> bool:
    return re.search(rb"Global step \d+: \{", head) is not None


class OpenRLHFParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.ignored = 0
        self.config = ConfigCapture()

    def line(self, lineno: int, text: str) -> Rows:
        m = _LINE.search(ANSI.sub("", text))
        if m is None:
            if "Global step" in text and "{" in text:
                self.bad(lineno, "'Global step' line whose dict cannot be parsed")
            elif not self.config.feed(lineno, ANSI.sub("", text)):
                self.ignored += 1
            return []
        obj = parse_pydict(m.group("dict"))
        if obj is None:
            self.bad(lineno, "'Global step' line whose dict cannot be parsed")
            return []
        step = self.step(lineno, m.group("step"))
        if step is None:
            return []
        row = {"step": step}
        row.update({k: v for k, v in obj.items() if k != "step"})
        return [(lineno, row)]

    def finish_notes(self) -> None:
        self.config.publish(self.report)
        if self.ignored:
            self.report.notes.append(f"{self.ignored} non-metric line(s) ignored (not rows, not errors)")


class OpenRLHFSource(LineSource):
    format_name = "openrlhf-console"
    parser_class = OpenRLHFParser

"""DeepSpeed-Chat step-3 (PPO) console, one block per generation batch::

    epoch: 0|step: 12|ppo_ep: 1|act_loss: 0.1148|cri_loss: 0.0623|unsuper_loss: 0.0      (2023)
    Epoch: 0 | Step: 12 | PPO Epoch: 1 | Actor Loss: x | Critic Loss: y | Unsupervised Loss: z
    average reward score: -0.61                 /  Average reward score: r | EMA reward score: e
    |E2E latency=3.79s |Gather latency=0.00s (0.00%) |Generate time=2.50s (65.92%) |...|CurSamplesPerSec=16.91

DeepSpeed engine lines (``[Rank 0] step=10, skipped=4, lr=[5.79e-07, ...]``, every
``steps_per_print`` optimizer steps) and ``OVERFLOW! Rank 0 Skipping step`` lines are printed
while a step trains, before its header: they go to the next block. Each engine prints its own
line, the actor's first (it steps first), then the critic's with the same ``step=``: the actor's
become ``ds_engine/lr`` and ``ds_engine/skipped`` (cumulative skipped optimizer steps), the
critic's ``ds_engine/critic_lr`` and ``ds_engine/critic_skipped``; ``ds_engine/overflows``
counts the overflow lines of the block (fp16 steps skipped while it trained).

The file is recognised by a step header in its head, or, when the header comes later (the 2023
layout prints model loading and the DeepSpeed config first), by the ``deepspeed.launcher``
banner of a step-3 command (``--actor_model_name_or_path``), whose options (``--actor_learning_rate``,
``--max_answer_seq_len``...) are kept as the run's config. The ``step`` of DeepSpeed-Chat
restarts every epoch: the stream's step is a global counter (the original is kept as ``ds_step``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..limits import STEP_MAX
from ..readers.base import ReadReport
from ._common import ANSI, LineParser, LineSource, Rows, parse_number
from .run_config import ConfigCapture

__all__ = ["DeepSpeedChatParser", "DeepSpeedChatSource", "detect"]

_HEADER = re.compile(r"^\s*(?:epoch|Epoch): *(?P<epoch>\d+) *\| *(?:step|Step): *(?P<step>\d+) *\|(?P<rest>.*)$")
_REWARD = re.compile(r"^\s*(?:average|Average) reward score: ")
_E2E = re.compile(r"^\s*\|?E2E latency=")
_ENGINE = re.compile(r"step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[(?P<lr>[^\],]+)")
_OVERFLOW = re.compile(r"OVERFLOW!")
_NUM = re.compile(r"^\s*(?P<v>[-+\w.]+?)s?\s*(?:\([^)]*\))?\s*$")


_LAUNCH = re.compile(rb"deepspeed\.launcher\.launch\b[^\n]*--actor_model_name_or_path")


def detect(path: Path, head: bytes) -> bool:
    # each pattern only where its words are (a substring search, where a regex over a 64 kB head
    # that lacks them costs a third of a millisecond)
    return ((b"poch:" in head
             and re.search(rb"(?m)^[ \t]*(?:epoch|Epoch): *\d+ *\| *(?:step|Step): *\d+ *\|", head) is not None)
            or (b"deepspeed.launcher.launch" in head and _LAUNCH.search(head) is not None))


def _pairs(text: str, sep: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in text.split("|"):
        key, s, val = part.partition(sep)
        if not s or not key.strip():
            continue
        m = _NUM.match(val)
        num = parse_number(m.group("v")) if m else None
        if num is not None:
            out[key.strip()] = num
    return out


class DeepSpeedChatParser(LineParser):
    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.block: tuple[int, dict[str, Any]] | None = None
        self.pending: dict[str, Any] = {}
        self.overflows = 0
        self.offset = 0
        self.last: tuple[int, int] | None = None
        self.resets = 0
        self.ignored = 0
        self.total_overflows = 0
        self.engine_step: int | None = None
        self.config = ConfigCapture()

    def line(self, lineno: int, text: str) -> Rows:
        text = ANSI.sub("", text)
        m = _HEADER.match(text)
        if m:
            out = self.flush()
            epoch, step = self.step(lineno, m.group("epoch")), self.step(lineno, m.group("step"))
            if epoch is None or step is None or self.offset + step > STEP_MAX:
                if epoch is not None and step is not None:
                    self.bad(lineno, f"global step {self.offset + step} is beyond int64", "step is not an integer")
                return out
            if self.last is not None and epoch != self.last[0] and step <= self.last[1]:
                self.offset += self.last[1] + 1
                self.resets += 1
            self.last = (epoch, step)
            row: dict[str, Any] = {"step": self.offset + step, "epoch": epoch, "ds_step": step}
            row.update(_pairs(m.group("rest"), ":"))
            row.update(self.pending)
            row["ds_engine/overflows"] = self.overflows
            self.pending, self.overflows = {}, 0
            self.block = (lineno, row)
            return out
        if _REWARD.match(text) or _E2E.match(text):
            vals = _pairs(text, ":" if _REWARD.match(text) else "=")
            if self.block is None:
                self.ignored += 1
                return []
            self.block[1].update({k: v for k, v in vals.items() if k not in self.block[1]})
            row = self.block[1]
            has_reward = any(k.lower() == "average reward score" for k in row)
            if has_reward and "E2E latency" in row:
                return self.flush()
            return []
        e = _ENGINE.search(text)
        if e:
            self._engine(e)
            return []
        if _OVERFLOW.search(text):
            self.overflows += 1
            self.total_overflows += 1
            return []
        if not self.config.feed(lineno, text):
            self.ignored += 1
        return []

    def _engine(self, e: re.Match[str]) -> None:
        """An engine line: the actor's, or the critic's when the actor's of that step came first."""
        step = int(e.group("step"))
        who = "ds_engine/critic_" if self.engine_step == step else "ds_engine/"
        self.engine_step = None if who == "ds_engine/critic_" else step
        self.pending[who + "skipped"] = float(e.group("skipped"))
        lr = parse_number(e.group("lr"))
        if lr is not None:
            self.pending[who + "lr"] = lr

    def flush(self) -> Rows:
        out, self.block = ([self.block] if self.block is not None else []), None
        return out

    def finish_notes(self) -> None:
        self.config.publish(self.report)
        notes = self.report.notes
        if self.resets:
            notes.append(f"DeepSpeed-Chat's step restarts every epoch ({self.resets} restart(s)): the "
                         "stream's step is a global counter; the logged step is kept as ds_step")
        if self.total_overflows:
            notes.append(f"{self.total_overflows} fp16 OVERFLOW line(s) (skipped optimizer steps): counted "
                         "per step in ds_engine/overflows")
        if self.ignored:
            notes.append(f"{self.ignored} non-metric line(s) ignored (not rows, not errors)")


class DeepSpeedChatSource(LineSource):
    format_name = "deepspeed-chat"
    parser_class = DeepSpeedChatParser

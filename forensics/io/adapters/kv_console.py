"""The reader of last resort: the console of a custom training loop, as ``name: number`` pairs.

Custom loops print a step's metrics in many spellings::

    step:12 | policy_loss=-0.0005 | kl_divergence=0.0006 | mean_reward=0.14 | grad_norm=90.75
    Epoch:[1/1](3/9751), Reward: -1.44, KL_ref: 0.04, Adv Std: 0.93, Actor Loss: 0.0065
    2025-09-23 09:01:00,984 - train - INFO - rl_loss: -0.0027, time: 109.1, l2_norm: 0.141,
        reward_data: {'total_num': 256, 'total_reward': 144.0}

When no specific format claims a file, every line with at least two numeric ``name: value`` or
``name=value`` pairs is read; a nested dict literal is flattened (``reward_data/total_reward``).
Keys are written lower case with spaces as underscores (``Adv Std`` -> ``adv_std``) and then
canonicalised through the alias table like any other format's.

A JSON object after a log prefix is read the same way, its keys kept as written (JSON names are
exact): numbers at any depth, nested objects flattened with ``/``, except that an object named
``metrics`` or ``data`` gives its keys unprefixed. That is how ROLL's ``stdout`` tracker prints a
step (``roll/utils/tracking.py``)::

    [INFO] metrics_tag: {"step": 12, "metrics": {"actor/pg_loss": -0.01, ...}}

The step comes from a counter on the line: a ``step``/``iteration``/``global_step``/``iter``
pair, a ``(i/N)`` progress counter (the first ``[i/N]`` is an epoch), or a counter in words
(``rollout batch 12``, ``iteration 7``); consecutive lines of one counter value are one row. A log
with no counter is read one row per line. Lines without pairs are counted in a note, never rows,
and the read report names the lines its rows came from and the first lines it skipped.

The reader never claims a file that is not a log: a specific format is tried first, and the head
must hold at least ``MIN_LINES`` lines of two or more pairs with the same keys and different values
(a log's metrics move from line to line): prose, source code and configs have neither, repeated
or not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..readers.base import ReadReport
from ._common import ANSI, LineParser, LineSource, Rows
from ._pydict import parse_pydict

__all__ = ["KVConsoleParser", "KVConsoleSource", "detect", "pairs"]

#: Lines of two or more pairs the head must hold, with one key set repeated that often.
MIN_LINES = 3
#: Lines of pairs without a step counter read before the log is taken to have none.
PENDING = 50
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_WORD = r"[A-Za-z][\w./\-]*"
_PAIR = re.compile(r"(?:^|(?<=[\s,|;{(\[]))(?P<key>" + _WORD + r"(?: " + _WORD + r"){0,3})\s*[:=]\s*"
                   r"(?P<val>" + _NUM + r")(?=$|[\s,|;:})\]%])")
_DICT = re.compile(r"(?:^|(?<=[\s,|;]))(?P<key>" + _WORD + r")\s*[:=]\s*(?P<dict>\{[^{}]*\})")
_PROGRESS = re.compile(r"\(\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\s*\)")
_COUNTERS = ("step", "global_step", "iteration", "iter", "it", "update", "train_step")
#: A counter written as words before a number: ``rollout batch 12``, ``iteration 7``, ``Step 3``.
_WORD_COUNTER = re.compile(r"\b(?P<name>rollout batch|global step|iteration|iter|step|update)\s+#?(?P<n>\d+)\b",
                           re.IGNORECASE)


def _key(text: str) -> str:
    return re.sub(r"\s+", "_", text.strip()).lower()


def pairs(line: str) -> dict[str, float]:
    """The numeric pairs of a console line, keys normalised (a nested dict flattened).

    >>> pairs("Epoch:[1/1](3/9751), Reward: -1.44, KL_ref: 0.04, Adv Std: 0.93")
    {'reward': -1.44, 'kl_ref': 0.04, 'adv_std': 0.93}
    >>> pairs("INFO - rl_loss: -0.0027, reward_data: {'total_num': 256, 'total_reward': 144.0}")
    {'reward_data/total_num': 256.0, 'reward_data/total_reward': 144.0, 'rl_loss': -0.0027}
    """
    out: dict[str, float] = {}
    text = ANSI.sub("", line)
    start = text.find('{"')
    if start >= 0:  # a JSON object after a log prefix (ROLL's stdout tracker)
        obj, end = _json_tail(text, start)
        if obj is not None:
            _flatten_json(obj, "", out)
            text = text[:start] + " " + text[end:]
    for m in _DICT.finditer(text):
        obj = parse_pydict(m.group("dict"))
        for k, v in (obj or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{_key(m.group('key'))}/{_key(str(k))}"] = float(v)
    text = _DICT.sub(" ", text)
    for m in _PAIR.finditer(text):
        out.setdefault(_key(m.group("key")), float(m.group("val")))
    return out


#: Objects whose keys are the metrics themselves: flattened without their own name.
_BARE = ("metrics", "data")
#: Nesting read in a JSON object; a metric is never deeper (and recursion stays bounded).
_JSON_DEPTH = 8
_DECODER = json.JSONDecoder()


def _json_tail(text: str, start: int) -> tuple[dict[str, Any] | None, int]:
    """The JSON object that starts at ``start`` and where it ends, or ``(None, start)``."""
    try:
        obj, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None, start
    return (obj, end) if isinstance(obj, dict) else (None, start)


def _flatten_json(obj: dict[str, Any], prefix: str, out: dict[str, float], depth: int = 0) -> None:
    """The numbers of a JSON object into ``out`` (``a/b`` for nested objects; those named in
    :data:`_BARE` at the top unprefixed, those deeper than :data:`_JSON_DEPTH` left out); text,
    lists, booleans and nulls are not pairs.

    >>> out = {}
    >>> _flatten_json({"step": 3, "metrics": {"actor/pg_loss": -0.1, "x": [1]}, "t": {"a": 1}}, "", out)
    >>> out
    {'step': 3.0, 'actor/pg_loss': -0.1, 't/a': 1.0}
    """
    for key, value in obj.items():
        if isinstance(value, dict):
            if depth < _JSON_DEPTH:
                _flatten_json(value, "" if not prefix and key in _BARE else f"{prefix}{key}/", out, depth + 1)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out.setdefault(f"{prefix}{key}", float(value))
            except OverflowError:  # an integer beyond a float: not a metric value
                continue


def detect(path: Path, head: bytes) -> bool:
    if b"\0" in head[:4096]:
        return False
    sets: dict[frozenset[str], set[tuple[float, ...]]] = {}
    looked = 0
    for raw in head.split(b"\n"):
        if raw.count(b":") + raw.count(b"=") < 2:  # cannot hold two pairs: no parse (prose is fast)
            continue
        looked += 1
        if looked > 2000:
            break
        found = pairs(raw.decode("utf-8", "replace"))
        if len(found) >= 2:
            sets.setdefault(frozenset(found), set()).add(tuple(found[k] for k in sorted(found)))
    # a log's values move from line to line: code or a config repeated holds the same ones
    return any(len(values) >= MIN_LINES for values in sets.values())


class KVConsoleParser(LineParser):
    """Lines of pairs -> rows; lines of one counter value merged into one row."""

    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.held: tuple[int, dict[str, Any]] | None = None
        self.numbered = 0
        #: lines skipped, by why: ``(count, the first few line numbers)``
        self.ignored = _Skipped()  # no two numeric pairs
        self.preamble = _Skipped()  # pairs before the first step counter
        self.repeated = _Skipped()  # pairs without the counter whose keys the held step already has
        #: the first and the last line a row came from
        self.span: list[int] = []
        self.counter: str | None = None
        #: lines of pairs without a counter before the first counter (a printed config, say):
        #: a preamble if a counter follows, rows if none does within PENDING lines
        self.pending: list[tuple[int, dict[str, float]]] = []
        self.counterless = False

    def _step(self, text: str, found: dict[str, float]) -> int | None:
        for name in _COUNTERS:
            if name in found and float(found[name]).is_integer():
                self.counter = self.counter or name
                return int(found.pop(name))
        m = _PROGRESS.search(text)
        if m is not None:
            self.counter = self.counter or "(i/N)"
            return int(m.group("i"))
        m = _WORD_COUNTER.search(text)
        if m is not None:
            self.counter = self.counter or m.group("name").lower()
            return int(m.group("n"))
        return None

    def line(self, lineno: int, text: str) -> Rows:
        found = pairs(text)
        if len(found) < 2:
            self.ignored.add(lineno)
            return []
        step = self._step(ANSI.sub("", text), found)
        if step is None and self.counter is None and not self.counterless:
            self.pending.append((lineno, found))
            return self._numbered(self.pending) if len(self.pending) >= PENDING else []
        if step is not None and self.pending:
            for pending_line, _ in self.pending:  # lines before the first counter: not steps
                self.preamble.add(pending_line)
            self.pending = []
        out: Rows = []
        if step is None and self.counter is not None:
            # a line without the counter, once there is one: the held step's continuation
            if self.held is not None and not set(self.held[1]) & set(found):
                self.held[1].update(found)
                self._took(lineno)
            else:
                self.repeated.add(lineno)
            return out
        if step is None:
            self.numbered += 1
            step = self.numbered
        self._took(lineno)
        if self.held is not None and self.held[1]["step"] == step and not (set(self.held[1]) & set(found)):
            self.held[1].update(found)  # a second line of the same step
            return out
        if self.held is not None:
            out.append(self.held)
        self.held = (lineno, {"step": step, **found})
        return out

    def _took(self, lineno: int) -> None:
        if not self.span:
            self.span = [lineno, lineno]
        self.span[1] = lineno

    def _numbered(self, lines: list[tuple[int, dict[str, float]]]) -> Rows:
        """No counter in sight: every line of pairs is a row, numbered."""
        self.counterless, self.pending = True, []
        out: Rows = []
        for lineno, found in lines:
            self.numbered += 1
            self._took(lineno)
            out.append((lineno, {"step": self.numbered, **found}))
        return out

    def flush(self) -> Rows:
        out = self._numbered(self.pending) if self.pending else []
        held, self.held = self.held, None
        return [*([held] if held is not None else []), *out]

    def finish_notes(self) -> None:
        how = (f"the step from the counter {self.counter!r}" if self.counter
               else "no step counter: one row per line, numbered")
        where = f", rows from lines {self.span[0]}-{self.span[1]}" if self.span else ""
        self.report.notes.append(f"read as a console of name: value pairs (the reader of last resort; {how}{where})")
        if self.preamble.count:
            self.report.notes.append(f"{self.preamble.count} line(s) of pairs before the first step counter "
                                     f"skipped (a printed config or banner; {self.preamble})")
        if self.repeated.count:
            self.report.notes.append(f"{self.repeated.count} line(s) of pairs without the step counter whose keys the "
                                     f"step already has skipped ({self.repeated})")
        if self.ignored.count:
            self.report.notes.append(f"{self.ignored.count} line(s) without two numeric pairs skipped (not rows, "
                                     f"not errors; {self.ignored})")


class _Skipped:
    """A count of skipped lines and the first few of them, for the read report."""

    SHOWN = 5

    def __init__(self) -> None:
        self.count = 0
        self.lines: list[int] = []

    def add(self, lineno: int) -> None:
        self.count += 1
        if len(self.lines) < self.SHOWN:
            self.lines.append(lineno)

    def __str__(self) -> str:
        word = "line" if self.count == 1 else "lines"
        return f"{word} {', '.join(map(str, self.lines))}{', ...' if self.count > len(self.lines) else ''}"


class KVConsoleSource(LineSource):
    format_name = "kv-console"
    parser_class = KVConsoleParser

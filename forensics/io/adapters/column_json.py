"""Column-major metric JSON: one object whose keys are metric names and whose values map a step to
a number, the layout NeMo-RL writes from its TensorBoard scalars and TensorBoard-to-JSON dumps
produce::

    {"train/reward": {"1": 0.59, "2": 0.0, ...}, "train/loss": {"1": 0.01, ...}, ...}

Read as a step log: one row per step found in any metric (steps from the keys, exact integers),
each metric's value at that step (missing where the metric was not logged at it). What is not a
number is never a row value, and the read report says what was left out:

* a key whose value is not such a map (a config value, a list) is set aside with a note;
* a map with no number under an integer step (strings, lists, objects, booleans, nulls, or keys
  that are not steps) is set aside the same way, named;
* in a map that does, a value that is not a number (a number written as text is one) is set
  aside as a value issue (``step 12: a list, not a number``), and a key that is not an integer
  step is skipped, counted with the metrics it was under;
* a document in which no map holds a number under an integer step is not this layout: refused
  (unrecognised content, exit 3), whatever its first value looked like.

A value's issue is located by its row (the n-th step of the table), the step named in its reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import FormatError, InputError
from ..canonical import parse_number, step_value
from ..inputs import open_binary
from ._common import Row, RowSource

__all__ = ["ColumnJsonSource", "detect"]

#: The head of such a file: an object whose first value is an object keyed by a step, and whose
#: first entry is a number (``null``, ``true``, a string or a list is not).
_HEAD = re.compile(rb'^\s*\{\s*"[^"\n]{1,300}"\s*:\s*\{\s*"-?\d{1,19}"\s*:\s*(?:[-+0-9.]|NaN|Infinity)')
#: Metric names shown in a note before it says how many more there are.
_SHOWN = 5


def detect(path: Path, head: bytes) -> bool:
    return _HEAD.match(head) is not None


class ColumnJsonSource(RowSource):
    format_name = "column-json"

    def _load(self) -> dict[str, Any]:
        try:
            with open_binary(self.path) as fh:
                data = fh.read()
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path=str(self.path)) from None
        try:
            obj = json.loads(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as exc:
            raise FormatError(f"column-major metric JSON that cannot be parsed: {exc}", path=str(self.path)) from None
        if not isinstance(obj, dict):
            raise FormatError("not a JSON object of metrics", path=str(self.path))
        return obj

    def rows(self) -> Iterator[Row]:
        obj = self._load()
        table: dict[int, dict[str, Any]] = {}
        apart: list[str] = []  # values that are not maps of step -> number
        empty: list[str] = []  # maps with no number under an integer step
        unkeyed: dict[str, int] = {}  # metric -> keys that are not integer steps
        stray: list[tuple[int, str, str]] = []  # (step, metric, why): values that are not numbers
        for metric, series in obj.items():
            name = str(metric)
            if not isinstance(series, dict):
                apart.append(name)
                continue
            numbers: dict[int, float] = {}
            odd: list[tuple[int, str]] = []
            for key, value in series.items():
                step, _ = step_value(key)
                if step is None:
                    unkeyed[name] = unkeyed.get(name, 0) + 1
                    continue
                number = _number(value)
                if number is None:
                    odd.append((step, _what(value)))
                else:
                    numbers[step] = number
            if not numbers:
                empty.append(name)
                continue
            for step, number in numbers.items():
                table.setdefault(step, {"step": step})[name] = number
            stray.extend((step, name, why) for step, why in odd)
        if not table:
            raise FormatError("unrecognised content: a JSON object of maps, none of which holds a number keyed by "
                              "an integer step (not column-major metric JSON)", path=str(self.path))
        self.report.notes.append(f"read as column-major metric JSON (metric -> {{step: value}}): "
                                 f"{len({k for row in table.values() for k in row}) - 1} metric(s), "
                                 f"{len(table)} step(s), the steps from the keys")
        if apart:
            self.report.notes.append(f"{len(apart)} key(s) whose value is not a map of step to number set aside: "
                                     f"{_names(apart)}")
        if empty:
            self.report.notes.append(f"{len(empty)} map(s) with no number under an integer step set aside: "
                                     f"{_names(empty)}")
        if unkeyed:
            self.report.notes.append(f"{sum(unkeyed.values())} value(s) under a key that is not an integer step "
                                     f"skipped, under {_names(sorted(unkeyed))}")
        order = {step: i for i, step in enumerate(sorted(table), start=1)}
        for step, name, why in stray:
            self.report.set_aside(order[step], name, f"step {step}: {why}")
        self.report.note_values_set_aside()
        for step, i in order.items():
            yield i, table[step]


def _number(value: Any) -> float | None:
    """A value as a number, or ``None`` (a boolean, a list, an object, a null, text that is not a
    number)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return parse_number(value)
    return None


def _what(value: Any) -> str:
    if value is None:
        return "null, not a number"
    if isinstance(value, str):
        return f"text {value[:40]!r}, not a number"
    return f"a {'boolean' if isinstance(value, bool) else type(value).__name__}, not a number"


def _names(names: list[str]) -> str:
    more = f" (and {len(names) - _SHOWN} more)" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more

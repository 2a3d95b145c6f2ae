"""Column-major metric JSON: one object whose keys are metric names and whose values map a step to
a number, the layout NeMo-RL writes from its TensorBoard scalars and TensorBoard-to-JSON dumps
produce::

    {"train/reward": {"1": 0.59, "2": 0.0, ...}, "train/loss": {"1": 0.01, ...}, ...}

Read as a step log: one row per step found in any metric (steps from the keys, exact integers),
each metric's value at that step (missing where the metric was not logged at it). A metric whose
value is not such a map (a config value, a list) is set aside with a note, never a row; a step key
that is not an integer is a skipped value with its metric named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import FormatError, InputError
from ..canonical import step_value
from ..inputs import open_binary
from ._common import Row, RowSource

__all__ = ["ColumnJsonSource", "detect"]

#: The head of such a file: an object whose first value is an object keyed by a step.
_HEAD = re.compile(rb'^\s*\{\s*"[^"\n]{1,300}"\s*:\s*\{\s*"-?\d{1,19}"\s*:\s*[-+0-9.NIn]')


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
        apart: list[str] = []
        bad = 0
        for metric, series in obj.items():
            if not isinstance(series, dict):
                apart.append(str(metric))
                continue
            for key, value in series.items():
                step, _ = step_value(key)
                if step is None:
                    bad += 1
                    continue
                table.setdefault(step, {"step": step})[str(metric)] = value
        if apart:
            self.report.notes.append(f"{len(apart)} key(s) whose value is not a map of step to number set "
                                     f"aside: {', '.join(apart[:5])}{' ...' if len(apart) > 5 else ''}")
        if bad:
            self.report.notes.append(f"{bad} value(s) under a key that is not an integer step skipped")
        self.report.notes.append(f"column-major metric JSON: {len(obj) - len(apart)} metric(s), the steps "
                                 "from their keys")
        for i, step in enumerate(sorted(table), start=1):
            yield i, table[step]

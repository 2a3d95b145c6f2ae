"""veRL logs: the console logger of every era and the file logger's JSONL.

Console (``trainer.logger=['console']``), one line per step::

    (TaskRunner pid=3165) step:71 - actor/entropy:0.1194 - actor/lr:np.float64(1e-06) - ...

Ray prefixes, ANSI colours and ``\\r``-joined tqdm fragments are stripped; values may be wrapped
(``np.float64(...)``, veRL >= 0.5) or printed with three decimals (veRL <= 0.4), which loses
precision: a small learning rate or KL prints as ``0.000``. Precision-sensitive metrics that print
as ``0.000`` on such lines are read as *missing* (not zero) and the report says so. Lines that
are not step lines (shell trace, config dump, samples) are ignored and counted in a note.

Validation-only lines (``step:0 - val-core/...`` before training, or a separate
``val/test_score`` line in old runs) are kept out of the training stream: their values join the
training row of the same step when one follows, and are otherwise listed in the notes.

File logger (v0.6+): ``{"step": N, "data": {...}}`` per line; NaN is a ``NaN`` literal (json,
v0.6 to v0.7) or ``null`` (orjson, later), read as missing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...schema import canonical_name
from ..readers.base import ReadReport
from ._common import ANSI, ApartRows, LineParser, LineSource, Rows, first_object, parse_number, step_value
from .run_config import ConfigCapture

__all__ = ["VerlConsoleParser", "VerlConsoleSource", "VerlJsonlParser", "VerlJsonlSource",
           "detect_console", "detect_jsonl"]

_RAY = re.compile(r"^\s*\((?:[\w.\-]+) pid=\d+(?:, ip=[\d.]+)?\)\s*")
_STEP_START = re.compile(r"^\s*step:(?P<step>\d+) - (?P<rest>.*)$")
_STEP_ANY = re.compile(r"(?:^|\s)step:(?P<step>\d+) - (?P<rest>[\w\-/@().]+:.*)$")
_SPLIT = re.compile(r" - (?=[\w\-/@().]+:)")
_PAIR = re.compile(r"^\s*(?P<key>[\w\-/@().]+):(?P<value>.*)$")
_THREE_DEC = re.compile(r"^-?\d+\.\d{3}$")
_VAL_PREFIXES = ("val-core/", "val-aux/", "val/", "test_score/")

#: Canonical metrics whose small values a 3-decimal print turns into a fake zero.
PRECISION_SENSITIVE = frozenset({"learning_rate", "kl", "kl_seq", "kl_coef", "approx_kl", "clip_frac"})


def is_validation_key(key: str) -> bool:
    return key.startswith(_VAL_PREFIXES)


class VerlConsoleParser(LineParser):
    """``step:N - key:value - ...`` lines of the veRL console logger."""

    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.ignored = 0
        self.rounded_rows = 0
        self.full_rows = 0
        self.zero_as_missing: dict[str, int] = {}
        self.val = ApartRows("validation-only line(s)")
        self._canon: dict[str, str | None] = {}
        self.config = ConfigCapture()

    def _canonical(self, key: str) -> str | None:
        if key not in self._canon:
            hit = canonical_name(key)
            self._canon[key] = hit[0] if hit else None
        return self._canon[key]

    def line(self, lineno: int, text: str) -> Rows:
        text = ANSI.sub("", text)
        out: Rows = []
        matched = False
        for frag in text.split("\r"):
            frag = _RAY.sub("", frag, count=1)
            m = _STEP_START.match(frag) or _STEP_ANY.search(frag)
            if m is None:
                continue
            matched = True
            step = self.step(lineno, m.group("step"))
            row = None if step is None else self._parse(lineno, step, m.group("rest"))
            if row is not None:
                out.append((lineno, row))
        if not matched and not self.config.feed(lineno, _RAY.sub("", text, count=1)):
            self.ignored += 1
        return out

    def _parse(self, lineno: int, step: int, rest: str) -> dict[str, Any] | None:
        values: dict[str, Any] = {}
        raw: dict[str, str] = {}
        for part in _SPLIT.split(rest.rstrip()):
            m = _PAIR.match(part)  # the key ends at its first colon: a value may hold colons
            if m is None:  # (tensor(0.5, device='cuda:0'))
                continue
            key, val = m.group("key").strip(), m.group("value")
            num = parse_number(val)
            if num is None:
                self.report.set_aside(lineno, key, f"{val.strip()[:40]!r} is not a number")
                continue
            values[key] = num
            raw[key] = val.strip()
        if not values:
            self.bad(lineno, "step line without any key:number pair")
            return None
        if all(is_validation_key(k) for k in values):
            self.val.hold(lineno, step, values)
            return None
        printed = [v for v in raw.values() if v.lower().lstrip("+-") not in ("nan", "inf")]
        rounded = bool(printed) and all(_THREE_DEC.match(v) for v in printed)
        if rounded:
            self.rounded_rows += 1
            for key, v in list(values.items()):
                if v == 0.0 and self._canonical(key) in PRECISION_SENSITIVE:
                    values[key] = None
                    self.zero_as_missing[key] = self.zero_as_missing.get(key, 0) + 1
        else:
            self.full_rows += 1
        row: dict[str, Any] = {"step": step, **values}
        self.val.attach(step, row)
        return row

    def finish_notes(self) -> None:
        notes = self.report.notes
        self.config.publish(self.report)
        if self.ignored:
            notes.append(f"{self.ignored} non-metric line(s) ignored (shell trace, config dump, progress "
                         "bars, samples): not rows, not errors")
        if self.rounded_rows:
            notes.append(f"lost precision: {self.rounded_rows} step line(s) print every value with 3 "
                         "decimals (veRL <= 0.4 console): values are exact to +-0.0005 only")
        for key, n in sorted(self.zero_as_missing.items()):
            notes.append(f"lost precision: {key} printed as 0.000 on {n} row(s): below the console's "
                         "print precision, read as missing (not zero)")
        self.val.notes(self.report)


class VerlConsoleSource(LineSource):
    format_name = "verl-console"
    parser_class = VerlConsoleParser


class VerlJsonlParser(LineParser):
    """``{"step": N, "data": {...}}`` lines of the veRL file logger."""

    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        super().__init__(report, strict)
        self.nulls = 0
        self.val = ApartRows("validation-only line(s)")

    def line(self, lineno: int, text: str) -> Rows:
        obj = self.json_object(lineno, text)
        if obj is None:
            return []
        if not isinstance(obj.get("data"), dict):
            self.bad(lineno, 'expected {"step": N, "data": {...}}')
            return []
        step, why = step_value(obj.get("step")) if obj.get("step") is not None else (None, "row has no step")
        if step is None:
            self.bad(lineno, why, "row has no step" if obj.get("step") is None else "step is not an integer")
            return []
        data: dict[str, Any] = {}
        for k, v in obj["data"].items():
            if v is None:
                self.nulls += 1
            data[k] = v
        if data and all(is_validation_key(k) for k in data):
            self.val.hold(lineno, step, data)
            return []
        row = {"step": step, **data}
        self.val.attach(step, row)
        return [(lineno, row)]

    def finish_notes(self) -> None:
        if self.nulls:
            self.report.notes.append(f"{self.nulls} null value(s) read as missing (veRL's orjson logger "
                                     "writes NaN as null)")
        self.val.notes(self.report)


class VerlJsonlSource(LineSource):
    format_name = "verl-jsonl"
    parser_class = VerlJsonlParser


_HEAD_STEP = re.compile(rb"(?:^|[\s)])step:\d+ - [\w\-/@().]+:", re.MULTILINE)
_HEAD_MARKERS = (b"verl.trainer", b"TaskRunner pid=", b"main_task pid=")


def detect_console(path: Path, head: bytes) -> bool:
    if head.lstrip().startswith((b"{", b"[")):
        return False
    return bool(_HEAD_STEP.search(head)) or any(m in head for m in _HEAD_MARKERS)


def detect_jsonl(path: Path, head: bytes) -> bool:
    obj = first_object(head)
    return obj is not None and set(obj) == {"step", "data"} and isinstance(obj["data"], dict)

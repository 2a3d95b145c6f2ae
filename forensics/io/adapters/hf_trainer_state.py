"""Hugging Face ``trainer_state.json`` (TRL GRPO/RLOO/PPO/DPO/OnlineDPO/KTO/ORPO, Unsloth, LLaMA-Factory).

The ``log_history`` list holds three kinds of rows, told apart here:

* training rows: one per logging event, ``step`` = global_step, each the average over the last
  ``logging_steps`` optimizer steps;
* evaluation rows: every metric prefixed ``eval_``; they join the training row of the same step
  as their own ``eval_*`` columns (never mixed into the training metrics), or are kept out of the
  step stream with a note when no training row shares their step;
* the final summary row (``train_runtime``, ``train_loss``, ``total_flos``...): excluded, noted.

The file is not strict JSON (``NaN``/``Infinity`` literals); entries are decoded one by one so a
truncated file keeps its complete rows and a broken entry is reported with its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import FormatError, InputError, StrictModeError
from ..limits import MAX_DEPTH, MAX_NUMBER_DIGITS
from ._common import ApartRows, Row, RowSource, fmt_value, open_binary, step_value
from .model_config import read_model_config

__all__ = ["HFTrainerStateSource", "detect"]

_LOG_HISTORY = re.compile(r'"log_history"\s*:\s*\[')
_SEP = re.compile(r"[\s,]*")
_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


#: How far detection looks for ``"log_history"`` in a JSON object whose head does not hold it
#: (other keys first: a long ``best_model_checkpoint``, many ``stateful_callbacks``).
_SEARCH_BYTES = 64 << 20


def detect(path: Path, head: bytes) -> bool:
    """A JSON object with a ``"log_history"`` key: in the head, or (an object that is not one
    JSON line, or a file named trainer_state.json) further on, up to ``_SEARCH_BYTES``."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    if b'"log_history"' in head:
        return True
    first = text.split(b"\n", 1)[0].strip()
    if path.name != "trainer_state.json" and first.endswith(b"}"):
        return False  # one whole object per line: JSON lines
    return _holds_log_history(path)


def _holds_log_history(path: Path) -> bool:
    key, seen, tail = b'"log_history"', 0, b""
    try:
        with open_binary(path) as fh:
            while seen < _SEARCH_BYTES and (block := fh.read(1 << 20)):
                if key in tail + block:
                    return True
                seen, tail = seen + len(block), block[-len(key):]
    except (OSError, InputError):
        return False
    return False


def classify(row: dict[str, Any]) -> str:
    """``"summary"``, ``"eval"`` or ``"train"``."""
    if any(k in row for k in _SUMMARY_KEYS):
        return "summary"
    if any(k.startswith("eval_") for k in row):
        return "eval"
    return "train"


_SPECIAL = re.compile(r'[{}\[\]"]')
_SCALAR = re.compile(r"[^,\]}\s]*")


def _value_end(text: str, pos: int) -> int:
    """Where the JSON value starting at ``pos`` ends, by bracket matching (strings skipped; linear
    however deep it nests), or -1 when the text ends first.

    >>> _value_end('{"a": [1, {"b": "}"}]}, {"c": 2}', 0)
    22
    >>> _value_end("123456, 7", 0), _value_end('{"a": [1', 0), _value_end("}, 7", 0)
    (6, -1, 1)
    """
    if text[pos] not in "{[":  # a scalar, or a stray closer: at least one character
        return max(_SCALAR.match(text, pos).end(), pos + 1)  # type: ignore[union-attr]
    depth, i = 0, pos
    while (m := _SPECIAL.search(text, i)) is not None:
        ch, i = m.group(), m.end()
        if ch == '"':
            while True:  # to the closing quote: one not preceded by an odd run of backslashes
                k = text.find('"', i)
                if k < 0:
                    return -1
                slashes = k - i - len(text[i:k].rstrip("\\"))
                i = k + 1
                if slashes % 2 == 0:
                    break
        elif ch in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i
    return -1


class HFTrainerStateSource(RowSource):
    format_name = "hf-trainer-state"

    def _text(self) -> str:
        try:
            with open_binary(self.path) as fh:
                data = fh.read()
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path=str(self.path)) from None
        return data.decode("utf-8", errors="replace")

    def rows(self) -> Iterator[Row]:
        text = self._text()
        m = _LOG_HISTORY.search(text)
        if m is None:
            raise FormatError("no log_history list: not a trainer_state.json", path=str(self.path))
        self._header_notes(text)
        self._model_files()
        evals = ApartRows("evaluation row(s) (eval_*)")
        held: Row | None = None
        nulls = 0
        for line, obj in self._entries(text, m.end()):
            if not isinstance(obj, dict):
                self._bad(line, f"log_history entry is a {type(obj).__name__}, not an object")
                continue
            step, why = step_value(obj["step"]) if obj.get("step") is not None else (None, "")
            if step is None:
                self._bad(line, f"log_history entry: {why}" if why else "log_history entry has no step",
                          "step is not an integer" if why else "row has no step")
                continue
            nulls += sum(1 for v in obj.values() if v is None)
            kind = classify(obj)
            if kind == "summary":
                shown = ", ".join(f"{k}={fmt_value(v)}" for k, v in sorted(obj.items()) if k != "step")
                self.report.notes.append(f"final summary row at line {line} (step {step}) excluded from "
                                         f"the step stream: {shown}")
                continue
            if kind == "eval":
                values = {k: v for k, v in obj.items() if k not in ("step", "epoch")}
                if held is not None and held[1]["step"] == step:
                    for k, v in values.items():
                        held[1].setdefault(k, v)
                    evals.merged += 1
                else:
                    evals.hold(line, step, values)
                continue
            if held is not None:
                yield held
            row = dict(obj)
            row["step"] = step
            evals.attach(step, row)
            held = (line, row)
        if held is not None:
            yield held
        evals.notes(self.report)
        if nulls:
            self.report.notes.append(f"{nulls} null value(s) read as missing (TRL writes null for a "
                                     "metric whose logging window was all NaN)")

    def _bad(self, line: int, reason: str, category: str = "malformed line") -> None:
        if self.strict:
            raise StrictModeError(reason, path=str(self.path), line=line)
        self.report.rows_read += 1
        self.report.skip(line, reason, category)

    def _entries(self, text: str, pos: int) -> Iterator[tuple[int, Any]]:
        """``(line, object)`` for each element of the list that starts at ``pos``."""
        dec = json.JSONDecoder()
        line, counted = 1, 0
        n = len(text)
        while True:
            pos = _SEP.match(text, pos).end()  # type: ignore[union-attr]
            line += text.count("\n", counted, pos)
            counted = pos
            if pos >= n:
                self._bad(line, "file ends inside log_history (truncated: the writer was probably "
                          "stopped mid-write)", "truncated file")
                return
            if text[pos] == "]":
                return
            try:
                obj, end = dec.raw_decode(text, pos)
            except (ValueError, RecursionError) as exc:  # bad JSON, a number past Python's digit
                # limit, deep nesting: the entry is skipped and the list goes on after its end
                if isinstance(exc, json.JSONDecodeError):
                    what = f"invalid JSON in log_history: {exc.msg}"
                    line_bad = text.count("\n", 0, exc.pos) + 1
                else:
                    what = ("log_history entry: " + (f"nested deeper than {MAX_DEPTH} levels"
                            if isinstance(exc, RecursionError) else f"a number longer than {MAX_NUMBER_DIGITS} digits"))
                    line_bad = line
                end = _value_end(text, pos)
                if end < 0:
                    self._bad(line_bad, f"{what}; the rest of the list cannot be read")
                    return
                self._bad(line_bad, what)
                pos = end
                continue
            yield line, obj
            pos = end

    def _model_files(self) -> None:
        """The model's config.json (or LoRA's adapter_config.json) beside the state, for the
        model's size (the usual learning rates depend on it)."""
        if self.report.run_config:
            return
        found, origin = read_model_config(self.path.parent)
        if found:
            self.report.run_config = found
            self.report.run_config_origin = origin

    def _header_notes(self, text: str) -> None:
        try:
            state = json.loads(text)
        except (ValueError, RecursionError):  # broken, a huge number, too deep: entries say why
            return
        if isinstance(state, dict) and isinstance(state.get("logging_steps"), int):
            k = state["logging_steps"]
            if k > 1:
                self.report.notes.append(f"logging_steps={k}: each row averages the metrics of the last "
                                         f"{k} optimizer steps")

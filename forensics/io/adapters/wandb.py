"""Weights & Biases exports: the chart CSV export and the API history (CSV or JSONL).

Chart export (panel menu, Export, CSV): ``Step``, ``<run> - <metric>``, ``<run> - <metric>__MIN``,
``<run> - <metric>__MAX``. The run name is stripped; ``__MIN``/``__MAX`` columns are carried
through under ``<metric>__MIN``/``<metric>__MAX``. Several runs in one export: ``--run NAME``
(:meth:`WandbChartSource.select_run`) reads one of them, by default the first, and a note names the
others (``forensics fleet`` reads each as a row of its own, see :func:`chart_runs`). Exports may be
sampled or bucketed (noted).

API history (``run.history()``/``scan_history()`` saved as CSV or JSONL): ``_step``,
``_runtime``, ``_timestamp`` plus the logged keys. The step is ``train/global_step`` when logged
(HF Trainer, OpenRLHF: W&B's own ``_step`` counts ``log`` calls, not optimizer steps), else
``_step``. Rows of one step (training and evaluation logged separately) are merged; histogram and
table cells (JSON objects with ``_type``) are carried as text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import InputError, StrictModeError, UsageError, did_you_mean
from ..csv_dialect import csv_records
from ..inputs import BOM
from ..readers.jsonl import parse_json_object
from ._common import (
    TOO_LONG,
    Row,
    RowSource,
    first_object,
    iter_lines,
    merge_same_step,
    open_binary,
    parse_number,
    step_value,
)

__all__ = ["WandbChartSource", "WandbHistorySource", "chart_runs", "detect_chart", "detect_history"]

_STEP_KEYS = ("train/global_step", "trainer/global_step", "global_step", "_step")
_SHARED = ("_step", "wandb/_step", "_runtime", "_timestamp", "epoch", "train/epoch", "eval/epoch")


def _first_line(head: bytes) -> str:
    return head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", errors="replace").rstrip("\r")


def _header(head: bytes) -> list[str]:
    try:
        return next(csv.reader(io.StringIO(_first_line(head))))
    except (csv.Error, StopIteration):
        return []


def detect_chart(path: Path, head: bytes) -> bool:
    cols = _header(head)
    return len(cols) >= 2 and cols[0] == "Step" and any(" - " in c for c in cols[1:])


def _runs_of(header: list[str]) -> list[str]:
    """The run names of a chart export's header (``<run> - <metric>`` columns), in order."""
    runs: dict[str, None] = {}
    for c in header[1:]:
        run, sep, _ = c.rpartition(" - ")
        if sep:
            runs.setdefault(run)
    return list(runs)


def chart_runs(path: Path) -> list[str]:
    """The runs a W&B chart export holds, in column order (``[]``: not a chart export, or no
    header). Any other file costs one read of its first bytes."""
    try:
        with open_binary(Path(path)) as fh:
            if not fh.read(16).removeprefix(BOM).startswith((b"Step,", b'"Step",')):
                return []
        for _, cells in _csv_rows(Path(path)):
            header = cells if isinstance(cells, list) else []
            return _runs_of(header) if header[:1] == ["Step"] else []
    except (InputError, OSError):
        return []
    return []


def detect_history(path: Path, head: bytes) -> bool:
    if head.lstrip().startswith(b"{"):
        obj = first_object(head)
        return obj is not None and "_step" in obj and ("_runtime" in obj or "_timestamp" in obj)
    cols = _header(head)
    return "_step" in cols and ("_runtime" in cols or "_timestamp" in cols)


def _cell(text: str) -> Any:
    if text == "":
        return None
    num = parse_number(text)
    return text if num is None else num


def _csv_rows(path: Path, delimiter: str = ",") -> Iterator[tuple[int, list[str] | str]]:
    """``(line, cells)``; the line is the 1-based line of the record's start. A record the CSV
    reader rejects (a NUL byte, a field longer than ``MAX_LINE_BYTES``) comes as its reason."""
    with open_binary(path) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="replace", newline="")
        try:
            yield from csv_records(text, delimiter)
        except (OSError, EOFError) as exc:
            raise InputError(f"read failed: {exc}", path=str(path)) from None


class _WandbSource(RowSource):
    def _bad(self, line: int, reason: str, category: str = "malformed line") -> None:
        if self.strict:
            raise StrictModeError(reason, path=str(self.path), line=line)
        self.report.rows_read += 1
        self.report.skip(line, reason, category)

    def _records(self) -> Iterator[tuple[int, list[str]]]:
        """The CSV records; one the CSV reader rejects is reported and skipped."""
        for line, cells in _csv_rows(self.path):
            if isinstance(cells, str):
                self._bad(line, cells)
            else:
                yield line, cells


class WandbChartSource(_WandbSource):
    format_name = "wandb-csv"
    #: The run to read (:meth:`select_run`); None: the first.
    run: str | None = None

    def select_run(self, name: str) -> None:
        """Read the run ``name`` of a multi-run export; a name the export does not hold is a
        :class:`~forensics.errors.UsageError` listing those it does."""
        runs = chart_runs(self.path)
        if name not in runs:
            raise UsageError(f"--run {name!r}: the W&B export {self.path} has no such run"
                             f"{did_you_mean(name, runs)}; it holds {_listed(runs)}")
        self.run = name

    def rows(self) -> Iterator[Row]:
        it = self._records()
        try:
            _, header = next(it)
        except StopIteration:
            return
        runs = _runs_of(header)
        run = self.run if self.run is not None else next(iter(runs), "")
        cols: list[tuple[int, str]] = []
        for i, c in enumerate(header):
            r, sep, metric = c.rpartition(" - ")
            if i == 0 or (sep and r == run):
                cols.append((i, "step" if i == 0 else metric))
        self.report.notes.append(f"W&B chart export of run {run!r}; values may be sampled or bucketed "
                                 "by the W&B UI")
        if len(runs) > 1:
            self.report.notes.append(
                f"the export holds {len(runs)} runs ({_listed(runs)}): read {run!r} only"
                + ("" if self.run is not None else " (the first)")
                + "; --run NAME reads another, `forensics fleet` reads each as its own row")
        empty = 0
        for line, cells in it:
            if not any(cells):
                continue
            if len(cells) != len(header):
                self._bad(line, f"{len(cells)} cells, header has {len(header)}")
                continue
            step, why = step_value(cells[0]) if cells[0].strip() else (None, "")
            if step is None:
                self._bad(line, f"Step: {why}" if why else "row has no Step",
                          "step is not an integer" if why else "row has no step")
                continue
            row: dict[str, Any] = {"step": step}
            for i, name in cols[1:]:
                v = _cell(cells[i])
                if v is not None:
                    row[name] = v
            if len(row) == 1:
                empty += 1
                continue
            yield line, row
        if empty:
            self.report.notes.append(f"{empty} row(s) with no value for run {run!r} left out")


def _listed(runs: list[str], most: int = 8) -> str:
    shown = ", ".join(repr(r) for r in runs[:most])
    return shown + (f" and {len(runs) - most} more" if len(runs) > most else "") if runs else "no run"


class WandbHistorySource(_WandbSource):
    format_name = "wandb-history"

    def _raw_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(line, row)`` under W&B's keys (``_step``, ``_runtime``, ...), before the step is chosen."""
        with open_binary(self.path) as fh:
            first = fh.read(len(BOM) + 1)
        return self._json_rows() if first.removeprefix(BOM)[:1] == b"{" else self._csv_dicts()

    def rows(self) -> Iterator[Row]:
        raw = self._raw_rows()
        self.histograms = 0
        self.no_step = 0
        self.step_key: str | None = None
        yield from merge_same_step(self._with_step(raw), shared=_SHARED)
        if self.step_key and self.step_key != "_step":
            self.report.notes.append(f"step = {self.step_key} (W&B's _step counts log calls; kept as a "
                                     "column)")
        if self.no_step:
            self.report.notes.append(f"{self.no_step} history row(s) without {self.step_key} left out "
                                     "(system or summary rows)")
        if self.histograms:
            self.report.notes.append(f"{self.histograms} histogram/table cell(s) carried as text")

    def _with_step(self, rows: Iterator[tuple[int, dict[str, Any]]]) -> Iterator[Row]:
        for line, row in rows:
            if self.step_key is None:
                self.step_key = next((k for k in _STEP_KEYS if k in row), "_step")
            value = row.pop(self.step_key, None)
            if value is None:
                self.no_step += 1
                continue
            step, why = step_value(value)
            if step is None:
                self._bad(line, f"{self.step_key}: {why}", "step is not an integer")
                continue
            for k in _STEP_KEYS:  # the step keys not chosen: numbers as the other columns
                if isinstance(row.get(k), str):
                    row[k] = _cell(row[k])
            if self.step_key != "_step" and "_step" in row:
                row["wandb/_step"] = row.pop("_step")
            out: dict[str, Any] = {"step": step}
            for k, v in row.items():
                if v is None:
                    continue
                if isinstance(v, (dict, list)):
                    self.histograms += 1
                    v = json.dumps(v)
                elif isinstance(v, str) and v.startswith("{") and '"_type"' in v:
                    self.histograms += 1
                out[k] = v
            yield line, out

    def _csv_dicts(self) -> Iterator[tuple[int, dict[str, Any]]]:
        it = self._records()
        try:
            _, header = next(it)
        except StopIteration:
            return
        for line, cells in it:
            if not any(cells):
                continue
            if len(cells) != len(header):
                self._bad(line, f"{len(cells)} cells, header has {len(header)}")
                continue
            # steps stay text until chosen: parsed exactly (never through float64)
            yield line, {k: (c or None) if k in _STEP_KEYS else _cell(c) for k, c in zip(header, cells)}

    def _json_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for line, text in iter_lines(self.path, self.report):
            if text is None:
                self._bad(line, TOO_LONG, "line too long")
                continue
            s = text.strip()
            if not s:
                continue
            obj, reason = parse_json_object(s)
            if obj is None:
                self._bad(line, reason)
                continue
            yield line, obj

"""A transformers/TRL ``TrainerCallback`` that writes the canonical streams and watches the run.

>>> from forensics.live.transformers import ForensicsCallback   # doctest: +SKIP
>>> trainer = GRPOTrainer(..., callbacks=[ForensicsCallback()])         # doctest: +SKIP

On every ``on_log`` of the main process the callback

* renames the logged keys to canonical names (units normalised, as a scan would) and appends one
  row to ``<output_dir>/forensics/steps.jsonl`` (``step`` = ``state.global_step``); evaluation
  logs (``eval_*``) go to ``eval.jsonl`` and the final summary (``train_runtime``) to
  ``run.json``, never into the training rows;
* feeds the row to the trackers (``forensics.analysis.engine.Scan``) and prints each finding once, when
  it first appears (``live=False`` turns this off).

The folder is a run folder: ``forensics scan <output_dir>/forensics`` analyses it afterwards and
``forensics watch .../steps.jsonl`` can follow it from another terminal. Rows are flushed per log
call, as plain Python floats (``.item()`` on tensors happens at log time in the Trainer already,
so no extra GPU synchronisation).

transformers is imported when this module is imported, not by ``import forensics``; without
transformers the class still works with any caller that follows the ``TrainerCallback`` call
protocol (duck typing), which is how it is tested.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..analysis.engine import Scan
from ..config import Config, RunMeta
from ..io.adapters.hf_trainer_state import classify
from ..io.readers.arrow import rows_to_raw
from ..io.readers.base import ReadReport
from ..schema import TRANSFORMS, ColumnMapping, resolve_columns
from .watch import LiveFindings

try:  # pragma: no cover - depends on the environment
    from transformers import TrainerCallback as _Base
except ImportError:  # duck-typed stand-in: the Trainer only calls the on_* methods by name
    _Base = object  # type: ignore[assignment,misc]

__all__ = ["ForensicsCallback", "JsonlWriter"]


def _plain(value: Any) -> Any:
    """A logged value as a JSON-able Python scalar (tensors and numpy scalars via ``.item()``)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError):
            return None
    return str(value)


class JsonlWriter:
    """Appends JSON objects, one per line, flushed at once; NaN and infinities as JSON literals
    (``NaN``, ``Infinity``) so a logged NaN is not confused with a missing value."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(path, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            raise ValueError(f"{self.path} is closed")
        self._fh.write(json.dumps(row, allow_nan=True, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class ForensicsCallback(_Base):  # type: ignore[misc,valid-type]
    """Writes ``steps.jsonl``/``eval.jsonl``/``run.json`` and runs the trackers as training goes.

    Parameters
    ----------
    output_dir : folder for the streams (default ``<args.output_dir>/forensics``).
    live : run the trackers and print findings as they appear.
    echo : where findings are printed (default ``print``).
    config, meta : tracker parameters and run metadata, as for a scan; the callback adds what the
        training arguments tell (``max_grad_norm``, ``beta`` as ``kl_coef_init``, algorithm).
    check_every : look for new findings every this many logged rows (a check finishes a copy of
        every tracker: tens of milliseconds).
    """

    def __init__(self, output_dir: str | Path | None = None, *, live: bool = True,
                 echo: Callable[[str], None] = print, config: Config | None = None,
                 meta: RunMeta | None = None, check_every: int = 1) -> None:
        self.check_every = max(1, int(check_every))
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.live = live
        self.echo = echo
        self.config = config or Config()
        self.meta = meta or RunMeta()
        self.mapping = ColumnMapping()
        self.steps: JsonlWriter | None = None
        self.evals: JsonlWriter | None = None
        self.scan: Scan | None = None
        self.findings: LiveFindings | None = None
        self.report: ReadReport | None = None
        self.rows = 0
        self.summary: dict[str, Any] = {}

    # -- TrainerCallback protocol -------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        out = self.output_dir or Path(getattr(args, "output_dir", ".") or ".") / "forensics"
        self.output_dir = out
        meta = self._meta_from_args(args).merged(self.meta)
        self.meta = meta
        self._write_run_json()
        self.steps = JsonlWriter(out / "steps.jsonl")
        self.evals = JsonlWriter(out / "eval.jsonl")
        if self.live:
            self.scan = Scan(self.config, meta)
            self.report = ReadReport(str(out / "steps.jsonl"), format="trainer-callback")
            self.findings = LiveFindings(self.scan, self.echo)
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
        if not logs or not getattr(state, "is_world_process_zero", True):
            return control
        if self.steps is None:
            self.on_train_begin(args, state, control)
        step = int(getattr(state, "global_step", self.rows))
        values = {str(k): _plain(v) for k, v in logs.items()}
        kind = classify(values)
        if kind == "summary":
            self.summary.update(values)
            self._write_run_json()
            return control
        if kind == "eval":
            assert self.evals is not None
            self.evals.write({"step": step, **values})
            return control
        row = self._canonical(step, values)
        assert self.steps is not None
        self.steps.write(row)
        self.rows += 1
        if self.scan is not None and self.report is not None and self.findings is not None:
            self.report.rows_read += 1
            self.report.rows_kept += 1
            self.scan.feed(rows_to_raw([row], np.array([self.rows], dtype=np.int64)), self.report)
            if self.rows % self.check_every == 0:
                self.findings.check()
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.findings is not None:
            self.findings.check()
            n = len(self.findings.printed)
            self.echo(f"forensics: {self.rows} step rows, {n} finding(s); full report: "
                      f"forensics scan {self.output_dir}")
        for w in (self.steps, self.evals):
            if w is not None:
                w.close()
        self._write_run_json()
        return control

    # -- helpers --------------------------------------------------------------------------
    def _canonical(self, step: int, values: dict[str, Any]) -> dict[str, Any]:
        self.mapping = resolve_columns([k for k in values if k != "step"], self.mapping)
        row: dict[str, Any] = {"step": step}
        for key, v in values.items():
            if key == "step":
                continue
            if key in self.mapping.transforms and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = float(TRANSFORMS[self.mapping.transforms[key]](np.array([float(v)]))[0])
            row[self.mapping.target(key)] = v
        return row

    @staticmethod
    def _meta_from_args(args: Any) -> RunMeta:
        fields: dict[str, Any] = {}
        mgn = getattr(args, "max_grad_norm", None)
        if isinstance(mgn, (int, float)) and mgn > 0 and math.isfinite(mgn):
            fields["max_grad_norm"] = float(mgn)
        beta = getattr(args, "beta", None)
        if isinstance(beta, (int, float)) and not isinstance(beta, bool):
            fields["kl_coef_init"] = float(beta)
        name = type(args).__name__.lower()
        for algo in ("grpo", "rloo", "ppo", "dpo", "kto", "orpo"):
            if name.startswith(algo) or f"{algo}config" in name:
                fields["algorithm"] = algo
                break
        run_name = getattr(args, "run_name", None)
        if isinstance(run_name, str):
            fields["name"] = run_name
        return RunMeta(**fields)

    def _write_run_json(self) -> None:
        if self.output_dir is None:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in self.meta.to_dict().items() if v not in (None, {}, [])}
        if self.summary:
            data["config"] = {**data.get("config", {}), "train_summary": self.summary}
        (self.output_dir / "run.json").write_text(json.dumps(data, indent=2, allow_nan=True) + "\n",
                                                  encoding="utf-8")

"""A transformers/TRL ``TrainerCallback`` that writes the canonical streams and watches the run.

>>> from forensics.live.transformers import ForensicsCallback   # doctest: +SKIP
>>> trainer = GRPOTrainer(..., callbacks=[ForensicsCallback(stop_on_critical=True)])  # doctest: +SKIP
>>> ForensicsCallback.attach(trainer)   # or this: it then knows the trainer's TensorBoard folder  # doctest: +SKIP

It runs on transformers 4.40 through 5.x, with or without TRL.

On every ``on_log`` of the main process the callback

* renames the logged keys to canonical names (units normalised, as a scan would) and appends one
  row to ``<output_dir>/forensics/steps.jsonl`` (``step`` = ``state.global_step``); evaluation
  logs (``eval_*``) go to ``eval.jsonl`` and the final summary (``train_runtime``) to
  ``run.json``, never into the training rows;
* writes the sample stream (``samples.jsonl``: step, prompt, completion, reward and each reward
  function's ``reward/<name>``, advantage) when completions are available: the completions tables
  TRL's GRPO/RLOO trainers write with ``log_completions=True``
  (``<output_dir>/completions/completions_<step>.parquet``, read once each), or what a training
  loop passes to :meth:`log_samples`;
* feeds the rows to the trackers (:class:`forensics.analysis.engine.Scan`) and logs each finding
  through :mod:`logging` (logger ``forensics``: critical findings at ERROR, warnings at WARNING,
  the rest at INFO) when it appears and when it escalates; with ``stop_on_critical=True`` a
  critical finding sets ``control.should_save`` and ``control.should_training_stop``: the Trainer
  saves ``<output_dir>/checkpoint-<step>`` (named in the log line) and stops (with
  ``save_strategy="best"`` too: see :meth:`ForensicsCallback.on_epoch_end`);
* sends the findings to the trainer's ``report_to`` targets, each only when its package is
  installed: TensorBoard (``forensics/*`` scalars, each episode as a severity series
  ``forensics/episodes/<rule>`` and a text summary, in a run of its own beside the Trainer's:
  ``<its folder>/forensics``, :func:`~forensics.live.trainer_outputs.tensorboard_dir`) and W&B
  (the active run's summary, an alert per critical finding, ``forensics/findings`` and
  ``forensics/episodes`` tables at the end).

On each checkpoint save (``on_save``) it writes the analysis so far beside the checkpoint
(``checkpoint-N/forensics/analysis.json``) and appends a row to ``forensics/checkpoints.csv``
(step, health scores, findings by severity, the first domino so far), so a resume point can be
chosen by the health the run had at each checkpoint.

Settings come from the training arguments: ``learning_rate``, ``max_grad_norm``; GRPO/RLOO
``beta`` (the KL coefficient), ``epsilon`` (clip range), ``num_generations``,
``max_completion_length``; PPO ``kl_coef``, ``cliprange``, ``response_length``; DPO/KTO/ORPO/CPO
``beta`` is the preference temperature (:attr:`RunMeta.beta`), never a KL coefficient. The
algorithm comes from the arguments' class hierarchy (:func:`~forensics.live.trainer_outputs.algorithm_of`).

The folder is a run folder: ``forensics scan <output_dir>`` analyses it afterwards (the
``forensics/`` sub-folder is found) and ``forensics watch <output_dir>`` can follow it. transformers
is imported when this module is imported, not by ``import forensics``; without transformers the
class works with any caller that follows the ``TrainerCallback`` call protocol (duck typing),
which is how it is tested.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..analysis.engine import Scan
from ..analysis.findings import Severity
from ..config import Config, RunMeta
from ..io.adapters.hf_trainer_state import classify
from ..io.canonical import Canonicalizer
from ..io.readers.arrow import rows_to_raw
from ..io.readers.base import ReadReport
from .notify import Notifier
from .trainer_outputs import CompletionTables, algorithm_of, tensorboard_dir
from .watch import LiveFindings

try:  # pragma: no cover - depends on the environment
    from transformers import TrainerCallback as _Base
except ImportError:  # duck-typed stand-in: the Trainer only calls the on_* methods by name
    _Base = object  # type: ignore[assignment,misc]

__all__ = ["CHECKPOINT_COLUMNS", "ForensicsCallback", "JsonlWriter", "meta_from_args"]

logger = logging.getLogger("forensics")

#: Columns of ``forensics/checkpoints.csv``.
CHECKPOINT_COLUMNS = ("step", "checkpoint", "rows", "health_overall", "health_stability", "health_convergence",
                      "critical", "warning", "info", "first_domino_rule", "first_domino_step")
_LEVEL = {"critical": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}


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
        self._fh.write(json.dumps(row, allow_nan=True, separators=(",", ":"), default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _number(args: Any, *names: str, positive: bool = True) -> float | None:
    for name in names:
        v = getattr(args, name, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive):
            return float(v)
    return None


_PREFERENCE = ("dpo", "kto", "orpo", "cpo", "simpo", "ipo")


def meta_from_args(args: Any) -> RunMeta:
    """Run metadata from a trainer's arguments (TRL's ``GRPOConfig``, ``PPOConfig``, ``DPOConfig``...).

    >>> from types import SimpleNamespace as NS
    >>> class DPOConfig(NS): ...
    >>> m = meta_from_args(DPOConfig(beta=0.1, learning_rate=5e-7, max_grad_norm=1.0))
    >>> m.algorithm, m.beta, m.kl_coef_init
    ('dpo', 0.1, None)
    >>> class PPOConfig(NS): ...
    >>> m = meta_from_args(PPOConfig(kl_coef=0.05, cliprange=0.2, response_length=53))
    >>> m.algorithm, m.kl_coef_init, m.clip_range, m.max_length
    ('ppo', 0.05, 0.2, 53)
    """
    fields: dict[str, Any] = {}
    algo = algorithm_of(args)
    if algo is not None:
        fields["algorithm"] = algo
    if (v := _number(args, "max_grad_norm")) is not None:
        fields["max_grad_norm"] = v
    if (v := _number(args, "learning_rate")) is not None:
        fields["learning_rate"] = v
    beta = _number(args, "beta", positive=False)
    if algo in _PREFERENCE:
        if beta is not None:
            fields["beta"] = beta  # the preference temperature, not a KL coefficient
    elif algo == "ppo":
        if (v := _number(args, "kl_coef", "init_kl_coef", positive=False)) is not None:
            fields["kl_coef_init"] = v
    elif beta is not None:  # GRPO, RLOO, online DPO ... : beta weighs the KL term
        fields["kl_coef_init"] = beta
    if (v := _number(args, "epsilon", "cliprange", "clip_range")) is not None:
        fields["clip_range"] = v
    length = _number(args, "max_completion_length", "response_length", "max_new_tokens")
    if length is not None:
        fields["max_length"] = int(length)
    if algo in ("grpo", "rloo") and (v := _number(args, "num_generations", "rloo_k")) is not None:
        fields["group_size"] = int(v)
    run_name = getattr(args, "run_name", None)
    if isinstance(run_name, str):
        fields["name"] = run_name
    return RunMeta(**fields)


def _report_to(args: Any) -> set[str]:
    targets = getattr(args, "report_to", None)
    if targets is None or targets == "none":
        return set()
    if isinstance(targets, str):
        targets = [targets]
    names = {str(t) for t in targets}
    if "all" in names:
        names |= {"tensorboard", "wandb"}
    return names


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class ForensicsCallback(_Base):  # type: ignore[misc,valid-type]
    """Writes the canonical streams, runs the trackers as training goes and reports back.

    Parameters
    ----------
    output_dir
        folder for the streams (default ``<args.output_dir>/forensics``).
    live
        run the trackers (alerts, stopping, checkpoint analyses, dashboards).
    echo
        also print each alert here (default: only :mod:`logging`, logger ``forensics``).
    config, meta
        tracker parameters and run metadata, as for a scan; the callback adds what the
        training arguments tell (see :func:`meta_from_args`).
    check_every
        look for new findings every this many logged rows (a check finishes a copy of
        every tracker: tens of milliseconds).
    stop_on_critical
        a critical finding saves a checkpoint and stops training
        (``control.should_save`` and ``control.should_training_stop``).
    report_to
        where findings go (``"tensorboard"``, ``"wandb"``); default: the trainer's own
        ``report_to``, each only when its package is installed.
    trainer
        the trainer, to find its TensorBoard folder from its own ``TensorBoardCallback``
        (or use :meth:`attach`).
    notify
        a webhook URL (or a :class:`~forensics.live.notify.Notifier`): each alert is posted
        there from a background thread, with retries; training never waits for it, and a failing
        endpoint is logged once. ``notify_format``: ``json``, ``slack`` or ``discord``.
    """

    def __init__(self, output_dir: str | Path | None = None, *, live: bool = True,
                 echo: Callable[[str], None] | None = None, config: Config | None = None,
                 meta: RunMeta | None = None, check_every: int = 1, stop_on_critical: bool = False,
                 report_to: Iterable[str] | None = None, trainer: Any = None,
                 notify: str | Notifier | None = None, notify_format: str = "json") -> None:
        self.check_every = max(1, int(check_every))
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.live = live
        self.echo = echo
        self.config = config or Config()
        self.meta = meta or RunMeta()
        self.stop_on_critical = stop_on_critical
        self.report_to = set(report_to) if report_to is not None else None
        self.trainer = trainer
        self.notify = notify if isinstance(notify, Notifier) or notify is None else Notifier(
            notify, notify_format, run=self.meta.name or "",
            on_error=lambda text: self._say(logging.WARNING, f"forensics: {text}"))
        #: the keys' resolver, a scan's (the step is the Trainer's: a column map to it is not applied)
        self.canon = Canonicalizer("step", {k: c for k, c in self.config.columns.items() if c.canonical != "step"})
        self.steps: JsonlWriter | None = None
        self.evals: JsonlWriter | None = None
        self.samples: JsonlWriter | None = None
        self.scan: Scan | None = None
        self.findings: LiveFindings | None = None
        self.report: ReadReport | None = None
        self.sample_report: ReadReport | None = None
        self.rows = 0
        self.sample_rows = 0
        self.summary: dict[str, Any] = {}
        #: every alert so far (dicts as ``forensics watch --jsonl`` writes them)
        self.alerts: list[dict[str, Any]] = []
        self.stop_reason: str | None = None
        #: the checkpoint the stop saves (``<output_dir>/checkpoint-<step>``), once a stop is asked
        self.stop_checkpoint: Path | None = None
        self._stop_pending = False
        self._stop_saved = False
        self._tb: Any = None
        self._wandb = False
        self.completions: CompletionTables | None = None

    @classmethod
    def attach(cls, trainer: Any, **kwargs: Any) -> ForensicsCallback:
        """Make a callback that knows ``trainer`` (so it finds the folder of the trainer's own
        TensorBoard callback) and add it to the trainer's callbacks."""
        cb = cls(trainer=trainer, **kwargs)
        trainer.add_callback(cb)
        return cb

    # -- TrainerCallback protocol -------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        out = self.output_dir or Path(getattr(args, "output_dir", ".") or ".") / "forensics"
        self.output_dir = out
        meta = meta_from_args(args).merged(self.meta)
        self.meta = meta
        self._write_run_json()
        self.steps = JsonlWriter(out / "steps.jsonl")
        self.evals = JsonlWriter(out / "eval.jsonl")
        self._open_completions(args)
        targets = self.report_to if self.report_to is not None else _report_to(args)
        if self.live:
            self.scan = Scan(self.config, meta)
            self.report = ReadReport(str(out / "steps.jsonl"), format="trainer-callback")
            self.sample_report = ReadReport(str(out / "samples.jsonl"), format="trainer-callback")
            self.findings = LiveFindings(self.scan, self.echo or (lambda s: None), sink=self._on_alert)
            if "tensorboard" in targets and _installed("tensorboard"):
                from ..report.export import TensorBoardWriter

                self._tb = TensorBoardWriter(tensorboard_dir(args, self.trainer) / "forensics")
                self._say(logging.INFO, f"forensics: TensorBoard scalars in {self._tb.path.parent}")
            self._wandb = "wandb" in targets and _installed("wandb")
        return control

    def _open_completions(self, args: Any) -> None:
        """Follow the completions tables TRL writes (``log_completions=True``); say once when a
        TRL trainer that could write them does not."""
        weights = getattr(args, "reward_weights", None)
        folder = Path(getattr(args, "output_dir", None) or ".") / "completions"
        self.completions = CompletionTables(folder, list(weights) if isinstance(weights, (list, tuple)) else None)
        if getattr(args, "log_completions", None) is False:
            self._say(logging.INFO, "forensics: no completions to read (log_completions=False); set "
                      "log_completions=True in the trainer's config for the sample-level checks")

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
        if self.completions is not None:
            self.completions.note_logs(list(values))
        self._completion_samples()
        if self.scan is not None and self.report is not None and self.findings is not None:
            self.report.rows_read += 1
            self.report.rows_kept += 1
            self.scan.feed(rows_to_raw([row], np.array([self.rows], dtype=np.int64)), self.report)
            if self.rows % self.check_every == 0:
                self._check(step)
        return self._control(control, args, step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """The analysis so far beside the checkpoint, and a row of ``checkpoints.csv``."""
        if self.stop_checkpoint is not None and _checkpoint(args, int(getattr(state, "global_step", 0))) == \
                self.stop_checkpoint:
            self._stop_saved = True
        if self.scan is None or self.scan.rows == 0 or not getattr(state, "is_world_process_zero", True):
            return control
        from ..report.files import to_json

        step = int(getattr(state, "global_step", 0))
        ckpt = _checkpoint(args, step)
        if self.stop_checkpoint is not None and ckpt == self.stop_checkpoint:
            self._say(logging.ERROR, f"forensics: saved {ckpt} before stopping (stop_on_critical)")
        d = self.scan.peek().to_dict()
        try:
            (ckpt / "forensics").mkdir(parents=True, exist_ok=True)
            (ckpt / "forensics" / "analysis.json").write_text(to_json(d), encoding="utf-8")
            self._checkpoint_row(step, ckpt, d)
        except OSError as exc:  # a full disk must not stop training: say so and go on
            logger.warning("forensics: cannot write the checkpoint analysis for %s: %s", ckpt, exc)
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Ask again for the stop's checkpoint if its step did not save it. With
        ``save_strategy="best"`` the Trainer sets ``should_save`` after each evaluation to whether the
        metric is a new best, over the request :meth:`on_log` made at that step; leaving the loop, it
        calls ``on_epoch_end`` at the same step and saves then (transformers 4.40 through 5.x)."""
        if self.stop_checkpoint is not None and not self._stop_saved and control is not None:
            control.should_save = True
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._completion_samples()  # TRL writes the last step's table after that step's on_log
        if self.findings is not None and self.scan is not None:
            self._check(int(getattr(state, "global_step", 0)))
            if self.scan.rows:
                d = self.scan.peek().to_dict()
                if self._tb is not None:
                    self._tb.analysis(d, int(getattr(state, "global_step", 0)) or None)
                run = self._wandb_run()
                if run is not None:
                    from ..report.export import wandb_log

                    wandb_log(run, d, alerts=False)
            n = len(self.findings.announced)
            self._say(logging.INFO, f"forensics: {self.rows} step rows, {n} finding(s); full report: "
                      f"forensics scan {self.output_dir}")
        for w in (self.steps, self.evals, self.samples):
            if w is not None:
                w.close()
        self._write_run_json()
        if self.notify is not None:  # a bounded wait for the last alerts, after training
            lost = self.notify.close(timeout=5.0)
            if lost:
                self._say(logging.WARNING, f"forensics: {lost}")
        return control

    # -- samples ------------------------------------------------------------------------
    def log_samples(self, step: int, rows: Iterable[dict[str, Any]]) -> int:
        """Append per-response rows (``prompt``, ``completion``, ``reward``, ``reward/<name>``,
        ``advantage``, ``length``, ...) to ``samples.jsonl`` and feed them to the trackers;
        return how many were written."""
        if self.output_dir is None:
            raise ValueError("log_samples before on_train_begin: the output folder is not known yet")
        if self.samples is None:
            self.samples = JsonlWriter(self.output_dir / "samples.jsonl")
        out = [{"step": int(step), **{k: _plain(v) for k, v in r.items() if k != "step"}} for r in rows]
        for r in out:
            self.samples.write(r)
        if out and self.scan is not None and self.sample_report is not None:
            lines = np.arange(self.sample_rows + 1, self.sample_rows + len(out) + 1, dtype=np.int64)
            self.sample_report.rows_read += len(out)
            self.sample_report.rows_kept += len(out)
            self.scan.feed_samples(rows_to_raw(out, lines), self.sample_report)
        self.sample_rows += len(out)
        return len(out)

    def _completion_samples(self) -> None:
        """The completions tables TRL wrote since the last look, each as the sample rows of its
        step; a table that cannot be read is said once and skipped."""
        if self.completions is None or self.output_dir is None:
            return
        for step, rows in self.completions.new_tables():
            self.log_samples(step, rows)
        for error in self.completions.errors:
            self._say(logging.WARNING, f"forensics: completions table skipped: {error}")
        self.completions.errors.clear()

    # -- alerts, stopping, dashboards -------------------------------------------------------
    def _check(self, step: int) -> None:
        assert self.findings is not None
        self.findings.check()
        if self._tb is not None and self.scan is not None and self.findings.current:
            counts = {s.value: sum(1 for f in self.findings.current if f.severity is s) for s in Severity}
            self._tb.scalars(step, {f"forensics/findings/{k}": float(v) for k, v in counts.items()})

    def _on_alert(self, alert: dict[str, Any]) -> None:
        self.alerts.append(alert)
        if self.notify is not None:
            self.notify.send(alert)
        sev = alert["severity"]
        what = "escalated" if alert["event"] == "escalated" else "new"
        self._say(_LEVEL.get(sev, logging.INFO),
                  f"forensics: {what} {sev} finding {alert['rule']} at step {alert['onset_step']} "
                  f"(steps {alert['first_step']}-{alert['last_step']}): {alert['message']}"
                  + (f" -> {alert['remedy']}" if sev != "info" else ""))
        if self._tb is not None and sev != "info":
            from ..report.export import SEVERITY_VALUE

            self._tb.scalars(int(alert["onset_step"]), {f"forensics/rules/{alert['rule']}": SEVERITY_VALUE[sev]})
        if sev == "critical":
            run = self._wandb_run()
            if run is not None:
                from ..report.export import wandb_alert

                wandb_alert(run, alert)
            if self.stop_on_critical and self.stop_reason is None:
                self.stop_reason = f"{alert['rule']} at step {alert['onset_step']}: {alert['message']}"
                self._stop_pending = True

    def _control(self, control: Any, args: Any, step: int) -> Any:
        """Ask the Trainer to save ``checkpoint-<step>`` and stop, once a stop is pending."""
        if self._stop_pending and control is not None:
            self.stop_checkpoint = _checkpoint(args, step)
            control.should_save = True
            control.should_training_stop = True
            self._stop_pending = False
            self._say(logging.ERROR, f"forensics: stopping training at step {step} (stop_on_critical): "
                      f"{self.stop_reason}; saving checkpoint {self.stop_checkpoint}")
        return control

    def _wandb_run(self) -> Any:
        if not self._wandb:
            return None
        try:
            import wandb
        except ImportError:
            return None
        return wandb.run

    def _say(self, level: int, text: str) -> None:
        logger.log(level, text)
        if self.echo is not None:
            self.echo(text)

    def _checkpoint_row(self, step: int, ckpt: Path, d: dict[str, Any]) -> None:
        assert self.output_dir is not None
        path = self.output_dir / "checkpoints.csv"
        domino = (d.get("timeline") or {}).get("first_domino") or {}
        health = d.get("health") or {}
        counts = d.get("findings_by_severity") or {}
        row = [step, ckpt.name, (d.get("steps") or {}).get("rows"), health.get("overall"), health.get("stability"),
               health.get("convergence"), counts.get("critical", 0), counts.get("warning", 0), counts.get("info", 0),
               domino.get("rule", ""), domino.get("onset_step", "")]
        new = not path.exists()
        with open(path, "a", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(CHECKPOINT_COLUMNS)
            w.writerow(["" if v is None else v for v in row])

    # -- helpers --------------------------------------------------------------------------
    def _canonical(self, step: int, values: dict[str, Any]) -> dict[str, Any]:
        """The logged row under the names a scan gives its keys (:meth:`Canonicalizer.rename`),
        ``step`` the Trainer's ``global_step``."""
        row = {"step": step, **{k: v for k, v in values.items() if k != "step"}}
        return self.canon.rename(row, self.report or ReadReport("logs", format="trainer-callback"), self.rows + 1)

    @staticmethod
    def _meta_from_args(args: Any) -> RunMeta:
        return meta_from_args(args)

    def _write_run_json(self) -> None:
        if self.output_dir is None:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in self.meta.to_dict().items() if v not in (None, {}, [])}
        if self.summary:
            data["config"] = {**data.get("config", {}), "train_summary": self.summary}
        (self.output_dir / "run.json").write_text(json.dumps(data, indent=2, allow_nan=True) + "\n",
                                                  encoding="utf-8")



def _checkpoint(args: Any, step: int) -> Path:
    """The folder the Trainer saves step ``step`` to (``<output_dir>/checkpoint-<step>``)."""
    return Path(getattr(args, "output_dir", None) or ".") / f"checkpoint-{step}"

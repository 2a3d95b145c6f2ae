"""Findings back where people look at runs: TensorBoard and W&B.

``forensics export ANALYSIS --to tensorboard DIR`` writes one event file into ``DIR`` with
``forensics/*`` scalars (health scores, findings by severity, each warning or critical finding's
severity at its onset) and a text summary (the verdict, the first domino, the findings as a
Markdown table); ``tensorboard --logdir`` shows them beside the run's own curves when ``DIR`` is
(or is inside) the run's log folder. ``--to wandb-offline DIR`` writes an offline W&B run under
``DIR/wandb/`` (``wandb sync`` uploads it): the same values in its summary, an alert for each
critical finding and a ``forensics/findings`` table; it needs the ``wandb`` package.

The trainer callback (:mod:`forensics.live.transformers`) uses the same writers while a run
trains. Event files are written with forensics' own TFRecord encoder (the TensorBoard package
is not needed to write them; the tests read them back with it).
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io.adapters.tensorboard import _pb_bytes, _pb_key, _pb_varint, encode_event, tfrecord
from ..io.output import Outputs

__all__ = ["TensorBoardWriter", "export_analysis", "findings_markdown", "scalars_of", "wandb_log"]

SEVERITIES = ("critical", "warning", "info")
_SEVERITY_VALUE = {"info": 1.0, "warning": 2.0, "critical": 3.0}


def scalars_of(d: dict[str, Any]) -> dict[str, float]:
    """The ``forensics/*`` scalars of an analysis dict: health scores and findings by severity.

    >>> scalars_of({"health": {"overall": 0.5, "stability": None, "areas": {"kl": 0.25}},
    ...             "findings_by_severity": {"critical": 1, "warning": 0, "info": 2}})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'forensics/health/overall': 0.5, 'forensics/health/areas/kl': 0.25, 'forensics/findings/critical': 1.0,
     'forensics/findings/warning': 0.0, 'forensics/findings/info': 2.0}
    """
    out: dict[str, float] = {}
    health = d.get("health") or {}
    for name in ("overall", "stability", "convergence"):
        if isinstance(health.get(name), (int, float)):
            out[f"forensics/health/{name}"] = float(health[name])
    for area, v in sorted((health.get("areas") or {}).items()):
        if isinstance(v, (int, float)):
            out[f"forensics/health/areas/{area}"] = float(v)
    counts = d.get("findings_by_severity") or {}
    for sev in SEVERITIES:
        out[f"forensics/findings/{sev}"] = float(counts.get(sev, 0))
    return out


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def findings_markdown(d: dict[str, Any], top: int = 30) -> str:
    """The verdict, the first domino and the findings as Markdown (a TensorBoard text panel)."""
    lines = []
    domino = (d.get("timeline") or {}).get("first_domino")
    counts = d.get("findings_by_severity") or {}
    lines.append(f"**forensics**: {counts.get('critical', 0)} critical, {counts.get('warning', 0)} warning, "
                 f"{counts.get('info', 0)} info; health overall {(d.get('health') or {}).get('overall')}")
    if domino:
        lines.append(f"\n**first domino**: `{domino.get('rule')}` at step {domino.get('onset_step')}: "
                     f"{_cell(domino.get('message', ''))}")
    findings = d.get("findings") or []
    if findings:
        lines += ["", "| severity | rule | steps | message | remedy |", "| --- | --- | --- | --- | --- |"]
        for f in findings[:top]:
            lines.append(f"| {f['severity']} | `{f['rule']}` | {f['first_step']}-{f['last_step']} | "
                         f"{_cell(f['message'])} | {_cell(f.get('remedy', ''))} |")
        if len(findings) > top:
            lines.append(f"\n... {len(findings) - top} more in analysis.json")
    return "\n".join(lines)


def _text_event(wall_time: float, step: int, tag: str, text: str) -> bytes:
    """An ``Event`` with a text summary (the TensorBoard text plugin: a string tensor)."""
    metadata = _pb_bytes(1, _pb_bytes(1, b"text"))  # SummaryMetadata.plugin_data.plugin_name
    tensor = _pb_key(1, 0) + bytes([7]) + _pb_bytes(2, b"") + _pb_bytes(8, text.encode("utf-8"))  # DT_STRING
    value = _pb_bytes(1, tag.encode()) + _pb_bytes(9, metadata) + _pb_bytes(8, tensor)
    out = _pb_key(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _pb_key(2, 0) + _pb_varint(step)
    return out + _pb_bytes(5, _pb_bytes(1, value))


class TensorBoardWriter:
    """Appends ``forensics/*`` scalars and text to one event file of its own in ``logdir``
    (``events.out.tfevents.<time>.<host>.forensics``), flushed at each write."""

    def __init__(self, logdir: Path | str, outputs: Outputs | None = None) -> None:
        self.logdir = Path(logdir)
        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
            now = time.time()
            self.path = self.logdir / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.forensics"
            (outputs or Outputs()).check(self.path)  # never appends to an input, a link or a FIFO
            with open(self.path, "ab") as fh:
                fh.write(tfrecord(encode_event(now, 0, file_version="brain.Event:2")))
        except OSError as exc:
            raise UsageError(f"cannot write TensorBoard events to {self.logdir}: {exc.strerror or exc}") from None

    def _write(self, data: bytes) -> None:
        with open(self.path, "ab") as fh:
            fh.write(tfrecord(data))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if values:
            self._write(encode_event(time.time(), step, values))

    def text(self, step: int, tag: str, text: str) -> None:
        self._write(_text_event(time.time(), step, tag, text))

    def analysis(self, d: dict[str, Any], step: int | None = None) -> None:
        """The scalars of an analysis at ``step`` (default: its last step), each warning or
        critical finding's severity at its onset, and the text summary."""
        last = step if step is not None else int((d.get("steps") or {}).get("last") or 0)
        self.scalars(last, scalars_of(d))
        for f in d.get("findings") or []:
            if f["severity"] != "info":
                self.scalars(int(f["onset_step"]), {f"forensics/rules/{f['rule']}": _SEVERITY_VALUE[f["severity"]]})
        self.text(last, "forensics/summary", findings_markdown(d))


def wandb_log(run: Any, d: dict[str, Any], *, alerts: bool = True, table: bool = True) -> None:
    """Put an analysis into a W&B run: summary values, an alert per critical finding, and the
    ``forensics/findings`` table."""
    import wandb

    for key, value in scalars_of(d).items():
        run.summary[key] = value
    domino = (d.get("timeline") or {}).get("first_domino")
    if domino:
        run.summary["forensics/first_domino"] = f"{domino.get('rule')} @ {domino.get('onset_step')}"
    if alerts:
        for f in d.get("findings") or []:
            if f["severity"] == "critical":
                wandb_alert(run, f)
    if table:
        cols = ["severity", "rule", "first_step", "last_step", "onset_step", "message", "remedy"]
        rows = [[f.get(c) for c in cols] for f in d.get("findings") or []]
        run.log({"forensics/findings": wandb.Table(columns=cols, data=rows)})  # type: ignore[arg-type]


def wandb_alert(run: Any, f: dict[str, Any]) -> None:
    """A W&B alert for one finding (offline runs keep it for ``wandb sync``; errors are ignored:
    an alert must never stop training)."""
    try:
        import wandb

        levels: Any = wandb.AlertLevel  # type: ignore[attr-defined]
        level = levels.ERROR if f["severity"] == "critical" else levels.WARN
        run.alert(title=f"forensics {f['rule']} ({f['severity']})",
                  text=f"steps {f['first_step']}-{f['last_step']}: {f['message']}\nremedy: {f.get('remedy', '')}",
                  level=level)
    except Exception:  # offline runs and old wandb versions: the summary and table still go
        pass


def _writable_folder(out_dir: Path, outputs: Outputs) -> Path:
    """``out_dir``, created, and proven writable by a file made there and removed (W&B falls
    back to its default folder when it cannot write where it is told)."""
    outputs.folder(out_dir)
    try:
        fd, probe = tempfile.mkstemp(dir=out_dir, prefix=".forensics-probe-")
    except OSError as exc:
        raise UsageError(f"cannot write into {out_dir}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    return out_dir


def export_analysis(d: dict[str, Any], target: str, out_dir: Path | str, outputs: Outputs | None = None) -> Path:
    """Write an analysis dict to ``target`` (``tensorboard`` or ``wandb-offline``) under
    ``out_dir``; return the file or run folder written. ``outputs`` knows the inputs: nothing
    is written over one (see :mod:`forensics.io.output`); an output folder that is a file, cannot
    be created or is not writable is a :class:`UsageError`."""
    out_dir = Path(out_dir)
    outputs = outputs or Outputs()
    if target == "tensorboard":
        writer = TensorBoardWriter(_writable_folder(out_dir, outputs), outputs)
        writer.analysis(d)
        return writer.path
    if target != "wandb-offline":
        raise UsageError(f"unknown export target {target!r}; known: tensorboard, wandb-offline")
    try:
        import wandb
    except ImportError:
        raise UsageError("--to wandb-offline needs the wandb package: pip install rl-forensics[wandb]") from None
    os.environ.setdefault("WANDB_SILENT", "true")
    _writable_folder(out_dir, outputs)
    name = (d.get("run") or {}).get("name") or "forensics"
    try:
        run = wandb.init(project="forensics", dir=str(out_dir), mode="offline", name=str(name),
                         job_type="forensics", config={"forensics": {"schema_version": d.get("schema_version")}},
                         reinit="finish_previous")
    except Exception as exc:  # wandb's own errors (a folder it cannot use): the user's to fix
        raise UsageError(f"cannot start a W&B offline run in {out_dir}: {exc}") from None
    try:
        folder = Path(run.dir).parent
        if not folder.resolve().is_relative_to(out_dir.resolve()):
            raise UsageError(f"W&B wrote its run to {folder}, not into {out_dir}; check WANDB_DIR")
        wandb_log(run, d)
    finally:
        run.finish()
    return folder

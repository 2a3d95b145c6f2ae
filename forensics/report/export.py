"""Findings back where people look at runs: TensorBoard and W&B.

``forensics export ANALYSIS --to tensorboard DIR`` writes one event file into ``DIR`` with
``forensics/*`` scalars (health scores, findings by severity), each rule's episodes as a range
(``forensics/episodes/<rule>``: the episode's severity, 1 info, 2 warning, 3 critical, over its
steps, 0 outside them) and a text summary (the verdict, the first domino, the findings as a
Markdown table); ``tensorboard --logdir`` shows them beside the run's own curves when ``DIR`` is
(or is inside) the run's log folder.

``--to wandb`` adds the findings to the analysed W&B run itself: its summary gets the same values,
the ``forensics/findings`` and ``forensics/episodes`` tables and the first domino, and each
critical finding raises an alert. The run is known when the analysed log is a W&B run folder
(``run-<date>-<id>`` or ``offline-run-<date>-<id>``: its id, project and entity are read from its
``.wandb`` file) or from ``--run-id`` (with ``--project``/``--entity``, which also override the
folder's); it is then resumed (:func:`wandb_target`). Only when no run is known is a new run made
(in ``$WANDB_PROJECT``, else the project ``forensics``). ``--to wandb-offline DIR`` does the same
offline, under ``DIR/wandb/``: ``wandb sync`` then uploads it into the analysed run (same id). Both
need the ``wandb`` package.

The trainer callback (:mod:`forensics.live.transformers`) uses the same writers while a run
trains. Event files are written with forensics' own TFRecord encoder (the TensorBoard package
is not needed to write them; the tests read them back with it).
"""

from __future__ import annotations

import heapq
import math
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io.adapters.tensorboard import encode_event, encode_text_event, tfrecord
from ..io.output import Outputs
from ..records import record

__all__ = ["EXPORT_TARGETS", "SEVERITY_VALUE", "TensorBoardWriter", "WandbTarget", "episode_series", "export_analysis",
           "findings_markdown", "scalars_of", "wandb_log", "wandb_target"]

#: ``forensics export --to`` choices.
EXPORT_TARGETS = ("tensorboard", "wandb", "wandb-offline")
#: At most this many points per episode in its TensorBoard series (longer episodes are sampled
#: evenly, their first and last steps always included).
EPISODE_POINTS = 500

SEVERITIES = ("critical", "warning", "info")
SEVERITY_VALUE = {"info": 1.0, "warning": 2.0, "critical": 3.0}


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


def _episodes(f: dict[str, Any]) -> list[tuple[int, int, float]]:
    """``(first, last, severity value)`` of each episode of a finding dict."""
    eps = f.get("episodes") or [f]
    return [(int(e["first_step"]), int(e["last_step"]), SEVERITY_VALUE[e.get("severity") or f["severity"]])
            for e in eps]


def _episode_steps(first: int, last: int) -> list[int]:
    """The steps at which an episode's series is drawn: every step, or ``EPISODE_POINTS`` evenly
    spaced ones (first and last included)."""
    stride = max(1, math.ceil((last - first) / EPISODE_POINTS))
    return sorted({*range(first, last + 1, stride), last})


def episode_series(d: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Each rule's episodes as one series over the run's steps: ``(step, value)`` in step order,
    the value the highest severity of the episodes covering the step (1 info, 2 warning,
    3 critical) and 0 at the steps either side of each episode and at the run's first and last
    step, so a line chart draws each episode as a range.

    >>> d = {"steps": {"first": 1, "last": 20}, "findings": [
    ...     {"rule": "kl.spike", "severity": "critical", "first_step": 5, "last_step": 7}]}
    >>> episode_series(d)["forensics/episodes/kl.spike"]
    [(1, 0.0), (4, 0.0), (5, 3.0), (6, 3.0), (7, 3.0), (8, 0.0), (20, 0.0)]
    """
    steps = d.get("steps") or {}
    by_rule: dict[str, list[tuple[int, int, float]]] = {}
    for f in d.get("findings") or []:
        by_rule.setdefault(f["rule"], []).extend(_episodes(f))
    out = {}
    for rule, eps in sorted(by_rule.items()):
        lo = min(int(steps.get("first") or min(e[0] for e in eps)), *(e[0] for e in eps))
        hi = max(int(steps.get("last") or max(e[1] for e in eps)), *(e[1] for e in eps))
        at = {lo, hi}
        for first, last, _ in eps:
            at.update(_episode_steps(first, last))
            at.update(s for s in (first - 1, last + 1) if lo <= s <= hi)
        out[f"forensics/episodes/{rule}"] = _highest_covering(sorted(at), eps)
    return out


def _highest_covering(points: list[int], eps: list[tuple[int, int, float]]) -> list[tuple[int, float]]:
    """``(step, value)`` at each of the sorted ``points``: the highest value of the episodes
    ``(first, last, value)`` covering the step (0 where none does). One sweep with a heap of the
    open episodes (a finding of 20,000 episodes: linear, not points times episodes).

    >>> _highest_covering([1, 2, 3, 4], [(1, 3, 1.0), (2, 2, 3.0)])
    [(1, 1.0), (2, 3.0), (3, 1.0), (4, 0.0)]
    """
    opening = sorted(eps)
    open_: list[tuple[float, int]] = []  # (-value, last): the highest on top; closed ones dropped lazily
    i, out = 0, []
    for s in points:
        while i < len(opening) and opening[i][0] <= s:
            heapq.heappush(open_, (-opening[i][2], opening[i][1]))
            i += 1
        while open_ and open_[0][1] < s:
            heapq.heappop(open_)
        out.append((s, -open_[0][0] if open_ else 0.0))
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
        self._write(encode_text_event(time.time(), step, tag, text))

    def analysis(self, d: dict[str, Any], step: int | None = None) -> None:
        """The scalars of an analysis at ``step`` (default: its last step), each rule's episodes
        as a range (:func:`episode_series`), and the text summary."""
        last = step if step is not None else int((d.get("steps") or {}).get("last") or 0)
        self.scalars(last, scalars_of(d))
        now = time.time()
        with open(self.path, "ab") as fh:  # one open for all the points
            for tag, series in episode_series(d).items():
                fh.write(b"".join(tfrecord(encode_event(now, s, {tag: v})) for s, v in series))
        self.text(last, "forensics/summary", findings_markdown(d))


_FINDING_COLUMNS: list[Any] = ["severity", "rule", "first_step", "last_step", "onset_step", "message", "remedy"]
_EPISODE_COLUMNS: list[Any] = ["rule", "severity", "first_step", "last_step", "onset_step", "message"]


def _episode_rows(d: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for f in d.get("findings") or []:
        for e in f.get("episodes") or [f]:
            rows.append([f["rule"], e.get("severity") or f["severity"], e["first_step"], e["last_step"],
                         e["onset_step"], e.get("message", f["message"])])
    return rows


def wandb_log(run: Any, d: dict[str, Any], *, alerts: bool = True, table: bool = True) -> None:
    """Put an analysis into a W&B run's summary: the scalars, the first domino, and the
    ``forensics/findings`` and ``forensics/episodes`` tables (summary values, not history rows, so
    a resumed run's step counter is left alone); an alert per critical finding."""
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
        rows: Any = [[f.get(c) for c in _FINDING_COLUMNS] for f in d.get("findings") or []]
        episodes: Any = _episode_rows(d)
        run.summary["forensics/findings"] = wandb.Table(columns=_FINDING_COLUMNS, data=rows)
        run.summary["forensics/episodes"] = wandb.Table(columns=_EPISODE_COLUMNS, data=episodes)


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


#: A W&B run folder's name: ``run-YYYYMMDD_HHMMSS-<id>`` (``offline-`` first when made offline).
_RUN_FOLDER = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<id>[A-Za-z0-9_-]+)$")


@record
class WandbTarget:
    """The W&B run findings go to: ``run_id`` is None for a new run; ``source`` says how it was
    found (the analysed run folder, or the options)."""

    run_id: str | None
    project: str | None
    entity: str | None
    source: str


def _run_folder(d: dict[str, Any]) -> Path | None:
    """The W&B run folder the analysed log lies in (its inputs' paths and their parents)."""
    for inp in d.get("inputs") or []:
        path = Path(str(inp.get("path") or ""))
        for p in (path, *path.parents):
            if _RUN_FOLDER.match(p.name):
                return p
    return None


def wandb_target(d: dict[str, Any], run_id: str | None = None, project: str | None = None,
                 entity: str | None = None) -> WandbTarget:
    """The analysed W&B run: the options first, then the run folder the analysed log lies in
    (its id from the folder's name or ``.wandb`` file, its project and entity from that file),
    then ``$WANDB_PROJECT``/``$WANDB_ENTITY``. A known run whose project is not known is a
    :class:`UsageError` (resuming it elsewhere would make a new run); with no run known, a new
    run in that project or ``forensics``."""
    folder = _run_folder(d)
    found: dict[str, str] = {}
    if folder is not None:
        match = _RUN_FOLDER.match(folder.name)
        found = {"run_id": match["id"]} if match else {}
        from ..io.adapters.wandb_offline import run_record

        found.update(run_record(folder))
    rid = run_id or found.get("run_id")
    proj = project or found.get("project") or os.environ.get("WANDB_PROJECT")
    ent = entity or found.get("entity") or os.environ.get("WANDB_ENTITY")
    source = "the options" if run_id else f"the analysed run folder {folder}" if rid else "a new run"
    if rid is not None and not proj:
        raise UsageError(f"the W&B run {rid} (from {source}) has no known project: give --project "
                         "(and --entity when it is not your default)")
    return WandbTarget(rid, proj or ("forensics" if rid is None else None), ent, source)


def _wandb_init(d: dict[str, Any], target: WandbTarget, out_dir: Path, offline: bool) -> Any:
    """A W&B run for ``target``: the analysed run resumed (``resume="allow"`` offline, where the
    server is not asked; ``"must"`` online), or a new one named after the analysed run."""
    import wandb

    kwargs: dict[str, Any] = {"project": target.project, "entity": target.entity, "dir": str(out_dir),
                              "config": {"forensics": {"schema_version": d.get("schema_version")}}}
    if offline:
        kwargs["mode"] = "offline"
    if target.run_id is not None:
        kwargs.update(id=target.run_id, resume="allow" if offline else "must")
    else:
        kwargs.update(name=str((d.get("run") or {}).get("name") or "forensics"), job_type="forensics")
    try:
        return wandb.init(reinit="finish_previous", **kwargs)
    except Exception as exc:  # wandb's own errors (no login, no such run, a folder it cannot use)
        what = f"resume the W&B run {target.run_id} ({target.source})" if target.run_id else "start a W&B run"
        raise UsageError(f"cannot {what} in {out_dir}: {exc}") from None


def export_analysis(d: dict[str, Any], target: str, out_dir: Path | str, outputs: Outputs | None = None, *,
                    run_id: str | None = None, project: str | None = None, entity: str | None = None) -> Path:
    """Write an analysis dict to ``target`` (:data:`EXPORT_TARGETS`) under ``out_dir``; return
    the file or run folder written. For W&B, ``run_id``/``project``/``entity`` name the analysed
    run when its folder does not (:func:`wandb_target`). ``outputs`` knows the inputs: nothing
    is written over one (see :mod:`forensics.io.output`); an output folder that is a file, cannot
    be created or is not writable is a :class:`UsageError`."""
    out_dir = Path(out_dir)
    outputs = outputs or Outputs()
    if target == "tensorboard":
        writer = TensorBoardWriter(_writable_folder(out_dir, outputs), outputs)
        writer.analysis(d)
        return writer.path
    if target not in EXPORT_TARGETS:
        raise UsageError(f"unknown export target {target!r}; known: {', '.join(EXPORT_TARGETS)}")
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise UsageError(f"--to {target} needs the wandb package: pip install rl-forensics[wandb]") from None
    os.environ.setdefault("WANDB_SILENT", "true")
    where = wandb_target(d, run_id, project, entity)
    _writable_folder(out_dir, outputs)
    run = _wandb_init(d, where, out_dir, offline=target == "wandb-offline")
    try:
        folder = Path(run.dir).parent
        if not folder.resolve().is_relative_to(out_dir.resolve()):
            raise UsageError(f"W&B wrote its run to {folder}, not into {out_dir}; check WANDB_DIR")
        wandb_log(run, d)
    finally:
        run.finish()
    return folder

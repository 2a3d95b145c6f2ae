"""Where a run's logs are: one answer for ``scan``, ``watch`` and ``fleet``.

:func:`locate` turns the path a user gives into the files a scan reads: the step log, the
sample stream and the run metadata. A file stands alone (``samples.*`` and ``run.json`` beside a
``steps.*`` file count). A folder is searched in this order:

1. a run folder: ``steps.*`` (a ``steps.parquet.parts/`` left by a killed writer too; a
   ``*.tmp`` is a write that never finished), ``samples.*``, ``run.json``;
2. the same in its ``forensics/`` sub-folder (what the trainer callback writes);
3. a transformers/TRL output_dir: ``trainer_state.json`` at its root or in the newest
   ``checkpoint-N/``, preferred over a TensorBoard ``runs/`` folder beside it (the trainer's
   own log, at full precision);
4. a W&B run folder (``wandb/run-*/``, ``offline-run-*``) whose ``.wandb`` file can be
   decoded (the ``wandb`` package is installed), then TensorBoard event files, then a W&B run
   folder's console and summary, then any other folder format (Parquet parts);
5. otherwise the one log file the folder holds (a veRL ``train.log``, a ``metrics.jsonl``):
   a file whose format is detected, or that is named like a log (:func:`log_error`). A folder
   of several logs is an error that names them (``forensics fleet`` scans each); a report folder
   (it holds ``analysis.json``) is no run.

Folders 1-4 are *run folders* (:func:`is_run_folder`): ``forensics fleet`` takes each as one run
and does not search inside it; in any other folder it takes each log file (5) as a run.
"""

from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path

import orjson

from ..errors import ForensicsError, InputError
from ..records import record

__all__ = ["CALLBACK_DIR", "LOG_NAMES", "NOT_LOGS", "RunFiles", "is_run_folder", "locate", "log_error",
           "trainer_state_of"]

#: Sub-folder where the trainer callback (forensics.live.transformers) writes the canonical
#: streams inside a trainer's output_dir.
CALLBACK_DIR = "forensics"
#: File names that are never a step log of their own (the sample stream, metadata, our reports).
NOT_LOGS = ("samples.", "run.json", "manifest.json", "analysis.json", "summary.json",
            "recommendations.", "fleet.")
#: Names that look like a training log: such a file is a log even when it cannot be read (its
#: scan, or its fleet row, then says why).
LOG_NAMES = (".jsonl", ".jsonl.gz", ".ndjson", ".csv", ".tsv", ".parquet", ".log", ".wandb")


@record(frozen=True)
class RunFiles:
    """The files of one run: the step log, the sample stream and the run metadata (None: none),
    and ``notes`` saying what was chosen over what."""

    steps: Path
    samples: Path | None = None
    meta: Path | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def inputs(self, samples: Path | str | None = None) -> list[Path]:
        """The files a scan reads (for progress estimates): the step log, and the sample stream
        (``samples`` when given) if any."""
        sample = Path(samples) if samples is not None else self.samples
        return [self.steps] + ([sample] if sample is not None else [])


def _checkpoint_number(p: Path) -> int:
    try:
        return int(p.name.rpartition("-")[2])
    except ValueError:
        return -1


def trainer_state_of(folder: Path) -> Path | None:
    """A transformers/TRL output_dir's ``trainer_state.json``: the one at its root or the one in
    its newest ``checkpoint-N/`` (highest N), whichever was written last (a resumed run's root
    file may be older than its latest checkpoint)."""
    cands = []
    root = folder / "trainer_state.json"
    if root.is_file():
        cands.append(root)
    ckpts = sorted((p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file()),
                   key=_checkpoint_number)
    if ckpts:
        cands.append(ckpts[-1] / "trainer_state.json")
    if not cands:
        return None
    return max(cands, key=lambda p: (p.stat().st_mtime, p != root))


def _streams(path: Path) -> RunFiles | None:
    """The canonical streams of a run folder (1), None when it has no ``steps.*``."""
    names = sorted(p for p in path.iterdir() if not p.name.endswith(".tmp"))
    steps = [p for p in names if p.name.startswith("steps.")]
    if not steps:
        return None
    samples = [p for p in names if p.name.startswith("samples.")]
    meta = path / "run.json"
    return RunFiles(steps[0], samples[0] if samples else None, meta if meta.exists() else None)


def _beside(path: Path) -> RunFiles:
    """A file given by name: a ``steps.*`` file brings the ``samples.*`` and ``run.json`` beside it."""
    if not path.name.startswith("steps."):
        return RunFiles(path)
    cands = sorted(path.parent.glob("samples.*"))
    meta_file = path.parent / "run.json"
    return RunFiles(path, cands[0] if cands else None, meta_file if meta_file.exists() else None)


def _log_folder(path: Path) -> RunFiles | None:
    """A folder a format reads (3, 4): a trainer's output_dir, a W&B run, TensorBoard, Parquet parts."""
    from .adapters import tensorboard, wandb_offline
    from .formats import FORMATS

    state = trainer_state_of(path)
    tb = tensorboard.detect(path, b"")
    wb = wandb_offline.find_run(path)
    if state is not None:
        others = [what for what, there in (("TensorBoard event files", tb), ("a W&B run", wb)) if there]
        return RunFiles(state, notes=(f"read {state.relative_to(path)} (the trainer's own log)"
                                      + (f"; not read: {', '.join(others)} in the same folder" if others else ""),))
    if wb is not None and (wandb_offline.binary_readable(wb) or not tb):
        return RunFiles(wb, notes=(f"read the W&B run {wb.name}; TensorBoard event files in the same folder "
                                   "not read",) if tb else ())
    if tb or any(f.detect(path, b"") for f in FORMATS if f.name != "parquet-parts" or _holds_parts(path)):
        return RunFiles(path)
    return None


def _holds_parts(folder: Path) -> bool:
    """Whether ``folder``'s Parquet files are parts of one log (beside each other, in ``key=value``
    partitions or in plain sub-folders), not the streams of run folders below a folder of runs
    (a ``steps.*`` or ``run.json`` anywhere below makes it a folder of runs, no run of its own)."""
    try:
        entries = list(os.scandir(folder))
        if any(e.name.endswith(".parquet") or (e.is_dir() and "=" in e.name) for e in entries):
            return True
        for _, _, names in os.walk(folder):
            if any(n.startswith(("steps.", "samples.")) or n == "run.json" for n in names):
                return False
        return True
    except OSError:
        return False


def _run_folder(path: Path) -> RunFiles | None:
    """What a run folder (1-4) holds; None for a folder that is not one."""
    found = _streams(path)
    if found is not None:
        return found
    sub = path / CALLBACK_DIR
    if sub.is_dir() and (found := _streams(sub)) is not None:
        return RunFiles(found.steps, found.samples, found.meta,
                        (f"read {sub.name}/{found.steps.name}, the streams the forensics trainer callback wrote",))
    return _log_folder(path)


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder (1-4 of the module doc): one run, not a folder of runs."""
    try:
        return path.is_dir() and _run_folder(path) is not None
    except OSError:
        return False


def log_error(path: Path) -> str | None:
    """None: ``path`` is not a log; "": a log; else why a file that looks like a log (by name)
    cannot be read. A pretty-printed JSON file (``config.json``) is not a JSON-lines log: its
    first line must be a whole JSON object."""
    from .formats import detect_format

    if path.name.startswith(NOT_LOGS):
        return None
    named = path.name.lower().endswith(LOG_NAMES) or path.name.startswith("events.out.tfevents")
    try:
        fmt = detect_format(path)
        if fmt != "jsonl" or named:
            return ""
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20).strip()
        return "" if isinstance(orjson.loads(first), dict) else None
    except (ForensicsError, OSError, orjson.JSONDecodeError) as exc:
        if not named or isinstance(exc, orjson.JSONDecodeError):
            return None
        return str(exc) if isinstance(exc, ForensicsError) else f"cannot be read: {exc.strerror or exc}"


def _one_log(path: Path) -> RunFiles:
    """The one log file of a folder that is not a run folder (5)."""
    if (path / "analysis.json").is_file():  # our own output: its CSVs are no training log
        raise InputError("a report folder (it holds analysis.json), not a run: forensics report, diff and gate "
                         "read it; give scan the run's log", path=str(path))
    logs = [p for p in sorted(path.iterdir())
            if not p.name.startswith(".") and p.is_file() and log_error(p) is not None]
    if len(logs) == 1:
        return RunFiles(logs[0], notes=(f"read {logs[0].name}, the one log in the folder",))
    if logs:
        shown = ", ".join(p.name for p in logs[:5]) + (", ..." if len(logs) > 5 else "")
        raise InputError(f"folder holds {len(logs)} logs ({shown}): give one of them, or scan them all with "
                         "forensics fleet", path=str(path))
    raise InputError("folder has no training log forensics reads: no steps.jsonl or steps.parquet, no "
                     "trainer_state.json (at its root or in a checkpoint-*/), no TensorBoard event files, no "
                     "W&B run (wandb/run-*/), no log file", path=str(path))


def locate(path: Path | str) -> RunFiles:
    """The files of the run at ``path`` (see the module doc for the order a folder is searched in).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "train.log").write_text('{"step": 1, "loss": 0.5}\\n')
    >>> locate(d).steps.name
    'train.log'
    """
    path = Path(path)
    if not path.is_dir():
        return _beside(path)
    try:
        found = _run_folder(path)
        return found if found is not None else _one_log(path)
    except OSError as exc:
        raise InputError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None

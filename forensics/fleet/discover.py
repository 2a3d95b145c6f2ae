"""Finding the runs under the paths given to ``forensics fleet``.

A run is one of:

* a **run folder**: it holds ``steps.*`` (the canonical streams, with ``samples.*`` and
  ``run.json`` beside), a Hugging Face ``trainer_state.json``, or it is a log folder a format
  reads whole (TensorBoard event files). Its subfolders are not searched further (a Hugging Face
  output folder's ``checkpoint-*/trainer_state.json`` are earlier copies of the same log);
* a **log file** that a format is detected for (:func:`forensics.io.formats.detect_format`), in a
  folder that is not a run folder. A pretty-printed JSON file (``config.json``) is not taken for
  JSON lines: its first line must be a whole JSON object.

Hidden entries, report folders (holding ``analysis.json``) and the fleet's own output folder
are skipped. A path given by name is always a run, even one that cannot be read: its row will
say why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import ForensicsError, InputError
from ..io.formats import FORMATS, detect_format

__all__ = ["Run", "find_runs", "is_run_folder"]

#: File names that are never a step log of their own (the sample stream, metadata, our reports).
NOT_LOGS = ("samples.", "run.json", "manifest.json", "analysis.json", "summary.json",
            "recommendations.", "fleet.")


@dataclass(frozen=True)
class Run:
    """A run to scan: its name in the fleet (``OUT/<name>/``) and the path ``scan_path`` reads."""

    name: str
    path: str


def is_run_folder(path: Path) -> bool:
    """A folder holding ``steps.*`` or ``trainer_state.json``, or one a format reads whole."""
    if not path.is_dir():
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    if any(n.startswith("steps.") and not n.endswith(".tmp") for n in names) \
            or "trainer_state.json" in names:
        return True
    return any(f.detect(path, b"") for f in FORMATS)


def _scan_target(folder: Path) -> Path:
    """What ``scan_path`` is given for a run folder (its trainer_state.json when that is all)."""
    names = os.listdir(folder)
    if not any(n.startswith("steps.") for n in names) and "trainer_state.json" in names \
            and not any(f.detect(folder, b"") for f in FORMATS):
        return folder / "trainer_state.json"
    return folder


def _is_log(path: Path) -> bool:
    if path.name.startswith(NOT_LOGS) or path.name.startswith("."):
        return False
    try:
        fmt = detect_format(path)
        if fmt != "jsonl":
            return True
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20).strip()
        return isinstance(orjson.loads(first), dict)
    except (ForensicsError, OSError, orjson.JSONDecodeError):
        return False


def _walk(folder: Path, skip: set[Path]) -> Iterator[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    if any(e.name == "analysis.json" for e in entries):  # a report folder
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.resolve() in skip:
            continue
        if entry.is_dir():
            if is_run_folder(entry):
                yield entry
            else:
                yield from _walk(entry, skip)
        elif entry.is_file() and _is_log(entry):
            yield entry


def find_runs(paths: Iterable[Path | str], exclude: Iterable[Path | str] = ()) -> list[Run]:
    """The runs under ``paths``, in order (each path's runs sorted by name).

    Names are paths relative to the path they were found under (prefixed with that path's own
    name when several paths are given); a path that is itself a run is named by its last part.
    A path that does not exist is an :class:`~forensics.errors.InputError`.
    """
    roots = [Path(p) for p in paths]
    skip = {Path(p).resolve() for p in exclude}
    runs: list[Run] = []
    used: set[str] = set()
    for root in roots:
        if not root.exists():
            raise InputError("no such file or directory", path=str(root))
        if root.is_file() or is_run_folder(root):
            found = [(root, root.name or str(root))]
        else:
            prefix = [root.resolve().name] if len(roots) > 1 else []
            found = [(p, "/".join([*prefix, *p.relative_to(root).parts])) for p in _walk(root, skip)]
        for path, name in found:
            unique, i = name, 2
            while unique in used:
                unique, i = f"{name}~{i}", i + 1
            used.add(unique)
            runs.append(Run(unique, str(_scan_target(path) if path.is_dir() else path)))
    return runs

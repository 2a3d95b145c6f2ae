"""Finding the runs under the paths given to ``forensics fleet``.

A run is one of:

* a **run folder** (:func:`forensics.io.locate.is_run_folder`, what ``forensics scan`` reads
  as one run): it holds ``steps.*`` (the canonical streams, with ``samples.*`` and ``run.json``
  beside; or in its ``forensics/`` sub-folder), a Hugging Face ``trainer_state.json`` (or a
  ``checkpoint-*/`` holding one), a W&B run, or it is a log folder a format reads whole
  (TensorBoard event files). Its subfolders are not searched further (a Hugging Face output
  folder's ``checkpoint-*/trainer_state.json`` are earlier copies of the same log);
* a **log file** (:func:`forensics.io.locate.log_error`), in a folder that is not a run folder.
  A pretty-printed JSON file (``config.json``) is not taken for JSON lines: its first line must
  be a whole JSON object.

A folder means the same to ``scan``, ``watch`` and ``fleet`` (:mod:`forensics.io.locate`): a
run folder's run is read as ``forensics scan FOLDER`` reads it.

A W&B chart export that holds several runs (``<run> - <metric>`` columns) is one run of the fleet
per run it holds, named ``<file>/<run>``.

Hidden entries, report folders (holding ``analysis.json``) and the fleet's own output folder
are skipped. A path given by name is always a run, even one that cannot be read: its row will
say why.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import ForensicsError, InputError
from ..io.adapters.wandb import chart_runs
from ..io.formats import detect_format
from ..io.locate import LOG_NAMES, is_run_folder, locate, log_error
from ..records import record

__all__ = ["Run", "find_runs", "is_run_folder"]

#: Most entries discovery lists under the paths given (a bound on the work of one fleet).
MAX_ENTRIES = 1_000_000

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


@record(frozen=True)
class Run:
    """A run to scan: its name in the fleet (``OUT/<name>/``), the path ``scan_path`` reads,
    when discovery already knows it cannot be scanned (a FIFO, an unreadable log) why, and the
    run to read in a file that holds several (``member``, a W&B chart export's run name)."""

    name: str
    path: str
    error: str = ""
    member: str | None = None


def _special(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "")


def _steps_error(folder: Path) -> str:
    """Why the logs a run folder's scan reads (:func:`forensics.io.locate.locate`) cannot be
    scanned ("" when they can): only regular files are read (a FIFO would block the fleet)."""
    try:
        files = locate(folder)
    except ForensicsError as exc:
        return str(exc)
    for path in (files.steps, files.samples):
        if path is None or path.is_dir():
            continue
        try:
            kind = _special(os.stat(path).st_mode)
        except OSError as exc:
            return f"{path.name}: cannot be read: {exc.strerror or exc}"
        if kind:
            return f"{path.name} is {kind}: fleet reads only regular files"
    return ""


class _Walker:
    """Walks a root once: each real file and folder once (by device and inode), never through a
    link to a folder (a loop, or a way out of the root), at most ``MAX_ENTRIES`` entries."""

    def __init__(self, root: Path, skip: set[Path]) -> None:
        self.root, self.skip = root.resolve(), skip
        self.seen: set[tuple[int, int]] = set()
        self.entries = 0

    def _count(self, n: int) -> None:
        self.entries += n
        if self.entries > MAX_ENTRIES:
            raise InputError(f"more than {MAX_ENTRIES:,} entries under this path: give the folders of the runs "
                             "(or a narrower path)", path=str(self.root))

    def walk(self, folder: Path) -> Iterator[tuple[Path, str]]:
        """``(run path, error)`` under ``folder``."""
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            return
        self._count(len(entries))
        if any(e.name == "analysis.json" for e in entries):  # a report folder
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            yield from self._entry(entry)

    def _entry(self, entry: Path) -> Iterator[tuple[Path, str]]:
        try:
            st = entry.stat()
            linked = entry.is_symlink()
        except OSError:
            return  # a dangling link
        if (st.st_dev, st.st_ino) in self.seen or entry.resolve() in self.skip:
            return
        self.seen.add((st.st_dev, st.st_ino))
        if stat.S_ISDIR(st.st_mode):
            if linked:
                return  # a link to a folder is not followed: a loop, or a way out of the root
            if is_run_folder(entry):
                yield entry, _steps_error(entry)
            else:
                yield from self.walk(entry)
        elif linked and not entry.resolve().is_relative_to(self.root):
            return  # a link out of the root
        elif stat.S_ISREG(st.st_mode):
            error = log_error(entry)
            if error is not None:
                yield entry, error
        elif entry.name.lower().endswith(LOG_NAMES):
            yield entry, f"{entry.name} is {_special(st.st_mode)}: fleet reads only regular files"


def _root_runs(root: Path, skip: set[Path], prefix: list[str]) -> list[tuple[Path, str, str]]:
    """``(path, name, error)`` of the runs under one path given to the fleet."""
    if not root.is_dir() or is_run_folder(root):
        try:
            kind = _special(root.stat().st_mode)
        except OSError as exc:
            return [(root, root.name or str(root), f"cannot be read: {exc.strerror or exc}")]
        error = f"is {kind}: fleet reads only regular files" if kind else (
            _steps_error(root) if root.is_dir() else "")
        return [(root, root.name or str(root), error)]
    walker = _Walker(root, skip)
    walker.seen.add((root.stat().st_dev, root.stat().st_ino))
    return [(p, "/".join([*prefix, *p.relative_to(root).parts]), err) for p, err in walker.walk(root)]


def find_runs(paths: Iterable[Path | str], exclude: Iterable[Path | str] = (), fmt: str | None = None) -> list[Run]:
    """The runs under ``paths``, in order (each path's runs sorted by name).

    Names are paths relative to the path they were found under (prefixed with that path's own
    name when several paths are given); a path that is itself a run is named by its last part.
    A path that does not exist is an :class:`~forensics.errors.InputError`. A file that looks
    like a log by its name but cannot be read, or is a FIFO or a device, is a run with its error.
    A multi-run W&B chart export is a run per run it holds, unless ``fmt`` (every run read as
    that format) is another format.
    """
    roots = [Path(p) for p in paths]
    skip = {Path(p).resolve() for p in exclude}
    runs: list[Run] = []
    used: set[str] = set()
    for root in roots:
        if not root.exists():
            raise InputError("no such file or directory", path=str(root))
        prefix = [root.resolve().name] if len(roots) > 1 else []
        for path, name, error in _root_runs(root, skip, prefix):
            unique, i = name, 2
            while unique in used:
                unique, i = f"{name}~{i}", i + 1
            used.add(unique)
            run = Run(unique, str(path), error)
            runs.extend(_members(run, used) if fmt in (None, "wandb-csv") else [run])
    return runs


def _member_name(run: str, i: int) -> str:
    """A W&B run name as one folder name: no separators, never hidden, never empty."""
    name = run.replace("/", "_").replace("\\", "_").replace("\0", "").strip().lstrip(".")
    return name or f"run{i + 1}"


def _members(run: Run, used: set[str]) -> list[Run]:
    """``run``, or one run per run of a multi-run W&B chart export."""
    if run.error or not Path(run.path).is_file():
        return [run]
    members = chart_runs(Path(run.path))  # [] at the cost of a few bytes read for any other log
    try:
        if len(members) < 2 or detect_format(Path(run.path)) != "wandb-csv":
            return [run]
    except (ForensicsError, OSError):
        return [run]
    out = []
    for i, member in enumerate(members):
        name, n = f"{run.name}/{_member_name(member, i)}", 2
        while name in used:
            name, n = f"{run.name}/{_member_name(member, i)}~{n}", n + 1
        used.add(name)
        out.append(Run(name, run.path, member=member))
    return out

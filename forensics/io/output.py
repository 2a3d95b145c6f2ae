"""Safe outputs: a file forensics writes never replaces an input, a special file or a link.

Every command that writes files (``scan``, ``report``, ``gate --output``, ``convert``) builds an
:class:`Outputs` from its inputs and writes through it:

* an output path that is an input (the same file, also through a symbolic or a hard link: the
  device and inode are compared) is refused, as is one that would replace a file inside an input
  folder (a TensorBoard folder, Parquet part files): a :class:`~forensics.errors.UsageError`
  (exit 2) before anything is written;
* a file of a published report (a scan's link into its store) is written only by the commands
  that write reports (``reports=True``: ``scan``, ``report``);
* only regular files are replaced: a symbolic link, a FIFO, a device, a socket or a folder at an
  output path is refused (``-o /dev/full`` leaves the device alone);
* a file is written to a temporary file in the same folder and renamed over the old one at the
  end, so a reader never sees half a file and a failed write leaves the old one in place.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from ..errors import UsageError

__all__ = ["CURRENT", "GENERATION_PREFIX", "LOCK_FILE", "STORE_DIR", "Outputs", "is_report_link", "writing"]

#: A scan's report store inside its output folder (see :func:`forensics.report.files.write_reports`):
#: generation folders, the ``current`` link to the published one, and the lock.
STORE_DIR = ".forensics"
CURRENT = "current"
GENERATION_PREFIX = "r-"
LOCK_FILE = "lock"

T = TypeVar("T")

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def writing(path: Path, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, an operation that writes ``path``; its :class:`OSError` becomes a
    :class:`UsageError` naming ``path`` (a full disk, a read-only folder)."""
    try:
        return fn(*args)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_reason(exc)}") from None


def is_report_link(path: Path) -> bool:
    """Whether ``path`` is a link a scan made to its report store (``.forensics/current/NAME``):
    an output forensics may replace."""
    try:
        return os.readlink(path) == f"{STORE_DIR}/{CURRENT}/{path.name}"
    except (OSError, ValueError):
        return False


class Outputs:
    """Where a command may write, given what it reads.

    Parameters
    ----------
    inputs
        the command's input paths (files or folders; ``None`` and missing paths are
        skipped). More can be added with :meth:`add` once known (the files a scan read).
    """

    def __init__(self, inputs: Iterable[Path | str | None] = (), *, reports: bool = False) -> None:
        #: whether this writer writes a report's own files (``scan``, ``report``): only then may a
        #: name a scan linked into its store (``analysis.json`` -> ``.forensics/current/...``) be
        #: written through; any other command's output there is refused
        self.reports = reports
        self._files: dict[tuple[int, int], str] = {}
        self._folders: list[tuple[Path, str]] = []
        self.add(*inputs)

    def add(self, *inputs: Path | str | None) -> None:
        """Also protect these inputs."""
        for p in inputs:
            if p is None or str(p) in ("", "-"):
                continue
            path = Path(p)
            try:
                st = path.stat()
            except (OSError, ValueError):
                continue  # not there (or unreadable): nothing an output could replace
            if stat.S_ISDIR(st.st_mode):
                self._folders.append((path.resolve(), str(path)))
            else:
                self._files[(st.st_dev, st.st_ino)] = str(path)

    def check(self, path: Path) -> None:
        """Refuse (:class:`UsageError`) an output path that is an input, inside an input folder
        with a file there already, or anything but a regular file."""
        try:
            lst = path.lstat()
        except FileNotFoundError:
            return
        except NotADirectoryError:
            blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
            raise UsageError(f"cannot write {path}: {blocker} is a file, not a folder") from None
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {_reason(exc)}") from None
        if stat.S_ISLNK(lst.st_mode) and is_report_link(path):
            if not self.reports:
                raise UsageError(f"refusing to write {path}: it is a file of the report in {path.parent} "
                                 "(a link into its store, which only `forensics scan` and `forensics report` "
                                 "write); choose another output path")
            try:  # a scan's own link: what it points to is what would be replaced
                lst = path.stat()
            except OSError:
                return  # dangling (a name the current report does not hold)
        for test, kind in _KINDS:
            if test(lst.st_mode):
                raise UsageError(f"refusing to write {path}: it is {kind}; forensics replaces only "
                                 "regular files (choose another output path)")
        same = self._files.get((lst.st_dev, lst.st_ino))
        if same is not None:
            raise UsageError(f"refusing to write {path}: it is the input {same}"
                             + ("" if Path(same) == path else " (the same file)")
                             + "; choose another output path")
        if not self._folders:
            return
        parent = path.parent.resolve()  # follows the links (a few stat calls): only with a folder to test
        for folder, shown in self._folders:
            if parent == folder or parent.is_relative_to(folder):
                raise UsageError(f"refusing to write {path}: it would replace a file inside the input "
                                 f"folder {shown}; choose another output path")

    def folder(self, path: Path) -> Path:
        """Create the output folder ``path`` (and its parents); a :class:`UsageError` when it is
        not a folder or cannot be created."""
        try:
            path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
            raise UsageError(f"cannot write into {path}: {blocker} is a file, not a folder") from None
        except OSError as exc:
            raise UsageError(f"cannot create the output folder {path}: {_reason(exc)}") from None
        if not path.is_dir():
            raise UsageError(f"cannot write into {path}: it is not a folder")
        return path

    @contextlib.contextmanager
    def temporary(self, path: Path) -> Iterator[Path]:
        """A temporary path beside ``path``; renamed over ``path`` when the block ends without an
        error (removed otherwise). ``path`` is checked first and again just before the rename."""
        self.check(path)
        parent = path.parent
        if not parent.exists():
            self.folder(parent)
            self.check(path)  # a path through the new folder ("new/../input") may reach an input
        elif not parent.is_dir():
            raise UsageError(f"cannot write {path}: {parent} is a file, not a folder")
        try:
            fd, name = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {_reason(exc)}") from None
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            self.check(path)
            writing(path, os.chmod, tmp, 0o666 & ~_umask())  # an ordinary new file, not mkstemp's 0600
            writing(path, os.replace, tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def open(self, path: Path, mode: str = "w") -> Iterator[IO[Any]]:
        """A file object for ``path`` (``"w"``: UTF-8 text with ``\\n`` newlines as written, or
        ``"wb"``), written through :meth:`temporary`."""
        with self.temporary(path) as tmp:
            kwargs: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
            try:
                with open(tmp, mode, **kwargs) as fh:
                    yield fh
            except OSError as exc:  # the block only writes: a full disk, a quota, an I/O error
                raise UsageError(f"cannot write {path}: {_reason(exc)}") from None

    def write_text(self, path: Path, text: str) -> Path:
        """Write ``text`` (UTF-8) to ``path`` safely; return ``path``."""
        with self.open(path) as fh:
            fh.write(text)
        return path

    def write_bytes(self, path: Path, data: bytes) -> Path:
        """Write ``data`` to ``path`` safely; return ``path``."""
        with self.open(path, "wb") as fh:
            fh.write(data)
        return path

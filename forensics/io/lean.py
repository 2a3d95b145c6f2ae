"""A command-line process that loads only what its input needs, and leaves when it is done.

pyarrow imports pandas on its first array conversion (its pandas shim checks whether a value is
a pandas object): about 0.27 CPU-seconds, most of the start-up budget of a small scan. The
command line never hands pyarrow a pandas object, so :func:`pyarrow_without_pandas` lets pyarrow
run as it does where pandas is not installed (a configuration pyarrow supports: a scan's files
are byte-identical either way, see tests/test_small_scan.py). An ``import pandas`` written in
Python code (a library that uses it, ``importlib.import_module``) still imports it; only an
import from compiled code (pyarrow's shim) is refused.

:func:`leave` ends the process without the interpreter's teardown (about 50 ms of a small scan's
0.4 s: freeing every module, numpy's and pyarrow's included), once the output is flushed and the
``atexit`` functions have run.

:func:`pause_collection` turns the cyclic garbage collector off while a command loads its modules
(a start's hundred young collections and their older ones walk the objects the imports made:
2-10 ms of a small scan's 0.2 s, measured side by side), and :func:`resume_collection` turns it
on again once the work on the input begins, with what was loaded moved out of its sight
(``gc.freeze``): a long scan or a ``watch`` collects as usual, over its own objects only.

All three are installed by the ``forensics`` entry points (``forensics`` and ``python -m forensics``),
never by ``import forensics``: a notebook that uses the library keeps pyarrow's pandas
integration.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from opcode import opmap
from types import FrameType
from typing import Any

__all__ = ["leave", "pause_collection", "pyarrow_without_pandas", "resume_collection"]

_IMPORT_NAME = opmap["IMPORT_NAME"]


def _from_python(frame: FrameType | None) -> bool:
    """Whether the search in progress was asked for by Python code: an ``import`` statement,
    ``importlib.import_module`` or ``importlib.util.find_spec`` (polars asks whether pandas is
    there); ``frame`` is the finder's caller."""
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
        frame = frame.f_back
    if frame is None or str(frame.f_globals.get("__name__")).startswith("importlib"):
        return True
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_NAME


class _NoPandasFromCompiledCode:
    """Refuses ``pandas`` to an import that compiled code asks for (pyarrow's shim). A meta path
    finder is any object with ``find_spec`` (``importlib.abc``, whose import loads
    ``importlib.resources``, is not needed for that)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" and not _from_python(sys._getframe(1)):
            raise ImportError("pandas is not loaded for pyarrow by the forensics command line")
        return None


def pyarrow_without_pandas() -> None:
    """Keep pyarrow from importing pandas in this process (see the module's text); nothing
    when pandas is already loaded."""
    if "pandas" in sys.modules or any(isinstance(f, _NoPandasFromCompiledCode) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _NoPandasFromCompiledCode())


_paused = False


def pause_collection() -> None:
    """Turn the cyclic garbage collector off until :func:`resume_collection` (nothing where it
    is off already: whoever turned it off keeps it so)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collection() -> None:
    """Turn the collector on again if :func:`pause_collection` turned it off, leaving every
    object made so far (the modules, their functions and classes) out of its collections."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def leave(code: object) -> None:
    """End the process with ``code`` (a ``SystemExit`` code: None is 0) as the interpreter
    would, less its teardown: standard output and error flushed, the ``atexit`` functions run
    (a library's clean-up, coverage's data), then ``os._exit``. Where another Python thread is
    still running, or ``code`` is a message, or a stream cannot be flushed, it exits the usual
    way (``SystemExit``), which waits for the threads and reports the error."""
    if (code is not None and not isinstance(code, int)) or threading.active_count() > 1:
        raise SystemExit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the interpreter's exit reports it
        raise SystemExit(code) from None
    atexit._run_exitfuncs()
    os._exit(code or 0)

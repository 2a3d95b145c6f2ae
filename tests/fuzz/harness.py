"""Run fuzz cases and classify what happened.

Each case runs in a fresh temporary folder (its files written there, ``{dir}`` in its argv
replaced by the folder, the folder as the working directory). Cases run in-process, inside
long-lived worker processes (one import of forensics per worker instead of one per case, which is
about 30x faster than a subprocess per case), so a crash or a hang costs a worker, never the run:
the parent waits on each case with a timeout, replaces a worker that died (**crash**) or that
overran (**hang**), and goes on. A case that feeds standard input runs as a real subprocess
(``python -m forensics``), since a worker has no stdin of its own to give.

Outcomes:

* ``ok`` (exit 0), ``gate`` (1), ``usage`` (2), ``input`` (3): the contract;
* ``internal``: exit 3 from a caught bug (the CLI's "internal error ... please report it");
* ``crash``: a signal, an exit code outside 0-3, a traceback, a worker that died;
* ``hang``: the case ran past its timeout;
* ``written``: an input file's bytes, or a special file (FIFO), changed;
* ``silent-loss``: exit 0, but the read report does not account for the rows the case holds
  (``rows_read != expect_rows`` or ``rows_kept + rows_skipped != rows_read``), or the scan
  analysed a different number of rows than the report kept;
* ``wrong-exit``, ``wrong-format``: the case names the one right exit code or format and the run
  gave another.

The first five of ``FAILURES`` are the suite's target (zero over the full run).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .case import Case

__all__ = ["FAILURES", "OUTCOMES", "Result", "classify", "run_case", "run_cases"]

OUTCOMES = ("ok", "gate", "usage", "input", "internal", "crash", "hang", "written", "silent-loss",
            "wrong-exit", "wrong-format")
FAILURES = frozenset({"internal", "crash", "hang", "written", "silent-loss", "wrong-exit", "wrong-format"})
INTERNAL = "internal error"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    """What one case did."""

    case: Case
    outcome: str
    exit_code: int | None
    detail: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


# --- the case folder -----------------------------------------------------------------------------
def _lay_out(case: Case, folder: Path) -> list[str]:
    """Write the case's files (FIFOs where the case asks); the argv with ``{dir}`` filled in."""
    for name, data in case.files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if name in case.fifos:
            os.mkfifo(p)
        else:
            p.write_bytes(data)
    return [a.replace("{dir}", str(folder)) for a in case.argv]


def _snapshot(case: Case, folder: Path) -> dict[str, tuple[int, bytes | None]]:
    out: dict[str, tuple[int, bytes | None]] = {}
    for name in case.files:
        p = folder / name
        try:
            st = os.lstat(p)
        except OSError:
            out[name] = (-1, None)
            continue
        out[name] = (stat.S_IFMT(st.st_mode), p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
    return out


def _feed_fifos(case: Case, folder: Path, deadline: float) -> list[threading.Thread]:
    """A writer thread per FIFO: it waits (without blocking forever) for a reader, writes the
    bytes and closes; a FIFO nobody opens is given up at the deadline."""
    threads = []
    for name in case.fifos:
        data = case.files[name]

        def feed(path: Path = folder / name, data: bytes = data) -> None:
            fd = None
            while time.monotonic() < deadline:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError:  # ENXIO: no reader yet
                    time.sleep(0.01)
            if fd is None:
                return
            os.set_blocking(fd, True)
            try:
                view = memoryview(data)
                while view and time.monotonic() < deadline:
                    n = os.write(fd, view[:65536])
                    view = view[n:]
            except OSError:  # the reader went away
                pass
            finally:
                os.close(fd)

        t = threading.Thread(target=feed, daemon=True)
        t.start()
        threads.append(t)
    return threads


# --- classification ------------------------------------------------------------------------------
def _rows_problem(case: Case, folder: Path) -> tuple[str, str]:
    """``(outcome, detail)`` of the checks on a successful run's read report."""
    analysis = folder / "out" / "analysis.json"
    converted = folder / "out.parquet"
    report: dict[str, Any] | None = None
    rows_analysed: int | None = None
    if analysis.is_file():
        data = json.loads(analysis.read_text())
        report = data["inputs"][0] if data.get("inputs") else None
        rows_analysed = data["steps"]["rows"]
    elif converted.is_file():
        from forensics.io.convert import read_convert_metadata

        meta = read_convert_metadata(converted)
        report = meta.get("read_report")
    if report is None:
        return "ok", ""
    read, kept, skipped = report["rows_read"], report["rows_kept"], report["rows_skipped"]
    if case.expect_format is not None and report["format"] != case.expect_format:
        return "wrong-format", f"read as {report['format']}, expected {case.expect_format}"
    if kept + skipped != read:
        return "silent-loss", f"rows kept {kept} + skipped {skipped} != read {read}"
    if case.expect_rows is not None and read != case.expect_rows:
        return "silent-loss", f"rows read {read} (kept {kept}, skipped {skipped}) != {case.expect_rows} in the input"
    if rows_analysed is not None and rows_analysed != kept:
        return "silent-loss", f"{rows_analysed} rows analysed, {kept} kept"
    return "ok", ""


def classify(case: Case, folder: Path, code: int | None, output: str, before: dict[str, Any],
             crashed: str = "") -> tuple[str, str]:
    """The outcome of a finished run (see the module doc)."""
    if crashed:
        outcome, detail = "crash", crashed
    elif code is None:
        outcome, detail = "hang", "timed out"
    elif INTERNAL in output:
        outcome, detail = "internal", _last_line(output, INTERNAL)
    elif "Traceback (most recent call last)" in output:
        outcome, detail = "crash", _last_line(output, "Error")
    elif code in (0, 1, 2, 3):
        outcome, detail = ("ok", "gate", "usage", "input")[code], _last_line(output, "Error")
    else:
        outcome, detail = "crash", f"exit {code}: {_last_line(output, '')}"
    after = _snapshot(case, folder)
    changed = [n for n in case.files if before.get(n) != after.get(n) and n not in case.fifos]
    changed += [n for n in case.fifos if before.get(n, (0,))[0] != after.get(n, (0,))[0]]
    if changed:
        return "written", f"input changed: {', '.join(changed)}"
    if outcome in ("crash", "hang", "internal"):
        return outcome, detail
    if code == 0:
        problem, why = _rows_problem(case, folder)
        if problem != "ok":
            return problem, why
    if case.expect_exit is not None and code != case.expect_exit:
        return "wrong-exit", f"exit {code}, expected {case.expect_exit}: {detail}"
    return outcome, detail


def _last_line(output: str, needle: str) -> str:
    lines = [ln for ln in output.splitlines() if needle in ln] or output.splitlines()[-1:]
    return lines[-1][:300] if lines else ""


# --- running one case ----------------------------------------------------------------------------
def _invoke(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in this process: ``(exit code, output)``; an escaped exception is a crash."""
    from click.testing import CliRunner

    from forensics.cli import main

    res = CliRunner().invoke(main, argv, catch_exceptions=True)
    out = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback

        out += "\nTraceback (most recent call last):\n" + "".join(
            traceback.format_exception(type(res.exception), res.exception, res.exception.__traceback__))
    return res.exit_code, out


def _reset_process_state() -> None:
    """Forget what one case left in the process (streams already copied)."""
    from forensics.io import inputs

    inputs._SPOOLED.clear()


def _run_here(case: Case, folder: Path, timeout: float) -> Result:
    argv = _lay_out(case, folder)
    before = _snapshot(case, folder)
    t0 = time.monotonic()
    threads = _feed_fifos(case, folder, t0 + timeout)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        code, out = _invoke(argv)
    finally:
        os.chdir(cwd)
        _reset_process_state()
    for t in threads:
        t.join(timeout=0.1)
    outcome, detail = classify(case, folder, code, out, before)
    return Result(case, outcome, code, detail, time.monotonic() - t0)


def _run_subprocess(case: Case, folder: Path, timeout: float) -> Result:
    argv = _lay_out(case, folder)
    before = _snapshot(case, folder)
    t0 = time.monotonic()
    threads = _feed_fifos(case, folder, t0 + timeout)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("FORENSICS_DEBUG", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "forensics", *argv], input=case.stdin or b"",
                              capture_output=True, timeout=timeout, cwd=folder, env=env)
        code: int | None = proc.returncode
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        code, out = None, ""
    for t in threads:
        t.join(timeout=0.1)
    crashed = f"signal {-code}" if code is not None and code < 0 else ""
    outcome, detail = classify(case, folder, code, out, before, crashed)
    return Result(case, outcome, code, detail, time.monotonic() - t0)


def run_case(case: Case, *, timeout: float = 60.0, subprocess_only: bool = False) -> Result:
    """Run one case in a fresh folder (in this process unless it feeds stdin); see the module
    doc. A crash or hang of an in-process case takes this process with it: use
    :func:`run_cases` for hostile input."""
    folder = Path(tempfile.mkdtemp(prefix="forensics-fuzz-"))
    try:
        if case.stdin is not None or subprocess_only:
            return _run_subprocess(case, folder, timeout)
        return _run_here(case, folder, timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- the worker pool ------------------------------------------------------------------------------
def _worker(conn: Any, timeout: float) -> None:  # pragma: no cover - runs in a child process
    import forensics.cli  # noqa: F401  (import once, before the first case)

    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        try:
            result = run_case(case, timeout=timeout)
            conn.send((result.outcome, result.exit_code, result.detail, result.seconds))
        except BaseException as exc:  # the harness itself failed on this case: say so
            conn.send(("crash", None, f"harness: {type(exc).__name__}: {exc}", 0.0))


class _Worker:
    def __init__(self, ctx: Any, timeout: float) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, timeout), daemon=True)
        self.proc.start()
        child.close()
        self.case: Case | None = None
        self.started = 0.0
        self.cases = 0

    def send(self, case: Case) -> None:
        self.case, self.started = case, time.monotonic()
        self.cases += 1
        self.conn.send(case)

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


def run_cases(cases: Iterable[Case], *, workers: int = 2, timeout: float = 60.0) -> Iterator[Result]:
    """Run cases on ``workers`` worker processes; results in completion order."""
    ctx = mp.get_context("spawn")
    pool = [_Worker(ctx, timeout) for _ in range(max(workers, 1))]
    todo = iter(cases)
    busy: list[_Worker] = []
    free = list(pool)
    try:
        while True:
            while free:
                case = next(todo, None)
                if case is None:
                    break
                w = free.pop()
                if case.stdin is not None:  # a subprocess of its own, run from here
                    free.append(w)
                    yield run_case(case, timeout=timeout)
                    continue
                w.send(case)
                busy.append(w)
            if not busy:
                return
            ready = mp.connection.wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.5)
            now = time.monotonic()
            for w in list(busy):
                assert w.case is not None
                if w.conn in ready:
                    try:
                        outcome, code, detail, secs = w.conn.recv()
                    except (EOFError, OSError):
                        w.proc.join(timeout=5)
                        code = w.proc.exitcode
                        outcome, detail, secs = "crash", f"worker died (exit {code})", now - w.started
                    else:
                        busy.remove(w)
                        free.append(w)
                        yield Result(w.case, outcome, code, detail, secs)
                        continue
                elif w.proc.sentinel not in ready and now - w.started < timeout + (30.0 if w.cases == 1 else 2.0):
                    continue  # (a worker's first case also pays its imports)
                else:
                    dead = not w.proc.is_alive()
                    code = w.proc.exitcode
                    outcome = "crash" if dead else "hang"
                    detail = (f"worker died (exit {code}{', signal ' + str(-code) if code and code < 0 else ''})"
                              if dead else f"no result after {timeout:.0f} s")
                    secs = now - w.started
                busy.remove(w)
                case = w.case
                w.stop()
                pool.remove(w)
                nw = _Worker(ctx, timeout)
                pool.append(nw)
                free.append(nw)
                yield Result(case, outcome, code, detail, secs)
    finally:
        for w in pool:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            w.stop()


def with_argv(case: Case, *argv: str) -> Case:
    """The case with another command line."""
    return replace(case, argv=tuple(argv))

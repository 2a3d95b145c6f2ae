"""Where the runs of a fleet are scanned: a local process pool (the default) or Ray.

Both engines run :func:`forensics.fleet.scan.scan_run` on each task and return the rows in task
order, so the table does not depend on the engine or on which run finished first. Neither is a
scheduler of ours: the local engine is :class:`concurrent.futures.ProcessPoolExecutor`, the other
is Ray (``pip install 'rl-forensics[ray]'``), which RL teams already run veRL and OpenRLHF on.

With Ray, the workers read the logs and write ``OUT/<run>/`` themselves, so on a cluster both
must be on a filesystem every node sees (as the checkpoints of such jobs usually are).

Workers stay warm: each worker process is started once and scans run after run (the local pool's
processes, Ray's task workers), so forensics is imported once per worker, not once per run. Each
worker is lean as the command line is (:func:`forensics.io.lean.pyarrow_without_pandas`: pyarrow does
not import pandas there). Each run's result carries its worker's process id, peak resident memory
and CPU time (:class:`Worker`): ``FleetResult.workers`` says how many processes did the work, how
much memory each needed at most and how much CPU the fleet cost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import UsageError
from ..records import record
from .scan import RunTask, error_row, scan_run

__all__ = ["ENGINES", "Done", "Worker", "Workers", "ray_init", "run_local", "run_ray"]

ENGINES = ("local", "ray")
#: Times a local pool is started again after a worker process died (killed, out of memory).
POOL_RESTARTS = 3

OnResult = Callable[[dict[str, Any]], None]


@record(frozen=True)
class Worker:
    """A worker process as its last run left it: its id, peak resident memory (bytes) and the
    CPU seconds it has used (its start-up included)."""

    pid: int
    peak_rss: int
    cpu_s: float


#: The workers of a fleet, by process id.
Workers = dict[int, Worker]


@record(frozen=True)
class Done:
    """A run's row, and the worker process that scanned it."""

    row: dict[str, Any]
    worker: Worker


def peak_rss() -> int:
    """This process's peak resident memory in bytes: Linux's ``VmHWM``, its own since it started.

    Not ``ru_maxrss`` there: Linux keeps it across ``exec``, so a spawned worker (a fork of the
    driver, then a new interpreter) reports the driver's peak when that was larger (a worker of
    60 MB read as the 400 MB of the process that started it). ``ru_maxrss`` elsewhere (macOS
    reports bytes)."""
    import resource
    import sys

    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _this_worker() -> Worker:
    """This process: its peak resident memory (:func:`peak_rss`) and CPU time."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return Worker(os.getpid(), peak_rss(), use.ru_utime + use.ru_stime)


def warm_worker() -> None:
    """Make a worker process lean and warm: pyarrow without pandas (as the command line runs),
    and the scan's modules imported before its first run."""
    from ..io.lean import pyarrow_without_pandas

    pyarrow_without_pandas()
    from ..analysis import engine  # noqa: F401  (the import is the point)
    from ..report import files  # noqa: F401


def work(task: RunTask) -> Done:
    """What a worker runs for one task: :func:`scan_run`, and this worker's figures."""
    warm_worker()  # nothing after the first run of this process
    return Done(scan_run(task), _this_worker())


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def _record(done: Done, workers: Workers) -> dict[str, Any]:
    """The row; its worker noted (a later run of the same process has the larger figures)."""
    last = workers.get(done.worker.pid)
    if last is None or done.worker.cpu_s >= last.cpu_s:
        workers[done.worker.pid] = done.worker
    return done.row


def run_local(tasks: Sequence[RunTask], workers: int | None = None,
              on_result: OnResult | None = None) -> tuple[list[dict[str, Any]], Workers]:
    """Scan the tasks on a pool of ``workers`` processes (default: one per CPU); the rows in task
    order, and the workers that scanned them (:data:`Workers`).

    The processes are started once (spawned: a fresh interpreter, not a fork of this process and
    its threads) and each scans run after run. A worker process that dies takes the runs it had
    with it: the pool is started again for the runs not finished (at most :data:`POOL_RESTARTS`
    times); after that they are rows with the error.
    """
    rows: list[dict[str, Any] | None] = [None] * len(tasks)
    seen: Workers = {}
    todo = list(range(len(tasks)))
    workers = max(1, min(workers or default_workers(), len(tasks) or 1))
    for attempt in range(POOL_RESTARTS + 1):
        if not todo:
            break
        broken = _pool_pass(tasks, todo, workers, rows, seen, on_result)
        todo = [i for i in todo if rows[i] is None]
        if not broken:
            break
        if attempt == POOL_RESTARTS:
            for i in todo:
                rows[i] = error_row(tasks[i].run, "worker process died (killed, or out of memory?)",
                                    tasks[i].policy)
                if on_result is not None:
                    on_result(rows[i])  # type: ignore[arg-type]
    return [r for r in rows if r is not None], seen


def _pool_pass(tasks: Sequence[RunTask], todo: list[int], workers: int, rows: list[dict[str, Any] | None],
               seen: Workers, on_result: OnResult | None) -> bool:
    """One pool over the runs ``todo``: fill in their rows; whether a worker process died."""
    import multiprocessing

    broken = False
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=warm_worker) as pool:
        futures = {pool.submit(work, tasks[i]): i for i in todo}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = futures[fut]
                try:
                    rows[i] = _record(fut.result(), seen)
                except BrokenProcessPool:
                    broken = True
                    continue
                except Exception as exc:  # pickling trouble and the like: that run's row
                    rows[i] = error_row(tasks[i].run, f"worker failed: {type(exc).__name__}: {exc}",
                                        tasks[i].policy)
                if on_result is not None:
                    on_result(rows[i])  # type: ignore[arg-type]
    return broken


#: Ray started quietly: no dashboard, no worker output or logs on the driver's terminal.
RAY_QUIET: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
                             "logging_level": "ERROR"}


def ray_init(ray: Any, address: str | None, workers: int | None) -> None:
    """Start (or reach) Ray without a word on the terminal: its start-up banner ("Started a local
    Ray instance") goes to the logging it is told not to configure, and whatever it writes to
    stderr while starting is held back and shown only when it fails."""
    import contextlib
    import io
    import logging

    kwargs = dict(RAY_QUIET)
    if address is None and workers:
        kwargs["num_cpus"] = workers
    held = io.StringIO()
    for name in ("ray", "ray._private.worker", "ray.worker"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(held), contextlib.redirect_stdout(held):
            ray.init(address=address, **kwargs)
    except Exception as exc:
        raise UsageError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}"
                         + (f"\n{held.getvalue().strip()}" if held.getvalue().strip() else "")) from None


def run_ray(tasks: Sequence[RunTask], address: str | None = None, workers: int | None = None,
            on_result: OnResult | None = None) -> tuple[list[dict[str, Any]], Workers]:
    """Scan the tasks as Ray tasks: on the cluster at ``address``, or on a local Ray instance
    (``workers`` CPUs, default all) when none is given. Each task returns its row; a task that
    fails in Ray (a worker that died) is a row with the error. Ray reuses its task workers, so
    each is warmed once (:func:`warm_worker`)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'rl-forensics[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray_init(ray, address, workers)
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(work)
        refs = [remote.remote(task) for task in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        rows: list[dict[str, Any] | None] = [None] * len(tasks)
        seen: Workers = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=min(len(pending), 16), timeout=0.5)
            for ref in done:
                i = index[ref]
                try:
                    rows[i] = _record(ray.get(ref), seen)
                except Exception as exc:  # the task's worker died, or Ray could not run it
                    rows[i] = error_row(tasks[i].run, f"Ray task failed: {type(exc).__name__}: {exc}",
                                        tasks[i].policy)
                if on_result is not None:
                    on_result(rows[i])  # type: ignore[arg-type]
        return [r for r in rows if r is not None], seen
    finally:
        if started:
            ray.shutdown()

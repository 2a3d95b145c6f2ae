"""Where the runs of a fleet are scanned: a local process pool (the default) or Ray.

Both engines run :func:`forensics.fleet.scan.scan_run` on each task and return the rows in task
order, so the table does not depend on the engine or on which run finished first. Neither is a
scheduler of ours: the local engine is :class:`concurrent.futures.ProcessPoolExecutor`, the other
is Ray (``pip install 'rl-forensics[ray]'``), which RL teams already run veRL and OpenRLHF on.

With Ray, the workers read the logs and write ``OUT/<run>/`` themselves, so on a cluster both
must be on a filesystem every node sees (as the checkpoints of such jobs usually are).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import UsageError
from .scan import RunTask, error_row, scan_run

__all__ = ["ENGINES", "run_local", "run_ray"]

ENGINES = ("local", "ray")
#: Times a local pool is started again after a worker process died (killed, out of memory).
POOL_RESTARTS = 3

OnResult = Callable[[dict[str, Any]], None]


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def run_local(tasks: Sequence[RunTask], workers: int | None = None,
              on_result: OnResult | None = None) -> list[dict[str, Any]]:
    """Scan the tasks on a pool of ``workers`` processes (default: one per CPU).

    A worker process that dies takes the runs it had with it: the pool is started again for the
    runs not finished (at most :data:`POOL_RESTARTS` times); after that they are rows with the
    error.
    """
    rows: list[dict[str, Any] | None] = [None] * len(tasks)
    todo = list(range(len(tasks)))
    workers = max(1, min(workers or default_workers(), len(tasks) or 1))
    for attempt in range(POOL_RESTARTS + 1):
        if not todo:
            break
        broken = False
        # spawn: a fresh interpreter per worker, not a fork of this process and its threads
        import multiprocessing

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(scan_run, tasks[i]): i for i in todo}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = futures[fut]
                    try:
                        rows[i] = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    except Exception as exc:  # pickling trouble and the like: that run's row
                        rows[i] = error_row(tasks[i].run, f"worker failed: {type(exc).__name__}: {exc}",
                                            tasks[i].policy)
                    if on_result is not None:
                        on_result(rows[i])  # type: ignore[arg-type]
        todo = [i for i in todo if rows[i] is None]
        if not broken:
            break
        if attempt == POOL_RESTARTS:
            for i in todo:
                rows[i] = error_row(tasks[i].run, "worker process died (killed, or out of memory?)",
                                    tasks[i].policy)
                if on_result is not None:
                    on_result(rows[i])  # type: ignore[arg-type]
    return [r for r in rows if r is not None]


def run_ray(tasks: Sequence[RunTask], address: str | None = None, workers: int | None = None,
            on_result: OnResult | None = None) -> list[dict[str, Any]]:
    """Scan the tasks as Ray tasks: on the cluster at ``address``, or on a local Ray instance
    (``workers`` CPUs, default all) when none is given. Each task returns its row; a task that
    fails in Ray (a worker that died) is a row with the error."""
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'rl-forensics[ray]'") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        if address is None and workers:
            kwargs["num_cpus"] = workers
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise UsageError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(scan_run)
        refs = [remote.remote(task) for task in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        rows: list[dict[str, Any] | None] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=min(len(pending), 16), timeout=0.5)
            for ref in done:
                i = index[ref]
                try:
                    rows[i] = ray.get(ref)
                except Exception as exc:  # the task's worker died, or Ray could not run it
                    rows[i] = error_row(tasks[i].run, f"Ray task failed: {type(exc).__name__}: {exc}",
                                        tasks[i].policy)
                if on_result is not None:
                    on_result(rows[i])  # type: ignore[arg-type]
        return [r for r in rows if r is not None]
    finally:
        if started:
            ray.shutdown()

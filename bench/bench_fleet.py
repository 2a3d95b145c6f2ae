"""Benchmark: a fleet of runs (default 1,000 runs of 10,000 steps) on the local pool and on Ray.

Writes the runs once under ``bench/data/fleet_<runs>x<steps>/`` (Parquet step logs of 20
metrics, each run its own seed; one in ten with a gradient explosion), then measures, in this
process:

* the **per-run cost**: ``scan_run`` (scan, reports, row) of the first runs one after the other,
  in this process, warm (imports done): seconds of CPU and wall per run;
* the **local pool**: ``run_fleet(engine="local")``: wall time, runs per second;
* **Ray**: a local Ray instance started and stopped alone (its startup), then
  ``run_fleet(engine="ray")`` (startup included): wall time, runs per second, and the overhead per
  run: ``(wall - startup) * workers / runs - per-run cost``;

and prints a projection for a cluster of C cores: ``startup + runs * (cost + overhead) / C``.
Per-run reports are written without report.html by default (``--html`` renders them too, and
prints their cost per run). Both engines must give the same fleet.csv (checked).

Usage: ``python bench/bench_fleet.py [--runs N] [--steps S] [--workers W] [--html]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def make_runs(runs: int, steps: int) -> Path:
    import numpy as np

    from bench.shapes import step_chunks, write_parquet

    root = DATA / f"fleet_{runs}x{steps}"
    done = root / ".complete"
    if done.exists():
        return root
    for i in range(runs):
        chunks = list(step_chunks(steps, 20, False, seed=1000 + i))
        if i % 10 == 3:  # a gradient explosion from 60% of the run on
            at = int(steps * 0.6)
            for c in chunks:
                hit = c["step"] >= at
                c["grad_norm"] = np.where(hit, c["grad_norm"] * 40, c["grad_norm"])
        write_parquet(root / f"run_{i:04d}" / "steps.parquet", iter(chunks))
    done.write_text("")
    return root


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--serial", type=int, default=20, help="runs timed one after the other")
    ap.add_argument("--html", action="store_true", help="also render each run's report.html")
    ap.add_argument("--cluster-cores", type=int, nargs="*", default=[64, 512])
    args = ap.parse_args()

    from forensics.fleet import find_runs, run_fleet
    from forensics.fleet.scan import RunTask, scan_run

    t0 = time.perf_counter()
    root = make_runs(args.runs, args.steps)
    size = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 1e6
    print(f"data: {args.runs} runs of {args.steps:,} steps under {root} ({size:,.0f} MB, "
          f"{time.perf_counter() - t0:.1f} s to prepare); workers {args.workers}, "
          f"html {'on' if args.html else 'off'}")
    runs = find_runs([root])
    out = DATA / "fleet_out"

    # per-run cost, in this process, warm
    shutil.rmtree(out, ignore_errors=True)
    scan_run(RunTask(runs[0], str(out / "warm"), html=args.html))
    n = min(args.serial, len(runs))
    c, w = cpu(), time.perf_counter()
    for r in runs[:n]:
        scan_run(RunTask(r, str(out / "serial"), html=args.html))
    cost_cpu, cost = (cpu() - c) / n, (time.perf_counter() - w) / n
    print(f"per run, serial in one process: {cost * 1000:.0f} ms wall, {cost_cpu * 1000:.0f} ms CPU")
    if not args.html:
        c, w = cpu(), time.perf_counter()
        for r in runs[:n]:
            scan_run(RunTask(r, str(out / "serial-html"), html=True))
        print(f"  with report.html rendered: {(time.perf_counter() - w) / n * 1000:.0f} ms wall, "
              f"{(cpu() - c) / n * 1000:.0f} ms CPU a run")

    results = {}
    for engine in ("local", "ray"):
        shutil.rmtree(out / engine, ignore_errors=True)
        startup = 0.0
        if engine == "ray":
            try:
                import ray
            except ImportError:
                print("ray: not installed (pip install 'rl-forensics[ray]'): skipped")
                continue
            w = time.perf_counter()
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            ray.shutdown()
            startup = time.perf_counter() - w
        w = time.perf_counter()
        res = run_fleet([root], out / engine, engine=engine, workers=args.workers, html=args.html,
                        runs=runs)
        wall = time.perf_counter() - w
        overhead = (wall - startup) * args.workers / len(runs) - cost
        results[engine] = (wall, startup, overhead)
        shutil.copy(out / engine / "fleet.csv", out / f"fleet-{engine}.csv")
        shutil.rmtree(out / engine)  # 1,000 runs' reports: gigabytes
        print(f"{engine:5}: {len(runs)} runs in {wall:6.1f} s = {len(runs) / wall:5.1f} runs/s "
              f"(startup {startup:.1f} s; overhead per run beyond the serial cost, per worker: "
              f"{overhead * 1000:.0f} ms); {res.unreadable} unreadable")
    if len(results) == 2:
        same = (out / "fleet-local.csv").read_bytes() == (out / "fleet-ray.csv").read_bytes()
        print(f"fleet.csv identical on both engines: {same}")
        wall, startup, overhead = results["ray"]
        print(f"projection on a Ray cluster of C cores: {startup:.0f} s + runs x "
              f"({cost * 1000:.0f} + {max(overhead, 0) * 1000:.0f}) ms / C")
        for cores in args.cluster_cores:
            for n_runs in (1_000, 10_000):
                t = startup + n_runs * (cost + max(overhead, 0)) / cores
                print(f"  {n_runs:>6,} runs on {cores:>4} cores: {t:7.1f} s ({n_runs / t:6.1f} runs/s)")


if __name__ == "__main__":
    main()

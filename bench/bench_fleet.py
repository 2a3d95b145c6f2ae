"""Benchmark: a fleet of small runs of mixed formats (default 1,000) on the local pool and on Ray.

Budgets (issue 38): at least 30 runs/s on a 2-core machine with the local pool, each run's
report.html included (``--reports html``, the fleet's default, with the one plotly.js the fleet
shares); a Ray worker's peak memory at most 1.3x a local worker's, from the same bench run.

Writes the runs once under ``bench/data/fleet_mixed_<runs>/``: logs of 200 to 1,500 steps (each
run its own length and seed; one in ten with a gradient explosion from 60% of the run on), in six
formats in turn: a run folder with ``steps.jsonl``, a plain CSV file, a Hugging Face output folder
(``trainer_state.json`` with TRL's keys), a veRL file-logger JSONL, a run folder with
``steps.parquet``, and W&B chart exports holding four runs each (a row per run). Then measures, in
this process:

* the **per-run cost**: ``scan_run`` (scan, reports, row) of the first runs one after the other,
  in this process, warm (imports done): seconds of CPU and wall per run;
* the **local pool**: ``run_fleet(engine="local")`` (worker start-up included): wall time, runs
  per second, the worker processes that did the work and the peak memory of each;
* **Ray**: a local Ray instance started and stopped alone (its startup), then
  ``run_fleet(engine="ray")`` (startup included): the same, and the overhead per run:
  ``(wall - startup) * workers / runs - per-run cost``;

and prints a projection for a cluster of C cores: ``startup + runs * CPU a run / C``.
Both engines must give the same fleet.csv (checked). The load average is printed before and after:
other work on the machine slows every figure, the wall time most (the CPU a run least); with
``--repeat N`` the engines take turns N times and the budgets are judged on the medians.

What a worker has imported after a run is compared across the engines (one run each, untimed): a
Ray worker holds Ray's own runtime (``ray`` and what it imports: requests, protobuf, yaml,
jsonschema, pydantic where installed), which a local worker does not; of forensics and its
dependencies it should import nothing the local worker does not (printed).

Usage: ``python bench/bench_fleet.py [--runs N] [--workers W] [--reports none|html|all]
[--engines local ray] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
#: Runs/s the local pool must reach on a 2-core machine (issue 38; 15 in issue 25).
BUDGET_RUNS_PER_S = 30.0
#: A Ray worker's peak memory at most this many times a local worker's (issue 38).
BUDGET_RAY_MEMORY = 1.3
#: Runs in one W&B chart export.
WANDB_RUNS_PER_EXPORT = 4
#: TRL's keys for the canonical metrics a GRPO trainer_state.json logs.
TRL_KEYS = {"reward_mean": "reward", "reward_std": "reward_std", "kl": "kl", "entropy": "entropy",
            "loss": "loss", "grad_norm": "grad_norm", "learning_rate": "learning_rate",
            "response_length_mean": "completions/mean_length", "clip_frac": "clip_ratio/region_mean",
            "step_time": "step_time"}
#: veRL's keys (its file logger nests them under "data").
VERL_KEYS = {"entropy": "actor/entropy", "policy_loss": "actor/pg_loss", "approx_kl": "actor/kl_loss",
             "kl_coef": "actor/kl_coef", "grad_norm": "actor/grad_norm", "learning_rate": "actor/lr",
             "reward_mean": "critic/score/mean", "advantage_mean": "critic/advantages/mean",
             "response_length_mean": "response_length/mean", "truncation_rate": "response_length/clip_ratio",
             "step_time": "timing_s/step"}
#: The metrics a W&B chart export holds for each run.
WANDB_METRICS = ("reward_mean", "kl", "entropy", "grad_norm", "learning_rate", "response_length_mean",
                 "loss", "clip_frac")


def _series(i: int, steps: int) -> dict[str, np.ndarray]:
    """Run ``i``'s step stream (20 canonical metrics); one run in ten explodes from 60% on."""
    from bench.shapes import step_chunks

    cols = next(step_chunks(steps, 20, False, seed=1000 + i))
    cols.pop("timestamp", None)
    if i % 10 == 3:
        cols["grad_norm"] = np.where(cols["step"] >= int(steps * 0.6), cols["grad_norm"] * 40, cols["grad_norm"])
    return cols


def _rows(cols: dict[str, np.ndarray], keys: dict[str, str] | None = None) -> list[dict[str, Any]]:
    names = keys or {k: k for k in cols if k != "step"}
    lists = {k: cols[k].tolist() for k in names}
    return [{"step": s, **{names[k]: round(lists[k][j], 6) for k in names}}
            for j, s in enumerate(cols["step"].tolist())]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _steps_jsonl(root: Path, i: int, cols: dict[str, np.ndarray]) -> None:
    _write_jsonl(root / "jsonl" / f"run_{i:04d}" / "steps.jsonl", _rows(cols))


def _plain_csv(root: Path, i: int, cols: dict[str, np.ndarray]) -> None:
    path = root / "csv" / f"run_{i:04d}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = _rows(cols)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(rows[0]))
        w.writerows(list(r.values()) for r in rows)


def _trainer_state(root: Path, i: int, cols: dict[str, np.ndarray]) -> None:
    path = root / "hf" / f"run_{i:04d}" / "trainer_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    log = _rows(cols, TRL_KEYS)
    steps = len(log)
    for r in log:
        r["epoch"] = round(r["step"] / steps, 6)
    path.write_bytes(orjson.dumps({"global_step": steps, "max_steps": steps, "logging_steps": 1,
                                   "log_history": log}, option=orjson.OPT_INDENT_2))


def _verl_jsonl(root: Path, i: int, cols: dict[str, np.ndarray]) -> None:
    rows = [{"step": r.pop("step"), "data": r} for r in _rows(cols, VERL_KEYS)]
    _write_jsonl(root / "verl" / f"run_{i:04d}.jsonl", rows)


def _steps_parquet(root: Path, i: int, cols: dict[str, np.ndarray]) -> None:
    from bench.shapes import write_parquet

    write_parquet(root / "parquet" / f"run_{i:04d}" / "steps.parquet", iter([cols]))


def _wandb_exports(root: Path, members: list[tuple[int, dict[str, np.ndarray]]]) -> None:
    """W&B chart exports of :data:`WANDB_RUNS_PER_EXPORT` runs each (``Step``, ``<run> - <metric>``)."""
    for k in range(0, len(members), WANDB_RUNS_PER_EXPORT):
        group = members[k:k + WANDB_RUNS_PER_EXPORT]
        steps = sorted({s for _, c in group for s in c["step"].tolist()})
        header = ["Step"] + [f"run-{i:04d} - {m}" for i, _ in group for m in WANDB_METRICS]
        values = {(i, m): dict(zip(c["step"].tolist(), c[m].tolist())) for i, c in group for m in WANDB_METRICS}
        path = root / "wandb_exports" / f"export_{k // WANDB_RUNS_PER_EXPORT:03d}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            for s in steps:
                w.writerow([s] + [_cell(values[(i, m)].get(s)) for i, _ in group for m in WANDB_METRICS])


def _cell(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


#: The formats in turn (run i is written by WRITERS[i % 6]; None: into a W&B chart export).
WRITERS: tuple[Callable[[Path, int, dict[str, np.ndarray]], None] | None, ...] = (
    _steps_jsonl, _plain_csv, _trainer_state, _verl_jsonl, _steps_parquet, None)


def make_runs(runs: int) -> Path:
    """The fleet's logs (written once; ``.complete`` marks a finished set)."""
    root = DATA / f"fleet_mixed_{runs}"
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    lengths = np.random.default_rng(7).integers(200, 1501, runs)
    members = []
    for i in range(runs):
        cols = _series(i, int(lengths[i]))
        writer = WRITERS[i % len(WRITERS)]
        if writer is None:
            members.append((i, cols))
        else:
            writer(root, i, cols)
    _wandb_exports(root, members)
    done.write_text("")
    return root


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def per_run_cost(runs: list[Any], out: Path, reports: str, n: int) -> float:
    """Wall seconds per run of ``scan_run`` one after the other in this process (warm)."""
    from forensics.fleet.scan import RunTask, scan_run
    from forensics.report.html import write_plotly_asset

    out.mkdir(parents=True, exist_ok=True)
    write_plotly_asset(out)
    scan_run(RunTask(runs[-1], str(out / "warm"), reports=reports))
    picked = runs[:: max(1, len(runs) // n)][:n]  # every format
    c, w = cpu(), time.perf_counter()
    for r in picked:
        scan_run(RunTask(r, str(out / "serial"), reports=reports))
    cost, cost_cpu = (time.perf_counter() - w) / len(picked), (cpu() - c) / len(picked)
    print(f"per run, serial in one process ({len(picked)} runs, every format): {cost * 1000:.0f} ms wall, "
          f"{cost_cpu * 1000:.0f} ms CPU")
    return cost


def modules_after(task: Any) -> tuple[list[str], dict[str, int]]:
    """What a worker has imported once it has scanned ``task`` (run in the worker), and its memory
    then in MB (Linux: resident, private, shared with other processes such as the other workers:
    the libraries; empty elsewhere)."""
    from forensics.fleet.engines import work

    work(task)
    mem: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as fh:
            kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in fh) if v.strip().endswith("kB")}
        mem = {"rss": kb["Rss"] // 1024, "private": (kb["Private_Clean"] + kb["Private_Dirty"]) // 1024,
               "shared": (kb["Shared_Clean"] + kb["Shared_Dirty"]) // 1024}
    except (OSError, KeyError):
        pass
    return sorted(sys.modules), mem


def local_imports(task: Any) -> tuple[list[str], dict[str, int]]:
    """:func:`modules_after` in a worker of the local pool (a pool of one, started as the fleet's are)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from forensics.fleet.engines import warm_worker

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=warm_worker) as pool:
        return pool.submit(modules_after, task).result()


def ray_startup(workers: int, task: Any) -> tuple[float, tuple[list[str], dict[str, int]]]:
    """A local Ray instance started and stopped alone: its startup (seconds), and between the two,
    untimed, :func:`modules_after` in one of its workers."""
    import ray

    from forensics.fleet.engines import ray_init

    w = time.perf_counter()
    ray_init(ray, None, workers)
    startup = time.perf_counter() - w
    modules = ray.get(ray.remote(num_cpus=1)(modules_after).remote(task))
    w = time.perf_counter()
    ray.shutdown()
    return startup + time.perf_counter() - w, modules


def compare_imports(local_after: tuple[list[str], dict[str, int]], ray_after: tuple[list[str], dict[str, int]]) -> None:
    """Print what a Ray worker has imported that a local worker has not, by top-level package,
    and the memory of each after one run."""
    (local, local_mem), (ray, ray_mem) = local_after, ray_after
    extra = sorted(set(ray) - set(local))
    tops: dict[str, int] = {}
    for m in extra:
        tops[m.split(".")[0]] = tops.get(m.split(".")[0], 0) + 1
    ours = [m for m in extra if m.split(".")[0] == "forensics"]
    by_package = ", ".join(f"{k} {v}" for k, v in sorted(tops.items(), key=lambda kv: -kv[1]))
    print(f"imports after a run: a local worker {len(local)} modules, a Ray worker {len(ray)}; the Ray worker's "
          f"{len(extra)} more, by package: {by_package}; of forensics: {', '.join(ours) if ours else 'none'}")
    if local_mem and ray_mem:
        print("memory after one run (MB): " + "; ".join(
            f"{name} worker {m['rss']} resident, {m['private']} private, {m['shared']} shared with other processes"
            for name, m in (("a local", local_mem), ("a Ray", ray_mem))))


def run_engine(engine: str, root: Path, runs: list[Any], out: Path, args: argparse.Namespace,
               cost: float, imports: dict[str, tuple[list[str], dict[str, int]]]) -> dict[str, float] | None:
    """One fleet on ``engine``, printed: its figures (``startup``, ``cpu_run``: CPU a run in the
    workers and the driver, ``rate``: runs/s, ``peak_mb``: the largest worker's peak memory);
    None: Ray absent. ``imports`` gets what a worker of the engine has imported after a run (once)."""
    from forensics.fleet import run_fleet
    from forensics.fleet.scan import RunTask
    from forensics.report.html import PLOTLY_FILE

    shutil.rmtree(out / engine, ignore_errors=True)
    startup = 0.0
    probe = RunTask(runs[0], str(out / "probe"), reports=args.reports)
    if engine == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray: not installed (pip install 'rl-forensics[ray]'): skipped")
            return None
        startup, modules = ray_startup(args.workers, probe)
        imports.setdefault("ray", modules)
    elif "local" not in imports:
        imports["local"] = local_imports(probe)
    w, own = time.perf_counter(), time.process_time()
    res = run_fleet([root], out / engine, engine=engine, workers=args.workers, reports=args.reports, runs=runs)
    wall, own = time.perf_counter() - w, time.process_time() - own
    overhead = (wall - startup) * args.workers / len(runs) - cost
    shutil.copy(out / engine / "fleet.csv", out / f"fleet-{engine}.csv")
    copies = len(list((out / engine).rglob(PLOTLY_FILE)))
    shutil.rmtree(out / engine)
    rate = len(runs) / wall
    workers = sorted(res.workers.values(), key=lambda wk: -wk.peak_rss)
    worker_cpu = sum(wk.cpu_s for wk in workers)
    budget = (f"{'meets' if rate >= BUDGET_RUNS_PER_S else 'BELOW'} the budget of {BUDGET_RUNS_PER_S:.0f}; "
              if engine == "local" else "")
    print(f"{engine:5}: {len(runs)} runs in {wall:6.1f} s = {rate:5.1f} runs/s ({budget}startup "
          f"{startup:.1f} s; overhead per run beyond the serial cost, per worker: {overhead * 1000:.0f} ms); "
          f"{res.unreadable} unreadable; {PLOTLY_FILE} copies: {copies}")
    print(f"       {len(workers)} worker process(es) did the work; peak memory per worker: "
          + ", ".join(f"{wk.peak_rss / 2**20:.0f} MB" for wk in workers)
          + f"; CPU in the workers {worker_cpu:.1f} s = {worker_cpu / len(runs) * 1000:.0f} ms a run (their "
          f"start-up included): {args.workers} cores of its own would scan {len(runs) * args.workers / worker_cpu:.1f} "
          f"runs/s; this process (the fleet's driver) {own / len(runs) * 1000:.1f} ms CPU a run; {load()}")
    return {"startup": startup, "cpu_run": (worker_cpu + own) / len(runs), "rate": rate,
            "peak_mb": max(wk.peak_rss for wk in workers) / 2**20, "worker_cpu_run": worker_cpu / len(runs)}


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def verdict(results: dict[str, list[dict[str, float]]], workers: int) -> None:
    """The budgets, judged on the medians of the repeats (each figure its own median)."""
    med = {e: {k: median([r[k] for r in rs]) for k in rs[0]} for e, rs in results.items()}
    n = len(next(iter(results.values())))
    of = f"median of {n}" if n > 1 else "one run"
    if "local" in med:
        m = med["local"]
        print(f"budget, local pool ({of}): {m['rate']:.1f} runs/s, "
              f"{'meets' if m['rate'] >= BUDGET_RUNS_PER_S else 'BELOW'} {BUDGET_RUNS_PER_S:.0f} "
              f"(its workers' CPU, {m['worker_cpu_run'] * 1000:.0f} ms a run, would scan "
              f"{workers / m['worker_cpu_run']:.1f} runs/s on {workers} cores of their own)")
    if len(med) == 2:
        ratio = med["ray"]["peak_mb"] / med["local"]["peak_mb"]
        print(f"budget, Ray's memory ({of}): peak {med['ray']['peak_mb']:.0f} MB a worker = {ratio:.2f}x the local "
              f"pool's {med['local']['peak_mb']:.0f} MB, {'meets' if ratio <= BUDGET_RAY_MEMORY else 'ABOVE'} "
              f"{BUDGET_RAY_MEMORY}x; {med['ray']['rate']:.1f} runs/s on Ray")


def projection(results: dict[str, list[dict[str, float]]], cores: list[int]) -> None:
    """A cluster of C cores, each a worker of its own: ``startup + runs x CPU a run / C`` (the CPU
    a run, not the wall time here, which other work on this machine inflates)."""
    engine = "ray" if "ray" in results else "local"
    startup = median([r["startup"] for r in results[engine]])
    per_run = median([r["cpu_run"] for r in results[engine]])
    print(f"projection on a {'Ray cluster' if engine == 'ray' else 'machine'} of C cores: {startup:.0f} s + runs x "
          f"{per_run * 1000:.0f} ms (CPU a run, workers and driver) / C")
    for c in cores:
        for n_runs in (1_000, 10_000):
            t = startup + n_runs * per_run / c
            print(f"  {n_runs:>6,} runs on {c:>4} cores: {t:7.1f} s ({n_runs / t:6.1f} runs/s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--serial", type=int, default=24, help="runs timed one after the other")
    ap.add_argument("--reports", choices=("none", "html", "all"), default="html")
    ap.add_argument("--engines", nargs="+", choices=("local", "ray"), default=["local", "ray"])
    ap.add_argument("--cluster-cores", type=int, nargs="*", default=[64, 512])
    ap.add_argument("--repeat", type=int, default=1, help="the engines take turns this many times (medians)")
    args = ap.parse_args()
    # this checkout's forensics (and bench.shapes), here and in every worker (Ray's inherit the environment)
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

    import forensics
    from forensics.fleet import find_runs

    print(f"forensics {forensics.__version__} from {Path(forensics.__file__).parent}")

    t0 = time.perf_counter()
    root = make_runs(args.runs)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
    runs = find_runs([root])
    print(f"data: {len(runs)} runs of 200-1,500 steps in 6 formats under {root} ({size:,.0f} MB, "
          f"{time.perf_counter() - t0:.1f} s to prepare and find); workers {args.workers}, reports "
          f"{args.reports}; {load()}")
    out = DATA / "fleet_out"
    shutil.rmtree(out, ignore_errors=True)
    cost = per_run_cost(runs, out / "serial", args.reports, args.serial)
    results: dict[str, list[dict[str, float]]] = {}
    imports: dict[str, tuple[list[str], dict[str, int]]] = {}
    for _ in range(max(1, args.repeat)):
        for engine in args.engines:
            got = run_engine(engine, root, runs, out, args, cost, imports)
            if got is not None:
                results.setdefault(engine, []).append(got)
    if len(results) == 2:
        same = (out / "fleet-local.csv").read_bytes() == (out / "fleet-ray.csv").read_bytes()
        print(f"fleet.csv identical on both engines: {same}")
    if len(imports) == 2:
        compare_imports(imports["local"], imports["ray"])
    if results:
        verdict(results, args.workers)
        projection(results, args.cluster_cores)


if __name__ == "__main__":
    main()

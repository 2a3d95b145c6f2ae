"""Benchmark: scan a 1,000,000-step log against pyarrow reading the same file, in the same run.

Writes ``bench/data/steps_1000000.jsonl`` (about 22 numeric fields a row) and its Parquet twin once,
then times, each in a fresh subprocess (so peak memory is the child's own):

* baseline JSONL: pyarrow's streaming JSON reader (``pyarrow.json.open_json``) over the file;
* baseline Parquet: ``pyarrow.parquet.ParquetFile.iter_batches`` over the file;
* forensics: the full analysis (read, canonicalise, all trackers, findings, health, and the
  analysis JSON with its plot series and timeline) of each.

Imports happen before the clock starts, for all three (pyarrow's for the baselines; forensics and the
libraries its readers use for the scan).

Prints seconds, the ratio to the baseline (target <= 1.5x) and peak RSS (target < 400 MB).
Usage: ``python bench/bench_scan.py [--rows N] [--repeat K]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"

CHILD = r"""
import json, sys, time
import pyarrow.json as pj, pyarrow.parquet as pq
kind, path = sys.argv[1], sys.argv[2]
if kind == "forensics":
    import polars  # the JSONL reader's parser, imported on first use: a library import, as pyarrow's
    from forensics.analysis.engine import scan_path
t0 = time.perf_counter()
if kind == "arrow-jsonl":
    rows = 0
    reader = pj.open_json(path)
    for batch in reader:
        rows += batch.num_rows
elif kind == "arrow-parquet":
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=65536):
        rows += batch.num_rows
else:
    a = scan_path(path)
    rows = a.steps["rows"]
    json.dumps(a.to_dict(), default=str)
dt = time.perf_counter() - t0
# VmHWM is this process's own peak RSS (ru_maxrss would include the parent's, kept across exec)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"seconds": dt, "rows": rows, "peak_mb": int(hwm) / 1024}))
"""


def make_data(rows: int) -> tuple[Path, Path]:
    DATA.mkdir(parents=True, exist_ok=True)
    jsonl = DATA / f"steps_{rows}.jsonl"
    parquet = DATA / f"steps_{rows}.parquet"
    if jsonl.exists() and parquet.exists():
        return jsonl, parquet
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = rows
    t = np.arange(n)
    cols = {
        "step": t,
        "epoch": t / 10_000.0,
        "timestamp": 1.7e9 + t * 2.5 + rng.normal(0, 0.05, n),
        "kl": 0.05 * np.exp(rng.normal(0, 0.1, n)),
        "kl_coef": np.full(n, 0.05),
        "entropy": 1.5 - 0.2 * t / n + rng.normal(0, 0.02, n),
        "loss": rng.normal(0.0, 0.05, n),
        "policy_loss": rng.normal(0.0, 0.05, n),
        "value_loss": 0.3 * np.exp(rng.normal(0, 0.2, n)),
        "grad_norm": 0.8 * np.exp(rng.normal(0, 0.15, n)),
        "grad_norm_value": 0.5 * np.exp(rng.normal(0, 0.15, n)),
        "learning_rate": np.full(n, 1e-6),
        "advantage_mean": rng.normal(0, 0.01, n),
        "advantage_std": 1 + rng.normal(0, 0.02, n),
        "reward_mean": 0.2 + 0.4 * t / n + rng.normal(0, 0.03, n),
        "reward_std": 0.3 + rng.normal(0, 0.01, n),
        "response_length_mean": 200 + rng.normal(0, 8, n),
        "truncation_rate": np.abs(rng.normal(0.01, 0.005, n)),
        "clip_frac": np.abs(rng.normal(0.05, 0.01, n)),
        "approx_kl": np.abs(rng.normal(0.005, 0.001, n)),
        "step_time": 2.5 * np.exp(rng.normal(0, 0.05, n)),
        "train_tokens_per_s": 4000 * np.exp(rng.normal(0, 0.05, n)),
    }
    table = pa.table(cols)
    pq.write_table(table, parquet, row_group_size=65536)
    names = list(cols)
    fmt = "{" + ", ".join(f'"{k}": %d' if k == "step" else f'"{k}": %.9g' for k in names) + "}\n"
    with open(jsonl, "w") as fh:
        mat = np.column_stack([cols[k] for k in names])
        for start in range(0, n, 50_000):
            block = mat[start : start + 50_000]
            fh.write("".join(fmt % tuple(r) for r in block))
    return jsonl, parquet


def run_child(kind: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(kind: str, path: Path, repeat: int) -> dict[str, float]:
    runs = [run_child(kind, path) for _ in range(repeat)]
    return min(runs, key=lambda r: r["seconds"]) | {"peak_mb": max(r["peak_mb"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    t0 = time.perf_counter()
    jsonl, parquet = make_data(args.rows)
    print(f"data: {jsonl.name} {jsonl.stat().st_size / 1e6:.0f} MB, {parquet.name} "
          f"{parquet.stat().st_size / 1e6:.0f} MB ({time.perf_counter() - t0:.1f} s to prepare)")
    ok = True
    for label, base_kind, path in (("JSONL", "arrow-jsonl", jsonl),
                                   ("Parquet", "arrow-parquet", parquet)):
        base = best(base_kind, path, args.repeat)
        ours = best("forensics", path, args.repeat)
        ratio = ours["seconds"] / base["seconds"]
        ok &= ratio <= 1.5 and ours["peak_mb"] < 400
        print(f"{label:8} pyarrow {base['seconds']:6.2f} s ({base['peak_mb']:5.0f} MB)   "
              f"forensics scan {ours['seconds']:6.2f} s ({ours['peak_mb']:5.0f} MB peak)   "
              f"ratio {ratio:4.2f}x (target <= 1.5x, < 400 MB)   rows {int(ours['rows'])}")
    print("PASS" if ok else "FAIL: a target was missed")


if __name__ == "__main__":
    main()

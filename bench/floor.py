"""The cost floor of any per-row analysis of the benchmark's Parquet file.

Times, in this process, best of ``--repeat``:

* ``read``: pyarrow decoding the file in 65,536-row record batches (the benchmark's baseline);
* ``numpy``: the same, plus converting every column to a numpy array;
* ``median``: the same, plus one 20-row moving median per column (bottleneck's, the fastest
  exact one available), a single robust statistic of the kind every tracker needs several of.

Run ``make bench`` first (it writes the file). Usage: ``python bench/floor.py [--repeat K]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import bottleneck as bn
import pyarrow.parquet as pq

PATH = Path(__file__).resolve().parent / "data" / "steps_20m_epoch_1000000.parquet"


def run(kind: str) -> float:
    t0 = time.perf_counter()
    for rb in pq.ParquetFile(PATH).iter_batches(batch_size=65536):
        if kind == "read":
            continue
        cols = [c.to_numpy(zero_copy_only=False) for c in rb.columns]
        if kind == "median":
            for c in cols:
                bn.move_median(c, 20, min_count=10)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not PATH.exists():
        raise SystemExit(f"{PATH} is missing: run `make bench` first")
    best = {k: min(run(k) for _ in range(args.repeat)) for k in ("read", "numpy", "median")}
    for k, v in best.items():
        print(f"{k:7} {v:6.3f} s   {v / best['read']:5.1f}x the read")


if __name__ == "__main__":
    main()

"""Regenerate the labelled fixture runs in ``fixtures/runs/`` with the reference trainer.

Each fixture is a run folder (``steps.jsonl``, ``samples.jsonl``, ``run.json``) plus a
``manifest.json``::

    {"name", "algorithm", "seed", "fault": null | name, "onset_step": int | null,
     "expected_rules": [rule ids, primary first], "horizon_steps": int, "notes"}

Healthy runs (PPO and GRPO, several seeds) must come out clean; every fault run must raise its
expected rules within ``horizon_steps`` of ``onset_step``. Runs are seeded and single-threaded
on the CPU, so every column except the wall-clock ones (``timestamp``, ``step_time``, the
throughput columns, ``mfu``, ``ram_gb``) is identical from one regeneration to the next.

Usage::

    python scripts/make_fixtures.py                 # everything, 2 runs in parallel
    python scripts/make_fixtures.py --only ppo_lr_high --jobs 1
    python scripts/make_fixtures.py --device cuda --out /tmp/cuda-runs --jobs 8   # the corpus on a GPU

A corpus trained on CUDA is not bit-identical to the CPU one (other kernels), but the same labels
must hold for it: ``python -m forensics.verdicts.evaluation cuda=/tmp/cuda-runs`` scores it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.trainer.reference.faults import FAULTS  # noqa: E402 - needs the repo on sys.path

OUT = ROOT / "fixtures" / "runs"
STEPS = 240
HEALTHY_SEEDS = (0, 1, 2)
FAULT_SEED = 0
#: responses recorded per step in the sample stream (with text); keeps fixtures small. GRPO keeps
#: two whole groups of 8, so within-step and within-group statistics stay meaningful.
SAMPLES_PER_STEP = {"ppo": 8, "grpo": 16}
SIZE_BUDGET = 20 * 1024 * 1024

HEALTHY_NOTES = ("Healthy run: no warning or critical finding is expected. The first ~40 steps "
                 "are the controller's approach to its KL target (PPO) and are normal.")


def fixtures() -> list[dict[str, Any]]:
    """Every fixture to generate: its manifest plus the trainer arguments."""
    out: list[dict[str, Any]] = []
    for algo in ("ppo", "grpo"):
        for seed in HEALTHY_SEEDS:
            out.append({"name": f"{algo}_healthy_s{seed}", "algorithm": algo, "seed": seed,
                        "fault": None, "onset_step": None, "expected_rules": [],
                        "horizon_steps": 0, "notes": HEALTHY_NOTES})
    for spec in FAULTS.values():
        out.append({"name": f"{spec.algorithm}_{spec.name}", "algorithm": spec.algorithm,
                    "seed": FAULT_SEED, "fault": spec.name, "onset_step": spec.onset,
                    "expected_rules": list(spec.expected_rules),
                    "horizon_steps": spec.horizon_steps, "notes": spec.description})
    return out


def generate(manifest: dict[str, Any], out: Path = OUT, device: str = "cpu") -> tuple[str, float]:
    """Run the trainer for one fixture in a fresh single-threaded process."""
    folder = out / manifest["name"]
    if folder.exists():
        shutil.rmtree(folder)
    cmd = [sys.executable, "-m", "forensics.trainer.reference", "--algo", manifest["algorithm"],
           "--seed", str(manifest["seed"]), "--steps", str(STEPS), "--threads", "1",
           "--samples-per-step", str(SAMPLES_PER_STEP[manifest["algorithm"]]), "--out", str(folder),
           "--device", device]
    if manifest["fault"]:
        cmd += ["--fault", manifest["fault"], "--onset", str(manifest["onset_step"])]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n",
                                          encoding="utf-8")
    return manifest["name"], time.perf_counter() - t0


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    """Generate the fixtures and print their sizes; exit 1 if the size budget is exceeded."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (2 CPU cores)")
    parser.add_argument("--only", nargs="*", help="fixture names to regenerate")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (the trainer's --device)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the runs (default: %(default)s)")
    args = parser.parse_args()
    todo = [m for m in fixtures() if not args.only or m["name"] in args.only]
    if args.only and len(todo) != len(args.only):
        known = ", ".join(m["name"] for m in fixtures())
        parser.error(f"unknown fixture name; known: {known}")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for name, seconds in pool.map(lambda m: generate(m, args.out, args.device), todo):
            print(f"{name:<28} {seconds:6.1f} s  {_size(args.out / name) / 1024:8.1f} KiB",
                  flush=True)
    total = _size(args.out)
    print(f"{len(todo)} runs on {args.device} in {time.perf_counter() - t0:.1f} s; {args.out} total "
          f"{total / 1024 / 1024:.2f} MiB (budget {SIZE_BUDGET / 1024 / 1024:.0f} MiB)")
    return 0 if total <= SIZE_BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: what ``RunWriter.log_step`` costs a training loop, against baselines in the same run.

CPU (always): a loop that logs 24 values a step to a JSONL run folder (``flush_every=50``,
timestamps on, ``close()`` inside the clock), with the values as

* ``floats``: 24 Python floats (the baseline);
* ``item``: 24 0-d float32 tensors read with ``.item()`` and logged as floats (the habit);
* ``tensors``: 24 0-d float32 tensors handed to the writer as they are;
* ``mixed``: 24 0-d tensors of mixed dtypes (16 float32, 4 float64, 2 int64, 1 bfloat16,
  1 bool), as a real step logs them (losses, ``advantage_stats``' float64 moments, token counts).

Every step logs distinct tensors, made off the clock 50 steps at a time just before they are
logged (a trainer logs values it has just computed, fresh in the caches), with the garbage
collector paused while the clock runs, as ``timeit`` does, and the allocator's tidying of the
values the benchmark itself freed done off the clock (glibc consolidates freed small blocks at
the next request of a kilobyte or more, whoever makes it). The clock is the
process's CPU time (``time.process_time``: the writer's cost is CPU work, and on a shared machine
wall time mostly measures the neighbours). Budget: ``tensors`` at most 2x ``floats``.

GPU (when ``torch.cuda.is_available()``): a training-like step of four 4096x4096 bf16 matmuls
(about 1 ms on an H100/H200) whose output yields 24 scalar tensors (one slice, unbound: one
kernel, the same in every variant), timed over ``--gpu-steps`` steps with one synchronisation at
the end, as

* ``none``: the step without logging (the baseline);
* ``item``: ``.item()`` on each of the 24 values, then ``log_step`` of the floats;
* ``writer``: ``log_step`` of the 24 tensors (16 float32, 4 float64, 2 int64, 2 bfloat16).

Budget: ``writer`` at most 3% over ``none``. Every variant is timed ``--repeat`` times, interleaved,
and the best is kept. No assertion is made: the script prints the figures and says which budget
is met. Usage: ``python bench/bench_writer.py [--steps N] [--repeat K] [--gpu-steps N]``.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.trainer.writer import RunWriter

N_VALUES = 24
NAMES = [f"metric_{i}" for i in range(N_VALUES)]
CPU_BUDGET = 2.0
GPU_BUDGET = 0.03
#: dtypes of the ``mixed`` CPU variant, in logging order
MIXED = ([torch.float32] * 16 + [torch.float64] * 4 + [torch.int64] * 2
         + [torch.bfloat16, torch.bool])
#: steps whose values are made at once, off the clock, just before they are logged
_CHUNK = 50


def _cpu_values(kind: str, steps: int, gen: torch.Generator) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for _ in range(steps):
        base = torch.rand(N_VALUES, generator=gen) * 10
        if kind == "floats":
            vals: list[object] = base.tolist()
        elif kind in ("tensors", "item"):
            # clone: independent 0-d tensors, not views of one storage
            vals = [v.clone() for v in base.unbind()]
        else:
            vals = [v.to(dt) for v, dt in zip(base.unbind(), MIXED, strict=True)]
        out.append(dict(zip(NAMES, vals, strict=True)))
    return out


def _time_cpu(kind: str, steps: int, folder: Path) -> float:
    """CPU seconds a step of logging ``kind`` values (the making of the values excluded)."""
    shutil.rmtree(folder, ignore_errors=True)
    gen = torch.Generator().manual_seed(0)
    spent = 0.0
    writer = RunWriter(folder, flush_every=50, register_atexit=False)
    for start in range(0, steps, _CHUNK):
        # a trainer logs values it has just computed: make the next few steps' values now,
        # off the clock, so that they are as fresh in the caches as a trainer's are
        chunk = []  # the previous steps' values are freed here, off the clock
        chunk = _cpu_values(kind, min(_CHUNK, steps - start), gen)
        # glibc's malloc tidies the small blocks freed above at the next request of 1 kB or
        # more, whoever makes it; make it here, so that the writer is not billed for it
        bytearray(1 << 12)
        gc.disable()  # as timeit does: collections are the trainer's business, not the writer's
        t0 = time.process_time()
        if kind == "item":
            for i, row in enumerate(chunk):
                writer.log_step(start + i, {k: v.item() for k, v in row.items()})  # type: ignore[attr-defined]
        else:
            for i, row in enumerate(chunk):
                writer.log_step(start + i, row)
        spent += time.process_time() - t0
        gc.enable()
    t0 = time.process_time()
    writer.close()
    spent += time.process_time() - t0
    return spent / steps


def bench_cpu(steps: int, repeat: int, tmp: Path) -> None:
    kinds = ["floats", "item", "tensors", "mixed"]
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeat):
        for kind in kinds:  # interleaved: machine noise hits every variant alike
            best[kind] = min(best[kind], _time_cpu(kind, steps, tmp / kind))
    base = best["floats"]
    print(f"CPU ({torch.get_num_threads()} threads, torch {torch.__version__}): "
          f"{N_VALUES} values a step, {steps} steps, best of {repeat}")
    for kind in kinds:
        print(f"  {kind:8s} {best[kind] * 1e6:8.1f} us/step   {best[kind] / base:5.2f}x floats")
    ratio = best["tensors"] / base
    verdict = "met" if ratio <= CPU_BUDGET else "NOT met"
    print(f"  budget: tensors <= {CPU_BUDGET:.1f}x floats: {ratio:.2f}x ({verdict}); "
          f"mixed dtypes {best['mixed'] / base:.2f}x")


def bench_gpu(steps: int, repeat: int, tmp: Path) -> None:
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    mats = [torch.randn(4096, 4096, device=device, dtype=torch.bfloat16, generator=gen) / 64
            for _ in range(4)]
    x0 = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16, generator=gen)

    def step() -> list[torch.Tensor]:
        y = x0
        for m in mats:
            y = y @ m
        # the step's 24 scalars in four dtypes: three small casts, then views (no kernel a value)
        row = y[0]
        return [*row[:16].float().unbind(), *row[16:20].double().unbind(),
                *row[20:22].long().unbind(), *row[22:24].unbind()]

    def run(kind: str) -> float:
        folder = tmp / f"gpu-{kind}"
        shutil.rmtree(folder, ignore_errors=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with RunWriter(folder, flush_every=50, register_atexit=False) as writer:
            for t in range(steps):
                vals = step()
                if kind == "item":
                    writer.log_step(t, {k: v.item() for k, v in zip(NAMES, vals, strict=True)})
                elif kind == "writer":
                    writer.log_step(t, dict(zip(NAMES, vals, strict=True)))
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps

    for _ in range(3):  # warm-up: cuBLAS heuristics, the caching allocators, pinned memory
        run("writer")
    kinds = ["none", "item", "writer"]
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeat):
        for kind in kinds:
            best[kind] = min(best[kind], run(kind))
    base = best["none"]
    name = torch.cuda.get_device_name(device)
    print(f"GPU ({name}, torch {torch.__version__}): four 4096x4096 bf16 matmuls a step, "
          f"{N_VALUES} values, {steps} steps, best of {repeat}")
    for kind in kinds:
        print(f"  {kind:8s} {best[kind] * 1e3:8.3f} ms/step   "
              f"{(best[kind] / base - 1) * 100:+6.1f}% over no logging")
    over = best["writer"] / base - 1
    verdict = "met" if over <= GPU_BUDGET else "NOT met"
    print(f"  budget: writer <= +{GPU_BUDGET * 100:.0f}%: {over * 100:+.1f}% ({verdict})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="CPU steps per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per variant (best kept)")
    parser.add_argument("--gpu-steps", type=int, default=500, help="GPU steps per timing")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the writer's work is tiny; one thread keeps the timings steady
    tmp = Path(tempfile.mkdtemp(prefix="bench-writer-"))
    try:
        bench_cpu(args.steps, args.repeat, tmp)
        if torch.cuda.is_available():
            bench_gpu(args.gpu_steps, args.repeat, tmp)
        else:
            print("GPU: torch.cuda.is_available() is false: GPU part skipped")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line of the reference trainer: ``python -m forensics.trainer.reference --help``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from .faults import FAULTS
from .trainer import TrainConfig, train


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, train, write the run folder; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m forensics.trainer.reference",
        description="Train a tiny PPO or GRPO policy on a toy task and record its event streams.")
    parser.add_argument("--algo", choices=("ppo", "grpo"), default="ppo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--fault", choices=sorted(FAULTS), default=None,
                        help="inject this fault (healthy run when omitted)")
    parser.add_argument("--onset", type=int, default=None,
                        help="step at which the fault switches on (default: the fault's own)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    parser.add_argument("--samples-per-step", type=int, default=TrainConfig.samples_per_step)
    parser.add_argument("--sft-steps", type=int, default=TrainConfig.sft_steps,
                        help="supervised warm-start steps before RL")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (1 makes CPU runs reproducible across machines)")
    parser.add_argument("--out", required=True, help="run folder to write")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    cfg = TrainConfig(algo=args.algo, seed=args.seed, steps=args.steps, device=args.device,
                      fault=args.fault, onset=args.onset, format=args.format,
                      samples_per_step=args.samples_per_step, sft_steps=args.sft_steps)
    t0 = time.perf_counter()
    out = train(cfg, args.out)
    print(f"wrote {out} ({cfg.steps} steps, {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

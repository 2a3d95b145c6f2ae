"""Logs shaped like the ones real trainers write, for the scenarios of real runs.

``trl_state`` writes a Hugging Face ``trainer_state.json`` (TRL's key names, one log_history row
per logged step); ``verl_console`` writes veRL's console lines (``step:N - key:value - ...``)
with the printed config before them. Values come from seeded noise around the levels the
scenario describes, so the same call gives the same file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Row = dict[str, float]


def series(n: int, seed: int, fn: Callable[[np.ndarray, np.random.Generator], dict[str, np.ndarray]]) -> list[Row]:
    """Rows 1..n from column arrays ``fn(steps, rng)`` returns."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    cols = fn(steps, rng)
    return [{"step": int(s), **{k: float(v[i]) for k, v in cols.items()}} for i, s in enumerate(steps)]


def trl_state(path: Path, rows: list[Row], logging_steps: int = 1) -> Path:
    """A TRL ``trainer_state.json`` holding ``rows`` as its log_history."""
    n = len(rows)
    history = [{**r, "epoch": round(r["step"] / max(n, 1), 4)} for r in rows]
    state = {"best_metric": None, "epoch": 1.0, "global_step": n, "log_history": history,
             "logging_steps": logging_steps, "max_steps": n, "num_train_epochs": 1,
             "train_batch_size": 8, "trial_name": None}
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def grpo_columns(kl: np.ndarray, rng: np.random.Generator, *, reward: np.ndarray | None = None,
                 beta: float = 0.04, length: float = 300.0, lr: float = 1e-6) -> dict[str, np.ndarray]:
    """TRL GRPO's metrics around a given per-token KL curve (the loss tracks beta x KL)."""
    n = len(kl)
    reward = reward if reward is not None else 0.3 + 0.3 * np.linspace(0, 1, n) + rng.normal(0, 0.05, n)
    return {
        "kl": kl,
        "loss": beta * kl + rng.normal(0, 0.002, n),
        "reward": reward,
        "reward_std": np.abs(0.4 + rng.normal(0, 0.03, n)),
        "rewards/accuracy_reward/mean": reward,
        "frac_reward_zero_std": np.clip(0.1 + rng.normal(0, 0.03, n), 0, 1),
        "completions/mean_length": length + rng.normal(0, 10, n),
        "completions/clipped_ratio": np.clip(np.abs(rng.normal(0.01, 0.005, n)), 0, 1),
        "grad_norm": 0.3 * np.exp(rng.normal(0, 0.2, n)),
        "learning_rate": np.full(n, lr),
        "entropy": 0.6 + rng.normal(0, 0.02, n),
        "num_tokens": np.cumsum(np.full(n, 8 * 400.0)),
        "clip_ratio/region_mean": np.zeros(n),
    }


def verl_console(path: Path, rows: list[dict[str, Any]], config: dict[str, Any]) -> Path:
    """A veRL console log: shell trace, the printed config, then one step line per row."""
    import pprint

    lines = ["++ python3 -m verl.trainer.main_ppo algorithm.adv_estimator="
             f"{config['algorithm']['adv_estimator']} trainer.total_epochs=1"]
    lines += ["(TaskRunner pid=1) " + ln for ln in pprint.pformat(config, width=100).splitlines()]
    for r in rows:
        parts = [f"step:{r['step']}"] + [f"{k}:{v!r}" for k, v in r.items() if k != "step"]
        lines.append("(TaskRunner pid=1) " + " - ".join(parts))
    path.write_text("\n".join(lines) + "\n")
    return path


def deepspeed_chat(path: Path, rows: list[dict[str, float]]) -> Path:
    """A DeepSpeed-Chat step-3 console log (2023 format), one block per step."""
    lines = ["[2023-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.9.2"]
    for r in rows:
        s = int(r["step"])
        lines += [f"[2023-05-01 10:01:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped=0, "
                  "lr=[5.79e-07, 5.79e-07], mom=[(0.9, 0.95)]",
                  f"epoch: 0|step: {s}|ppo_ep: 1|act_loss: {r['act_loss']}|cri_loss: {r['cri_loss']}|"
                  "unsuper_loss: 0.0",
                  f"average reward score: {r['reward']}",
                  "-" * 85,
                  "|E2E latency=3.8s |Gather latency=0.00s (0.00%) |Generate time=2.50s (65.92%) "
                  "|Training time=1.07s (28.19%) |Others=0.22 (5.89%)|CurSamplesPerSec=17.6 |AvgSamplesPerSec=15.46"]
    path.write_text("\n".join(lines) + "\n")
    return path

"""Seeded synthetic runs with known pathologies, for golden, invariance and tracker tests."""

from __future__ import annotations

import numpy as np

from .conftest import healthy_rows


def kl_spike(n: int = 300, at: int = 200, width: int = 4, seed: int = 1) -> list[dict]:
    rows = healthy_rows(n, seed)
    for r in rows[at : at + width]:
        r["kl"] *= 5.0
    return rows


def grad_explosion(n: int = 300, at: int = 180, seed: int = 2) -> list[dict]:
    rows = healthy_rows(n, seed)
    for i, r in enumerate(rows[at:]):
        r["grad_norm"] *= 30.0 * (1 + 0.05 * i)
    return rows


def nan_grads(n: int = 200, at: int = 150, seed: int = 3) -> list[dict]:
    rows = healthy_rows(n, seed)
    for r in rows[at : at + 3]:
        r["grad_norm"] = float("nan")
    return rows


def adv_bias(n: int = 300, at: int = 150, seed: int = 4) -> list[dict]:
    rows = healthy_rows(n, seed)
    for r in rows[at:]:
        r["advantage_mean"] += 0.6
    return rows


def truncation(n: int = 300, at: int = 150, seed: int = 5) -> list[dict]:
    rows = healthy_rows(n, seed)
    for i, r in enumerate(rows[at:]):
        r["truncation_rate"] = min(0.6, 0.01 + 0.01 * i)
    return rows


def ziegler(n: int = 300, target: float = 6.0, horizon: float = 10000, batch: float = 512,
            sign: float = 1.0, seed: int = 6) -> list[dict]:
    """KL driven around a target by an adaptive controller (sign -1: the controller is wrong)."""
    rng = np.random.default_rng(seed)
    beta, kl = 0.2, 4.0
    rows = []
    for step in range(n):
        # KL drifts up with the policy's pull and down with the penalty
        kl = max(0.1, kl + 0.08 - 0.3 * beta * (kl / target) + rng.normal(0, 0.05))
        rows.append({"step": step, "kl_seq": kl, "kl_coef": beta,
                     "grad_norm": float(np.exp(rng.normal(0, 0.1)))})
        err = float(np.clip(kl / target - 1, -0.2, 0.2))
        beta = beta * (1 + sign * err * batch / horizon)
    return rows


def length_hacking_samples(steps: int = 120, per_step: int = 16, at: int = 60,
                           seed: int = 7) -> list[dict]:
    """Per-response rows: after `at`, reward pays for length and responses grow."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        hacked = step >= at
        mean_len = 100 + (3.0 * (step - at) if hacked else 0)
        for i in range(per_step):
            length = max(5.0, rng.normal(mean_len, 20))
            quality = rng.normal(0.5, 0.2)
            reward = quality + (0.01 * (length - 100) if hacked else 0.0)
            out.append({"step": step, "length": round(length), "reward": reward,
                        "truncated": 0, "advantage": rng.normal(0, 1), "group": i // 4})
    return out

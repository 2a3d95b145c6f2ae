"""Shared fixtures: paths to the bundled logs and small run builders."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REAL = FIXTURES / "real-logs"
RLDK = REAL / "rldk_grpo_synthetic_seed2.jsonl"
VERL = REAL / "verl_v04_console_qwen2_7b_math_megatron.log"

# modules that need torch are not collected for doctests when torch is absent
collect_ignore: list[str] = []
if importlib.util.find_spec("torch") is None:
    collect_ignore += [str(ROOT / "forensics" / "trainer" / "reference"),
                       str(ROOT / "forensics" / "trainer" / "torch_helpers.py"),
                       str(ROOT / "forensics" / "torch_helpers.py")]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def healthy_rows(n: int = 400, seed: int = 0, **overrides: float) -> list[dict]:
    """A healthy GRPO-like run: noisy but stationary metrics, reward slowly improving."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(n):
        rows.append({
            "step": step,
            "kl": float(0.05 * np.exp(rng.normal(0, 0.1))),
            "kl_coef": 0.05,
            "grad_norm": float(0.8 * np.exp(rng.normal(0, 0.15))),
            "grad_norm_value": float(0.5 * np.exp(rng.normal(0, 0.15))),
            "advantage_mean": float(rng.normal(0, 0.01)),
            "advantage_std": float(1 + rng.normal(0, 0.02)),
            "reward_mean": float(0.2 + 0.4 * step / n + rng.normal(0, 0.03)),
            "response_length_mean": float(200 + rng.normal(0, 8)),
            "truncation_rate": float(abs(rng.normal(0.01, 0.005))),
            "entropy": float(1.5 - 0.3 * step / n + rng.normal(0, 0.02)),
            **overrides,
        })
    return rows


@pytest.fixture
def rldk() -> Path:
    return RLDK


@pytest.fixture
def verl() -> Path:
    return VERL

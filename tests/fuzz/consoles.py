"""The reader of last resort (``kv-console``, a custom loop's ``name: value`` console) against what
it must read and what it must refuse.

Families: custom consoles in the spellings loops print (``key: value`` with ``, `` or `` | ``
between pairs, ``key=value``, Python logging prefixes, a nested dict, an ``(i/N)`` progress
counter or a ``step``/``iteration`` pair or none, a preamble, noise lines, a log of a million
lines) read as ``kv-console`` (exit 0, every line of pairs a row or merged into one); prose,
source code, a JSON document that is not metrics and a config file refused (exit 3,
unrecognised content).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .case import Case

__all__ = ["generate"]

_KEYS = ["Reward", "KL_ref", "Adv Std", "Actor Loss", "Avg Response Len", "Learning Rate", "policy_loss",
         "kl_divergence", "mean_reward", "grad_norm", "entropy", "rl_loss", "l2_norm", "token_entropy"]


def _value(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(-2, 2):.4f}", f"{rng.uniform(0, 1):.2e}", str(rng.randint(0, 500)),
                       f"{rng.uniform(0, 1e-6):.7f}"])


def _console(rng: random.Random, lines: int) -> tuple[bytes, int]:
    keys = rng.sample(_KEYS, rng.randint(2, 7))
    sep = rng.choice([", ", " | ", "  ", "; "])
    eq = rng.choice([": ", "=", ":"])
    counter = rng.choice(["progress", "step", "iteration", "none"])
    prefix = rng.choice(["", "2025-09-23 09:01:00,984 - train - INFO - ", "[rank0]: "])
    out: list[str] = []
    if rng.random() < 0.5:
        out += ["Loading checkpoint shards: 100%", "starting training"]
    for i in range(1, lines + 1):
        pairs = [f"{k}{eq}{_value(rng)}" for k in keys]
        if counter == "progress":
            pairs.insert(0, f"Epoch:[1/1]({i}/{lines})")
        elif counter in ("step", "iteration"):
            pairs.insert(0, f"{counter}{eq}{i}")
        if rng.random() < 0.2:
            pairs.append("reward_data: {'total_num': 256, 'total_reward': 144.0}")
        out.append(prefix + sep.join(pairs))
        if rng.random() < 0.1:
            out.append("saving checkpoint to ./out")
    return ("\n".join(out) + "\n").encode(), lines


_REFUSED = {
    "prose": b"The quick brown fox jumps over the lazy dog.\nIt was the best of times: 1859.\n" * 40,
    "python": (b"import numpy as np\n\n\ndef f(a=1, b=2):\n    x = a + b\n    return x\n\n"
               b"class A:\n    lr = 3e-4\n    steps = 100\n" * 20),
    "json_document": b'{\n  "name": "pkg",\n  "version": "1.0.0",\n  "dependencies": {"a": "^1"}\n}\n',
    "ini_config": b"[train]\nlr = 3e-4\nbatch_size = 8\nepochs = 3\n[eval]\nevery = 100\n",
}


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` cases: custom consoles (read, exit 0) and files that are not logs (refused, exit 3)."""
    for i in range(n):
        if i % 3 == 2:
            name = list(_REFUSED)[(i // 3) % len(_REFUSED)]
            yield Case(f"consoles:{name}#{i}", {"x.log": _REFUSED[name]}, ("scan", "{dir}/x.log", "-q",
                       "-o", "{dir}/out"), expect_exit=3)
            continue
        lines = rng.choice([5, 60, 400]) if i % 50 else 1_000_000
        data, _ = _console(rng, lines)
        yield Case(f"consoles:console#{i}", {"train.log": data},
                   ("scan", "{dir}/train.log", "-q", "-o", "{dir}/out"), expect_exit=None,
                   expect_format="kv-console")

"""The output folder's ownership: a scan removes only what its report store made.

Families: an output folder holding the user's folders by names an older version's temporary
folders had (``.forensics-*``), folders in the store that a scan did not make (``r-notes``,
``keep``), the scan's own input inside one of them, a notes file beside the report; scanned into
once. Every file laid out must come through unchanged (the harness's ``written`` check).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from .case import Case

__all__ = ["generate"]

_NAMES = [".forensics-mine", ".forensics-cache", ".forensics-", ".forensics-tmp12345", ".forensics/r-notes",
          ".forensics/keep", ".forensics/r-abcdefgh1", "notes"]


def _log(rng: random.Random) -> bytes:
    n = rng.randint(20, 300)
    return "".join(json.dumps({"step": i, "kl": 0.01 + rng.random() * 1e-3, "reward_mean": i / n,
                               "loss": 1.0 / i}) + "\n" for i in range(1, n + 1)).encode()


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` scans into folders that hold the user's files among the scan's names."""
    for i in range(n):
        names = rng.sample(_NAMES, rng.randint(1, 4))
        files = {f"o/{name}/notes.txt": b"the user's notes\n" for name in names}
        where = rng.choice([*names, "."])
        log = "steps.jsonl" if where == "." else f"o/{where}/steps.jsonl"
        files[log] = _log(rng)
        if where.startswith(".forensics/"):  # an input in the store is refused
            yield Case(f"store:input-in-store#{i}", files, ("scan", "{dir}/" + log, "-o", "{dir}/o", "-q"),
                       expect_exit=2)
            continue
        yield Case(f"store:beside#{i}", files, ("scan", "{dir}/" + log, "-o", "{dir}/o", "-q"))

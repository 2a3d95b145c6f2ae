"""A seeded slice of the configuration fuzz cases (tests/fuzz/configs.py), run through the CLI.

Each case's files are laid out in a fresh folder and the command runs in-process (click's
CliRunner). A case passes when the exit code is one of the contract's (0-3) and the one it
expects where it expects one, an error names what was wrong ("Error: ..."), no internal error
or traceback reaches the output, and no input file changed. ``python -m tests.test_fuzz_configs
[N] [SEED]`` runs N cases (default: every systematic case) and prints the counts by outcome.
"""

from __future__ import annotations

import collections
import random
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main

from .fuzz.case import Case
from .fuzz.configs import DAMAGED, generate, systematic

#: Cases in the fast slice (``make test``); the full run is ``make fuzz``.
FAST_SLICE = 40
SEED = 20240611


def run_case(case: Case, folder: Path) -> tuple[str, str]:
    """``(outcome, detail)``: outcome ``exit N`` when the case passes, else what went wrong."""
    for name, data in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    res = CliRunner().invoke(main, argv, input=case.stdin, catch_exceptions=True)
    out = res.output
    changed = [n for n, data in case.files.items() if (folder / n).read_bytes() != data]
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return "crash", f"{type(res.exception).__name__}: {res.exception}"
    if "internal error" in out or "Traceback" in out:
        return "internal error", out.strip().splitlines()[-1][:300]
    if changed:
        return "input written", ", ".join(changed)
    if res.exit_code not in (0, 1, 2, 3):
        return f"bad exit {res.exit_code}", out[-300:]
    if case.expect_exit is not None and res.exit_code != case.expect_exit:
        return "wrong exit", f"exit {res.exit_code}, expected {case.expect_exit}: {out.strip()[-300:]}"
    if res.exit_code in (2, 3) and "Error:" not in out:
        return "no message", out[-300:]
    return f"exit {res.exit_code}", ""


def _slice() -> list[Case]:
    rng = random.Random(SEED)
    damaged = [c for c in systematic() if c.name.startswith("saved/") and c.expect_exit == 3][:6]
    return damaged + list(generate(rng, FAST_SLICE - len(damaged)))


@pytest.mark.parametrize("case", _slice(), ids=lambda c: c.name[:70])
def test_fuzz_case(case: Case, tmp_path: Path) -> None:
    outcome, detail = run_case(case, tmp_path)
    assert outcome.startswith("exit "), f"{case.name}: {outcome}: {detail}"


def test_the_generator_covers_every_family_and_is_deterministic() -> None:
    cases = systematic()
    families = collections.Counter(c.name.split("/")[0] for c in cases)
    assert set(families) == {"config", "run.json", "policy", "saved", "cli"}
    assert len(cases) > 3000 and len({c.name for c in cases}) == len(cases)
    assert sum(1 for c in cases if c.name.startswith("saved/") and c.expect_exit == 3) >= len(DAMAGED)
    a = [c.name for c in generate(random.Random(1), 50)]
    assert a == [c.name for c in generate(random.Random(1), 50)] and len(a) == 50
    more = list(generate(random.Random(1), len(cases) + 20))
    assert [c.name for c in more[-20:]] != [c.name for c in more[:20]]


def main_(argv: list[str]) -> int:
    """Run ``N`` cases (default all systematic ones) and print the counts by outcome."""
    n = int(argv[0]) if argv else len(systematic())
    rng = random.Random(int(argv[1]) if len(argv) > 1 else SEED)
    counts: collections.Counter[str] = collections.Counter()
    by_family: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failures = []
    start = time.time()
    for case in generate(rng, n):
        with tempfile.TemporaryDirectory() as d:
            outcome, detail = run_case(case, Path(d))
        counts[outcome] += 1
        by_family[case.name.split("/")[0]][outcome] += 1
        if not outcome.startswith("exit "):
            failures.append(f"{case.name}: {outcome}: {detail}")
    print(f"{n} cases in {time.time() - start:.0f} s")
    for family, c in sorted(by_family.items()):
        print(f"  {family:<9} " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())))
    print("total     " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    for f in failures[:50]:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main_(sys.argv[1:]))

"""``python -m tests.fuzz`` (``make fuzz``): run the fuzz suite and print counts by outcome.

Every module of this package with a ``generate(rng, n)`` function is a generator: it is called
with a seeded ``random.Random`` and its share of the cases (``--cases`` split evenly) and yields
:class:`~tests.fuzz.case.Case` objects. The cases run on worker processes
(:func:`tests.fuzz.harness.run_cases`); the failing ones are listed with what went wrong, and
``--save DIR`` keeps their files (and a ``case.json``) for replay. The exit status is 1 when any
case failed (internal error, crash, hang, written input, silent loss, wrong exit or format).

Options: ``--cases N`` (default 10,000 in all), ``--seed S``, ``--workers W``, ``--timeout T``
(seconds per case), ``--only NAME`` (a generator module), ``--save DIR``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .case import Case
from .harness import FAILURES, OUTCOMES, Result, run_cases


def generators(only: str | None = None) -> dict[str, Any]:
    """The generator modules of this package: ``{name: generate}``."""
    from . import __path__ as here

    found: dict[str, Any] = {}
    for info in sorted(pkgutil.iter_modules(here), key=lambda m: m.name):
        if info.name in ("__main__", "harness", "case") or (only and info.name != only):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        if callable(getattr(module, "generate", None)):
            found[info.name] = module.generate
    return found


def all_cases(total: int, seed: int, only: str | None = None) -> Iterator[tuple[str, Case]]:
    gens = generators(only)
    share = -(-total // max(len(gens), 1))
    for name, gen in gens.items():
        rng = random.Random(f"{seed}:{name}")
        for case in gen(rng, share):
            yield name, case


def _save(result: Result, folder: Path, index: int) -> None:
    d = folder / f"{index:05d}"
    d.mkdir(parents=True, exist_ok=True)
    for name, data in result.case.files.items():
        p = d / "files" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (d / "case.json").write_text(json.dumps({
        "name": result.case.name, "argv": list(result.case.argv), "outcome": result.outcome,
        "exit": result.exit_code, "detail": result.detail, "expect_exit": result.case.expect_exit,
        "expect_rows": result.case.expect_rows, "fifos": list(result.case.fifos)}, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only")
    ap.add_argument("--save", type=Path)
    args = ap.parse_args(argv)
    by_module: dict[str, Counter[str]] = {}
    module_of: dict[str, str] = {}
    failures: list[Result] = []

    def cases() -> Iterator[Case]:
        for name, case in all_cases(args.cases, args.seed, args.only):
            module_of[case.name] = name
            yield case

    t0 = time.monotonic()
    done = 0
    for result in run_cases(cases(), workers=args.workers, timeout=args.timeout):
        done += 1
        by_module.setdefault(module_of.get(result.case.name, "?"), Counter())[result.outcome] += 1
        if result.failed:
            failures.append(result)
            if args.save:
                _save(result, args.save, len(failures))
        if done % 500 == 0:
            print(f"... {done} cases, {len(failures)} failing, {time.monotonic() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    total: Counter[str] = Counter()
    for c in by_module.values():
        total.update(c)
    print(f"fuzz: {done} cases, seed {args.seed}, {time.monotonic() - t0:.0f} s")
    print(f"{'generator':<12}" + "".join(f"{o:>13}" for o in OUTCOMES))
    for name, c in sorted(by_module.items()):
        print(f"{name:<12}" + "".join(f"{c.get(o, 0):>13}" for o in OUTCOMES))
    print(f"{'all':<12}" + "".join(f"{total.get(o, 0):>13}" for o in OUTCOMES))
    print(f"failing: {sum(total.get(o, 0) for o in FAILURES)}")
    for r in failures[:200]:
        print(f"  {r.outcome:<12} {r.case.name}: {' '.join(r.case.argv)[:120]} -> {r.detail[:300]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

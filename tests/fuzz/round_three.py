"""Case families of the third hostile-input round (issue 41) not covered by ``store`` and
``webhooks``: small files that are devices, paths the system refuses, ``--strict`` on what is
not JSON, a policy naming a rule twice, a fleet with no readable run, a ``label: value`` listing.

Each states the one right exit code.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from .case import Case

__all__ = ["generate"]


def _log(rng: random.Random, n: int = 40) -> bytes:
    return "".join(json.dumps({"step": i, "kl": round(rng.uniform(0.001, 0.1), 5), "loss": 1.0 / i}) + "\n"
                   for i in range(1, n + 1)).encode()


def device(rng: random.Random) -> Case:
    """A device given as a config, run metadata, policy or saved analysis: refused unread (3)."""
    dev = rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"])
    argv = rng.choice([("scan", "{dir}/steps.jsonl", "-q", "-o", "{dir}/out", "--config", dev),
                       ("scan", "{dir}/steps.jsonl", "-q", "-o", "{dir}/out", "--meta", dev),
                       ("gate", "{dir}/steps.jsonl", "--policy", dev), ("report", dev)])
    # /dev/null is a device too: refused as one, never read as an empty file
    return Case("device", {"steps.jsonl": _log(rng)}, argv, expect_exit=3)


def long_name(rng: random.Random) -> Case:
    """A name longer than the file system holds, in any command: exit 3 naming it."""
    name = "{dir}/" + rng.choice("abcxyz") * rng.randint(256, 400)
    argv = rng.choice([("scan", name), ("gate", name), ("report", name), ("convert", name, "-o", "{dir}/x.csv"),
                       ("watch", name, "--once", "-q"), ("diff", name, name),
                       ("scan", "{dir}/steps.jsonl", "-q", "-o", "{dir}/out", "--config", name + ".toml")])
    return Case("long-name", {"steps.jsonl": _log(rng)}, argv, expect_exit=3)


def strict_not_json(rng: random.Random) -> Case:
    """A bare nan / inf or a lone surrogate under --strict: a malformed line, exit 3."""
    lines = _log(rng).decode().splitlines()
    k = rng.randrange(len(lines))
    bad = rng.choice(['{"step": %d, "kl": nan}', '{"step": %d, "kl": -inf}', '{"step": %d, "kl": "\\ud83d"}',
                      '{"step": %d, "note\\udc00": 1}'])
    lines[k] = bad % (k + 1)
    return Case("strict-not-json", {"steps.jsonl": ("\n".join(lines) + "\n").encode()},
                ("scan", "{dir}/steps.jsonl", "--strict", "-q", "-o", "{dir}/out"), expect_exit=3)


def policy_twice(rng: random.Random) -> Case:
    """A policy naming one rule by its old and its new id: exit 2."""
    a, b = rng.sample(["ignore", "warning", "critical", "info"], 2)
    pairs = [f'"lr.change" = "{a}"', f'"hyperparams.lr_change" = "{b}"']
    rng.shuffle(pairs)
    text = 'fail_on = "critical"\n[overrides]\n' + "\n".join(pairs) + "\n"
    return Case("policy-twice", {"steps.jsonl": _log(rng), "p.toml": text.encode()},
                ("gate", "{dir}/steps.jsonl", "--policy", "{dir}/p.toml"), expect_exit=2)


def fleet_none_readable(rng: random.Random) -> Case:
    """A fleet whose every run is unreadable: exit 3 (its table still written)."""
    unreadable = [b"not a log\n", b"\x00" * 64, b"[1, 2]\n" * 3]
    files = {f"runs/r{i}.jsonl": rng.choice(unreadable) for i in range(rng.randint(1, 3))}
    # a subprocess of its own (stdin=b""): a harness worker may not start the fleet's processes
    return Case("fleet-none", files, ("fleet", "{dir}/runs", "-o", "{dir}/out", "-q", "--workers", "1",
                                      "--input-format", "jsonl"), expect_exit=3, stdin=b"")


def listing(rng: random.Random) -> Case:
    """``label:<tab>value`` lines (a /proc status file): no table, exit 3."""
    keys = rng.sample(["Name", "Umask", "State", "Tgid", "Pid", "PPid", "VmPeak", "VmRSS", "Threads"], 6)
    text = "".join(f"{k}:\t{rng.randint(0, 10**6)}{rng.choice(['', ' kB'])}\n" for k in keys)
    return Case("listing", {"status": text.encode()}, ("scan", "{dir}/status", "-q", "-o", "{dir}/out"),
                expect_exit=3)


FAMILIES = (device, long_name, strict_not_json, policy_twice, fleet_none_readable, listing)


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` cases, the families in turn."""
    for i in range(n):
        case = FAMILIES[i % len(FAMILIES)](rng)
        yield Case(f"round_three:{case.name}#{i}", case.files, case.argv, case.expect_exit, stdin=case.stdin)

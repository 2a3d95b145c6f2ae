"""Case families of the second hostile-input round (issue 22): readers past their bounds, commands
whose outputs could touch their inputs, exit codes, and the fleet's discovery.

Each family states the one right exit code (``expect_exit``) and, for a scan, the rows the read
report must account for (``expect_rows``), so the harness fails a case that crashes, hangs,
writes an input, loses rows or exits otherwise.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Iterator

from .case import Case

__all__ = ["FAMILIES", "generate"]


def _rows(rng: random.Random, n: int) -> list[dict[str, object]]:
    return [{"step": i, "kl": round(rng.uniform(0.001, 0.1), 5), "reward_mean": round(rng.gauss(0, 1), 4),
             "loss": round(rng.uniform(0.1, 2.0), 4)} for i in range(1, n + 1)]


def _jsonl(rows: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _scan(name: str, files: dict[str, bytes], rows: int, log: str = "steps.jsonl", **kw: object) -> Case:
    return Case(name, files, ("scan", f"{{dir}}/{log}", "-o", "{dir}/out", "-q"), 0, rows, **kw)  # type: ignore[arg-type]


def blank_tail(rng: random.Random) -> Case:
    """Rows followed by tens of thousands of blank lines (an IndexError before)."""
    n = rng.randint(1, 5)
    return _scan("blank-tail", {"steps.jsonl": _jsonl(_rows(rng, n)) + b"\n" * rng.randint(70_000, 140_000)}, n)


def step_below_int64(rng: random.Random) -> Case:
    """A step beyond int64 (below -2**63 or above 2**63-1): a skipped row, never clamped."""
    rows = _rows(rng, rng.randint(20, 300))
    for _ in range(rng.randint(1, 3)):
        beyond = [-(2**63) - rng.randint(1, 10**6), 2**63 + rng.randint(0, 9), -(2**64) - 1]
        rows[rng.randrange(len(rows))]["step"] = rng.choice(beyond)
    return _scan("step-beyond-int64", {"steps.jsonl": _jsonl(rows)}, len(rows))


def bare_nan(rng: random.Random) -> Case:
    """Mostly bare nan / inf values, as Python prints them: read as JSONL, no row dropped."""
    rows = _rows(rng, rng.randint(20, 300))
    words = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "NAN"]
    text = "".join("{" + ", ".join(f'"{k}": {rng.choice(words) if k != "step" and rng.random() < 0.8 else v}'
                                   for k, v in r.items()) + "}\n" for r in rows)
    return Case("bare-nan", {"steps.jsonl": text.encode()}, ("scan", "{dir}/steps.jsonl", "-o", "{dir}/out", "-q"),
                0, len(rows), expect_format="jsonl")


def wide_row(rng: random.Random) -> Case:
    """A row past MAX_ROW_KEYS keys among ordinary rows: that row skipped with its reason."""
    from forensics.io.limits import MAX_ROW_KEYS

    rows = _rows(rng, rng.randint(5, 60))
    at = rng.randrange(len(rows))
    rows[at] = {**rows[at], **{f"k{i}": i for i in range(MAX_ROW_KEYS + rng.randint(1, 50))}}
    return _scan("wide-row", {"steps.jsonl": _jsonl(rows)}, len(rows))


def _wandb(records: list[bytes]) -> bytes:
    """A .wandb file: LevelDB-log framing of the records (FULL, or FIRST, MIDDLE..., LAST)."""
    from forensics.io.adapters.wandb_offline import BLOCK, CHUNK, FIRST, FULL, HEADER, LAST, MAGIC, MIDDLE

    out = bytearray(HEADER.pack(b":W&B", MAGIC, 0))
    for data in records:
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < CHUNK.size:
                out += b"\x00" * left
                continue
            part, data = data[: left - CHUNK.size], data[left - CHUNK.size :]
            kind = (FULL if not data else FIRST) if first else (LAST if not data else MIDDLE)
            out += CHUNK.pack(zlib.crc32(part, zlib.crc32(bytes([kind]))), len(part), kind) + part
            first = False
            if not data:
                break
    return bytes(out)


def _history(step: int, values: dict[str, str]) -> bytes:
    from wandb.proto import wandb_internal_pb2 as pb

    rec = pb.Record()
    for key, value_json in {"_step": str(step), **values}.items():
        item = rec.history.item.add()
        item.key, item.value_json = key, value_json
    return rec.SerializeToString()


_RUN = "wandb/offline-run-20250101_000000-fuzz"


def wandb_deep(rng: random.Random) -> Case:
    """A W&B history value nested thousands deep (a RecursionError before): a skipped record."""
    n = rng.randint(5, 200)
    depth = rng.randint(1_000, 5_000)
    deep = rng.randrange(n)
    records = [_history(i, {"train/loss": "[" * depth + "]" * depth if i == deep else f"{rng.random():.4f}"})
               for i in range(n)]
    return Case("wandb-deep", {f"{_RUN}/run-fuzz.wandb": _wandb(records)},
                ("scan", f"{{dir}}/{_RUN}", "-o", "{dir}/out", "-q"), 0, n)


def wandb_corrupt_chunk(rng: random.Random) -> Case:
    """One flipped byte in one record: that record is lost and counted, the rest are read."""
    from forensics.io.adapters.wandb_offline import CHUNK, HEADER

    n = rng.randint(300, 900)
    data = bytearray(_wandb([_history(i, {"train/loss": f"{rng.random():.6f}"}) for i in range(n)]))
    at = rng.randrange(HEADER.size + CHUNK.size, len(data))
    while data[at] == 0:  # a byte of a record, not block padding
        at = rng.randrange(HEADER.size + CHUNK.size, len(data))
    data[at] ^= 1 << rng.randrange(8)
    return Case("wandb-corrupt-chunk", {f"{_RUN}/run-fuzz.wandb": bytes(data)},
                ("scan", f"{{dir}}/{_RUN}", "-o", "{dir}/out", "-q"), None, None)


def output_is_input(rng: random.Random) -> Case:
    """An output path that is an input of the same command: refused (exit 2), the input intact."""
    files = {"a.jsonl": _jsonl(_rows(rng, 80)), "b.jsonl": _jsonl(_rows(rng, 60))}
    argv = rng.choice([("watch", "{dir}/a.jsonl", "--once", "-q", "--jsonl", "{dir}/a.jsonl"),
                       ("diff", "{dir}/a.jsonl", "{dir}/b.jsonl", "-q", "-o", "{dir}/a.jsonl"),
                       ("diff", "{dir}/a.jsonl", "{dir}/b.jsonl", "-q", "-o", "{dir}/b.jsonl"),
                       ("scan", "{dir}/a.jsonl", "-q", "-o", "{dir}/a.jsonl/x")])
    return Case("output-is-input", files, argv, 2)


def no_analysis(rng: random.Random) -> Case:
    """report / export of a folder without analysis.json: an absent input (exit 3)."""
    files = {"empty/notes.txt": b"nothing here\n"}
    argv = rng.choice([("report", "{dir}/empty"), ("export", "{dir}/empty", "--to", "tensorboard", "-o", "{dir}/tb")])
    return Case("no-analysis", files, argv, 3)


def device(rng: random.Random) -> Case:
    """An endless device: read up to --max-bytes, then exit 3."""
    return Case("device", {}, ("scan", "/dev/zero", "--max-bytes", str(rng.randint(1, 8) << 20), "-o", "{dir}/out"),
                3)


def fleet_unreadable(rng: random.Random) -> Case:
    """A fleet with a FIFO steps file and an unreadable log: rows with errors, the gate fails (1)."""
    files = {"runs/good/steps.jsonl": _jsonl(_rows(rng, 60)), "runs/piped/steps.jsonl": _jsonl(_rows(rng, 10)),
             "runs/broken.jsonl": bytes(rng.randrange(256) for _ in range(rng.randint(1, 400))) + b"\x00",
             "policy.toml": b'fail_on = "critical"\n'}
    argv = ("fleet", "{dir}/runs", "-o", "{dir}/f", "-q", "--no-html", "--workers", "1",
            "--policy", "{dir}/policy.toml")
    return Case("fleet-unreadable", files, argv, 1, stdin=b"", fifos=("runs/piped/steps.jsonl",))


def fleet_collision(rng: random.Random) -> Case:
    """A run named as the fleet's table: refused before any scan (exit 2)."""
    name = rng.choice(["fleet.csv", "fleet.json", "fleet.html"])
    files = {f"runs/{name}/steps.jsonl": _jsonl(_rows(rng, 30)), "runs/other/steps.jsonl": _jsonl(_rows(rng, 30))}
    return Case("fleet-collision", files, ("fleet", "{dir}/runs", "-o", "{dir}/f", "-q", "--no-html"), 2, stdin=b"")


#: (maker, weight): the fleet families start worker processes (so they run as a subprocess of their
#: own, ``stdin=b""``: a harness worker may not start processes) and are drawn less often.
def _csv_rows(rng: random.Random, n: int, step: Callable[[int], str] = str) -> list[str]:
    return [f"{step(i)},{rng.uniform(0.001, 0.1):.5f},{rng.gauss(0, 1):.4f}" for i in range(1, n + 1)]


def csv_odd(rng: random.Random) -> Case:
    """A valid CSV in one of the shapes refused or misread before (issue 22 items 4-5): a blank second
    line, a quoted newline or a Latin-1 name in the header, thousands of columns, names opening
    with ( [ ", repeated names, steps written as decimals or near 2**62: every row read, as csv."""
    n = rng.randint(5, 200)
    shape = rng.choice(["blank-second", "quoted-newline", "latin1", "wide", "odd-names", "repeated",
                        "decimal-steps", "huge-steps"])
    header, rows, encoding = "step,kl,reward_mean", _csv_rows(rng, n), "utf-8"
    if shape == "blank-second":
        header += "\n"
    elif shape == "quoted-newline":
        header = 'step,"kl",' + '"reward\nmean"'
    elif shape == "latin1":
        header, encoding = "step,kl,récompense", "latin-1"
    elif shape == "wide":
        extra = rng.randint(1000, 4000)
        header += "".join(f",c{j}" for j in range(extra))
        rows = [r + ",1" * extra for r in rows]
    elif shape == "odd-names":
        header = "step," + rng.choice(['"(kl)"', "[kl]", '"""kl"""']) + ",reward_mean"
    elif shape == "repeated":
        header = "step,kl,kl"
    elif shape == "decimal-steps":
        rows = _csv_rows(rng, n, lambda i: f"{i}.0")
    else:
        rows = _csv_rows(rng, n, lambda i: str(2**62 + i))
    text = header + "\n" + "\n".join(rows) + "\n"
    return Case("csv-odd", {"steps.csv": text.encode(encoding)},  # the shape shows in the saved file
                ("scan", "{dir}/steps.csv", "-o", "{dir}/out", "-q"), 0, n, expect_format="csv")


def csv_damaged(rng: random.Random) -> Case:
    """A CSV with an unterminated quote, a fractional step or a last line cut inside its last cell:
    the damage costs its own line (skipped with its reason) or cell, never the rows after it."""
    n = rng.randint(20, 300)
    rows = _csv_rows(rng, n)
    shape = rng.choice(["unterminated-quote", "fractional-step", "cut-last-cell"])
    text = "step,kl,reward_mean\n"
    if shape == "unterminated-quote":
        at = rng.randrange(n - 1)
        rows[at] = rows[at].replace(",", ',"', 1)
        text += "\n".join(rows) + "\n"
    elif shape == "fractional-step":
        at = rng.randrange(n)
        rows[at] = f"{at + 1}.5" + rows[at][rows[at].index(","):]
        text += "\n".join(rows) + "\n"
    else:
        text += "\n".join(rows)[:-1]  # no line end, the last cell cut
    return Case("csv-damaged", {"steps.csv": text.encode()}, ("scan", "{dir}/steps.csv", "-o", "{dir}/out", "-q"),
                0, n, expect_format="csv")


FAMILIES: list[tuple[Callable[[random.Random], Case], float]] = [
    (blank_tail, 1.0), (step_below_int64, 3.0), (bare_nan, 3.0), (wide_row, 1.0), (wandb_deep, 2.0),
    (wandb_corrupt_chunk, 3.0), (output_is_input, 3.0), (no_analysis, 2.0), (device, 1.0),
    (fleet_unreadable, 0.3), (fleet_collision, 1.0), (csv_odd, 3.0), (csv_damaged, 2.0)]


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` cases: every family once when ``n`` allows, the rest drawn by weight."""
    makers = [m for m, _ in FAMILIES]
    weights = [w for _, w in FAMILIES]
    for i in range(n):
        maker = makers[i] if i < len(makers) else rng.choices(makers, weights)[0]
        case = maker(rng)
        yield Case(f"{case.name}#{i}", case.files, case.argv, case.expect_exit, case.expect_rows, case.stdin,
                   case.fifos, case.expect_format)

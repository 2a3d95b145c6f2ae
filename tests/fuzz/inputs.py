"""Hostile inputs for every reader and adapter, from a seed corpus and its mutations.

Seeds: the bundled logs (``fixtures/formats/``: TRL/Unsloth ``trainer_state.json``, veRL console
and file logger, OpenRLHF, DeepSpeed-Chat, HF console, W&B chart export and history,
LLaMA-Factory, TensorBoard events; ``fixtures/golden/``: canonical JSONL), plus Parquet files,
Parquet parts, partitioned datasets and TensorBoard records built here.

Mutations: truncation, bit flips, inserted/deleted/duplicated byte ranges, invalid UTF-8, NUL
bytes, a BOM, a comment, a malformed or a long (> 64 KiB) first line, CRLF endings, gzip (whole
and cut short); in JSON rows: values replaced by hostile ones (``"nan"``, ``"oops"``, NaN
literals, 5,000-digit integers, ``1e400``, deep nesting, lists, objects, booleans, long
strings), steps replaced by odd ones (strings, floats, NaN, booleans, 2**53 + 1, 2**63, negative),
a canonical key that appears late beside its alias, a new key on every row; in console lines:
``tensor(x, device='cuda:0')`` values, steps of thousands of digits, ANSI noise; in Parquet:
decimal, numeric-string, dictionary, float16, unsigned and struct columns, int64 steps near the
limits; in TensorBoard records: lengths of 2**40 and 2**63 (with valid header checksums), short
summaries, varint-stored floats, tensor scalars of every dtype.

Every case runs one of ``scan`` (with odd ``--batch-rows`` now and then), ``convert`` and
``watch --once``, on a file, a FIFO or standard input. ``expect_rows`` is set where the rows of
the input are known (canonical JSONL: one row per non-blank line; Parquet: its rows).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from forensics.io.adapters.tensorboard import _pb_varint

from .case import Case

__all__ = ["generate"]

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "fixtures" / "formats"
GOLDEN = ROOT / "fixtures" / "golden"

#: (file name, format) of the line- and document-oriented seeds
TEXT_SEEDS = [
    ("trl_grpo_trainer_state.json", "hf-trainer-state"),
    ("trl_ppo_trainer_state.json", "hf-trainer-state"),
    ("trl_dpo_trainer_state.json", "hf-trainer-state"),
    ("verl_v05_console.log", "verl-console"),
    ("verl_file_logger.jsonl", "verl-jsonl"),
    ("openrlhf_console.log", "openrlhf-console"),
    ("deepspeed_chat_step3.log", "deepspeed-chat"),
    ("hf_console.log", "hf-console"),
    ("wandb_chart_export.csv", "wandb-csv"),
    ("wandb_history.csv", "wandb-history"),
    ("llamafactory_trainer_log.jsonl", "llamafactory"),
]


def _read(path: Path) -> bytes:
    return path.read_bytes()


_CACHE: dict[str, bytes] = {}


def _seed(name: str) -> bytes:
    if name not in _CACHE:
        _CACHE[name] = _read(FORMATS / name)
    return _CACHE[name]


def _golden(rng: random.Random, rows: int | None = None) -> tuple[str, list[bytes]]:
    files = sorted(GOLDEN.glob("*.jsonl"))
    f = rng.choice(files)
    key = "golden/" + f.name
    if key not in _CACHE:
        _CACHE[key] = f.read_bytes()
    lines = _CACHE[key].splitlines()
    if rows is not None:
        lines = lines[:rows]
    return f.stem, lines


# --- hostile values --------------------------------------------------------------------------------
def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _hostile_value(rng: random.Random) -> str:
    """A JSON value text that a numeric column should survive."""
    return rng.choice([
        '"nan"', '"NaN"', '"inf"', '"-inf"', '"oops"', '"1e-3"', '" 0.5 "', '""', "NaN", "Infinity", "-Infinity",
        "null", "true", "false", "[1, 2, 3]", '{"x": 1}', "1e400", "-1e400", "9" * 5000, "-" + "9" * 4400,
        "1" * 30, "18446744073709551616", "9007199254740993", '"' + "x" * 70000 + '"',
        "\"tensor(0.5, device='cuda:0')\"", '"np.float64(0.25)"', "0.1" + "0" * 400 + "1",
        _deep(rng.choice([5, 100, 300, 2000])), '"\\ud800"', '"caf\\u00e9"', '"a\\u0000b"',
    ])


def _hostile_step(rng: random.Random, step: int) -> str:
    return rng.choice([
        '"oops"', f'"{step}"', f"{step}.5", f"{step}.0", "NaN", "Infinity", "true", "false", "null", "[1]",
        '{"s": 1}', str(2**53 + 1), str(2**63), str(2**63 - 1), str(-(2**63)), str(-(2**63) - 1),
        "1e20", "-5", "9" * 5000, '"1e3"', '""', f"{step}e0",
    ])


_VALUE_KEY = b'"reward_mean": '


def _replace_value(line: bytes, key: bytes, new: str) -> bytes:
    i = line.find(key)
    if i < 0:
        return line
    j = i + len(key)
    end = j
    depth = 0
    while end < len(line):  # the end of a flat value: the next comma or brace at depth 0
        c = line[end:end + 1]
        if c in (b"{", b"["):
            depth += 1
        elif c in (b"}", b"]"):
            if depth == 0:
                break
            depth -= 1
        elif c == b"," and depth == 0:
            break
        end += 1
    return line[:j] + new.encode("utf-8", "surrogatepass") + line[end:]


# --- byte mutations ------------------------------------------------------------------------------
def _flip(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    kind = rng.choice(["truncate", "flip", "insert", "delete", "duplicate", "utf8", "nul", "bom", "crlf",
                       "garbage-tail", "zero-block"])
    n = len(data)
    if kind == "truncate":
        return data[: rng.randrange(n + 1)], kind
    if kind == "flip":
        return _flip(data, rng), kind
    if kind == "insert":
        i = rng.randrange(n + 1)
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[i:], kind
    if kind == "delete":
        i = rng.randrange(n + 1)
        return data[:i] + data[i + rng.randint(1, 200):], kind
    if kind == "duplicate":
        i = rng.randrange(n + 1)
        return data[:i] + data[i:i + rng.randint(1, 2000)] + data[i:], kind
    if kind == "utf8":
        i = rng.randrange(n + 1)
        return data[:i] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf0\x9f"]) + data[i:], kind
    if kind == "nul":
        i = rng.randrange(n + 1)
        return data[:i] + b"\x00" * rng.randint(1, 10) + data[i:], kind
    if kind == "bom":
        return b"\xef\xbb\xbf" + data, kind
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n"), kind
    if kind == "garbage-tail":
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))), kind
    i = rng.randrange(n + 1)
    return data[:i] + b"\x00" * rng.randint(100, 5000) + data[i + rng.randint(0, 100):], kind


# --- commands ------------------------------------------------------------------------------------
def _command(rng: random.Random, target: str) -> tuple[str, ...]:
    r = rng.random()
    if r < 0.25:
        extra: tuple[str, ...] = ()
        if rng.random() < 0.3:
            extra = ("--batch-rows", str(rng.choice([1, 3, 7, 64, 1000])))
        if rng.random() < 0.1:
            extra += ("--strict",)
        return ("scan", target, "-o", "{dir}/out", "-q", *extra)
    if r < 0.75:
        return ("convert", target, "-o", "{dir}/out.parquet", "-q")
    return ("watch", target, "--once")


def _gunzip_all(data: bytes) -> bytes:
    out = b""
    while data:
        d = zlib.decompressobj(31)
        try:
            out += d.decompress(data)
        except zlib.error:
            break
        if not d.eof:
            break
        data = d.unused_data
    return out


def _jsonl_rows(data: bytes) -> int:
    """Rows a canonical JSONL input holds: its non-blank lines (after a gzip and a BOM)."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip_all(data)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return sum(1 for line in data.split(b"\n") if line.strip())


# --- JSONL families ------------------------------------------------------------------------------
def _jsonl_case(rng: random.Random, name: str, lines: list[bytes], *, fmt: str | None = None,
                gz: bool = False, expect_exit: int | None = None, expect_format: str | None = None) -> Case:
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.9 else b"")
    if gz:
        data = gzip.compress(data, mtime=0)
    fname = "steps.jsonl.gz" if gz else rng.choice(["steps.jsonl", "log.jsonl", "data.txt"])
    argv = _command(rng, "{dir}/" + fname)
    if fmt is not None and argv[0] in ("scan", "convert") and rng.random() < 0.3:
        argv = (*argv, "--format", fmt)
    expect_rows = _jsonl_rows(data) if argv[0] != "watch" else None
    return Case(name, {fname: data}, argv, expect_exit=expect_exit, expect_rows=expect_rows,
                expect_format=expect_format)


def jsonl_values(rng: random.Random) -> Case:
    stem, lines = _golden(rng, rng.choice([20, 60, 300]))
    lines = list(lines)
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(len(lines))
        key = rng.choice([_VALUE_KEY, b'"kl": ', b'"grad_norm": ', b'"entropy": '])
        lines[i] = _replace_value(lines[i], key, _hostile_value(rng))
    return _jsonl_case(rng, f"jsonl/values/{stem}", lines)


def jsonl_steps(rng: random.Random) -> Case:
    stem, lines = _golden(rng, rng.choice([20, 100]))
    lines = list(lines)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        lines[i] = _replace_value(lines[i], b'"step": ', _hostile_step(rng, i))
    return _jsonl_case(rng, f"jsonl/steps/{stem}", lines)


def jsonl_big_steps(rng: random.Random) -> Case:
    """Steps at the int64 and float64 limits: distinct steps must stay distinct."""
    base = rng.choice([2**53 - 3, 2**62, 2**63 - 10, -(2**63)])
    rows = [json.dumps({"step": base + i, "kl": 0.1 + i / 100, "reward_mean": 0.5}).encode() for i in range(6)]
    return _jsonl_case(rng, "jsonl/big-steps", rows, expect_exit=0)


def jsonl_head(rng: random.Random) -> Case:
    """What only detection on a buffered head gets right: a BOM, a comment, a malformed, blank or
    long (> 64 KiB) first line: read as JSONL, the odd line reported."""
    stem, lines = _golden(rng, 50)
    lines = list(lines)
    kind = rng.choice(["bom", "comment", "malformed", "long", "blank", "long-string"])
    if kind == "bom":
        lines[0] = b"\xef\xbb\xbf" + lines[0]
    elif kind == "comment":
        lines.insert(0, b"# written by my trainer")
    elif kind == "malformed":
        lines.insert(0, b'{"step": 0, "kl": ')
    elif kind == "blank":
        lines[0:0] = [b"", b"   "]
    elif kind == "long":
        lines[0] = lines[0][:-1] + b', "blob": "' + b"x" * rng.choice([70_000, 300_000]) + b'"}'
    else:
        lines.insert(0, b'{"note": "' + b"y" * 100_000 + b'"}')
    case = _jsonl_case(rng, f"jsonl/head-{kind}/{stem}", lines, expect_exit=0, expect_format="jsonl")
    # a malformed line, and a row with no step, are fatal there
    if "--strict" in case.argv and kind in ("comment", "malformed", "long-string"):
        case = Case(case.name, case.files, case.argv, 3, None)
    return case


def jsonl_late_key(rng: random.Random) -> Case:
    """``grad_norm`` from row k on, beside the aliased ``grad_norm_policy``: one source per
    canonical name, no column overwritten."""
    n = rng.choice([50, 300, 2000])
    k = rng.randrange(1, n)
    rows = []
    for i in range(n):
        row: dict[str, object] = {"step": i, "grad_norm_policy": 1.0 + (i % 7) / 10, "kl": 0.05}
        if i >= k:
            row["grad_norm"] = 50.0
        rows.append(json.dumps(row).encode())
    return _jsonl_case(rng, "jsonl/late-canonical-key", rows, expect_exit=0)


def jsonl_new_keys(rng: random.Random) -> Case:
    n = rng.choice([100, 1000, 3000])
    rows = [json.dumps({"step": i, "kl": 0.05, f"k{i}": 1.0}).encode() for i in range(n)]
    return _jsonl_case(rng, "jsonl/new-key-per-row", rows, expect_exit=0)


def jsonl_bytes(rng: random.Random) -> Case:
    stem, lines = _golden(rng, rng.choice([30, 300]))
    data, kind = _mutate_bytes(b"\n".join(lines) + b"\n", rng)
    fname = "steps.jsonl"
    argv = _command(rng, "{dir}/" + fname)
    rows = _jsonl_rows(data) if argv[0] != "watch" and data.lstrip()[:1] == b"{" else None
    return Case(f"jsonl/bytes-{kind}/{stem}", {fname: data}, argv, expect_rows=rows)


def jsonl_gzip(rng: random.Random) -> Case:
    stem, lines = _golden(rng, rng.choice([50, 300]))
    data = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
    kind = rng.choice(["whole", "cut", "flip", "two-members", "not-gzip", "no-suffix"])
    name = "steps.jsonl.gz"
    if kind == "cut":
        data = data[: rng.randrange(10, len(data))]
    elif kind == "flip":
        data = data[:10] + _flip(data[10:], rng)
    elif kind == "two-members":
        data = data + gzip.compress(b"\n".join(lines[:5]) + b"\n", mtime=0)
    elif kind == "not-gzip":
        data = b"\n".join(lines)
    elif kind == "no-suffix":
        name = "steps.jsonl"
    argv = _command(rng, "{dir}/" + name)
    rows = _jsonl_rows(data) if argv[0] != "watch" and kind in ("whole", "cut", "two-members", "no-suffix") else None
    return Case(f"jsonl/gzip-{kind}/{stem}", {name: data}, argv, expect_rows=rows)


def jsonl_stream(rng: random.Random) -> Case:
    """A pipe, a FIFO or stdin: read once, to the end, nothing lost to detection."""
    stem, lines = _golden(rng, rng.choice([10, 300]))
    data = b"\n".join(lines) + b"\n"
    if rng.random() < 0.3:
        data = gzip.compress(data, mtime=0)
    rows = _jsonl_rows(data)
    kind = rng.choice(["fifo", "fifo", "fifo", "stdin"])
    if kind == "stdin":
        cmd = rng.choice(["scan", "convert", "watch"])
        argv = {"scan": ("scan", "-", "-o", "{dir}/out", "-q"), "convert": ("convert", "-", "-o", "{dir}/out.parquet"),
                "watch": ("watch", "-", "--once", "--timeout", "20")}[cmd]
        return Case(f"stream/stdin-{cmd}/{stem}", {}, argv, expect_exit=0,
                    expect_rows=None if cmd == "watch" else rows, stdin=data)
    cmd = rng.choice(["scan", "convert", "watch"])
    argv = {"scan": ("scan", "{dir}/pipe", "-o", "{dir}/out", "-q"),
            "convert": ("convert", "{dir}/pipe", "-o", "{dir}/out.parquet"),
            "watch": ("watch", "{dir}/pipe", "--once", "--timeout", "20")}[cmd]
    return Case(f"stream/fifo-{cmd}/{stem}", {"pipe": data}, argv, expect_exit=0,
                expect_rows=None if cmd == "watch" else rows, fifos=("pipe",))


def watch_options(rng: random.Random) -> Case:
    """Numbers ``watch`` must refuse (usage error), and inputs it must not accept as a success."""
    _, lines = _golden(rng, 30)
    data = b"\n".join(lines) + b"\n"
    kind = rng.choice(["interval-nan", "timeout-nan", "timeout-inf", "interval-inf", "missing", "empty", "garbage",
                       "wrong-format", "empty-folder"])
    files = {"steps.jsonl": data}
    if kind == "interval-nan":
        return Case("watch/interval-nan", files, ("watch", "{dir}/steps.jsonl", "--interval", "nan", "--timeout", "1"),
                    expect_exit=2)
    if kind == "interval-inf":
        return Case("watch/interval-inf", files, ("watch", "{dir}/steps.jsonl", "--interval", "inf", "--timeout", "1"),
                    expect_exit=2)
    if kind == "timeout-nan":
        return Case("watch/timeout-nan", files, ("watch", "{dir}/steps.jsonl", "--timeout", "nan"), expect_exit=2)
    if kind == "timeout-inf":
        return Case("watch/timeout-inf", files, ("watch", "{dir}/steps.jsonl", "--timeout", "inf"), expect_exit=2)
    if kind == "missing":
        return Case("watch/missing", files, ("watch", "{dir}/nope.jsonl", "--once"), expect_exit=3)
    if kind == "empty":
        return Case("watch/empty", {"e.jsonl": b""}, ("watch", "{dir}/e.jsonl", "--once"), expect_exit=3)
    if kind == "garbage":
        return Case("watch/garbage", {"g.bin": bytes(rng.randrange(256) for _ in range(2000))},
                    ("watch", "{dir}/g.bin", "--once"), expect_exit=3)
    if kind == "empty-folder":
        return Case("watch/empty-folder", {"d/.keep": b""}, ("watch", "{dir}/d", "--once"), expect_exit=3)
    return Case("watch/wrong-format", files, ("watch", "{dir}/steps.jsonl", "--once", "--format", "verl-console"),
                expect_exit=3)


# --- adapters ------------------------------------------------------------------------------------
_CONSOLE_JUNK = [
    "actor/entropy:tensor(0.5, device='cuda:0')", "actor/kl_loss:tensor(nan, device='cuda:0')",
    "critic/score/mean:np.float64(nan)", "actor/lr:1e-06", "response_length/mean:inf", "actor/pg_loss:oops",
    "timing_s/gen:" + "9" * 5000, "actor/grad_norm:-1e400",
]


def _mutate_console(data: bytes, rng: random.Random, fmt: str) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    kind = rng.choice(["values", "step-digits", "ansi", "long-line", "bytes"])
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        line = lines[i]
        if kind == "values" and fmt == "verl-console" and b"step:" in line:
            lines[i] = line + b" - " + rng.choice(_CONSOLE_JUNK).encode()
        elif kind == "values" and fmt in ("openrlhf-console", "hf-console") and b"{" in line:
            lines[i] = line.replace(b"{", b"{'kl': " + rng.choice([b"nan", b"tensor(0.5, device='cuda:0')",
                                                                   b"'oops'", b"9" * 5000, b"[1, 2]"]) + b", ", 1)
        elif kind == "step-digits":
            lines[i] = (line.replace(b"step:", b"step:" + b"9" * rng.choice([19, 20, 5000]), 1)
                        .replace(b"Global step ", b"Global step " + b"9" * rng.choice([19, 5000]), 1)
                        .replace(b"step: ", b"step: " + b"9" * rng.choice([19, 5000]), 1))
        elif kind == "ansi":
            lines[i] = b"\x1b[31m" + line + b"\x1b[0m\r" + line[: len(line) // 2]
        elif kind == "long-line":
            lines[i] = line + b"x" * 70_000
    data = b"\n".join(lines)
    if kind == "bytes":
        data, sub = _mutate_bytes(data, rng)
        kind = f"bytes-{sub}"
    return data, kind


def _mutate_json_doc(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """trainer_state.json / JSON-lines adapters: values and steps replaced inside the text."""
    kind = rng.choice(["value", "step", "bytes", "deep"])
    text = data
    if kind == "value":
        for _ in range(rng.randint(1, 4)):
            key = rng.choice([b'"loss": ', b'"kl": ', b'"reward": ', b'"grad_norm": ', b'"lr": '])
            positions = [i for i in range(len(text)) if text.startswith(key, i)][:200]
            if positions:
                i = rng.choice(positions)
                text = text[:i] + _replace_value(text[i:], key, _hostile_value(rng))
    elif kind == "step":
        for key in (b'"step": ', b'"current_steps": ', b'"_step": '):
            positions = [i for i in range(len(text)) if text.startswith(key, i)][:200]
            if positions:
                i = rng.choice(positions)
                text = text[:i] + _replace_value(text[i:], key, _hostile_step(rng, 3))
    elif kind == "deep":
        i = text.find(b'"loss": ')
        if i >= 0:
            text = text[:i] + _replace_value(text[i:], b'"loss": ', _deep(rng.choice([500, 2000, 20000])))
    else:
        text, sub = _mutate_bytes(text, rng)
        kind = f"bytes-{sub}"
    return text, kind


def _mutate_csv(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    kind = rng.choice(["step", "cell", "ragged", "quote", "bytes", "huge-field"])
    i = rng.randrange(1, max(len(lines) - 1, 2))
    if i < len(lines) and lines[i]:
        cells = lines[i].split(b",")
        if kind == "step":
            cells[0] = rng.choice([b"nan", b"inf", b"-inf", b"oops", b"2.5", b"1e30", b"9" * 5000, b"", b"true"])
        elif kind == "cell" and len(cells) > 1:
            cells[rng.randrange(1, len(cells))] = rng.choice([b"nan", b"oops", b"1e400", b"9" * 5000, b'"{""a"": 1}"'])
        elif kind == "ragged":
            cells = cells[: rng.randrange(len(cells))] or [b""]
        elif kind == "quote":
            cells[0] = b'"' + cells[0]
        elif kind == "huge-field":
            cells[-1] = b'"' + b"z" * 200_000 + b'"'
        lines[i] = b",".join(cells)
    data = b"\n".join(lines)
    if kind == "bytes":
        data, sub = _mutate_bytes(data, rng)
        kind = f"bytes-{sub}"
    return data, kind


def adapters(rng: random.Random) -> Case:
    name, fmt = rng.choice(TEXT_SEEDS)
    data = _seed(name)
    if fmt in ("verl-console", "openrlhf-console", "deepspeed-chat", "hf-console"):
        data, kind = _mutate_console(data, rng, fmt)
    elif fmt in ("wandb-csv", "wandb-history"):
        data, kind = _mutate_csv(data, rng)
    else:
        data, kind = _mutate_json_doc(data, rng)
    if rng.random() < 0.1:
        data, kind = gzip.compress(data, mtime=0), kind + "+gz"
        name += ".gz"
    argv = _command(rng, "{dir}/" + name)
    if rng.random() < 0.2 and argv[0] != "watch":
        argv = (*argv, "--format", fmt)
    return Case(f"adapter/{fmt}/{kind}", {name: data}, argv)


def adapters_clean(rng: random.Random) -> Case:
    """The seeds as they are, on every command and a FIFO now and then: must read (exit 0)."""
    name, fmt = rng.choice(TEXT_SEEDS)
    data = _seed(name)
    if rng.random() < 0.3 and fmt not in ("hf-trainer-state", "wandb-csv", "wandb-history"):
        argv = ("watch", "{dir}/pipe", "--once", "--timeout", "20")
        return Case(f"adapter-clean/{fmt}/fifo", {"pipe": data}, argv, expect_exit=0, fifos=("pipe",))
    argv = tuple(a for a in _command(rng, "{dir}/" + name) if a != "--strict")  # some seeds hold a bad line
    return Case(f"adapter-clean/{fmt}", {name: data}, argv, expect_exit=0, expect_format=fmt)


# --- Parquet ---------------------------------------------------------------------------------------
def _parquet_bytes(table: object) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)  # type: ignore[arg-type]
    return buf.getvalue()


def _odd_table(rng: random.Random, n: int) -> tuple[object, str]:
    import decimal

    import pyarrow as pa

    steps = list(range(n))
    kind = rng.choice(["decimal", "string-numbers", "dictionary", "float16", "uint64", "struct", "bool-step",
                       "big-steps", "string-step", "float-step", "nulls", "list", "all-null", "timestamp"])
    cols: dict[str, object] = {"kl": pa.array([0.05 + (i % 5) / 100 for i in range(n)])}
    step_arr: object = pa.array(steps, pa.int64())
    if kind == "decimal":
        cols["reward_mean"] = pa.array([decimal.Decimal(f"{i % 9}.125") for i in range(n)], pa.decimal128(12, 3))
    elif kind == "string-numbers":
        cols["reward_mean"] = pa.array([rng.choice(["0.5", "nan", "1e-3", "oops", None, " 2 "]) for _ in range(n)])
        cols["custom"] = pa.array([str(i) for i in range(n)])
    elif kind == "dictionary":
        cols["grad_norm"] = pa.array([float(i % 3) for i in range(n)]).dictionary_encode()
        cols["tag"] = pa.array(["a", "b"] * (n // 2) + ["a"] * (n % 2)).dictionary_encode()
    elif kind == "float16":
        import numpy as np

        cols["entropy"] = pa.array(np.array([1.5] * n, dtype=np.float16))
    elif kind == "uint64":
        cols["tokens"] = pa.array([2**64 - 1 - i for i in range(n)], pa.uint64())
    elif kind == "struct":
        cols["nested"] = pa.array([{"a": i, "b": None} for i in range(n)])
    elif kind == "bool-step":
        step_arr = pa.array([i % 2 == 0 for i in range(n)])
    elif kind == "big-steps":
        base = rng.choice([2**53, 2**63 - n - 1, -(2**63)])
        step_arr = pa.array([base + i for i in range(n)], pa.int64())
    elif kind == "string-step":
        step_arr = pa.array([rng.choice([str(i), "oops", "", None, f"{i}.0"]) for i in range(n)])
    elif kind == "float-step":
        step_arr = pa.array([rng.choice([float(i), float("nan"), float("inf"), i + 0.5, 1e30]) for i in range(n)])
    elif kind == "nulls":
        step_arr = pa.array([None if i % 7 == 3 else i for i in range(n)], pa.int64())
    elif kind == "list":
        cols["hist"] = pa.array([[1.0, 2.0]] * n)
    elif kind == "all-null":
        cols["empty"] = pa.nulls(n)
    else:
        cols["ts"] = pa.array([i * 1_000_000 for i in range(n)], pa.timestamp("us"))
    return pa.table({"step": step_arr, **cols}), kind


def parquet_files(rng: random.Random) -> Case:
    n = rng.choice([1, 10, 200])
    table, kind = _odd_table(rng, n)
    data = _parquet_bytes(table)
    mutate = rng.random() < 0.25
    if mutate:
        data, sub = _mutate_bytes(data, rng)
        kind += f"+{sub}"
    argv = _command(rng, "{dir}/steps.parquet")
    return Case(f"parquet/{kind}", {"steps.parquet": data}, argv,
                expect_rows=None if mutate or argv[0] == "watch" else n)


def parquet_folders(rng: random.Random) -> Case:
    """Parts a killed writer left, and partitioned datasets (hive ``key=value`` folders)."""
    import pyarrow as pa

    layout = rng.choice(["parts", "hive", "nested", "mixed-schema", "bookkeeping"])
    files: dict[str, bytes] = {}
    total = 0
    step = 0
    for k in range(rng.randint(1, 12)):
        n = rng.choice([1, 5, 50])
        cols: dict[str, object] = {"step": pa.array(range(step, step + n), pa.int64()),
                                   "kl": pa.array([0.05] * n)}
        if layout == "mixed-schema" and k % 2:
            cols["reward_mean"] = pa.array(["0.5"] * n)
        data = _parquet_bytes(pa.table(cols))
        if layout == "parts":
            files[f"steps.parquet.parts/part-{k:06d}.parquet"] = data
        elif layout == "hive":
            files[f"steps/epoch={k}/part-0.parquet"] = data
        elif layout == "nested":
            files[f"steps/{k // 3}/{k}.parquet"] = data
        else:
            files[f"steps/part-{k}.parquet"] = data
        step += n
        total += n
    if layout == "bookkeeping":
        files["steps/_SUCCESS"] = b""
        files["steps/_metadata"] = b"junk"
        files["steps/.part-0.parquet.crc"] = b"crc"
    target = "{dir}/steps.parquet.parts" if layout == "parts" else "{dir}/steps"
    argv = _command(rng, target)
    if argv[0] == "watch":
        argv = ("scan", target, "-o", "{dir}/out", "-q")
    return Case(f"parquet-folder/{layout}", files, argv, expect_exit=0, expect_rows=total)


# --- TensorBoard -----------------------------------------------------------------------------------
def _pb(field: int, wt: int, payload: bytes | int) -> bytes:
    key = _pb_varint((field << 3) | wt)
    if wt == 0:
        return key + _pb_varint(int(payload))
    if wt == 2:
        assert isinstance(payload, bytes)
        return key + _pb_varint(len(payload)) + payload
    assert isinstance(payload, bytes)
    return key + payload


def _tensor_value(rng: random.Random) -> bytes:
    """A hand-built TensorProto scalar of a random dtype (TensorFlow's tensor.proto)."""
    kind = rng.choice(["half", "half-packed", "bf16", "int32-neg", "int64", "uint64", "bool", "double", "float",
                       "content-half", "content-int8", "string", "varint-float", "short", "vector"])
    if kind == "half":
        return _pb(1, 0, 19) + _pb(13, 0, struct.unpack("<H", struct.pack("<e", 1.5))[0])
    if kind == "half-packed":
        return _pb(1, 0, 19) + _pb(13, 2, _pb_varint(struct.unpack("<H", struct.pack("<e", -2.25))[0]))
    if kind == "bf16":
        return _pb(1, 0, 14) + _pb(13, 0, 0x3FC0)
    if kind == "int32-neg":
        return _pb(1, 0, 3) + _pb(7, 0, -7)
    if kind == "int64":
        return _pb(1, 0, 9) + _pb(10, 2, _pb_varint(2**40))
    if kind == "uint64":
        return _pb(1, 0, 23) + _pb(17, 0, 2**64 - 1)
    if kind == "bool":
        return _pb(1, 0, 10) + _pb(11, 0, 1)
    if kind == "double":
        return _pb(1, 0, 2) + _pb(6, 2, struct.pack("<d", 0.1))
    if kind == "float":
        return _pb(1, 0, 1) + _pb(5, 5, struct.pack("<f", 0.25))
    if kind == "content-half":
        return _pb(1, 0, 19) + _pb(4, 2, struct.pack("<e", 0.5))
    if kind == "content-int8":
        return _pb(1, 0, 6) + _pb(4, 2, struct.pack("<b", -3))
    if kind == "string":
        return _pb(1, 0, 7) + _pb(8, 2, b"hello")
    if kind == "varint-float":
        return _pb(1, 0, 1) + _pb(5, 0, 12345)
    if kind == "short":
        return _pb(1, 0, 1) + b"\x2d\x00"
    return _pb(1, 0, 1) + _pb(2, 2, _pb(2, 2, _pb(1, 0, 3))) + _pb(5, 2, struct.pack("<3f", 1, 2, 3))


def _event(rng: random.Random, step: int) -> bytes:
    from forensics.io.adapters.tensorboard import encode_event

    r = rng.random()
    if r < 0.5:
        return encode_event(1000.0 + step, step, {"train/loss": 0.5, "train/kl": 0.01 * step})
    value = _pb(1, 2, b"train/x") + _pb(8, 2, _tensor_value(rng))
    if r < 0.6:  # a short or odd summary
        value = rng.choice([b"\x0a", b"\x0a\x05\x0a\x03ab", _pb(1, 2, b"t") + _pb(2, 0, 7),
                            b"\x0a\xff\xff\xff\xff\x0f"])
    summary = _pb(1, 2, value) if r >= 0.6 else value
    return _pb(1, 1, struct.pack("<d", 1000.0 + step)) + _pb(2, 0, step) + _pb(5, 2, summary)


def tensorboard_records(rng: random.Random) -> Case:
    from forensics.io.adapters.tensorboard import masked_crc32c, tfrecord

    records = [tfrecord(_event(rng, s)) for s in range(rng.choice([1, 5, 40]))]
    kind = rng.choice(["clean", "huge-length", "length-2^40", "cut", "flip", "garbage-record", "empty-record"])
    data = b"".join(records)
    if kind in ("huge-length", "length-2^40"):
        length = struct.pack("<Q", 2**63 if kind == "huge-length" else 2**40)
        data += length + struct.pack("<I", masked_crc32c(length)) + b"abc"
    elif kind == "cut":
        data = data[: rng.randrange(12, len(data) + 1)]
    elif kind == "flip":
        data = data[:12] + _flip(data[12:], rng)
    elif kind == "garbage-record":
        data += tfrecord(bytes(rng.randrange(256) for _ in range(rng.randint(1, 100))))
    elif kind == "empty-record":
        data += tfrecord(b"")
    name = "events.out.tfevents.1700000000.host.1.0"
    if rng.random() < 0.3:
        files = {f"tb/run{i}/{name}": data for i in range(2)}
        argv = _command(rng, "{dir}/tb")
    else:
        files = {name: data}
        argv = _command(rng, "{dir}/" + name)
    return Case(f"tensorboard/{kind}", files, argv)


# --- the generator -----------------------------------------------------------------------------
#: (maker, weight): how often each family is drawn
MAKERS: list[tuple[Callable[[random.Random], Case], float]] = [
    (jsonl_values, 3), (jsonl_steps, 2), (jsonl_big_steps, 0.5), (jsonl_head, 1), (jsonl_late_key, 0.5),
    (jsonl_new_keys, 0.2), (jsonl_bytes, 2), (jsonl_gzip, 1), (jsonl_stream, 0.4), (watch_options, 0.5),
    (adapters, 4), (adapters_clean, 1), (parquet_files, 1.5), (parquet_folders, 0.7),
    (tensorboard_records, 1.5),
]


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` input cases drawn from every family (see the module doc), reproducible from ``rng``.

    Every family comes at least once when ``n`` allows; the rest are drawn by weight.
    """
    makers = [m for m, _ in MAKERS]
    weights = [w for _, w in MAKERS]
    for i in range(n):
        maker = makers[i] if i < len(makers) else rng.choices(makers, weights)[0]
        case = maker(rng)
        yield Case(f"{case.name}#{i}", case.files, case.argv, case.expect_exit, case.expect_rows, case.stdin,
                   case.fifos, case.expect_format)

"""JSON that is not a metric log (issue 40): what the column-major reader (``column-json``), the
JSON-lines reader and the reader of last resort (``kv-console``) must refuse, or read with a
report that says what they took.

Families, each with the one right exit code:

* documents that are not logs: configs (nested objects of hyperparameters), ``package.json``,
  ``tsconfig.json``, JSON-LD, a Jupyter notebook, GeoJSON, a dict of dicts keyed by names, a
  huge array, an object nested up to 100,000 deep, named ``.json``, ``.jsonl`` or ``.log``.
  Pretty-printed, or a top-level array, it is refused as unrecognised content or as holding no
  usable row (exit 3, ``scan`` or ``convert``). An object on one line is a JSON-lines file of one
  row: read, its report says that no training metric was recognised, and ``gate`` fails it
  (exit 1), never a traceback;
* column-json lookalikes whose maps are not step -> number (strings that are not numbers, nested
  lists, objects, booleans, nulls, keys that are not integers): with no number in any map,
  refused when pretty-printed (3) and failed by ``gate`` on one line (1); with a genuine metric
  first, read as ``column-json`` (exit 0) with one row per step, the other maps and values set
  aside and said so in the read report.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Iterator

from .case import Case

__all__ = ["generate", "not_logs"]


def _word(rng: random.Random, lo: int = 3, hi: int = 10) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(lo, hi)))


def _config(rng: random.Random) -> object:
    return {"model": {"name_or_path": f"org/{_word(rng)}", "dtype": "bfloat16", "layers": rng.randint(2, 80)},
            "optim": {"lr": rng.choice([1e-6, 3e-4, 5e-5]), "betas": [0.9, 0.999], "weight_decay": 0.01},
            "train": {"epochs": rng.randint(1, 5), "batch_size": rng.choice([8, 16, 64]), "seed": rng.randint(0, 9),
                      "steps": {str(i): _word(rng) for i in range(1, 4)}},
            "data": [{"path": f"/data/{_word(rng)}.jsonl", "weight": round(rng.random(), 3)} for _ in range(3)]}


def _package(rng: random.Random) -> object:
    return {"name": _word(rng), "version": f"{rng.randint(0, 9)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}",
            "private": True, "scripts": {"build": "tsc -p .", "test": "vitest"},
            "dependencies": {_word(rng): f"^{rng.randint(1, 20)}.0.0" for _ in range(6)},
            "engines": {"node": ">=18"}}


def _tsconfig(rng: random.Random) -> object:
    return {"compilerOptions": {"target": "ES2022", "module": "NodeNext", "strict": True, "outDir": "dist",
                                "paths": {"@/*": ["src/*"]}, "lib": ["ES2022", "DOM"]},
            "include": ["src/**/*.ts"], "exclude": ["node_modules"]}


def _json_ld(rng: random.Random) -> object:
    return {"@context": "https://schema.org", "@type": "Dataset", "name": _word(rng),
            "distribution": [{"@type": "DataDownload", "contentUrl": f"https://x.org/{_word(rng)}.csv"}],
            "variableMeasured": [{"@type": "PropertyValue", "name": _word(rng), "value": rng.random()}
                                 for _ in range(4)]}


def _notebook(rng: random.Random) -> object:
    cells = []
    for i in range(rng.randint(3, 12)):
        cells.append({"cell_type": "code", "execution_count": i + 1, "metadata": {},
                      "source": [f"loss = {rng.random():.4f}\n", f"print('step', {i}, 'loss', loss)\n"],
                      "outputs": [{"output_type": "stream", "name": "stdout",
                                   "text": [f"step: {i}, loss: {rng.random():.4f}, kl: {rng.random():.4f}\n"]}]})
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _geojson(rng: random.Random) -> object:
    feats = [{"type": "Feature", "properties": {"name": _word(rng), "pop": rng.randint(0, 10**6)},
              "geometry": {"type": "Point", "coordinates": [round(rng.uniform(-180, 180), 5),
                                                            round(rng.uniform(-90, 90), 5)]}}
             for _ in range(rng.randint(5, 40))]
    return {"type": "FeatureCollection", "features": feats}


def _by_name(rng: random.Random) -> object:
    """A dict of dicts keyed by names, numeric leaves: a table of people, not a log."""
    return {_word(rng).capitalize(): {"age": rng.randint(18, 90), "score": round(rng.random(), 3),
                                      "height": round(rng.uniform(1.5, 2.0), 2)} for _ in range(rng.randint(5, 60))}


def _huge_array(rng: random.Random) -> object:
    n = rng.choice([10_000, 200_000])
    return rng.choice([[rng.random() for _ in range(n)], {"data": list(range(n))},
                       [[i, i * 0.5] for i in range(n // 4)]])


#: JSON lines read objects nested this deep; deeper ones are lines that cannot be rows
JSONL_DEPTH = 256


def _deep(rng: random.Random) -> tuple[str, bool]:
    """An object (or array) nested up to 100,000 deep: ``(text, readable as one JSON-lines row)``."""
    depth = rng.choice([200, 5_000, 100_000])
    key = rng.choice(['{"a": ', '{"1": ', '['])
    close = "}" if key.startswith("{") else "]"
    return key * depth + "1" + close * depth, key != "[" and depth <= JSONL_DEPTH


#: documents that are not logs: each must be refused (exit 3)
NOT_LOGS: dict[str, Callable[[random.Random], object]] = {
    "config": _config, "package.json": _package, "tsconfig": _tsconfig, "json-ld": _json_ld,
    "notebook": _notebook, "geojson": _geojson, "by-name": _by_name, "huge-array": _huge_array,
}


def not_logs(rng: random.Random, kind: str) -> tuple[bytes, bool]:
    """A document of ``kind`` (a key of :data:`NOT_LOGS`, or ``deep``): ``(bytes, an object on
    one line)``."""
    if kind == "deep":
        text, readable = _deep(rng)
        return text.encode(), readable
    obj = NOT_LOGS[kind](rng)
    indent = rng.choice([None, 1, 2])
    return json.dumps(obj, indent=indent).encode(), indent is None and isinstance(obj, dict)


def _lookalike(rng: random.Random) -> tuple[bytes, int, bool]:
    """A column-json lookalike: ``(bytes, steps of its genuine metric (0: none), on one line)``:
    maps keyed by steps whose values are strings, lists, objects, booleans or nulls, or keyed by
    words; now and then a genuine metric first."""
    steps = range(1, rng.randint(3, 30))
    bad: list[Callable[[int], object]] = [lambda s: f"v{s}", lambda s: [s, s + 1], lambda s: {"v": s},
                                          lambda s: bool(s % 2), lambda s: None, lambda s: [[s]]]
    obj: dict[str, object] = {}
    genuine = rng.random() < 0.5
    if genuine:  # a real metric first: the file is column-major metric JSON with noise beside it
        obj["train/reward"] = {str(s): round(rng.random(), 4) for s in steps}
    for _ in range(rng.randint(1, 4)):
        make = rng.choice(bad)
        obj[f"train/{_word(rng)}"] = {str(s): make(s) for s in steps}
    if rng.random() < 0.3:  # keys that are not steps
        obj["train/words"] = {_word(rng): rng.random() for _ in steps}
    if genuine and rng.random() < 0.3:  # a metric with a few values that are not numbers
        obj["train/loss"] = {str(s): (rng.random() if s % 4 else rng.choice(bad)(s)) for s in steps}
    indent = rng.choice([None, 2])
    return json.dumps(obj, indent=indent).encode(), len(steps) if genuine else 0, indent is None


def _refused_or_failed(name: str, file: str, data: bytes, one_line_object: bool,
                       rng: random.Random) -> Case:
    if one_line_object:  # a JSON-lines file of one row that holds no training metric: gate fails it
        return Case(name, {file: data}, ("gate", "{dir}/" + file), expect_exit=1)
    argv = rng.choice([("scan", "{dir}/" + file, "-q", "-o", "{dir}/out"),
                       ("convert", "{dir}/" + file, "-o", "{dir}/out.parquet")])
    return Case(name, {file: data}, argv, expect_exit=3)


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` cases: documents that are not logs and column-json lookalikes (module doc)."""
    kinds = [*NOT_LOGS, "deep"]
    for i in range(n):
        if i % 3 == 2:
            data, rows, one_line = _lookalike(rng)
            if rows:
                yield Case(f"json_docs:lookalike-with-metric#{i}", {"metrics.json": data},
                           ("scan", "{dir}/metrics.json", "-q", "-o", "{dir}/out"), expect_exit=0,
                           expect_rows=rows, expect_format="column-json")
            else:
                yield _refused_or_failed(f"json_docs:lookalike#{i}", "metrics.json", data, one_line, rng)
            continue
        kind = kinds[(i // 3 * 2 + i % 3) % len(kinds)]
        data, one_line = not_logs(rng, kind)
        yield _refused_or_failed(f"json_docs:{kind}#{i}", rng.choice(["doc.json", "doc.log", "doc.jsonl"]), data,
                                 one_line, rng)

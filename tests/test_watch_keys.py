"""``forensics watch`` resolves a log's keys as ``forensics scan`` does: one resolver (the
:class:`~forensics.io.canonical.Canonicalizer`), the config's column maps included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics.analysis.engine import scan_path
from forensics.config import make_config
from forensics.live.watch import Watcher

from .conftest import healthy_rows

#: Odd keys: the step under a name only the user's map gives it, a metric under a trainer's
#: alias beside its canonical spelling (one of them shadows the other), an unknown key.
MAPS = ("when=step", "gnorm=grad_norm")


def _odd_rows(n: int, start: int = 0) -> list[dict[str, float]]:
    rows = []
    for r in healthy_rows(start + n, seed=5)[start:]:
        rows.append({"when": r["step"], "gnorm": r["grad_norm"], "objective/kl": r["kl"], "kl": r["kl"] * 2,
                     "train/loss": r.get("loss", 0.5), "my_counter": 7.0})
    return rows


def _write(path: Path, rows: list[dict[str, float]]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("name", ["steps.parquet", "steps.jsonl"])  # re-read whole, read by lines
def test_watch_and_scan_map_the_same_odd_keys_to_the_same_names(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    _write(path, _odd_rows(120))
    config = make_config(maps=MAPS)
    w = Watcher(path, config=config, echo=lambda s: None)
    w.poll()
    _write(path, _odd_rows(200))  # the log grows (a Parquet file is rewritten whole)
    w.poll(final=True)
    scanned = scan_path(path, config=config)
    watched = w.scan.finish()
    assert watched.mappings[str(path)].mapping == scanned.mappings[str(path)].mapping
    assert scanned.mappings[str(path)].mapping["when"] == "step"
    assert scanned.mappings[str(path)].mapping["gnorm"] == "grad_norm"
    assert watched.mappings[str(path)].shadowed == scanned.mappings[str(path)].shadowed
    # every row fed once: the re-read found its new rows by the step the map names (not the
    # whole file again, 120 rows set aside as replayed steps)
    assert watched.steps["rows"] == scanned.steps["rows"] == 200
    assert watched.inputs[0].rows_skipped == scanned.inputs[0].rows_skipped == 0
    assert [f.rule for f in watched.findings] == [f.rule for f in scanned.findings]
    np.testing.assert_array_equal(watched.metrics_frame(["grad_norm"])["grad_norm"],
                                  scanned.metrics_frame(["grad_norm"])["grad_norm"])

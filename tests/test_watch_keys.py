"""``forensics watch`` and the trainer callback resolve a log's keys as ``forensics scan`` does:
one resolver (the :class:`~forensics.io.canonical.Canonicalizer`), the config's column maps
included."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics import schema
from forensics.analysis.engine import scan_path
from forensics.config import make_config
from forensics.live.transformers import ForensicsCallback
from forensics.live.watch import Watcher
from forensics.schema import Alias

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


def test_a_key_added_to_the_alias_table_is_read_by_scan_watch_and_the_callback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One resolver: an alias learnt once (here a new entry of the table) is read the same way by
    ``scan``, ``watch`` and the trainer callback, shadowing included (``grad_norm``, logged from
    step 150 on, comes after the new alias that already feeds ``grad_norm``)."""
    alias = Alias("my_gnorm", "grad_norm", "test")
    monkeypatch.setattr(schema, "ALIASES", (*schema.ALIASES, alias))
    monkeypatch.setitem(schema._ALIAS_BY_SOURCE, alias.source, alias)
    monkeypatch.setitem(schema._ALIAS_RANK, alias.source, len(schema._ALIAS_RANK))
    rows = []
    for r in healthy_rows(300, seed=7):
        r["my_gnorm"] = r.pop("grad_norm")
        if r["step"] >= 150:
            r["grad_norm"] = 99.0
        rows.append(r)
    path = tmp_path / "steps.jsonl"
    _write(path, rows)
    scanned = scan_path(path)
    w = Watcher(path, echo=lambda s: None)
    w.poll(final=True)
    watched = w.scan.finish()
    args = SimpleNamespace(output_dir=str(tmp_path / "trainer"), report_to=[])
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    cb = ForensicsCallback(check_every=50)
    cb.on_train_begin(args, state, None)
    for r in rows:
        state.global_step = r["step"]
        cb.on_log(args, state, None, logs={k: v for k, v in r.items() if k != "step"})
    cb.on_train_end(args, state, None)
    assert cb.scan is not None
    live = cb.scan.finish()
    written = scan_path(tmp_path / "trainer")  # the callback's own file, scanned afterwards

    expected = scanned.mappings[str(path)]
    assert expected.mapping["my_gnorm"] == "grad_norm" and expected.shadowed == ["grad_norm"]
    assert watched.mappings[str(path)].to_dict() == expected.to_dict()
    assert cb.canon.mapping.to_dict() == expected.to_dict()
    first = json.loads((tmp_path / "trainer" / "forensics" / "steps.jsonl").read_text().splitlines()[-1])
    assert first["grad_norm"] == rows[-1]["my_gnorm"] and first["shadowed/grad_norm"] == 99.0
    for analysis in (watched, live, written):
        np.testing.assert_array_equal(analysis.metrics_frame(["grad_norm"])["grad_norm"],
                                      scanned.metrics_frame(["grad_norm"])["grad_norm"])
        assert [f.rule for f in analysis.findings] == [f.rule for f in scanned.findings]

"""Where a scan's tracker updates run (issue 25, item 4): on the worker pool when cores are idle,
inline when the source already keeps a core busy parsing ahead. Pinned by the threads used, not
by a clock; the analysis is the same either way (the trackers are independent)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import forensics.io.readers.jsonl as jsonl
from forensics.analysis import engine
from forensics.analysis.trackers.kl_schedule import KLSchedule
from forensics.report.files import json_bytes

from .conftest import healthy_rows, write_jsonl


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names of the threads that ran the KL tracker's updates (on batches of 64 rows and more
    the pool is considered; a small JSONL parses ahead on its reader thread as a large one does)."""
    seen: set[str] = set()
    update = KLSchedule.update

    def spy(self: KLSchedule, batch):  # type: ignore[no-untyped-def]
        seen.add(threading.current_thread().name)
        return update(self, batch)

    monkeypatch.setattr(KLSchedule, "update", spy)
    monkeypatch.setattr(engine, "PARALLEL_ROWS", 64)
    monkeypatch.setattr(jsonl, "_MAX_CHUNK", 1 << 16)
    return seen


def _analysis(path: Path) -> bytes:
    d = engine.scan_path(path).to_dict()
    d.pop("inputs")  # the reader's own notes (chunking) aside
    return json_bytes(d)


def test_trackers_run_inline_beside_a_source_parsing_ahead_on_two_cores(
        tmp_path: Path, threads: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(3_000))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    on_two = _analysis(log)
    assert threads == {"MainThread"}  # the reader thread takes one core: the trackers the other
    threads.clear()
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert _analysis(log) == on_two
    assert threads and all(t.startswith("forensics-tracker") for t in threads)  # cores to spare


def test_trackers_use_the_pool_on_two_cores_beside_a_source_that_does_not_parse_ahead(
        tmp_path: Path, threads: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rows = healthy_rows(3_000)
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    engine.scan_path(path)
    assert threads and all(t.startswith("forensics-tracker") for t in threads)
    threads.clear()
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one core: no pool at all
    engine.scan_path(path)
    assert threads == {"MainThread"}


def test_a_large_scan_draws_its_plots_beside_the_trackers_finish(
        tmp_path: Path, threads: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The plots read the per-step store alone: with cores to spare they are drawn on a thread of
    their own while the trackers finish, and the analysis is the one drawn inline."""
    drawn: list[str] = []
    store_plots = engine.store_plots

    def spy(store, *args):  # type: ignore[no-untyped-def]
        drawn.append(threading.current_thread().name)
        return store_plots(store, *args)

    monkeypatch.setattr(engine, "store_plots", spy)
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.Table.from_pylist(healthy_rows(3_000)), path)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    beside = _analysis(path)
    assert drawn == ["forensics-plots_0"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert _analysis(path) == beside and drawn == ["forensics-plots_0"]  # inline: by diagnose itself

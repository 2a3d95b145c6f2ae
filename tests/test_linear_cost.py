"""Cost linear in the rows: every tracker, the engine, the timeline and the report writers.

A scan does bounded work per row (or per window, per step of the sample stream) whatever the
shape of the log. This test counts work, never time: a profile hook (``sys.setprofile``) counts,
per part of the pipeline, the function calls (Python and C) and the numpy elements handed to
Python-level functions (``np.concatenate``'s and ``np.median``'s dispatchers included, so an array
that grows with the run and is re-read on every batch is seen). Logs of ``n``, ``2n`` and ``10n``
rows are scanned, each a prefix of the next (:mod:`bench.shapes`); linear work grows by
``(W(10n) - W(n)) / (W(2n) - W(n)) = 9`` whatever its fixed cost, quadratic work by 33. A part
fails past :data:`SLACK` times 9.

Windows are made short (:data:`WINDOW` steps) and the per-step store spills every 500 rows, so per-window
and per-spill work is exercised a hundred times over at these sizes.
"""

from __future__ import annotations

import collections
import functools
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.shapes import sample_chunks, step_chunks, write_parquet
from forensics.analysis import engine, store
from forensics.analysis.diagnosis import diagnose as diagnosis
from forensics.analysis.trackers import TRACKERS
from forensics.config import Config
from forensics.report import files

#: Allowed growth over the linear 9x (sorting's log factor and batch-boundary effects stay
#: well inside it; work quadratic in the rows is 33x).
SLACK = 1.25
#: Parts doing less work than this at 10n are too small to judge (a handful of findings).
MIN_CALLS, MIN_ELEMENTS = 2_000, 20_000
N = 1_000
BATCH = 250
#: Steps per window (and per epoch): short, so per-window work is exercised hundreds of times.
WINDOW = 20
WRITERS = ("write_metrics_csv", "write_metrics_parquet", "write_findings_csv",
           "write_training_files", "write_rendered", "to_json")


def _elements(values: Any) -> int:
    """Array elements among a call's arguments: arrays, and lists, tuples and dicts of arrays
    (judged by their first item, so a long list of numbers costs the meter nothing)."""
    n = 0
    for v in values:
        if isinstance(v, np.ndarray):
            n += v.size
        elif isinstance(v, (list, tuple)):
            if v and isinstance(v[0], np.ndarray):
                n += sum(x.size for x in v if isinstance(x, np.ndarray))
        elif isinstance(v, dict) and v and isinstance(next(iter(v.values())), np.ndarray):
            n += sum(x.size for x in v.values() if isinstance(x, np.ndarray))
    return n


class OpMeter:
    """Counts calls and array elements per label; ``wrap`` labels what a function does."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.elements: collections.Counter[str] = collections.Counter()
        self.label = "engine"
        self._counts = [0, 0]  # of the current label, added to the counters when it changes

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        counts = self._counts
        counts[0] += 1
        if event == "call":
            counts[1] += _elements(frame.f_locals.values())

    def _switch(self, label: str) -> str:
        prev = self.label
        self.calls[prev] += self._counts[0]
        self.elements[prev] += self._counts[1]
        self._counts[0] = self._counts[1] = 0
        self.label = label
        return prev

    def wrap(self, label: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def labelled(*args: Any, **kwargs: Any) -> Any:
            prev = self._switch(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self._switch(prev)
        return labelled

    def run(self, fn: Any) -> tuple[dict[str, int], dict[str, int]]:
        """Calls and elements by label while ``fn()`` runs (C calls and returns count as calls)."""
        self.calls.clear()
        self.elements.clear()
        self._counts[:] = [0, 0]
        self.label = "engine"
        sys.setprofile(self._hook)
        try:
            fn()
        finally:
            sys.setprofile(None)
            self._switch("engine")
        return dict(self.calls), dict(self.elements)


@pytest.fixture
def meter(monkeypatch: pytest.MonkeyPatch) -> OpMeter:
    m = OpMeter()
    for cls in TRACKERS.values():
        monkeypatch.setattr(cls, "update", m.wrap(cls.name, cls.update))
        monkeypatch.setattr(cls, "finish", m.wrap(cls.name, cls.finish))
    monkeypatch.setattr(diagnosis, "timeline_section", m.wrap("timeline", diagnosis.timeline_section))
    plots = diagnosis.plots_section
    # 100 plotted points instead of 2,000: the plots' JSON and HTML are bounded by the points,
    # and below the bound they would grow with these small logs
    monkeypatch.setattr(diagnosis, "plots_section", m.wrap("plots", lambda a: plots(a, 100)))
    for name in WRITERS:
        if hasattr(files, name):
            monkeypatch.setattr(files, name, m.wrap(name, getattr(files, name)))
    monkeypatch.setattr(store.MetricsStore.__init__, "__defaults__", (500, 500 * 20, store.MAX_COLUMNS))
    # the meter follows one thread (sys.setprofile): tracker updates and finishes run inline
    monkeypatch.setattr(engine, "PARALLEL_ROWS", 2**62)
    monkeypatch.setattr(files, "CSV_BESIDE_PAGE", False)  # metrics.csv in turn, not beside the page
    return m


def _growth(w1: int, w2: int, w10: int) -> float:
    return (w10 - w1) / max(w2 - w1, 1)


def _assert_linear(counts: dict[int, tuple[dict[str, int], dict[str, int]]]) -> dict[str, Any]:
    n1, n2, n10 = sorted(counts)
    seen: dict[str, Any] = {}
    bad = []
    for kind, (i, floor) in {"calls": (0, MIN_CALLS), "elements": (1, MIN_ELEMENTS)}.items():
        for label in sorted(counts[n10][i]):
            w = [counts[n][i].get(label, 0) for n in (n1, n2, n10)]
            if w[2] < floor or w[2] - w[0] < n10 - n1:
                # too little work to judge, or less than one unit per added row: a fixed cost
                # whose small wobble (a few calls) would read as a large growth ratio
                continue
            g = _growth(*w)
            seen[f"{label} {kind}"] = round(g, 2)
            if g > 9 * SLACK:
                msg = f"{label}: {kind} {w} grow {g:.1f}x from {n2 - n1} to {n10 - n1} more rows"
                bad.append(msg)
    assert not bad, "work grows faster than the rows:\n" + "\n".join(bad)
    return seen


def _scan_and_write(path: Path, out: Path, samples: Path | None = None) -> None:
    cfg = Config(batch_rows=BATCH, trackers={"windows": {"window_rows": WINDOW}})
    analysis = engine.scan_path(path, samples=samples, config=cfg)
    files.write_reports(analysis, out)


@pytest.fixture(scope="module", autouse=True)
def _warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One unmeasured scan first: imports, compiled templates and caches are not per-row work."""
    d = tmp_path_factory.mktemp("warm")
    steps = write_parquet(d / "steps.parquet", step_chunks(N, 200, True, steps_per_epoch=WINDOW))
    samples = write_parquet(d / "samples.parquet", sample_chunks(N // 20, per_step=20))
    _scan_and_write(steps, d / "out", samples)


@pytest.mark.parametrize(("metrics", "epoch"), [(20, False), (20, True), (200, False)],
                         ids=["20-no-epoch", "20-epoch", "200-no-epoch"])
def test_step_stream_work_is_linear(tmp_path: Path, meter: OpMeter, metrics: int, epoch: bool) -> None:
    counts = {}
    for i, rows in enumerate((N, 2 * N, 10 * N)):
        d = tmp_path / f"r{i}"
        log = write_parquet(d / "steps.parquet", step_chunks(rows, metrics, epoch, steps_per_epoch=WINDOW))
        counts[rows] = meter.run(lambda log=log, d=d: _scan_and_write(log, d / "out"))
    # every step tracker, the engine, the timeline, the plots and the writers were measured
    # (generation reads completions and preference preference pairs: neither is in these logs;
    # the timeline reads the findings only, so it does little work whatever the rows)
    for label in [*(t for t in TRACKERS if t not in ("generation", "preference")), "engine", "plots",
                  "write_metrics_csv", "write_rendered"]:
        calls, elements = (c.get(label, 0) for c in counts[10 * N])
        assert calls >= MIN_CALLS or elements >= MIN_ELEMENTS, (label, counts[10 * N])
    # to_json is one orjson call (its work is in C, unseen by the meter): linear in the JSON it
    # writes, which must grow no faster than the rows (the window table grows with them)
    sizes = [(tmp_path / f"r{i}" / "out" / "analysis.json").stat().st_size for i in range(3)]
    assert _growth(*sizes) <= 9 * SLACK, sizes
    _assert_linear(counts)


def test_the_meter_sees_work_that_grows_with_the_history() -> None:
    """A part that re-reads everything seen so far on every batch fails; one that keeps a
    bounded state passes (the guard can fail)."""
    meter = OpMeter()

    def feed(rows: int, keep_all: bool) -> None:
        history = np.zeros(0)
        for _ in range(rows // BATCH):
            batch = np.ones(BATCH)
            history = np.concatenate([history, batch]) if keep_all else np.concatenate([history[-BATCH:], batch])
            np.median(history)

    for keep_all in (False, True):
        counts = {rows: meter.run(lambda rows=rows, k=keep_all: meter.wrap("tracker", feed)(rows, k))
                  for rows in (10 * BATCH, 20 * BATCH, 100 * BATCH)}
        if keep_all:
            with pytest.raises(AssertionError, match="tracker: elements"):
                _assert_linear(counts)
        else:
            assert _assert_linear(counts)["tracker elements"] == pytest.approx(9, rel=0.05)


def test_sample_stream_work_is_linear(tmp_path: Path, meter: OpMeter) -> None:
    counts = {}
    steps = write_parquet(tmp_path / "steps.parquet", step_chunks(10 * N // 20, 20, False))
    for i, n_steps in enumerate((N // 20, N // 10, N // 2)):  # 20 responses a step
        d = tmp_path / f"r{i}"
        samples = write_parquet(d / "samples.parquet",
                                sample_chunks(n_steps, per_step=20, bias_from=n_steps // 2))
        counts[n_steps] = meter.run(lambda s=samples, d=d: _scan_and_write(steps, d / "out", s))
    seen = _assert_linear(counts)
    assert "length_bias calls" in seen and "length_bias elements" in seen, seen


def test_plots_streamed_part_by_part_equal_the_whole_column_envelope() -> None:
    """The plots section reads the per-step store a part at a time (bounded memory at 10M rows)
    and picks the same points as :func:`envelope` over the whole column: ties, NaN, spikes."""
    from forensics.analysis.diagnosis.series import _stream_plots, envelope, paired_sample

    rng = np.random.default_rng(3)
    n = 25_000
    steps = np.arange(n, dtype=np.int64) * 2
    frame = {"step": steps,
             "kl": np.round(rng.normal(0, 1, n), 1).astype(np.float32),  # many ties
             "reward_mean": rng.normal(0, 1, n).astype(np.float32),
             "response_length_mean": rng.normal(200, 5, n).astype(np.float32),
             "grad_norm": np.full(n, np.nan, dtype=np.float32),
             "step_time": np.full(n, 0.5, dtype=np.float32)}
    frame["kl"][rng.choice(n, 3000, replace=False)] = np.nan
    frame["reward_mean"][12_345] = 40.0
    frame["response_length_mean"][::5] = np.nan
    cuts = [0, *sorted(rng.choice(n, 30, replace=False)), n]
    parts = [{k: v[a:b] for k, v in frame.items()} for a, b in itertools.pairwise(cuts)]
    got = _stream_plots(lambda: parts, list(frame), 500)
    assert "grad_norm" not in got["series"] and got["rows"] == n
    for name in ("kl", "reward_mean", "response_length_mean", "step_time"):
        x, y = envelope(steps, frame[name], 500)
        assert got["series"][name]["x"] == x.tolist(), name
        assert got["series"][name]["y"] == [float(f"{v:.6g}") for v in y.tolist()], name
    assert 24_690 in got["series"]["reward_mean"]["x"]  # the spike survives
    want = paired_sample(steps, frame["response_length_mean"], frame["reward_mean"], 250)
    assert got["pairs"]["length_reward"] == want
    assert got["duration"] == {"seconds": n * 0.5, "source": "sum of step_time"}


@pytest.mark.parametrize("seed", range(60))
def test_plots_streamed_in_any_cut_pick_the_envelopes_points(seed: int) -> None:
    """Any cut of a column (empty parts, parts of one value, parts inside one bucket, a part
    spanning many) with NaN, infinities, ties and float32 gives :func:`envelope`'s points."""
    from forensics.analysis.diagnosis.series import _stream_plots, envelope

    rng = np.random.default_rng(seed)
    n, max_points = int(rng.integers(1, 3000)), int(rng.integers(2, 200))
    steps = np.arange(n, dtype=np.int64) * 3
    v = np.round(rng.normal(0, 1, n), int(rng.integers(0, 3)))  # ties at 0 and 1 decimals
    v = v.astype(np.float32) if seed % 2 else v
    v[rng.random(n) < rng.random() * 0.5] = np.nan
    if seed % 3 == 0:
        v[rng.random(n) < 0.1] = np.inf
    cuts = [0, *sorted(rng.choice(n + 1, int(rng.integers(0, min(n, 50) + 1)))), n]
    parts = [{"step": steps[a:b], "kl": v[a:b]} for a, b in itertools.pairwise(cuts)]
    got = _stream_plots(lambda: parts, ["step", "kl"], max_points)["series"]
    x, y = envelope(steps, v, max_points)
    if not len(x):
        assert "kl" not in got
        return
    assert got["kl"]["x"] == x.tolist()
    assert got["kl"]["y"] == [float(f"{q:.6g}") for q in y.tolist()]


def _work(fn: Any, *args: Any, lines: bool = False) -> int:
    """Work ``fn(*args)`` does: Python and C calls (``sys.setprofile``), or, with ``lines``, the
    lines executed (``sys.settrace``: a generator's steps are lines, not calls)."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event in ("call", "c_call")

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return trace

    if lines:
        sys.settrace(trace)
    else:
        sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return count


def _assert_grows_linearly(work: Any, n: int) -> None:
    """``work(k)`` at ``n``, ``2n`` and ``10n`` grows as linear work does (see the module doc)."""
    w = [work(k * n) for k in (1, 2, 10)]
    assert _growth(*w) <= 9 * SLACK, w


def test_the_timeline_is_linear_in_the_findings() -> None:
    """A thousand user rules that fire once each took 42 s (every finding matched against every
    other, through the whole causal table); each rule id is matched once now."""
    from forensics.analysis.diagnosis.timeline import build_timeline

    def findings(n: int) -> list[dict[str, Any]]:  # n user rules firing once, within one causal window
        return [{"rule": f"custom.rule_{i}", "severity": "warning", "onset_step": i, "first_step": i,
                 "last_step": i + 3, "message": ""} for i in range(n)]

    _assert_grows_linearly(lambda n: _work(build_timeline, findings(n), n), 200)


def test_parsing_user_rules_is_linear_in_the_rules() -> None:
    """40,000 rules that never fire took 131 s: each id was compared with every earlier one."""
    from forensics.analysis.trackers.custom import parse_rules

    def tables(n: int) -> list[dict[str, Any]]:
        return [{"id": f"never_{i}", "metric": "kl", "kind": "above", "threshold": 1e9} for i in range(n)]

    _assert_grows_linearly(lambda n: _work(parse_rules, tables(n)), 300)


def test_the_episode_series_is_linear_in_the_episodes() -> None:
    """A finding of 20,000 episodes took 91 s to export to TensorBoard (every point tested
    against every episode); one sweep now. Lines executed are counted (a generator's steps are
    lines, not calls)."""
    from forensics.report.export import episode_series

    def analysis(n: int) -> dict[str, Any]:
        return {"steps": {"first": 0, "last": 10 * n}, "findings": [
            {"rule": "kl.spike", "severity": "warning", "first_step": 0, "last_step": 10 * n,
             "episodes": [{"first_step": 10 * i, "last_step": 10 * i + 3, "severity": "warning"} for i in range(n)]}]}

    _assert_grows_linearly(lambda n: _work(episode_series, analysis(n), lines=True), 50)

"""The scan engine: raw batches -> canonical batches -> trackers -> an :class:`Analysis`.

A scan is a pure function of its inputs (files, metadata, config): no clock, no randomness, and
its result serialises to JSON, so per-run scans can fan out on Ray or Dask unchanged.

Step policy (resumed runs)
--------------------------
A trainer resumed from a checkpoint logs steps it had already logged. forensics keeps the
**first** record of every step and sets aside any row whose step is not greater than the highest
step seen so far. The rows before a crash are usually the evidence of what went wrong, so they
stay in the analysis; the replayed rows are counted in the read report (reason ``step replayed``)
and every replay is reported as a ``stream.step_replay`` finding with the step it went back to and
how many rows it replayed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import __version__
from .batch import Batch
from .config import Config, RunMeta, build_params, load_run_meta
from .errors import InputError
from .findings import Finding, RuleSpec, Severity
from .health import health_scores
from .memory import trim
from .readers import RawBatch, ReadReport, open_source
from .schema import TRANSFORMS, ColumnMapping, resolve_columns
from .store import MetricsStore
from .trackers import TRACKERS, Tracker
from .trackers.base import TrackerResult

if TYPE_CHECKING:  # pandas is imported when a DataFrame is asked for, not by every scan
    import pandas as pd

__all__ = ["SCHEMA_VERSION", "STREAM_RULES", "Analysis", "Scan", "scan_path"]

#: Version of the analysis JSON layout; bumped on any incompatible change.
SCHEMA_VERSION = "1.0"

STREAM_RULES = (
    RuleSpec(
        "stream.step_replay", Severity.WARNING, "Steps logged again (resumed run)",
        "The step counter went back: the run was resumed from a checkpoint and re-logged steps "
        "it had logged before. The first record of each step is analysed; the replayed rows are "
        "counted and left out.",
        "Check why the run restarted (crash, pre-emption, NaN) around the step it went back "
        "from; resume from the latest checkpoint, or log to a fresh file per attempt.",
    ),
    RuleSpec(
        "stream.rows_skipped", Severity.WARNING, "Rows could not be read",
        "Some rows of the input were malformed or truncated and were skipped; the analysis "
        "covers the rest.",
        "Look at the listed lines; a truncated last line means the writer was killed mid-write.",
    ),
)


@dataclass
class Replay:
    line: int
    from_step: int
    to_step: int
    rows: int = 0
    last_step: int = 0


class StepOrder:
    """Keeps the first record of each step; counts and describes replays (see module doc)."""

    def __init__(self) -> None:
        self.max_step: int | None = None
        self.replays: list[Replay] = []
        self._in_replay = False

    def apply(self, steps: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """Mask of the rows to keep (steps greater than every step seen before)."""
        if len(steps) == 0:
            return np.zeros(0, dtype=bool)
        prev = -(2**62) if self.max_step is None else self.max_step
        running = np.maximum.accumulate(np.concatenate([[prev], steps]))
        keep = steps > running[:-1]
        bad = np.flatnonzero(~keep)
        if len(bad):
            runs = np.split(bad, np.flatnonzero(np.diff(bad) > 1) + 1)
            for run in runs:
                first = int(run[0])
                if not (first == 0 and self._in_replay):
                    self.replays.append(Replay(int(lines[first]) if len(lines) else 0,
                                               int(running[first]), int(steps[first])))
                replay = self.replays[-1]
                replay.rows += len(run)
                replay.last_step = int(steps[run].max())
        self._in_replay = not bool(keep[-1])
        self.max_step = int(running[-1])
        return keep


class _Canonicalizer:
    """Renames one source's keys to canonical names as keys appear, applies unit transforms."""

    def __init__(self, stream: str = "step") -> None:
        self.stream = stream
        self.mapping = ColumnMapping()
        self.step_from_rows: bool | None = None
        self.next_row_step = 0

    def __call__(self, raw: RawBatch, report: ReadReport) -> tuple[Batch, np.ndarray]:
        keys = [*raw.numeric, *raw.text]
        self.mapping = resolve_columns(keys, self.mapping, self.stream)
        m = self.mapping
        columns: dict[str, np.ndarray] = {}
        missing: dict[str, np.ndarray] = {}
        for key, values in raw.numeric.items():
            name = m.target(key)
            if key in m.transforms:
                values = TRANSFORMS[m.transforms[key]](values)
            columns[name] = values
            if key in raw.missing:
                missing[name] = raw.missing[key]
        text = {m.target(k): v for k, v in raw.text.items()}
        n = len(raw)
        if self.step_from_rows is None:
            self.step_from_rows = "step" not in columns
            if self.step_from_rows:
                report.notes.append("no step column: rows are numbered 0, 1, 2, ... in file order")
        keep = np.ones(n, dtype=bool)
        if self.step_from_rows:
            steps = np.arange(self.next_row_step, self.next_row_step + n, dtype=np.int64)
            self.next_row_step += n
        else:
            raw_steps = columns.pop("step", np.full(n, np.nan))
            missing.pop("step", None)
            ok = np.isfinite(raw_steps) & (raw_steps == np.floor(raw_steps))
            for i in np.flatnonzero(~ok)[:50]:
                report.skip(int(raw.lines[i]), "row has no integer step", "row has no step")
            extra = int((~ok).sum()) - min(int((~ok).sum()), 50)
            if extra:
                report.skipped["row has no step"] += extra
            keep &= ok
            steps = np.where(ok, raw_steps, 0).astype(np.int64)
        batch = Batch(steps=steps, columns=columns, missing=missing, text=text, lines=raw.lines)
        return batch, keep


#: Functions that add top-level sections to the analysis JSON from a finished analysis
#: (``name -> fn(analysis) -> JSON-able``); report modules register here (plots, timeline).
ANALYSIS_SECTIONS: dict[str, Callable[[Analysis], Any]] = {}


@dataclass
class Analysis:
    """The result of a scan. ``to_dict`` is the analysis JSON (deterministic)."""

    inputs: list[ReadReport]
    mappings: dict[str, ColumnMapping]
    meta: RunMeta
    results: list[TrackerResult]
    findings: list[Finding]
    health: dict[str, Any]
    steps: dict[str, Any]
    metrics: MetricsStore
    sample_series: dict[str, tuple[np.ndarray, np.ndarray]]
    params: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        # the modules that register the standard sections (imported here: they import this one)
        from . import timeline  # noqa: F401
        from .report import plots  # noqa: F401

        d = self._core_dict()
        for r in self.results:
            d.update(r.sections)
        for name, fn in ANALYSIS_SECTIONS.items():
            d[name] = fn(self)
        return d

    def _core_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "forensics", "version": __version__},
            "run": self.meta.to_dict(),
            "inputs": [r.to_dict() for r in self.inputs],
            "column_mapping": {k: v.to_dict() for k, v in self.mappings.items()},
            "steps": self.steps,
            "health": self.health,
            "trackers": {r.name: r.to_dict() for r in self.results},
            "findings": [f.to_dict() for f in self.findings],
            "findings_by_severity": {
                s.value: sum(1 for f in self.findings if f.severity is s) for s in Severity},
            "params": self.params,
        }

    def to_pandas(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The per-step metrics (all, or the named columns, plus the series derived from the
        sample stream) as a pandas DataFrame indexed by step: a notebook post-mortem's table."""
        import pandas as pd

        return pd.DataFrame(self.metrics_frame(columns)).set_index("step")

    def findings_frame(self) -> pd.DataFrame:
        """One row per finding (the columns of ``findings.csv``; ``evidence`` as a dict)."""
        import pandas as pd

        cols = ["rule", "severity", "tracker", "first_step", "last_step", "onset_step", "message",
                "explanation", "remedy", "evidence"]
        return pd.DataFrame([f.to_dict() for f in self.findings], columns=cols)

    def metrics_frame(self, columns: list[str] | None = None) -> dict[str, np.ndarray]:
        """Per-step columns (all, or the named ones) plus the per-step series derived from the
        sample stream."""
        return self._with_sample_series(self.metrics.frame(columns))

    def metrics_parts(self) -> Iterator[dict[str, np.ndarray]]:
        """:meth:`metrics_frame` of every column, a part of the per-step store at a time (a
        million-step run's table is never whole in memory)."""
        for part in self.metrics.parts():
            yield self._with_sample_series(part)

    def _with_sample_series(self, frame: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        steps = frame["step"]
        frame = dict(frame)
        for name, (s, v) in sorted(self.sample_series.items()):
            col = np.full(len(steps), np.nan, dtype=np.float32)
            if len(steps) and len(s):
                order = np.argsort(steps, kind="stable")
                pos = np.searchsorted(steps[order], s)
                ok = pos < len(steps)
                ok[ok] = steps[order][pos[ok]] == s[ok]
                col[order[pos[ok]]] = v[ok]
            frame[name] = col
        return frame


#: Batches of at least this many rows have their tracker updates run on worker threads: the
#: trackers are independent and their work (numpy, bottleneck, sorts) releases the GIL, so they
#: overlap on a multi-core machine. A live stream's small batches run inline, where the hand-off
#: would cost more than it saves.
PARALLEL_ROWS = 4096
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _tracker_pool() -> ThreadPoolExecutor | None:
    """The shared worker pool (None on a single core). Created once; its threads idle between
    scans, and a scan stays a pure function of its inputs (each tracker runs on one thread at a
    time and only touches its own state and the read-only batch)."""
    global _POOL
    workers = min(os.cpu_count() or 1, 4)
    if workers < 2:
        return None
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="forensics-tracker")
    return _POOL


def _timed(tracker: Tracker, batch: Batch) -> tuple[dict[str, np.ndarray] | None, float]:
    t0 = time.perf_counter()
    out = tracker.update(batch)
    return out, time.perf_counter() - t0


def _finish(tracker: Tracker) -> TrackerResult:
    return tracker.finish()


class Scan:
    """Feed raw batches of a step stream (and optionally a sample stream); ``finish`` analyses.

    The same object serves offline scans (large batches) and live runs (batches of one row).
    """

    def __init__(self, config: Config | None = None, meta: RunMeta | None = None,
                 trackers: Iterable[str] | None = None) -> None:
        self.config = config or Config()
        self.meta = self.config.run if meta is None else meta.merged(self.config.run)
        names = list(trackers) if trackers is not None else list(TRACKERS)
        self.trackers: list[Tracker] = []
        self.params: dict[str, dict[str, Any]] = {}
        for name in names:
            cls = TRACKERS[name]
            params = build_params(cls.Params, self.config.trackers.get(name))
            self.trackers.append(cls(params, self.meta))
            self.params[name] = dict(vars(params))
        self.reports: list[ReadReport] = []
        self.mappings: dict[str, ColumnMapping] = {}
        self._canon: dict[str, _Canonicalizer] = {}
        self.order = StepOrder()
        self.store = MetricsStore()
        self._cost: dict[int, float] = {}  # seconds each step tracker took on the last batch
        self.rows = 0
        self.sample_rows = 0
        self.first_step: int | None = None
        self.last_step: int | None = None

    def _canonical(self, raw: RawBatch, report: ReadReport, stream: str = "step") -> tuple[Batch, np.ndarray]:
        if report.path not in self._canon:
            self._canon[report.path] = _Canonicalizer(stream)
            self.reports.append(report)
        canon = self._canon[report.path]
        batch, keep = canon(raw, report)
        self.mappings[report.path] = canon.mapping
        return batch, keep

    def feed(self, raw: RawBatch, report: ReadReport) -> list[Finding]:
        """Feed a batch of the step stream; return nothing new (findings come at finish)."""
        batch, keep = self._canonical(raw, report)
        order_keep = self.order.apply(batch.steps[keep], batch.lines[keep]
                                      if batch.lines is not None else np.zeros(0))
        full_keep = keep.copy()
        full_keep[keep] = order_keep
        dropped = int(keep.sum() - order_keep.sum())
        if dropped:
            report.skipped["step replayed"] += dropped
            report.rows_kept -= dropped
        report.rows_kept -= int((~keep).sum())
        if not full_keep.all():
            batch = batch.take(full_keep)
        if not len(batch):
            return []
        batch.row0 = self.rows
        self.rows += len(batch)
        if self.first_step is None:
            self.first_step = int(batch.steps[0])
        self.last_step = int(batch.steps[-1])
        step_trackers = [t for t in self.trackers if "step" in t.streams]
        pool = _tracker_pool() if len(batch) >= PARALLEL_ROWS else None
        if pool is None:
            outs = [t.update(batch) for t in step_trackers]
        else:
            # slowest first (by the last batch's time): the workers finish together, not with
            # one of them starting the largest tracker last
            order = sorted(range(len(step_trackers)), key=lambda i: -self._cost.get(i, 0.0))
            futs = {i: pool.submit(_timed, step_trackers[i], batch) for i in order}
            outs = []
            for i in range(len(step_trackers)):
                out, self._cost[i] = futs[i].result()
                outs.append(out)
        derived: dict[str, np.ndarray] = {}
        for out in outs:  # in tracker order, as inline: the same columns whatever the threading
            if out:
                derived.update(out)
        self.store.append(batch.steps, {**batch.columns, **derived})
        if pool is not None:  # a large batch's temporaries are freed: hand the memory back
            del batch, outs, derived
            trim()
        return []

    def feed_samples(self, raw: RawBatch, report: ReadReport) -> None:
        """Feed a batch of the per-response sample stream."""
        batch, keep = self._canonical(raw, report, "sample")
        batch.stream = "sample"
        report.rows_kept -= int((~keep).sum())
        if not keep.all():
            batch = batch.take(keep)
        batch.row0 = self.sample_rows
        self.sample_rows += len(batch)
        for tracker in self.trackers:
            if "sample" in tracker.streams:
                tracker.update(batch)

    def peek(self) -> Analysis:
        """The analysis so far, without disturbing the scan (live use: ``forensics watch``).

        Trackers and the step order are copied and finished; the per-step store is shared
        read-only.
        """
        import copy

        clone = copy.copy(self)
        clone.trackers = copy.deepcopy(self.trackers)
        clone.order = copy.deepcopy(self.order)
        clone.reports = copy.deepcopy(self.reports)
        return clone.finish()

    def finish(self) -> Analysis:
        """Close every tracker and assemble the analysis."""
        pool = _tracker_pool() if self.rows >= PARALLEL_ROWS else None
        if pool is None:
            results = [t.finish() for t in self.trackers]
        else:  # independent, as their updates are; results in tracker order
            results = list(pool.map(_finish, self.trackers))
        trim()
        findings: list[Finding] = [f for r in results for f in r.findings]
        self._name_source_keys(findings)
        stream_findings = self._stream_findings()
        findings.extend(stream_findings)
        findings.sort(key=Finding.sort_key)
        sample_series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for r in results:
            sample_series.update(r.series)
        health = health_scores(results, stream_findings, self.rows)
        steps = {
            "rows": self.rows,
            "first": self.first_step,
            "last": self.last_step,
            "sample_rows": self.sample_rows,
            "replays": [vars(r) for r in self.order.replays],
            "policy": "keep-first",
        }
        return Analysis(self.reports, self.mappings, self.meta, results, findings, health,
                        steps, self.store, sample_series, self.params)

    def _name_source_keys(self, findings: list[Finding]) -> None:
        """Evidence names the *source* keys (``objective/kl``), not only canonical columns.

        Trackers record the canonical columns they read (``Tracker.source_keys``, metric ->
        column); the column mapping of the inputs turns each column back into the key the trainer
        logged. A finding whose tracker did not list its metrics gets all the tracker's inputs.
        """
        to_source: dict[str, str] = {}
        for mapping in self.mappings.values():
            for src, dst in mapping.mapping.items():
                to_source.setdefault(dst, src)
        by_name = {t.name: t for t in self.trackers}
        for f in findings:
            keys = f.evidence.get("source_keys")
            if not keys:
                tracker = by_name.get(f.tracker)
                keys = dict(tracker.source_keys) if tracker is not None else {}
            if keys:
                f.evidence["source_keys"] = {k: to_source.get(v, v) for k, v in keys.items()}

    def _stream_findings(self) -> list[Finding]:
        out: list[Finding] = []
        spec = STREAM_RULES[0]
        for r in self.order.replays:
            out.append(Finding(
                rule=spec.id, severity=spec.severity, first_step=r.to_step,
                last_step=max(r.from_step, r.last_step), onset_step=r.from_step,
                message=(f"step went back from {r.from_step} to {r.to_step} at line {r.line}: "
                         f"{r.rows} replayed rows set aside (first record of each step kept)"),
                remedy=spec.remedy, tracker="stream",
                evidence={"went_back_from": r.from_step, "went_back_to": r.to_step,
                          "line": r.line, "replayed_rows": r.rows},
                explanation=spec.explanation))
        spec = STREAM_RULES[1]
        for rep in sorted(self.reports, key=lambda rep: rep.path):
            n = rep.rows_skipped - rep.skipped.get("step replayed", 0)
            if n <= 0:
                continue
            first = rep.issues[0] if rep.issues else None
            out.append(Finding(
                rule=spec.id, severity=spec.severity,
                first_step=self.first_step or 0, last_step=self.last_step or 0,
                onset_step=self.first_step or 0,
                message=f"{n} of {rep.rows_read} rows of {Path(rep.path).name} skipped"
                        + (f" (first: line {first.line}: {first.reason})" if first else ""),
                remedy=spec.remedy, tracker="stream",
                evidence={"path": rep.path, "rows_skipped": n, "rows_read": rep.rows_read,
                          "by_reason": {k: v for k, v in rep.skipped.items()
                                        if k != "step replayed"}},
                explanation=spec.explanation))
        return out


def _find_run_files(path: Path) -> tuple[Path, Path | None, Path | None]:
    """A run folder holds steps.*, optional samples.* and run.json; a file stands alone."""
    if path.is_dir():
        # steps.jsonl, steps.parquet, or steps.parquet.parts/ left by a writer that was killed
        # (a *.tmp is a write that never finished)
        steps = [p for p in sorted(path.iterdir())
                 if p.name.startswith("steps.") and not p.name.endswith(".tmp")]
        if not steps:
            from .readers import FORMATS
            if any(f.detect(path, b"") for f in FORMATS):  # a log folder, e.g. TensorBoard events
                return path, None, None
            raise InputError("run folder has no steps.jsonl or steps.parquet", path=str(path))
        samples = [p for p in sorted(path.iterdir())
                   if p.name.startswith("samples.") and not p.name.endswith(".tmp")]
        meta = path / "run.json"
        return steps[0], samples[0] if samples else None, meta if meta.exists() else None
    if not path.name.startswith("steps."):
        return path, None, None
    cands = sorted(path.parent.glob("samples.*"))
    meta_file = path.parent / "run.json"
    return path, cands[0] if cands else None, meta_file if meta_file.exists() else None


def scan_path(
    path: Path | str,
    *,
    samples: Path | str | None = None,
    meta: Path | str | None = None,
    config: Config | None = None,
    fmt: str | None = None,
    progress: Callable[[int], None] | None = None,
    trackers: Iterable[str] | None = None,
) -> Analysis:
    """Scan a step file or a run folder and return the analysis."""
    config = config or Config()
    steps_path, samples_path, meta_path = _find_run_files(Path(path))
    if samples is not None:
        samples_path = Path(samples)
    if meta is not None:
        meta_path = Path(meta)
    run_meta = load_run_meta(meta_path) if meta_path else RunMeta()
    scan = Scan(config, run_meta, trackers)
    source = open_source(steps_path, fmt, strict=config.strict)
    for raw in source.batches(config.batch_rows):
        scan.feed(raw, source.report)
        if progress is not None:
            progress(len(raw))
    if source.report.rows_kept == 0 and source.report not in scan.reports:
        scan.reports.append(source.report)
    if samples_path is not None:
        sample_source = open_source(samples_path, None, strict=config.strict)
        for raw in sample_source.batches(config.batch_rows):
            scan.feed_samples(raw, sample_source.report)
        if sample_source.report not in scan.reports:
            scan.reports.append(sample_source.report)
    if scan.rows == 0:
        r = source.report
        raise InputError(f"no usable rows ({r.rows_read} read, {r.rows_skipped} skipped"
                         + (f"; first problem: line {r.issues[0].line}: {r.issues[0].reason}"
                            if r.issues else "") + ")", path=str(steps_path))
    return scan.finish()

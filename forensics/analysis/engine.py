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

from ..config import Config, RunMeta, load_run_meta
from ..errors import InputError
from ..io.canonical import Batch, Canonicalizer
from ..io.formats import open_source
from ..io.memory import trim
from ..io.readers import RawBatch, ReadReport
from ..schema import ColumnMapping
from .context import infer_context
from .findings import STREAM_RULES, Finding
from .health import health_scores
from .result import Analysis
from .store import MetricsStore
from .trackers import TRACKERS, Tracker, build_params
from .trackers.base import TrackerResult

if TYPE_CHECKING:  # pandas is imported when a DataFrame is asked for, not by every scan
    pass

__all__ = ["Scan", "run_inputs", "scan_path"]

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
        # steps are exact int64 (the whole range: a first step of -2**63 is a step like any other)
        steps = steps.astype(np.int64, copy=False)
        prev = np.iinfo(np.int64).min if self.max_step is None else self.max_step
        running = np.maximum.accumulate(np.concatenate([np.array([prev], dtype=np.int64), steps]))
        keep = steps > running[:-1]
        if self.max_step is None:
            keep[0] = True
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


def _read_ahead(batches: Iterator[RawBatch]) -> Iterator[RawBatch]:
    """The batches, each read on a helper thread while the one before it is analysed.

    A 10,000,000-row sample stream spends about as long decoding as analysing; both release the
    GIL (pyarrow's decode, numpy's sorts and sums), so on two cores they overlap. One batch is
    read ahead at most (memory: two batches).
    """
    with ThreadPoolExecutor(1, thread_name_prefix="forensics-read-ahead") as ex:
        fut = ex.submit(next, batches, None)
        try:
            while (raw := fut.result()) is not None:
                fut = ex.submit(next, batches, None)
                yield raw
        finally:
            fut.cancel()


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
        # where each field the user set came from (the run context fills the others)
        self.explicit: dict[str, str] = {}
        for source, part in (("run.json", meta), ("config or command line", self.config.run)):
            for name in part.to_dict() if part is not None else {}:
                self.explicit[name] = source
        self.tracker_names = list(trackers) if trackers is not None else list(TRACKERS)
        # checked now (a bad config is a usage error before anything is read); the trackers
        # are built on the first batch, once the run context is known
        self.all_params = build_params(self.config.trackers, self.config.source)
        self.params = {name: dict(vars(self.all_params[name])) for name in self.tracker_names}
        self.trackers: list[Tracker] = []
        self.started = False
        self.context: dict[str, dict[str, Any]] = {}
        self.reports: list[ReadReport] = []
        self.mappings: dict[str, ColumnMapping] = {}
        self._canon: dict[str, Canonicalizer] = {}
        self.order = StepOrder()
        self.store = MetricsStore()
        self._cost: dict[int, float] = {}  # seconds each step tracker took on the last batch
        self.rows = 0
        self.sample_rows = 0
        self.first_step: int | None = None
        self.last_step: int | None = None

    def _start(self, raw: RawBatch | None, report: ReadReport | None) -> None:
        """Read the run context (first row's keys, the log's printed config) and build the
        trackers with it. Only the first row counts, so the context does not depend on how the
        stream is cut into batches."""
        self.started = True
        keys: list[str] = []
        if raw is not None and len(raw):
            keys = [k for k in raw.numeric if not (k in raw.missing and raw.missing[k][0])]
            keys += [k for k, v in raw.text.items() if v[0] is not None]
        fmt = report.format if report else ""
        if report is not None and report.converted_from:  # a converted log reads as its source
            fmt = report.converted_from.get("format") or fmt
            keys = [*keys, *report.converted_from.get("keys", [])]
        ctx = infer_context(keys, fmt, report.run_config if report else None,
                            report.run_config_origin if report else "")
        self.meta, self.context = ctx.apply(self.meta, self.explicit)
        self.trackers = [TRACKERS[name](self.all_params[name], self.meta) for name in self.tracker_names]

    def _canonical(self, raw: RawBatch, report: ReadReport, stream: str = "step") -> tuple[Batch, np.ndarray]:
        if report.path not in self._canon:
            self._canon[report.path] = Canonicalizer(stream)
            self.reports.append(report)
        canon = self._canon[report.path]
        batch, keep = canon(raw, report)
        self.mappings[report.path] = canon.mapping
        return batch, keep

    def feed(self, raw: RawBatch, report: ReadReport) -> list[Finding]:
        """Feed a batch of the step stream; return nothing new (findings come at finish)."""
        if not self.started:
            self._start(raw, report)
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
        if not self.started:
            self._start(None, None)
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
        if not self.started:
            self._start(None, None)
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
                        steps, self.store, sample_series, self.params, self.context,
                        self._coverage(results))

    def _coverage(self, results: list[TrackerResult]) -> dict[str, Any]:
        """How much of the log was checked: columns mapped and not, trackers active and why not."""
        mapped = sorted({dst for m in self.mappings.values() for dst in m.mapping.values()})
        unmapped = sorted({k for m in self.mappings.values() for k in [*m.unmapped, *m.shadowed]})
        trackers: dict[str, dict[str, Any]] = {}
        for tracker, r in zip(self.trackers, results):
            entry: dict[str, Any] = {"active": r.active}
            if not r.active:
                present = [c for c in tracker.requires if c in mapped]
                entry["reason"] = (f"not applicable to this run ({self.meta.family or 'unknown'} "
                                   f"family): {', '.join(present)} logged" if present else
                                   "none of its metrics is logged (needs one of: "
                                   + ", ".join(tracker.requires) + ")")
            trackers[tracker.name] = entry
        # throughput judges the machine and the windows only summarise: neither checks training
        judged = [n for n, e in trackers.items() if e["active"] and n not in ("throughput", "windows")]
        return {"checked": bool(judged), "trackers_judging": judged,
                "columns": {"mapped": len(mapped), "unmapped": len(unmapped),
                            "mapped_names": mapped, "unmapped_keys": unmapped}, "trackers": trackers}

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
            from ..io.formats import FORMATS
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


#: Most values (rows x columns) in one batch of the step stream. A 20-metric log keeps the full
#: ``batch_rows``; a 200-metric one (veRL) gets about 10,000 rows a batch: a batch is held
#: several times while it is analysed, and 65,536 rows of 200 columns peaked near 500 MB.
BATCH_CELLS = 1 << 21


def _row_width(path: Path) -> int | None:
    """Columns of a Parquet file (its schema) or keys of a JSON-lines log's first row (None:
    another format, or unknown)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        if head.startswith(b"PAR1"):
            import pyarrow.parquet as pq

            return len(pq.read_schema(path).names)
        if head.lstrip().startswith(b"{"):
            return head.lstrip().split(b"\n", 1)[0].count(b'":') or None
    except Exception:  # an estimate only: the reader reports what is wrong with the file
        return None
    return None


def batch_rows_for(path: Path, batch_rows: int) -> int:
    r"""``batch_rows``, fewer for a wide log (at most :data:`BATCH_CELLS` values a batch).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "steps.jsonl"
    >>> _ = p.write_text("{" + ", ".join(f'"m{i}": 1' for i in range(256)) + "}\n")
    >>> batch_rows_for(p, 65_536), batch_rows_for(p, 100)
    (8192, 100)
    """
    width = _row_width(path)
    return batch_rows if not width else min(batch_rows, max(1024, BATCH_CELLS // width))


def run_inputs(path: Path | str, samples: Path | str | None = None) -> list[Path]:
    """The files a scan of ``path`` reads: the step log, and the sample stream if any (for
    progress estimates; an unreadable path gives what can be told without reading it)."""
    try:
        steps, found, _ = _find_run_files(Path(path))
    except InputError:
        return [Path(path)]
    sample = Path(samples) if samples is not None else found
    return [steps] + ([sample] if sample is not None else [])


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
    """Scan a step file or a run folder and return the analysis.

    ``progress(rows)`` is called after each batch of either stream (rows of the batch).
    """
    config = config or Config()
    steps_path, samples_path, meta_path = _find_run_files(Path(path))
    if samples is not None:
        samples_path = Path(samples)
    if meta is not None:
        meta_path = Path(meta)
    run_meta = load_run_meta(meta_path) if meta_path else RunMeta()
    scan = Scan(config, run_meta, trackers)
    source = open_source(steps_path, fmt, strict=config.strict)
    for raw in source.batches(batch_rows_for(steps_path, config.batch_rows)):
        scan.feed(raw, source.report)
        if progress is not None:
            progress(len(raw))
    if source.report.rows_kept == 0 and source.report not in scan.reports:
        scan.reports.append(source.report)
    if samples_path is not None:
        sample_source = open_source(samples_path, None, strict=config.strict)
        for raw in _read_ahead(sample_source.batches(config.batch_rows)):
            scan.feed_samples(raw, sample_source.report)
            if progress is not None:
                progress(len(raw))
        if sample_source.report not in scan.reports:
            scan.reports.append(sample_source.report)
    if scan.rows == 0:
        r = source.report
        raise InputError(f"no usable rows ({r.rows_read} read, {r.rows_skipped} skipped"
                         + (f"; first problem: line {r.issues[0].line}: {r.issues[0].reason}"
                            if r.issues else "") + ")", path=str(steps_path))
    return scan.finish()

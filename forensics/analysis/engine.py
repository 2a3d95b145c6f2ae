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

A counter that goes back to the run's *first* step after the run had moved past it is not a
resume but a new run appended to the same log (a script started again, writing on): the run read
so far is set aside (counted in the read report as ``an earlier run in the same log``) and the
scan starts afresh with the new one, so the last run is the one analysed and runs are never
merged. Each such restart is a ``stream.step_replay`` finding with ``restart`` in its evidence.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import Config, RunMeta, load_run_meta, make_config
from ..errors import InputError
from ..io.canonical import Batch, Canonicalizer
from ..io.formats import batch_rows_for, open_source
from ..io.lean import resume_collection
from ..io.locate import RunFiles, locate
from ..io.memory import trim
from ..io.readers import RawBatch, ReadReport
from ..records import record
from ..schema import CORE_SIGNALS, ColumnMapping, suggest_canonical
from .context import infer_context
from .diagnosis.consequence import Consequences, StoreCourses, apply_consequences
from .diagnosis.diagnose import diagnose
from .diagnosis.health import health_scores
from .diagnosis.recommendations import fit_remedy
from .diagnosis.series import store_plots
from .findings import Finding, Severity
from .result import Analysis
from .store import MetricsStore
from .stream import stream_findings
from .trackers import TRACKERS, Tracker, build_params
from .trackers.base import TrackerResult, tracker_score
from .trackers.custom import CustomRules, config_rules

if TYPE_CHECKING:  # concurrent.futures (and logging with it) is loaded by the scans that use threads
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["Scan", "map_not_found_text", "scan_frame", "scan_path"]

@record
class Replay:
    """A stretch of rows whose steps went back to ones already read (a resumed job's replay):
    where it starts, which steps, how many rows."""

    line: int
    from_step: int
    to_step: int
    rows: int = 0
    last_step: int = 0
    #: the counter went back to the run's first step after the run had moved on: a new run
    #: appended to the log (the rows before it are set aside: ``rows``), not a resume
    restart: bool = False


class StepOrder:
    """Keeps the first record of each step; counts and describes replays (see module doc)."""

    def __init__(self) -> None:
        self.max_step: int | None = None
        self.replays: list[Replay] = []
        self._in_replay = False
        #: the first step of the run being read
        self.first: int | None = None

    def restart_at(self, steps: np.ndarray) -> int | None:
        """The position of the first of ``steps`` at or before the run's first step, once the run
        has moved past it: the counter restarted (a new run appended to the log), or None.

        >>> o = StepOrder(); _ = o.apply(np.array([0, 1, 2]), np.array([1, 2, 3]))
        >>> o.restart_at(np.array([3, 4, 0, 1])), o.restart_at(np.array([3, 4]))
        (2, None)
        """
        if not len(steps):
            return None
        first = self.first if self.first is not None else int(steps[0])
        moved = np.maximum.accumulate(np.concatenate([[self.max_step if self.max_step is not None
                                                       else first], steps.astype(np.int64)]))[:-1] > first
        hit = np.flatnonzero(moved & (steps <= first))
        return int(hit[0]) if len(hit) else None

    def apply(self, steps: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """Mask of the rows to keep (steps greater than every step seen before)."""
        if len(steps) == 0:
            return np.zeros(0, dtype=bool)
        # steps are exact int64 (the whole range: a first step of -2**63 is a step like any other)
        steps = steps.astype(np.int64, copy=False)
        if self.first is None:
            self.first = int(steps[0])
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
#: would cost more than it saves. So do the batches of a source that parses ahead on a thread of
#: its own when that leaves fewer than two cores (see :func:`_tracker_pool`).
PARALLEL_ROWS = 4096
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _tracker_pool(busy: int = 0) -> ThreadPoolExecutor | None:
    """The shared worker pool; None when fewer than two cores are left once ``busy`` are taken
    (a source parsing ahead on its own thread takes one: on two cores the trackers then run
    inline, where two tracker threads would fight that thread and each other for the GIL. A
    million-row JSONL scan took a CPU-second more, 0.4 s of wall clock, on the pool). Created
    once; its threads idle between scans, and a scan stays a pure function of its inputs (each
    tracker runs on one thread at a time and only touches its own state and the read-only
    batch)."""
    global _POOL
    cores = os.cpu_count() or 1
    if cores - busy < 2:
        return None
    workers = min(cores, 4)
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="forensics-tracker")
    return _POOL


def _read_ahead(batches: Iterator[RawBatch]) -> Iterator[RawBatch]:
    """The batches, each read on a helper thread while the one before it is analysed.

    A 10,000,000-row sample stream spends about as long decoding as analysing; both release the
    GIL (pyarrow's decode, numpy's sorts and sums), so on two cores they overlap. One batch is
    read ahead at most (memory: two batches).
    """
    from concurrent.futures import ThreadPoolExecutor

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


def _close_finish(tracker: Tracker) -> TrackerResult:
    tracker.close()
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
        self.custom_rules = config_rules(self.config)
        self.trackers: list[Tracker] = []
        self.started = False
        self.context: dict[str, dict[str, Any]] = {}
        self.reports: list[ReadReport] = []
        self.mappings: dict[str, ColumnMapping] = {}
        self._canon: dict[str, Canonicalizer] = {}
        self.order = StepOrder()
        #: counters that restarted at the run's first step: the runs set aside before the last
        self.restarts: list[Replay] = []
        self.store = MetricsStore()
        self._cost: dict[int, float] = {}  # seconds each step tracker took on the last batch
        self.rows = 0
        self.sample_rows = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        #: cores the step source keeps busy parsing ahead while a batch is analysed (set by the
        #: feeding loop from the source's ``reads_ahead``)
        self.reading_cores = 0

    def _start(self, raw: RawBatch | None, report: ReadReport | None) -> None:
        """Read the run context (first row's keys, the log's printed config) and build the
        trackers with it. Only the first row counts, so the context does not depend on how the
        stream is cut into batches."""
        self.started = True
        resume_collection()  # the command line's start is over (forensics.io.lean)
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
        if self.custom_rules:  # the config's own [[rules]], run like the built-in ones
            self.trackers.append(CustomRules(self.custom_rules, self.meta))

    def _canonical(self, raw: RawBatch, report: ReadReport, stream: str = "step") -> tuple[Batch, np.ndarray]:
        if report.path not in self._canon:
            self._canon[report.path] = Canonicalizer(stream, self.config.columns)
            self.reports.append(report)
        canon = self._canon[report.path]
        batch, keep = canon(raw, report)
        self.mappings[report.path] = canon.mapping
        return batch, keep

    def feed(self, raw: RawBatch, report: ReadReport) -> list[Finding]:
        """Feed a batch of the step stream; return nothing new (findings come at finish). A
        counter that restarts at the run's first step is a new run appended to the log: the run
        before it is set aside and the scan goes on with the new one (the last run is analysed)."""
        if not self.started:
            self._start(raw, report)
        batch, keep = self._canonical(raw, report)
        while True:
            cut = self.order.restart_at(batch.steps[keep])
            if cut is None:
                return self._feed(batch, keep, report)
            at = int(np.flatnonzero(keep)[cut])
            before = np.arange(len(keep)) < at
            self._feed(batch.take(before), keep[before], report)
            self._new_run(batch, at, report)
            batch, keep = batch.take(~before), keep[~before]

    def _new_run(self, batch: Batch, at: int, report: ReadReport) -> None:
        """Set the run read so far aside (a new one starts at row ``at`` of ``batch``) and start
        afresh: the trackers, the per-step store and the step order."""
        line = int(batch.lines[at]) if batch.lines is not None else 0
        set_aside = self.rows
        report.skipped["an earlier run in the same log"] += set_aside
        report.rows_kept -= set_aside
        self.restarts.append(Replay(line, int(self.last_step if self.last_step is not None else 0),
                                    int(batch.steps[at]), set_aside, restart=True))
        self.trackers = [TRACKERS[name](self.all_params[name], self.meta) for name in self.tracker_names]
        if self.custom_rules:
            self.trackers.append(CustomRules(self.custom_rules, self.meta))
        self.store, self.order, self._cost = MetricsStore(), StepOrder(), {}
        self.rows, self.first_step, self.last_step = 0, None, None

    def _feed(self, batch: Batch, keep: np.ndarray, report: ReadReport) -> list[Finding]:
        """Feed one run's rows (``keep``: the rows the canonical layer kept)."""
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
        pool = _tracker_pool(self.reading_cores) if len(batch) >= PARALLEL_ROWS else None
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
        if len(batch) >= PARALLEL_ROWS:  # a large batch's temporaries are freed: hand the memory back
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

        A tracker's ``finish`` only reads its state (the tracker contract), so nothing is copied
        but the scan's own attributes; what waits for a later row (the responses of the step
        still being logged, the open segment) waits on.
        """
        return copy.copy(self)._analyse(close=False)

    def finish(self) -> Analysis:
        """End the streams (each tracker's ``close``), close every tracker and assemble the
        analysis. A second call gives the same analysis."""
        return self._analyse(close=True)

    def _analyse(self, close: bool) -> Analysis:
        if not self.started:
            self._start(None, None)
        pool = _tracker_pool() if self.rows >= PARALLEL_ROWS else None
        work = _close_finish if close else Tracker.finish
        with contextlib.ExitStack() as stack:
            plots = None
            if pool is None:
                results = [work(t) for t in self.trackers]
            else:  # independent, as their updates are; results in tracker order
                # the plots read the per-step store alone: drawn on a thread of their own while
                # the trackers finish (a million-row scan's finish 0.47-0.58 -> 0.37-0.41 s)
                from concurrent.futures import ThreadPoolExecutor

                beside = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="forensics-plots"))
                plots = beside.submit(store_plots, self.store).result
                results = list(pool.map(work, self.trackers))
                trim()  # a large scan's freed batches go back to the system (a small one holds little)
            return self._assemble(results, plots)

    def _assemble(self, results: list[TrackerResult], plots: Callable[[], dict[str, Any]] | None) -> Analysis:
        self._note_dropped_columns()
        findings: list[Finding] = [f for r in results for f in r.findings]
        self._judge_consequences(findings, results)
        for f in findings:  # a remedy speaks of the run's kind of algorithm only (no advantages in DPO)
            f.remedy = fit_remedy(f.remedy, self.meta.family)
        self._name_source_keys(findings)
        streams = self._stream_findings()
        findings.extend(streams)
        findings.sort(key=Finding.sort_key)
        sample_series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for r in results:
            sample_series.update(r.series)
        health = health_scores(results, streams, self.rows, self.first_step, self.last_step)
        coverage = self._coverage(results)
        if not coverage["checked"]:
            health["overall"] = None  # no core signal judged: no score either, not a perfect one
        steps = {
            "rows": self.rows,
            "first": self.first_step,
            "last": self.last_step,
            "sample_rows": self.sample_rows,
            "replays": [vars(r) for r in [*self.restarts, *self.order.replays]],
            "policy": "keep-first",
        }
        analysis = Analysis(self.reports, self.mappings, self.meta, results, findings, health,
                            steps, self.store, sample_series, self.params, self.context, coverage)
        analysis.diagnosis = diagnose(analysis, plots)
        return analysis

    def _note_dropped_columns(self) -> None:
        """Say when the per-step table left columns out (a log that adds keys as it goes)."""
        store = self.store
        if store.dropped_count and self.reports:
            first = ", ".join(list(store.dropped)[:5])
            what = "left out of the per-step table (metrics.csv)"
            notes = self.reports[0].notes  # a peek said it before, with the count of its time
            notes[:] = [n for n in notes if what not in n]
            notes.append(f"{store.dropped_count} further column(s) {what} once it held {store.max_columns} "
                         f"(a log that adds keys as it goes; first: {first}); the trackers read every row")

    def _judge_consequences(self, findings: list[Finding], results: list[TrackerResult]) -> None:
        """Severity from consequence (analysis.diagnosis.consequence), then the changed trackers re-scored."""
        if not self.rows:
            return
        # the series the checks read, from the store as they ask (a clean run reads nothing back)
        courses = StoreCourses(self.store) if any(f.severity is not Severity.INFO for f in findings) else {}
        extent = Consequences(int(self.first_step or 0), int(self.last_step or 0), self.rows, courses,
                              self.meta.family)
        changed = {f.tracker for f in apply_consequences(findings, extent)}
        for tracker, r in zip(self.trackers, results):
            if r.name in changed:
                r.findings.sort(key=Finding.sort_key)
                if r.score is not None:
                    r.score = tracker_score(r.findings, tracker.rows, r.coverage)

    def _coverage(self, results: list[TrackerResult]) -> dict[str, Any]:
        """How much of the log was checked: columns mapped and not, trackers active and why not."""
        mapped = sorted({dst for m in self.mappings.values() for dst in m.mapping.values()})
        unmapped = sorted({k for m in self.mappings.values() for k in [*m.unmapped, *m.shadowed]})
        trackers: dict[str, dict[str, Any]] = {}
        for tracker, r in zip(self.trackers, results):
            entry: dict[str, Any] = {"active": r.active}
            if not r.active:
                present = [c for c in tracker.starts() if c in mapped]
                entry["reason"] = (tracker.skip_reason or (
                    f"{', '.join(present)} logged but without a usable value (missing, non-finite "
                    "or rounded to zero in the log)" if present else
                    "none of its metrics is logged (needs one of: " + ", ".join(tracker.starts()) + ")"))
            trackers[tracker.name] = entry
        # throughput judges the machine and the windows only summarise: neither checks training
        judged = [n for n, e in trackers.items() if e["active"] and n not in ("throughput", "windows")]
        core = [c for c in CORE_SIGNALS if c in mapped]
        columns: dict[str, Any] = {"mapped": len(mapped), "unmapped": len(unmapped),
                                   "mapped_names": mapped, "unmapped_keys": unmapped, "core_signals": core}
        suggested = self._suggested_maps(set(mapped))
        if suggested:
            columns["suggested_maps"] = suggested
        missing = self._maps_not_found()
        if missing:
            columns["maps_not_found"] = missing
        absent = self._rules_not_found({*mapped, *(k for m in self.mappings.values() for k in m.unmapped)})
        if absent:
            columns["rule_metrics_not_found"] = absent
        # a verdict needs a core training signal: a learning rate alone judges nothing of training
        return {"checked": bool(judged) and bool(core), "trackers_judging": judged, "columns": columns,
                "trackers": trackers}

    def _suggested_maps(self, mapped: set[str]) -> list[dict[str, Any]]:
        """The log's unrecognised numeric keys with the canonical name each most likely means (a
        name already read is not suggested again), and whether that is sure or a guess."""
        out = []
        for m in self.mappings.values():
            for key in m.unmapped:
                hit = suggest_canonical(key)
                if hit is not None and hit[0] not in mapped:
                    out.append({"key": key, "canonical": hit[0], "sure": hit[1]})
        return sorted(out, key=lambda s: (not s["sure"], s["key"]))[:12]  # the sure ones first

    def _rules_not_found(self, present: set[str]) -> list[dict[str, Any]]:
        """The user's rules (``[[rules]]``) whose metric the log does not have, each with the
        closest columns it does have: such a rule judges nothing, and says so instead of never
        firing in silence; under ``strict`` a :class:`UsageError`."""
        if not self.config.rules:
            return []
        from ..errors import closest
        from .trackers.custom import config_rules

        out = [{"rule": r.id, "metric": c.metric, "closest": closest(c.metric, present)}
               for r in config_rules(self.config) for c in r.conditions if c.metric not in present]
        if out and self.config.strict:
            from ..errors import UsageError

            raise UsageError("; ".join(map(rule_metric_not_found_text, out)) + " (an error under --strict)")
        return out

    def _maps_not_found(self) -> list[dict[str, Any]]:
        """The user's column maps (``[columns]``, ``--map``) whose source key no input has, each
        with the closest keys the log does have; under ``strict`` a :class:`UsageError`."""
        from ..errors import closest

        seen = {k for m in self.mappings.values() for k in [*m.mapping, *m.unmapped, *m.shadowed]}
        out = [{"source": c.source, "canonical": c.canonical, "origin": c.origin,
                "closest": closest(c.source, seen)}
               for c in self.config.columns.values() if c.source not in seen]
        if out and self.config.strict:
            from ..errors import UsageError

            raise UsageError("; ".join(map_not_found_text(m) for m in out) + " (an error under --strict)")
        return out

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
        return stream_findings([*self.restarts, *self.order.replays], self.reports, self.first_step or 0,
                               self.last_step or 0)


def map_not_found_text(m: dict[str, Any]) -> str:
    """One line for a column map whose key the log does not have (``coverage.columns.maps_not_found``).

    >>> map_not_found_text({"source": "gnrom", "canonical": "grad_norm", "origin": "--map",
    ...                     "closest": ["gnorm"]})
    "--map gnrom=grad_norm: the log has no key 'gnrom' (closest: 'gnorm'); grad_norm is read as the log names it"
    """
    near = ", ".join(repr(k) for k in m.get("closest") or [])
    return (f"{m['origin']} {m['source']}={m['canonical']}: the log has no key {m['source']!r} "
            f"({'closest: ' + near if near else 'no key close to it; -v lists the keys'}); "
            f"{m['canonical']} is read as the log names it")


def rule_metric_not_found_text(m: dict[str, Any]) -> str:
    """One line for a user rule whose metric the log does not have
    (``coverage.columns.rule_metrics_not_found``).

    >>> rule_metric_not_found_text({"rule": "custom.tps", "metric": "tps", "closest": ["tps_all"]})
    "rule custom.tps reads 'tps': the log has no such column (closest: 'tps_all'); the rule judges nothing"
    """
    near = ", ".join(repr(k) for k in m.get("closest") or [])
    return (f"rule {m['rule']} reads {m['metric']!r}: the log has no such column "
            f"({'closest: ' + near if near else 'no column close to it; -v lists the keys'}); "
            "the rule judges nothing")


def _feed_sources(scan: Scan, source: Any, sample_source: Any, config: Config,
                  progress: Callable[[int], None] | None, where: str, step_batch_rows: int) -> Analysis:
    """Feed the step source (batches of ``step_batch_rows``) and the sample source (or None, read
    one batch ahead) to ``scan`` and finish it; ``progress(rows)`` after each batch of either."""
    for raw in source.batches(step_batch_rows):
        scan.reading_cores = 1 if getattr(source, "reads_ahead", False) else 0
        scan.feed(raw, source.report)
        if progress is not None:
            progress(len(raw))
    if source.report.rows_kept == 0 and source.report not in scan.reports:
        scan.reports.append(source.report)
    if sample_source is not None:
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
                            if r.issues else "") + ")", path=where)
    return scan.finish()


def scan_path(
    path: Path | str | RunFiles,
    *,
    samples: Path | str | None = None,
    meta: Path | str | None = None,
    config: Config | None = None,
    fmt: str | None = None,
    progress: Callable[[int], None] | None = None,
    trackers: Iterable[str] | None = None,
    config_path: Path | str | None = None,
    kl_target: float | None = None,
    kl_unit: str | None = None,
    strict: bool | None = None,
    batch_rows: int | None = None,
    columns: dict[str, str] | None = None,
    maps: Iterable[str] = (),
    gpus: float | None = None,
    gpu_hours: float | None = None,
    gpu_price: float | None = None,
    run: str | None = None,
) -> Analysis:
    """Scan a step file or a run folder and return the analysis: what ``forensics scan`` does.

    Parameters
    ----------
    path
        a log file, a run folder, a trainer's output_dir, a TensorBoard or W&B run folder, a
        folder holding one log (see :mod:`forensics.io.locate` for what is read in a folder); or
        the :class:`~forensics.io.locate.RunFiles` :func:`~forensics.io.locate.locate` found.
    samples, meta
        the sample stream and run metadata (default: ``samples.*`` and ``run.json`` beside it).
    config
        a :class:`~forensics.config.Config`; or ``config_path``, a TOML file (``--config``).
    fmt, run
        the input format (``--input-format``; default: detected from content); the run to read
        in a file that holds several (a W&B chart export; ``--run``).
    kl_target, kl_unit, strict, batch_rows, gpus, gpu_hours, gpu_price
        as ``--kl-target``, ``--kl-unit``, ``--strict``, ``--batch-rows``, ``--gpus``, ...
    columns
        your own key names, source key -> canonical name (``[columns]``); ``maps`` the same
        as ``--map`` strings (``"my_reward=reward_mean"``).
    trackers, progress
        run only these trackers (default: all); called after each batch with its number of rows.
    """
    config = make_config(config, config_path=config_path, kl_target=kl_target, kl_unit=kl_unit,
                         strict=strict, batch_rows=batch_rows, columns=columns, maps=maps, gpus=gpus,
                         gpu_hours=gpu_hours, gpu_price=gpu_price)
    files = path if isinstance(path, RunFiles) else locate(path)
    steps_path = files.steps
    samples_path = Path(samples) if samples is not None else files.samples
    meta_path = Path(meta) if meta is not None else files.meta
    run_meta = load_run_meta(meta_path) if meta_path else RunMeta()
    scan = Scan(config, run_meta, trackers)
    source = open_source(steps_path, fmt, strict=config.strict, run=run)
    source.report.notes[:0] = files.notes
    sample_source = None if samples_path is None else open_source(samples_path, None, strict=config.strict)
    return _feed_sources(scan, source, sample_source, config, progress, str(steps_path),
                         batch_rows_for(steps_path, config.batch_rows))


def scan_frame(frame: Any, *, samples: Any = None, meta: RunMeta | dict[str, Any] | None = None,
               name: str = "<DataFrame>", config: Config | None = None,
               trackers: Iterable[str] | None = None, **options: Any) -> Analysis:
    """Scan a pandas DataFrame of step rows (one per optimizer step, a ``step`` column or a
    named index; your key names are mapped as a log's are): a notebook's own table.

    ``samples`` is an optional DataFrame of the sample stream; ``meta`` run metadata (a
    :class:`~forensics.config.RunMeta` or a dict as in run.json); ``options`` are
    :func:`scan_path`'s (``kl_target``, ``columns``, ``maps``, ``strict``, ...).

    >>> import pandas as pd
    >>> df = pd.DataFrame({"iteration": range(50), "gnorm": [1.0] * 50})
    >>> a = scan_frame(df, columns={"iteration": "step", "gnorm": "grad_norm"})
    >>> a.steps["rows"], a.mappings["<DataFrame>"].mapping["gnorm"]
    (50, 'grad_norm')
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"scan_frame takes a pandas DataFrame, not {type(frame).__name__}", path=name)
    config = make_config(config, **options)
    run_meta = RunMeta.from_dict(meta, source="meta") if isinstance(meta, dict) else (meta or RunMeta())
    scan = Scan(config, run_meta, trackers)
    from ..io.readers.frame import FrameSource

    sample_source = None if samples is None else FrameSource(samples, name + " samples")
    return _feed_sources(scan, FrameSource(frame, name), sample_source, config, None, name, config.batch_rows)

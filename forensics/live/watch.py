"""Follow a growing log and report each finding once, when it appears.

``forensics watch PATH`` polls the file. Line-oriented formats (JSONL, veRL console and JSONL,
LLaMA-Factory, OpenRLHF, DeepSpeed-Chat, HF console) are read incrementally: only the bytes
appended since the last poll (a gzip file is decompressed as it grows), a partial last line
waits for its newline, and a file that shrinks or is replaced (truncation, rotation, a veRL file
logger restarting) is read again from the start (the replayed steps then show up as a
``stream.step_replay`` finding). Whole-document formats (``trainer_state.json``, TensorBoard,
W&B exports, Parquet) are re-read when they change and only rows with a step beyond the last one
fed are passed on.

A stream (``-`` for stdin, a FIFO, a pipe) is read as a stream when its format is line-oriented:
it is opened without blocking, each poll takes what has arrived, and ``--once`` reads it to its
end (or to ``--timeout``); a whole-document format on a stream is refused. Nothing waits past
``--timeout``. What a poll brings is fed in batches of the scan's size, so catching up with a
long log costs what a scan of it costs.

Rows go to the same trackers as an offline scan, through :class:`forensics.analysis.engine.Scan` in small
batches; after each batch the analysis so far (``Scan.peek``) is compared with what was already
announced (:class:`LiveFindings`): a finding is announced when it first appears and again when it
escalates (a higher severity, a new episode, or an episode that doubled in length), the alerts
of one poll in step order. ``--jsonl`` appends each alert as a JSON line, ``--notify`` posts it
to a webhook (:mod:`forensics.live.notify`: a background thread, never blocking the loop),
``--fail-on`` stops at the first finding of that severity (exit 1).

The path is found as a scan and a fleet find it (:func:`forensics.io.locate.locate`): a run
folder's ``steps.*`` with its ``run.json``, a trainer's output_dir's ``trainer_state.json``, the
one log of a folder. A
path that does not exist, or a folder with no log, is an error at once (exit 3) unless
``wait`` is set, when it is waited for.
"""

from __future__ import annotations

import json
import math
import os
import select
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.engine import Scan
from ..analysis.findings import Finding, Severity
from ..config import Config, RunMeta, load_run_meta
from ..errors import FormatError, InputError, UsageError
from ..io.adapters import LINE_PARSERS
from ..io.canonical import Canonicalizer
from ..io.formats import HEAD_BYTES, detect_format, detect_head, open_source
from ..io.inputs import BOM, GZIP_MAGIC, STDIN, GzipFeed, is_stream
from ..io.limits import MAX_HEAD_BYTES, MAX_LINE_BYTES
from ..io.locate import locate
from ..io.output import Outputs
from ..io.readers import RawBatch, ReadReport
from ..io.readers.arrow import budget_groups, rows_to_raw
from .notify import Notifier

__all__ = ["LiveFindings", "Watcher"]


class LiveFindings:
    """Announces the findings of a running :class:`Scan`: once when one first appears, and again
    when it escalates (its severity rises, it has a new episode, or its latest episode has at
    least doubled in length since it was announced). :meth:`check` peeks at the analysis so far
    (without disturbing the scan) and echoes the alerts of this check in step order.

    A finding is known by its rule and tracker. ``sink`` (when given) receives each alert as a
    dict (``event``: ``new`` or ``escalated``); ``printed`` is the set of ``(rule, onset_step)``
    first announced.
    """

    def __init__(self, scan: Scan, echo: Callable[[str], None] = print,
                 min_severity: Severity = Severity.INFO,
                 sink: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.scan = scan
        self.echo = echo
        self.min_severity = min_severity
        self.sink = sink
        self.printed: set[tuple[str, int]] = set()
        #: (tracker, rule) -> (severity rank, episodes, first step, last step) last announced
        self.announced: dict[tuple[str, str], tuple[int, int, int, int]] = {}
        #: every finding of the last check (announced or not: below ``min_severity``)
        self.current: list[Finding] = []

    @staticmethod
    def _shape(f: Finding) -> tuple[int, int, int, int]:
        ranges = f.episode_ranges()
        first, last, _ = ranges[-1]
        return f.severity.rank, len(ranges), first, last

    def _escalated(self, before: tuple[int, int, int, int], now: tuple[int, int, int, int]) -> str:
        rank0, n0, first0, last0 = before
        rank, n, first, last = now
        if rank > rank0:
            return "severity"
        if n > n0:
            return "new episode"
        if first == first0 and (last - first + 1) >= 2 * (last0 - first0 + 1) and last > last0:
            return "range"
        return ""

    def check(self) -> list[Finding]:
        if self.scan.rows == 0:
            return []
        self.current = self.scan.peek().findings
        alerts: list[tuple[int, str, Finding, dict[str, Any]]] = []
        for f in self.current:
            if f.severity.rank < self.min_severity.rank:
                continue
            key = (f.tracker, f.rule)
            shape = self._shape(f)
            before = self.announced.get(key)
            if before is None:
                event: dict[str, Any] = {"event": "new"}
            else:
                why = self._escalated(before, shape)
                if not why:
                    continue
                event = {"event": "escalated", "why": why,
                         "previous_severity": _severity_of_rank(before[0]),
                         "previous_steps": [before[2], before[3]]}
            self.announced[key] = shape
            self.printed.add((f.rule, f.onset_step))
            alerts.append((shape[2], f.rule, f, event))
        alerts.sort(key=lambda a: (a[0], a[1]))
        for _, _, f, event in alerts:
            self.echo(format_finding(f, event))
            if self.sink is not None:
                self.sink({**event, **f.to_dict(), "rows_analysed": self.scan.rows})
        return [f for _, _, f, _ in alerts]


def _severity_of_rank(rank: int) -> str:
    return next(s.value for s in Severity if s.rank == rank)


def format_finding(f: Finding, event: dict[str, Any] | None = None) -> str:
    """One finding as the live commands print it (two lines when it has a remedy to act on); an
    escalation says what it escalated from."""
    first, last, onset = f.episode_ranges()[-1]
    text = f"[step {onset}] {f.severity.value.upper():<8} {f.rule}: {f.message}"
    if event and event.get("event") == "escalated":
        a, b = event["previous_steps"]
        text += (f" (escalated: {event['why']}; was {event['previous_severity']}, steps {a}-{b}; "
                 f"now steps {first}-{last})")
    if f.severity is not Severity.INFO:
        text += f"\n           -> {f.remedy}"
    return text


class Watcher:
    """Polls one file (or stream); :meth:`poll` reads what is new, feeds it and returns the new
    findings.

    ``echo`` receives every line of output (``click.echo`` in the CLI, a list in tests).
    """

    def __init__(self, path: Path | str, *, fmt: str | None = None, config: Config | None = None,
                 meta: RunMeta | None = None, echo: Callable[[str], None] = print,
                 min_severity: Severity = Severity.INFO, batch_rows: int | None = None,
                 status: Callable[[str], None] | None = None, meta_path: Path | str | None = None,
                 wait: bool = False, jsonl: Path | str | None = None,
                 fail_on: Severity | None = None, notify: Notifier | None = None) -> None:
        self.given = Path(path)
        self.path = Path(path)
        self.fmt = fmt
        self.config = config or Config()
        self.meta = meta
        self.meta_path = Path(meta_path) if meta_path is not None else None
        self.wait = wait
        self.fail_on = fail_on
        #: the first finding that reached ``fail_on`` (the watch then stops)
        self.failed: Finding | None = None
        self.jsonl = Path(jsonl) if jsonl is not None else None
        self.echo = echo
        #: start and stop lines (``-q`` silences them; alerts always go to ``echo``)
        self.status = status or echo
        self.min_severity = min_severity
        self.located = False
        self.why_not: InputError | None = None  # why the log cannot be read yet
        self._locate(must=False)
        self._check_alerts_path()
        self.scan = Scan(self.config, self._run_meta())
        #: rows per batch fed to the trackers (a poll's rows are fed in batches of this size)
        self.batch_rows = batch_rows or self.config.batch_rows
        self.report = ReadReport(str(self.path))
        self.started = False
        #: posts each alert to a webhook from a background thread (``--notify``)
        self.notify = notify
        self.live = LiveFindings(self.scan, echo, min_severity,
                                 self._alert if self.jsonl or self.notify else None)
        self.findings: list[Finding] = []
        # line mode
        self.parser: Any = None
        self.offset = 0
        self.lineno = 0
        self.tail = b""
        self.skipping = False  # inside a line longer than MAX_LINE_BYTES
        self.ident: tuple[int, int] | None = None
        self.idle_flushed = True
        self.gunzip: GzipFeed | None = None
        self.first_bytes = True
        # stream mode (stdin, a FIFO, a pipe)
        self.stream = is_stream(self.path)
        self.fd: int | None = None
        self.eof = False
        self.got_data = False
        self.head = b""  # what a stream held before its format was known
        # re-read mode
        self.signature: tuple[int, float] | None = None
        self.step_reader = Canonicalizer("step", self.config.columns)
        self.last_step: int | None = None
        self.fed_bad_lines: set[int] = set()
        self.src_skipped: Counter[str] = Counter()
        self.src_issues: set[tuple[int, str]] = set()

    # -- where, and with which metadata ---------------------------------------------------
    def _locate(self, must: bool = True) -> bool:
        """Find the log in the given path as a scan does (a run folder's steps.* and run.json,
        a trainer's output_dir): True once found. A missing path or a folder with no log is an
        :class:`InputError` when ``must`` (:meth:`run` without ``wait``), else waited for."""
        if self.located:
            return True
        if str(self.given) == STDIN or is_stream(self.given):
            self.located = True
            return True
        if not self.given.exists():
            if self.wait or not must:
                self.why_not = InputError("no such file or directory (waiting for it)", path=str(self.given))
                return False
            raise InputError("no such file or directory (forensics watch --wait waits for a log that does "
                             "not exist yet)", path=str(self.given))
        try:
            run = locate(self.given)
        except InputError as exc:
            if (self.wait or not must) and self.given.is_dir():
                self.why_not = exc
                return False
            raise
        self.path = run.steps
        if self.meta_path is None and run.meta is not None:
            self.meta_path = run.meta
        self.located = True
        return True

    def _run_meta(self) -> RunMeta | None:
        """``--meta`` or the run.json found beside the log, under what the caller gave."""
        if self.meta_path is None:
            return self.meta
        found = load_run_meta(self.meta_path)
        return found if self.meta is None else found.merged(self.meta)

    def _check_alerts_path(self) -> None:
        """Refuse (:class:`UsageError`) an alerts file that is the watched log or the run's
        metadata (by file identity, links included), a link or a special file."""
        if self.jsonl is not None:
            logs = (p for p in (self.given, self.path, self.meta_path) if p is not None and not p.is_dir())
            Outputs(logs).check(self.jsonl)

    def _alert(self, alert: dict[str, Any]) -> None:
        """Where each alert goes besides the terminal: the ``--jsonl`` file, the webhook."""
        if self.jsonl is not None:
            self._append_alert(alert)
        # one alert per finding and per rise in severity: a new episode of a known finding, or
        # one that grew, is printed and written to --jsonl, not posted to the channel
        if self.notify is not None and (alert.get("event") != "escalated" or alert.get("why") == "severity"):
            self.notify.send({"path": str(self.path), **alert})

    def _append_alert(self, alert: dict[str, Any]) -> None:
        assert self.jsonl is not None
        self._check_alerts_path()
        try:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)
            with open(self.jsonl, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"time": time.time(), "path": str(self.path), **alert}, sort_keys=True,
                                    default=str) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot append alerts to {self.jsonl}: {exc.strerror or exc}") from None

    # -- format -----------------------------------------------------------------------
    def _resolve_format(self, final: bool = False, deadline: float | None = None) -> bool:
        if not self.located:
            if not self._locate(must=False):
                return False
            self.scan = Scan(self.config, self._run_meta())  # nothing was fed yet
            self.live.scan = self.scan
            self.report.path = str(self.path)
            self.stream = is_stream(self.path)
        if self.stream:
            return self._resolve_stream(final, deadline)
        if self.fmt is not None:
            self._start()
            return True
        try:
            size = self.path.stat().st_size if self.path.is_file() else 0
        except OSError:
            size = 0
        if not self.path.exists():
            self.why_not = InputError("no such file or directory", path=str(self.path))
            return False
        if self.path.is_file() and size == 0:
            self.why_not = FormatError("file is empty", path=str(self.path))
            return False
        try:
            self.fmt = detect_format(self.path)
        except FormatError as exc:
            if self.path.is_file() and size < HEAD_BYTES:
                self.why_not = exc
                return False  # too little written yet to tell; try again next poll
            raise
        except InputError as exc:
            self.why_not = exc
            return False
        self._start()
        return True

    def _resolve_stream(self, final: bool, deadline: float | None) -> bool:
        self._open_stream()
        self.head += self._read_stream(block=final, deadline=deadline, limit=MAX_HEAD_BYTES - len(self.head))
        if self.fmt is None:
            text = self.head
            if text[:2] == GZIP_MAGIC:
                text = GzipFeed().feed(text)
            text = text.removeprefix(BOM)
            if not text.strip():
                self.why_not = FormatError("stream is empty" if self.eof else "nothing read from the stream yet",
                                           path=str(self.path))
                return False
            self.fmt = detect_head(self.path, text)
            if self.fmt is None:
                self.why_not = FormatError("unrecognised content", path=str(self.path))
                if self.eof or len(self.head) >= MAX_HEAD_BYTES:
                    raise self.why_not
                return False
        self._start()
        return True

    def _start(self) -> None:
        self.started = True
        self.report.format = self.fmt or ""
        self.status(f"watching {self.path} (format {self.fmt})")
        if self.fmt in LINE_PARSERS:
            self.parser = LINE_PARSERS[self.fmt](self.report, self.config.strict)
        elif self.stream:
            raise InputError(f"format {self.fmt} is read whole: it can be watched as a file, not as a stream "
                             "(stdin, FIFO or pipe)", path=str(self.path))

    # -- streams ------------------------------------------------------------------------
    def _open_stream(self) -> None:
        if self.fd is not None:
            return
        try:
            if str(self.path) == STDIN:
                self.fd = sys.stdin.fileno()
                os.set_blocking(self.fd, False)
            else:  # O_NONBLOCK: opening a FIFO does not wait for its writer
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot open: {getattr(exc, 'strerror', None) or exc}", path=str(self.path)) from None

    def _read_stream(self, *, block: bool, limit: int = 1 << 62, deadline: float | None = None) -> bytes:
        """What the stream holds now (``block``: up to its end, or until ``deadline``)."""
        assert self.fd is not None
        out = bytearray()
        while not self.eof and len(out) < limit:
            wait = 0.0
            if block:
                wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                if block and (deadline is None or time.monotonic() < deadline):
                    continue
                break
            try:
                data = os.read(self.fd, min(1 << 20, limit - len(out)))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise InputError(f"read failed: {exc.strerror or exc}", path=str(self.path)) from None
            if not data:  # the writer closed its end, or no writer has opened the FIFO yet
                if self.got_data or str(self.path) == STDIN:
                    self.eof = True
                    break
                if block and (deadline is None or time.monotonic() < deadline):
                    time.sleep(0.05)
                    continue
                break
            self.got_data = True
            out += data
        return bytes(out)

    # -- polling ------------------------------------------------------------------------
    def poll(self, final: bool = False, deadline: float | None = None) -> list[Finding]:
        """Read what was appended, feed it, return (and echo) the findings that are new."""
        if not self.started:
            if not self._resolve_format(final, deadline):
                return []
        if self.parser is None:
            return self._new_findings() if self._poll_reread() else []
        rows = self._poll_lines(final, deadline)
        fed = False
        for chunk in budget_groups(rows, max(self.batch_rows, 1), lambda r: r[1].keys()):
            self.report.rows_read += len(chunk)
            self.report.rows_kept += len(chunk)
            self.scan.feed(rows_to_raw([r for _, r in chunk],
                                       np.array([ln for ln, _ in chunk], dtype=np.int64)), self.report)
            fed = True
        if not fed:
            return []
        return self._new_findings()

    def _new_findings(self) -> list[Finding]:
        new = self.live.check()
        self.findings.extend(new)
        if self.fail_on is not None and self.failed is None:
            self.failed = next((f for f in self.live.current if f.severity.rank >= self.fail_on.rank), None)
        return new

    def _read_file(self) -> bytes:
        """The bytes appended to the file since the last poll (decompressed for gzip)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return b""
        ident = (st.st_dev, st.st_ino)
        if self.ident is not None and (ident != self.ident or st.st_size < self.offset):
            self.echo(f"{self.path}: file truncated or replaced; reading it again from the start")
            self.offset, self.lineno, self.tail, self.skipping = 0, 0, b"", False
            self.gunzip, self.first_bytes = None, True
            self.parser = type(self.parser)(self.report, self.config.strict)
        self.ident = ident
        if st.st_size <= self.offset:
            return b""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(st.st_size - self.offset)
        except OSError as exc:
            raise InputError(f"read failed: {exc.strerror or exc}", path=str(self.path)) from None
        self.offset += len(data)
        return data

    def _poll_lines(self, final: bool, deadline: float | None = None) -> list[tuple[int, dict[str, Any]]]:
        if self.stream:
            data, self.head = self.head + self._read_stream(block=final, deadline=deadline), b""
        else:
            data = self._read_file()
        if data and self.first_bytes:
            self.first_bytes = False
            if data[:2] == GZIP_MAGIC:
                self.gunzip = GzipFeed()
        if data and self.gunzip is not None:
            data = self.gunzip.feed(data)
            if self.gunzip.broken and self.gunzip.broken not in self.report.notes:
                self.report.notes.append(self.gunzip.broken)
        rows: list[tuple[int, dict[str, Any]]] = []
        if data:
            if self.lineno == 0 and not self.tail and data.startswith(BOM):
                data = data[len(BOM):]
            buf = self.tail + data
            parts = buf.split(b"\n")
            self.tail = parts.pop()  # b"" when the data ended with a newline
            for part in parts:
                if self.skipping:  # the end of an over-long line
                    self.skipping = False
                    continue
                self.lineno += 1
                rows.extend(self.parser.line(self.lineno, part.decode("utf-8", errors="replace").rstrip("\r")))
            if len(self.tail) > MAX_LINE_BYTES and not self.skipping:
                self.lineno += 1
                self._too_long()
                self.tail, self.skipping = b"", True
            elif self.skipping:
                self.tail = b""
            self.idle_flushed = False
        elif not self.idle_flushed:
            # nothing new since the last poll: release rows a parser holds back for a late line
            rows.extend(self.parser.flush())
            self.idle_flushed = True
        if final:
            if self.tail:
                self.lineno += 1
                rows.extend(self.parser.line(self.lineno, self.tail.decode("utf-8", errors="replace")))
                self.tail = b""
            rows.extend(self.parser.flush())
        return rows

    def _too_long(self) -> None:
        reason = f"line longer than {MAX_LINE_BYTES} bytes (skipped unread)"
        self.report.rows_read += 1
        self.report.skip(self.lineno, reason, "line too long")

    def _poll_reread(self) -> list[int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        sig = (st.st_size, st.st_mtime)
        if self.path.is_dir():
            files = sorted(self.path.rglob("*"))
            sig = (sum(p.stat().st_size for p in files if p.is_file()), max((p.stat().st_mtime for p in files),
                                                                           default=0.0))
        if sig == self.signature:
            return []
        self.signature = sig
        source = open_source(self.path, self.fmt, strict=self.config.strict)
        fed: list[int] = []
        for raw in source.batches(self.batch_rows):
            new = self._after_last_step(raw)
            if new is None:
                continue
            self.report.rows_read += len(new)
            self.report.rows_kept += len(new)
            self.scan.feed(new, self.report)
            fed.append(len(new))
        self._take_source_report(source.report)
        return fed

    def _take_source_report(self, src: ReadReport) -> None:
        """Add what a re-read's source skipped that earlier re-reads had not (rows and issues)."""
        new = src.skipped - self.src_skipped
        self.report.skipped.update(new)
        self.report.rows_read += sum(new.values())
        self.src_skipped = Counter(src.skipped)
        for issue in src.issues:
            if (issue.line, issue.reason) not in self.src_issues:
                self.src_issues.add((issue.line, issue.reason))
                self.report.issues.append(issue)
        for note in src.notes:
            if note not in self.report.notes:
                self.report.notes.append(note)

    def _after_last_step(self, raw: RawBatch) -> RawBatch | None:
        """The rows of a re-read not fed before: a step beyond the last one fed, or (once) a row
        whose step is unusable, which the scan then reports. The step is read from the key the
        scan reads it from (the scan's :class:`Canonicalizer`, the config's column maps included)."""
        found = self.step_reader.steps(raw, ReadReport(""))
        if found is None:
            return raw if self.last_step is None else None
        steps, ok = found
        keep = ok.copy()
        if self.last_step is not None:
            keep &= steps > self.last_step
        if keep.any():
            self.last_step = int(steps[keep].max())
        for i in np.flatnonzero(~ok).tolist():  # fed once, so the scan reports them once
            line = int(raw.lines[i])
            if line not in self.fed_bad_lines:
                self.fed_bad_lines.add(line)
                keep[i] = True
        if not keep.any():
            return None
        return raw if keep.all() else raw.take(keep)

    def close_notify(self, timeout: float = 10.0) -> None:
        """Wait (at most ``timeout`` seconds) for the webhook's queued alerts; say how many
        were not delivered."""
        if self.notify is not None:
            lost = self.notify.close(timeout)
            if lost:
                self.echo(f"warning: {lost}")

    # -- loop ---------------------------------------------------------------------------
    def run(self, *, interval: float = 2.0, once: bool = False, timeout: float | None = None,
            sleep: Callable[[float], None] = time.sleep) -> list[Finding]:
        """Poll until interrupted, or once, or until ``timeout`` seconds have passed.

        Raises :class:`~forensics.errors.UsageError` for an interval that is not a positive
        number or a timeout that is not a finite one, and
        :class:`~forensics.errors.InputError` when nothing could be read by the end (no such
        file, empty, unrecognised content, no usable rows).
        """
        if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
            raise UsageError(f"--interval must be a positive number of seconds, not {interval!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and math.isfinite(timeout)
                                        and timeout >= 0):
            raise UsageError(f"--timeout must be a finite number of seconds >= 0, not {timeout!r}")
        if not self.wait and not self.located:
            self._locate()  # a missing path or a folder with no log: an error now, not a wait
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        while True:
            done = once or (deadline is not None and time.monotonic() >= deadline) or (self.stream and self.eof)
            self.poll(final=done, deadline=deadline)
            if done or self.failed is not None:
                break
            pause = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
            sleep(pause)
        if self.parser is not None:
            self.parser.finish_notes()
        self.close_notify()
        rows = self.scan.rows
        self.status(f"stopped: {rows} step rows analysed, {len(self.findings)} alert(s)")
        if not self.started:
            raise self.why_not or InputError("nothing could be read", path=str(self.path))
        if rows == 0:
            r = self.report
            raise InputError(f"no usable rows ({r.rows_read} read, {r.rows_skipped} skipped"
                             + (f"; first problem: line {r.issues[0].line}: {r.issues[0].reason}"
                                if r.issues else "") + ")", path=str(self.path))
        return self.findings

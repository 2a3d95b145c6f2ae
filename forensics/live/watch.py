"""Follow a growing log and report each finding once, when it appears.

``forensics watch PATH`` polls the file. Line-oriented formats (JSONL, veRL console and JSONL,
LLaMA-Factory, OpenRLHF, DeepSpeed-Chat, HF console) are read incrementally: only the bytes
appended since the last poll, a partial last line waits for its newline, and a file that shrinks
or is replaced (truncation, rotation, a veRL file logger restarting) is read again from the
start (the replayed steps then show up as a ``stream.step_replay`` finding). Whole-document
formats (``trainer_state.json``, TensorBoard, W&B exports, Parquet) are re-read when they change
and only rows with a step beyond the last one fed are passed on.

Rows go to the same trackers as an offline scan, through :class:`forensics.analysis.engine.Scan` in small
batches; after each batch the analysis so far (``Scan.peek``) is compared with what was already
printed, keyed by ``(rule, onset_step)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.engine import Scan
from ..analysis.findings import Finding, Severity
from ..config import Config, RunMeta
from ..errors import FormatError, InputError
from ..io.formats import HEAD_BYTES, detect_format, open_source
from ..io.readers import RawBatch, ReadReport
from ..io.readers.arrow import rows_to_raw
from ..io.readers.jsonl import parse_json_object
from ..schema import resolve_columns

__all__ = ["LiveFindings", "Watcher"]


class LiveFindings:
    """Prints each finding of a running :class:`Scan` once, when it first appears.

    A finding is known by ``(rule, onset_step)``; :meth:`check` peeks at the analysis so far
    (without disturbing the scan) and echoes the findings not seen before.
    """

    def __init__(self, scan: Scan, echo: Callable[[str], None] = print,
                 min_severity: Severity = Severity.INFO) -> None:
        self.scan = scan
        self.echo = echo
        self.min_severity = min_severity
        self.printed: set[tuple[str, int]] = set()

    def check(self) -> list[Finding]:
        if self.scan.rows == 0:
            return []
        new: list[Finding] = []
        for f in self.scan.peek().findings:
            key = (f.rule, f.onset_step)
            if key in self.printed or f.severity.rank < self.min_severity.rank:
                continue
            self.printed.add(key)
            new.append(f)
            self.echo(format_finding(f))
        return new


def format_finding(f: Finding) -> str:
    """One finding as the live commands print it (two lines when it has a remedy to act on)."""
    text = f"[step {f.onset_step}] {f.severity.value.upper():<8} {f.rule}: {f.message}"
    if f.severity is not Severity.INFO:
        text += f"\n           -> {f.remedy}"
    return text


class _JsonlParser:
    """Generic JSONL, one object per line (the canonical step stream, RLDK-style rows)."""

    def __init__(self, report: ReadReport, strict: bool = False) -> None:
        self.report = report

    def line(self, lineno: int, text: str) -> list[tuple[int, dict[str, Any]]]:
        s = text.strip()
        if not s:
            return []
        obj, reason = parse_json_object(s)
        if obj is None:
            self.report.rows_read += 1
            self.report.skip(lineno, reason, "malformed line")
            return []
        return [(lineno, obj)]

    def flush(self) -> list[tuple[int, dict[str, Any]]]:
        return []

    def finish_notes(self) -> None:
        pass


def _line_parsers() -> dict[str, Any]:
    from ..io.adapters import LINE_PARSERS

    return {"jsonl": _JsonlParser, **LINE_PARSERS}


class Watcher:
    """Polls one file; :meth:`poll` reads what is new, feeds it and returns the new findings.

    ``echo`` receives every line of output (``click.echo`` in the CLI, a list in tests).
    """

    def __init__(self, path: Path | str, *, fmt: str | None = None, config: Config | None = None,
                 meta: RunMeta | None = None, echo: Callable[[str], None] = print,
                 min_severity: Severity = Severity.INFO, batch_rows: int = 16) -> None:
        self.path = Path(path)
        self.fmt = fmt
        self.config = config or Config()
        self.scan = Scan(self.config, meta)
        self.echo = echo
        self.min_severity = min_severity
        self.batch_rows = batch_rows
        self.report = ReadReport(str(self.path))
        self.started = False
        self.live = LiveFindings(self.scan, echo, min_severity)
        self.findings: list[Finding] = []
        # line mode
        self.parser: Any = None
        self.offset = 0
        self.lineno = 0
        self.tail = b""
        self.ident: tuple[int, int] | None = None
        self.idle_flushed = True
        # re-read mode
        self.signature: tuple[int, float] | None = None
        self.last_step: int | None = None

    # -- format -----------------------------------------------------------------------
    def _resolve_format(self) -> bool:
        if self.fmt is not None:
            self._start()
            return True
        try:
            size = self.path.stat().st_size if self.path.is_file() else 0
        except OSError:
            return False
        if self.path.is_file() and size == 0:
            return False
        try:
            self.fmt = detect_format(self.path)
        except FormatError:
            if self.path.is_file() and size < HEAD_BYTES:
                return False  # too little written yet to tell; try again next poll
            raise
        except InputError:
            return False
        self._start()
        return True

    def _start(self) -> None:
        self.started = True
        self.report.format = self.fmt or ""
        self.echo(f"watching {self.path} (format {self.fmt})")
        parsers = _line_parsers()
        if self.fmt in parsers:
            self.parser = parsers[self.fmt](self.report, self.config.strict)

    # -- polling ------------------------------------------------------------------------
    def poll(self, final: bool = False) -> list[Finding]:
        """Read what was appended, feed it, return (and echo) the findings that are new."""
        if not self.started:
            if not self._resolve_format():
                return []
        if self.parser is None:
            return self._new_findings() if self._poll_reread() else []
        rows = self._poll_lines(final)
        fed = False
        if rows:
            for i in range(0, len(rows), self.batch_rows):
                chunk = rows[i:i + self.batch_rows]
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
        return new

    def _poll_lines(self, final: bool) -> list[tuple[int, dict[str, Any]]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        ident = (st.st_dev, st.st_ino)
        if self.ident is not None and (ident != self.ident or st.st_size < self.offset):
            self.echo(f"{self.path}: file truncated or replaced; reading it again from the start")
            self.offset, self.lineno, self.tail = 0, 0, b""
            self.parser = type(self.parser)(self.report, self.config.strict)
        self.ident = ident
        data = b""
        if st.st_size > self.offset:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(st.st_size - self.offset)
            self.offset += len(data)
        rows: list[tuple[int, dict[str, Any]]] = []
        if data:
            buf = self.tail + data
            parts = buf.split(b"\n")
            self.tail = parts.pop()  # b"" when the data ended with a newline
            for part in parts:
                self.lineno += 1
                rows.extend(self.parser.line(self.lineno, part.decode("utf-8", errors="replace").rstrip("\r")))
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
        step_key: str | None = None
        for raw in source.batches(self.batch_rows):
            if step_key is None:
                step_key = resolve_columns([*raw.numeric]).source_of("step") or ""
            new = self._after_last_step(raw, step_key)
            if new is None:
                continue
            self.report.rows_kept += len(new)
            self.scan.feed(new, self.report)
            fed.append(len(new))
        self.report.rows_read = source.report.rows_read
        self.report.skipped = source.report.skipped
        self.report.issues = source.report.issues
        self.report.notes = source.report.notes
        return fed

    def _after_last_step(self, raw: RawBatch, step_key: str) -> RawBatch | None:
        if not step_key or step_key not in raw.numeric:
            return raw if self.last_step is None else None
        steps = raw.numeric[step_key]
        keep = np.isfinite(steps)
        if self.last_step is not None:
            keep &= steps > self.last_step
        if keep.any():
            self.last_step = int(np.nanmax(steps[keep]))
        if not keep.any():
            return None
        if keep.all():
            return raw
        return RawBatch({k: v[keep] for k, v in raw.numeric.items()},
                        {k: v[keep] for k, v in raw.missing.items()},
                        {k: v[keep] for k, v in raw.text.items()}, raw.lines[keep])

    # -- loop ---------------------------------------------------------------------------
    def run(self, *, interval: float = 2.0, once: bool = False, timeout: float | None = None,
            sleep: Callable[[float], None] = time.sleep) -> list[Finding]:
        """Poll until interrupted, or once, or until ``timeout`` seconds have passed."""
        start = time.monotonic()
        while True:
            done = once or (timeout is not None and time.monotonic() - start >= timeout)
            self.poll(final=done)
            if done:
                break
            sleep(interval)
        if self.parser is not None:
            self.parser.finish_notes()
        rows = self.scan.rows
        self.echo(f"stopped: {rows} step rows analysed, {len(self.findings)} finding(s) reported")
        return self.findings

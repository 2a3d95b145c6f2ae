"""W&B run folders as ``wandb`` leaves them on disk (``wandb/run-*/``, ``wandb/offline-run-*/``).

A run folder holds the full history in its binary ``run-<id>.wandb`` file, the captured console
in ``files/output.log`` and (online runs) the last values in ``files/wandb-summary.json``.

* **The binary history** (when the ``wandb`` package is installed: ``pip install
  rl-forensics[wandb]``): a 7-byte header (``:W&B``, magic ``0xBEE1``, a version byte), then
  LevelDB-log framing in 32 KiB blocks (chunks of ``crc32 | length | type``; FULL, or FIRST,
  MIDDLE..., LAST; a block's tail shorter than a chunk header is zero padding). The framing is
  read here; each payload is a ``Record`` protobuf decoded with the ``wandb`` package's own
  message classes (``wandb.proto.wandb_internal_pb2``). History records become rows under their
  keys (``train/loss``, ``_step``, ``_runtime``...) and are then read as the W&B API history is
  (:class:`~forensics.io.adapters.wandb.WandbHistorySource`: the step is ``train/global_step``
  when logged, else ``_step``). A record whose checksum fails is skipped to the next block, a
  file cut short (a killed run) gives every complete record before the cut; both are noted.
* **Without the package**: ``files/output.log`` is read in whatever console format it holds
  (a Hugging Face, veRL or OpenRLHF console), and when it holds none, ``wandb-summary.json`` is
  one row of the run's last values; a note says the full history needs the package.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import FormatError, InputError, StrictModeError
from ..limits import MAX_ROW_KEYS
from ..readers.base import RawBatch, ReadReport
from ..readers.jsonl import parse_json_value
from ._common import RowSource, step_value
from .wandb import WandbHistorySource

__all__ = ["WandbOfflineSource", "binary_readable", "detect", "find_run", "read_records", "run_record"]

HEADER = struct.Struct("<4sHB")
MAGIC = 0xBEE1
CHUNK = struct.Struct("<IHB")
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: A payload larger than this is not a history record (a bound on what one record may claim).
MAX_RECORD = 256 << 20
_RUN_PREFIXES = ("run-", "offline-run-")


def _is_run_dir(path: Path) -> bool:
    if not path.name.startswith(_RUN_PREFIXES) or not path.is_dir():
        return False
    return binary_file(path) is not None or (path / "files" / "output.log").is_file() \
        or (path / "files" / "wandb-summary.json").is_file()


def find_run(path: Path) -> Path | None:
    """The W&B run folder ``path`` is, or holds (``wandb/latest-run``, else the newest
    ``wandb/*run-*``): ``None`` when there is none."""
    if _is_run_dir(path):
        return path
    for base in (path, path / "wandb") if path.name != "wandb" else (path,):
        if not base.is_dir():
            continue
        latest = base / "latest-run"
        if latest.is_dir() and _is_run_dir(latest.resolve()):
            return latest.resolve()
        runs = sorted((p for p in base.iterdir() if _is_run_dir(p)),
                      key=lambda p: p.name.removeprefix("offline-"))  # run-YYYYMMDD_HHMMSS-id
        if runs:
            return runs[-1]
    return None


def detect(path: Path, head: bytes) -> bool:
    """A W&B run folder, or a ``wandb/`` folder of them (never a folder that merely holds one:
    :func:`forensics.io.locate.locate` chooses between the logs of a folder)."""
    return path.is_dir() and (_is_run_dir(path) or (path.name == "wandb" and find_run(path) is not None))


def binary_file(run: Path) -> Path | None:
    files = sorted(run.glob("*.wandb"))
    return files[0] if files else None


def _record_class() -> Any:
    try:
        from wandb.proto import wandb_internal_pb2
    except Exception:  # not installed, or a build that cannot load: the console is read instead
        return None
    return wandb_internal_pb2.Record  # type: ignore[attr-defined]


def binary_readable(run: Path) -> bool:
    """Whether the run's ``.wandb`` history can be decoded here (file present, package installed)."""
    return binary_file(run) is not None and _record_class() is not None


def run_record(folder: Path) -> dict[str, str]:
    """The id, project and entity a W&B run folder's ``.wandb`` file records (empty when the
    file or the ``wandb`` package is missing, or it holds no run record)."""
    binary = binary_file(folder) if folder.is_dir() else None
    cls = _record_class() if binary is not None else None
    if binary is None or cls is None:
        return {}
    for _, data in read_records(binary, ReadReport(str(binary))):
        rec = cls()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "run":
            return {k: v for k, v in (("run_id", rec.run.run_id), ("project", rec.run.project),
                                      ("entity", rec.run.entity)) if v}
    return {}


_CUT = ("the .wandb file ends inside a record (the run was stopped while writing): every complete record "
        "before it was read")


def _verifies(buf: bytes, pos: int, seeds: dict[int, int]) -> bool:
    """Whether a whole chunk whose checksum and type are right starts at ``pos`` of ``buf``."""
    crc, length, kind = CHUNK.unpack_from(buf, pos)
    end = pos + CHUNK.size + length
    return kind in seeds and end <= len(buf) and zlib.crc32(buf[pos + CHUNK.size : end], seeds[kind]) == crc


def _resync(buf: bytes, start: int, seeds: dict[int, int]) -> int | None:
    """The offset of the next whole, verified chunk of the block ``buf`` after ``start``."""
    for pos in range(start, len(buf) - CHUNK.size + 1):
        if buf[pos + 6] in seeds and _verifies(buf, pos, seeds):
            return pos
    return None


def _blocks(fh: Any) -> Iterator[tuple[bytes, bool]]:
    """The 32 KiB blocks of a ``.wandb`` file after its header (the first is shorter by the
    header): ``(block, whether it is whole)``."""
    size = BLOCK - HEADER.size
    while buf := fh.read(size):
        yield buf, len(buf) == size
        if len(buf) < size:
            return
        size = BLOCK


def read_records(path: Path, report: ReadReport, strict: bool = False) -> Iterator[tuple[int, bytes]]:
    """``(record number, payload)`` of a ``.wandb`` file (see the module doc for the framing).

    A chunk whose checksum or type is wrong loses its record (a skipped row with its reason);
    reading goes on at the next chunk of the block that verifies, so the records after it are
    kept (one corrupt chunk is one lost record, not the rest of its block).
    """
    seeds = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None
    with fh:
        head = fh.read(HEADER.size)
        if len(head) < HEADER.size:
            raise FormatError("not a W&B history file (shorter than its header)", path=str(path))
        ident, magic, _version = HEADER.unpack(head)
        if ident != b":W&B" or magic != MAGIC:
            raise FormatError(f"not a W&B history file (header {head!r})", path=str(path))
        number = 0
        parts: list[bytes] = []
        for buf, full in _blocks(fh):
            pos = 0
            while len(buf) - pos >= CHUNK.size:
                crc, length, kind = CHUNK.unpack_from(buf, pos)
                if kind == 0 and length == 0 and crc == 0:  # zeros: the end of what was written
                    return
                if not _verifies(buf, pos, seeds):
                    if pos + CHUNK.size + length > len(buf) and not full:
                        report.notes.append(_CUT)  # the last block, cut inside this chunk
                        return
                    number += 1
                    if strict:
                        raise StrictModeError(f"W&B record {number}: checksum or chunk type wrong",
                                              path=str(path), line=number)
                    report.rows_read += 1
                    report.skip(number, f"W&B record {number}: checksum or chunk type wrong; read on at the "
                                "next chunk that verifies", "corrupt record")
                    parts = []
                    nxt = _resync(buf, pos + 1, seeds)
                    if nxt is None:
                        break
                    pos = nxt
                    continue
                data = buf[pos + CHUNK.size : pos + CHUNK.size + length]
                pos += CHUNK.size + length
                if kind == FULL:
                    number += 1
                    yield number, data
                elif kind == FIRST:
                    parts = [data]
                elif parts and sum(map(len, parts)) + length > MAX_RECORD:
                    number, parts = number + 1, []
                    report.rows_read += 1
                    report.skip(number, f"W&B record {number}: larger than {MAX_RECORD} bytes", "value past a limit")
                elif kind == MIDDLE and parts:
                    parts.append(data)
                elif kind == LAST and parts:
                    number += 1
                    whole = b"".join([*parts, data])
                    parts = []
                    yield number, whole
            if not full and (parts or buf[pos:].strip(b"\x00")):
                report.notes.append(_CUT)
                return
        if parts:
            report.notes.append(_CUT)


def _history_row(history: Any) -> tuple[dict[str, Any], str]:
    """The keys and values of a history record; ``(row, reason)`` with a reason when a value
    is past a bound of :mod:`forensics.io.limits` (nesting, digits): the record is skipped."""
    row: dict[str, Any] = {}
    if len(history.item) > MAX_ROW_KEYS:
        return row, f"more than {MAX_ROW_KEYS} keys in one record"
    for item in history.item:
        key = item.key or "/".join(item.nested_key)
        value, why = parse_json_value(item.value_json)
        if why.startswith("invalid JSON"):
            value = item.value_json  # a plain string
        elif why:
            return row, f"value of {key!r}: {why}"
        row[key] = value
    return row, ""


class _BinaryHistory(WandbHistorySource):
    """The history records of a ``.wandb`` file, read as W&B's API history."""

    format_name = "wandb-offline"

    def _raw_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        record_class = _record_class()
        others = 0
        for number, data in read_records(self.path, self.report, self.strict):
            rec = record_class()
            try:
                rec.ParseFromString(data)
            except Exception as exc:  # a payload the protobuf rejects
                if self.strict:
                    raise StrictModeError(f"W&B record {number}: {exc}", path=str(self.path), line=number) from None
                self.report.rows_read += 1
                self.report.skip(number, f"W&B record {number} cannot be decoded: {exc}", "corrupt record")
                continue
            if rec.WhichOneof("record_type") != "history":
                others += 1
                continue
            row, why = _history_row(rec.history)
            if why:
                if self.strict:
                    raise StrictModeError(f"W&B record {number}: {why}", path=str(self.path), line=number)
                self.report.rows_read += 1
                self.report.skip(number, f"W&B record {number}: {why}", "value past a limit")
                continue
            if "_step" not in row and rec.history.HasField("step"):
                row["_step"] = rec.history.step.num
            yield number, row
        self.report.notes.append(f"W&B binary history {self.path.name} (read with the wandb package's "
                                 f"record definitions); {others} non-history record(s) (config, summary, "
                                 "system) passed over")


class _SummaryRow(RowSource):
    """``wandb-summary.json``: the run's last values, one row."""

    format_name = "wandb-offline"

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            data, why = parse_json_value(self.path.read_bytes())
        except OSError as exc:
            raise InputError(f"cannot read the W&B summary: {exc.strerror or exc}", path=str(self.path)) from None
        if why:
            raise InputError(f"cannot read the W&B summary: {why}", path=str(self.path))
        if not isinstance(data, dict):
            raise InputError("the W&B summary is not a JSON object", path=str(self.path))
        key = next((k for k in ("train/global_step", "trainer/global_step", "global_step", "_step") if k in data),
                   None)
        step, why = step_value(data.get(key)) if key else (None, "no _step")
        if step is None:
            raise InputError(f"the W&B summary has no usable step ({why})", path=str(self.path))
        row = {k: v for k, v in data.items() if not isinstance(v, (dict, list)) and k != key}
        self.report.notes.append("only the run's last values (wandb-summary.json): install the wandb package "
                                 "(pip install rl-forensics[wandb]) to read the full history from the .wandb file")
        yield 1, {"step": step, **row}


class WandbOfflineSource:
    """A W&B run folder: the binary history when it can be decoded, else the console, else the
    summary (see the module doc). ``report`` names the file that was read."""

    def __init__(self, path: Path, strict: bool = False) -> None:
        run = find_run(Path(path))
        if run is None:
            raise InputError("not a W&B run folder (no run-*.wandb, files/output.log or wandb-summary.json)",
                             path=str(path))
        self.run = run
        self.inner: Any
        binary = binary_file(run)
        log = run / "files" / "output.log"
        summary = run / "files" / "wandb-summary.json"
        note = ""
        if binary is not None and _record_class() is not None:
            self.inner = _BinaryHistory(binary, strict)
        elif log.is_file() and (found := self._console(log)) is not None:
            fmt, opener = found
            self.inner = opener(log, strict)
            note = (f"W&B run {run.name}: the console it captured (files/output.log, {fmt})"
                    + (": install the wandb package (pip install rl-forensics[wandb]) to read the full "
                       "history from the .wandb file" if binary is not None else ""))
        elif summary.is_file():
            self.inner = _SummaryRow(summary, strict)
        else:
            raise FormatError("W&B run folder without a readable history: the .wandb file needs the wandb package "
                              "(pip install rl-forensics[wandb]); files/output.log holds no console format forensics "
                              "reads and there is no wandb-summary.json", path=str(run))
        self.report: ReadReport = self.inner.report
        self.report.format = "wandb-offline"
        if note:
            self.report.notes.append(note)

    @staticmethod
    def _console(log: Path) -> tuple[str, Any] | None:
        """The console format ``output.log`` holds (the line-oriented adapters, in their
        detection order) and its source class, or None."""
        from ..inputs import read_head
        from . import deepspeed_chat, hf_console, openrlhf, verl

        try:
            head = read_head(log)
        except (OSError, InputError):
            return None
        consoles = (("verl-console", verl.detect_console, verl.VerlConsoleSource),
                    ("openrlhf-console", openrlhf.detect, openrlhf.OpenRLHFSource),
                    ("deepspeed-chat", deepspeed_chat.detect, deepspeed_chat.DeepSpeedChatSource),
                    ("hf-console", hf_console.detect, hf_console.HFConsoleSource))
        if head.strip():
            for name, detect_fmt, source in consoles:
                if detect_fmt(log, head):
                    return name, source
        return None

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        return self.inner.batches(batch_rows)

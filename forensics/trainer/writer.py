"""Trainer-side event writer: the step stream, the sample stream and run metadata of one run.

A run folder holds ``steps.jsonl`` (or ``steps.parquet``), optionally ``samples.jsonl`` (or
``samples.parquet``) and ``run.json``; ``forensics scan <folder>`` reads it back. Column names are
the canonical ones of :mod:`forensics.schema` (``kl``, ``grad_norm``, ``reward/<component>``, ...).

Values may be Python numbers, numpy numbers and arrays, or torch tensors (torch is optional: this
module imports without it). A log call gathers its tensors on their device with one ``stack`` (or
``cat``) per device and dtype into a byte buffer, never a kernel per value, and a flush moves each
device's buffer to the host in **one** asynchronous copy (pinned memory on CUDA), read once it has
landed. Logging therefore never synchronises the GPU, and values stay exact in their own dtype
(:mod:`forensics.trainer.device_values` has the details).

Crash safety: rows are buffered in memory and written every ``flush_every`` rows. A JSONL flush
writes whole lines and flushes the OS buffer, so a crash loses at most the rows logged since the
last flush (on CUDA also those of a flush whose device-to-host copy had not landed), and a
half-written last line (a kill in the middle of a write) is the only damage a reader has to
skip; reopening a file in ``resume`` mode trims it. A Parquet flush writes one row
group; the footer is written when the writer is closed, which ``close()``, leaving a ``with``
block (also on an exception) and interpreter exit (``atexit``) all do. A hard kill (SIGKILL, OOM)
before that leaves a Parquet file without footer, so prefer JSONL where hard kills are likely.

Example
-------
>>> import tempfile
>>> from forensics.trainer.writer import RunWriter
>>> folder = tempfile.mkdtemp()
>>> meta = {"algorithm": "ppo", "kl_target": 6.0, "kl_target_unit": "sequence"}
>>> with RunWriter(folder, meta=meta, timestamp=False) as w:
...     for step in range(3):
...         w.log_step(step, kl=0.1 * step, reward_mean=1.0)
...     w.log_samples(2, {"length": [3, 5], "reward": [0.5, 1.0], "completion": ["ab", "abcd"]})
>>> open(f"{folder}/steps.jsonl").read().splitlines()[1]
'{"step":1,"kl":0.1,"reward_mean":1.0}'
"""

from __future__ import annotations

import atexit
import json
import operator
import os
import shutil
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from ..config import RunMeta
from ..errors import UsageError
from . import device_values as dv

__all__ = ["RunWriter", "to_host"]

_torch: Any
try:  # torch is optional: the writer must serve numpy-only trainers too
    import torch as _torch
except ImportError:  # pragma: no cover - exercised only where torch is absent
    _torch = None

FORMATS = ("jsonl", "parquet")

#: Columns that are written as integers (everything else numeric is float64).
_INT_COLUMNS = frozenset({"step", "group"})
#: Host values a row takes as they are (bool is not among them: it is written as 0/1).
_PLAIN = frozenset({float, int, str, type(None)})
#: ``set(map(type, values))`` of a mapping of plain tensors (torch is optional).
_TENSORS_ONLY = {_torch.Tensor} if _torch is not None else set()
_DTYPE = operator.attrgetter("dtype")
#: Flushes whose device copies may be in flight before the writer waits for the oldest.
_MAX_IN_FLIGHT = 2




class _NoTensor:
    """Stands for ``torch.Tensor`` where torch is absent: nothing is an instance of it."""


_Tensor: Any = _torch.Tensor if _torch is not None else _NoTensor


def _is_tensor(value: Any) -> bool:
    return isinstance(value, _Tensor)


def to_host(value: Any) -> Any:
    """Convert one value to a plain Python value (forces a transfer for device tensors).

    Meant for values that are already on the host; :class:`RunWriter` batches device tensors
    itself and never calls this on them.

    >>> to_host(np.float32(0.5)), to_host(np.int64(3)), to_host(True)
    (0.5, 3, 1)
    """
    if _is_tensor(value):
        return value.detach().cpu().tolist()
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _meta_value(value: Any) -> Any:
    # metadata keeps Python booleans (advantage_normalization is a flag, not a number)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return to_host(value)


class _Stream:
    """One buffered output stream (steps or samples) in JSONL or Parquet.

    Parquet cannot be appended to and is unreadable until its footer is written, so each flush
    goes to its own complete part file (``steps.parquet.parts/part-000000.parquet``, written to a
    temporary name and renamed, so a part is whole or absent). ``close`` merges the parts into
    ``steps.parquet`` (one row group per flush, schemas unified: a key first logged late becomes
    a column of nulls before it) and removes them. After a hard kill the parts folder is still a
    readable run: ``forensics scan`` reads it as one stream, and ``resume=True`` carries on.
    """

    def __init__(self, path: Path, fmt: str, resume: bool) -> None:
        self.path = path
        self.fmt = fmt
        self.rows: list[dict[str, Any]] = []
        self.rows_written = 0
        self._fh: Any = None
        self.parts = path.with_name(path.name + ".parts")
        if fmt == "jsonl":
            if resume and path.exists():
                _trim_partial_line(path)
            self._fh = open(path, "a" if resume else "w", encoding="utf-8")
            return
        if not resume:
            if path.exists():
                path.unlink()
            if self.parts.exists():
                shutil.rmtree(self.parts)
        self.parts.mkdir(parents=True, exist_ok=True)
        if resume and path.exists():
            # a closed file becomes the first part: close() merges old and new rows
            os.replace(path, self._next_part())

    def _next_part(self) -> Path:
        done = sorted(self.parts.glob("part-*.parquet"))
        k = int(done[-1].stem.split("-")[1]) + 1 if done else 0
        return self.parts / f"part-{k:06d}.parquet"

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.fmt == "jsonl":
            text = "".join(_dumps(row) + "\n" for row in rows)
            # one write call per flush and an OS-level flush: a crash afterwards cannot lose it
            self._fh.write(text)
            self._fh.flush()
        else:
            self._write_part(rows)
        self.rows_written += len(rows)

    def _write_part(self, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns: dict[str, list[Any]] = {}
        for i, row in enumerate(rows):
            for key in row:
                if key not in columns:
                    columns[key] = [None] * i
            for key, col in columns.items():
                col.append(row.get(key))
        fields = [pa.field(k, _arrow_type(k, v)) for k, v in columns.items()]
        arrays = [pa.array(_coerce(columns[f.name], f.type), type=f.type) for f in fields]
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        part = self._next_part()
        tmp = part.with_suffix(".tmp")
        pq.write_table(table, tmp, row_group_size=len(rows))
        os.replace(tmp, part)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self.fmt == "parquet" and self.parts.exists():
            _merge_parts(self.parts, self.path)


def _merge_parts(parts_dir: Path, path: Path) -> None:
    """Merge part files into one Parquet file (one row group per part) and remove them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(parts_dir.glob("part-*.parquet"))
    if parts:
        schema = pa.unify_schemas([pq.read_schema(p) for p in parts], promote_options="permissive")
        tmp = path.with_name(path.name + ".tmp")
        with pq.ParquetWriter(tmp, schema) as writer:
            for part in parts:  # one part in memory at a time
                table = pq.read_table(part)
                for fld in schema:
                    if table.schema.get_field_index(fld.name) < 0:
                        table = table.append_column(fld, pa.nulls(len(table), type=fld.type))
                writer.write_table(table.select(schema.names).cast(schema),
                                   row_group_size=max(len(table), 1))
        os.replace(tmp, path)
    shutil.rmtree(parts_dir)


def _trim_partial_line(path: Path) -> None:
    """Drop a trailing partial line left by a crash in the middle of a write."""
    with open(path, "rb+") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        # scan back for the last newline in chunks
        pos = size
        while pos > 0:
            start = max(0, pos - 65536)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                fh.truncate(start + idx + 1)
                return
            pos = start
        fh.truncate(0)


def _arrow_type(name: str, values: list[Any]) -> Any:
    import pyarrow as pa

    for v in values:
        if v is None:
            continue
        if isinstance(v, str):
            return pa.string()
        if isinstance(v, (list, tuple)):
            return pa.string()  # token lists are detokenised before this; keep lists as text
        break
    return pa.int64() if name in _INT_COLUMNS else pa.float64()


def _coerce(values: list[Any], typ: Any) -> list[Any]:
    import pyarrow as pa

    if typ == pa.string():
        return [None if v is None else (v if isinstance(v, str) else json.dumps(v))
                for v in values]
    if typ == pa.int64():
        return [None if v is None else int(v) for v in values]
    return [None if v is None else float(v) for v in values]


def _dumps(row: Mapping[str, Any]) -> str:
    # NaN and infinities are written as the bare tokens Python's json module writes (NaN,
    # Infinity, -Infinity): a logged NaN is a finding, and null would make it look like a value
    # that was never logged.
    return json.dumps(row, ensure_ascii=False, allow_nan=True, separators=(",", ":"))


class RunWriter:
    """Write the event streams of one training run into a folder.

    Parameters
    ----------
    path
        folder of the run; created if missing.
    format
        ``"jsonl"`` (default; robust to hard kills) or ``"parquet"`` (one row group per
        flush; compact and fast to scan).
    flush_every
        step rows buffered before a flush (the at-risk window of a crash).
    samples_flush_every
        sample rows buffered before a flush (default ``64 * flush_every``).
    flush_seconds
        also flush when this many seconds passed since the last flush (checked on
        each log call; ``None`` disables it).
    meta
        run metadata (a :class:`forensics.config.RunMeta` or a mapping of its fields), written
        to ``run.json`` at once; :meth:`write_meta` may update it later.
    resume
        append to existing streams (a run resumed from a checkpoint) instead of replacing
        them. A JSONL file's partial last line, left by a crash, is trimmed first.
    detokenize
        turns one response's token ids into text; lets callers log 2-D integer token
        tensors as text columns without a transfer per step (decoding happens at flush).
    timestamp
        add a ``timestamp`` column (host wall-clock seconds) to each step row that has
        none.
    register_atexit
        close the writer at interpreter exit if the caller did not.

    Notes
    -----
    ``log_step`` and ``log_samples`` never move a tensor to the host: they copy the call's
    tensors on their device with one ``stack``/``cat`` per device and dtype (so an in-place
    update of a tensor after it was logged cannot change the logged value). A flush packs each
    device's copies into one buffer and hands it to the host in one asynchronous copy. On CUDA
    the flushed rows are written as soon as that copy has landed (checked, without waiting, on
    the next log calls), so a flush does not stall the GPU, and a crash can also lose the rows
    whose copy was still in flight (at most ``_MAX_IN_FLIGHT`` flushes; the writer waits for the
    oldest beyond that). :meth:`flush` and :meth:`close` wait. ``flushes`` counts the flushes
    handed off.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: str = "jsonl",
        flush_every: int = 50,
        samples_flush_every: int | None = None,
        flush_seconds: float | None = None,
        meta: RunMeta | Mapping[str, Any] | None = None,
        resume: bool = False,
        detokenize: Callable[[Sequence[int]], str] | None = None,
        timestamp: bool = True,
        register_atexit: bool = True,
    ) -> None:
        if format not in FORMATS:
            raise UsageError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        if flush_every < 1:
            raise UsageError(f"flush_every must be >= 1, not {flush_every!r}")
        self.path = Path(path)
        self.format = format
        self.flush_every = flush_every
        self.samples_flush_every = samples_flush_every or 64 * flush_every
        self.flush_seconds = flush_seconds
        self.detokenize = detokenize
        self.timestamp = timestamp
        self.path.mkdir(parents=True, exist_ok=True)
        ext = "jsonl" if format == "jsonl" else "parquet"
        self._steps = _Stream(self.path / f"steps.{ext}", format, resume)
        self._samples_path = self.path / f"samples.{ext}"
        self._samples: _Stream | None = None
        self._resume = resume
        # tensor values logged since the last flush: a staging buffer per device, and where
        # each gathered group goes; then the flushes whose copies are still in flight
        self._staging: dict[Any, dv.Staging] = {}
        self._records: list[dv.Record] = []
        self._in_flight: deque[dv.Batch] = deque()
        self._last_flush = time.monotonic()
        self._closed = False
        self.flushes = 0
        if meta is not None:
            self.write_meta(meta)
        if register_atexit:
            ref = weakref.ref(self)

            def _close_at_exit() -> None:
                writer = ref()
                if writer is not None:
                    writer.close()

            self._atexit: Callable[[], None] | None = _close_at_exit
            atexit.register(_close_at_exit)
        else:
            self._atexit = None

    # ------------------------------------------------------------------ metadata
    def write_meta(self, meta: RunMeta | Mapping[str, Any]) -> RunMeta:
        """Validate run metadata and write it to ``run.json`` (atomically: temp file + rename).

        Unknown keys (the trainer's own settings) are kept under ``config``; reading a run.json
        written by hand, :meth:`RunMeta.from_dict` refuses them (a typo is a usage error).
        """
        if isinstance(meta, RunMeta):
            run_meta = meta
            run_meta._check("run metadata")
        else:
            run_meta = RunMeta.from_dict({k: _meta_value(v) for k, v in meta.items()}, unknown="config")
        data = run_meta.to_dict()
        tmp = self.path / "run.json.tmp"
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=to_host) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self.path / "run.json")
        return run_meta

    # ------------------------------------------------------------------ logging
    def log_step(self, step: int, metrics: Mapping[str, Any] | None = None, /,
                 **kwargs: Any) -> None:
        """Buffer one step row: ``step`` plus canonical metrics (a mapping and/or keywords).

        Scalars may be Python or numpy numbers or 0-d/1-element tensors; ``None`` means "not
        logged". Tensors are not read here: they are copied on their device (see Notes).
        """
        if self._closed:
            raise UsageError("RunWriter is closed")
        step_value = step if type(step) is int else self._step_value(step)
        row: dict[str, Any] = {"step": step_value}
        if kwargs:  # keywords win over the mapping, as in dict(mapping, **kwargs)
            metrics = {**metrics, **kwargs} if metrics else kwargs
        tkeys: list[str] = []
        tvals: list[Any] = []
        if metrics and set(map(type, metrics.values())) == _TENSORS_ONLY:
            # a mapping of tensors only (what the torch helpers return): placed in C, and
            # checked for shape and dtype when they are gathered
            row.update(dict.fromkeys(metrics))  # places, in logging order, the flush fills
            tkeys += metrics
            tvals += metrics.values()
        elif metrics:
            for key, value in metrics.items():
                if type(value) in _PLAIN:  # the common host case first, and cheaply
                    row[key] = value
                elif isinstance(value, _Tensor):
                    row[key] = None
                    tkeys.append(key)
                    tvals.append(value)
                else:
                    self._put(row, key, value)
        if tvals:
            if row["step"] is None and "step" in tkeys:  # a tensor under "step": not a metric
                i = tkeys.index("step")
                del tkeys[i], tvals[i]
            self._stage_step(row, tkeys, tvals)
        row["step"] = step_value  # a "step" among the metrics does not replace the step
        if self.timestamp and "timestamp" not in row:
            row["timestamp"] = time.time()
        self._steps.rows.append(row)
        self._after_log()

    def log_samples(self, step: int, columns: Mapping[str, Any], /) -> None:
        """Buffer per-response rows of one step from columns of equal length.

        A column is a 1-D tensor, array or list (one value per response), a scalar (broadcast),
        or a 2-D integer tensor of token ids (decoded to text with ``detokenize`` at flush).
        Canonical names: ``length``, ``reward``, ``reward/<component>``, ``truncated``,
        ``advantage``, ``group``, ``prompt``, ``completion``.
        """
        self._check_open()
        n = None
        for key, value in columns.items():
            size = _leading_len(value)
            if size is None:
                continue
            if n is None:
                n = size
            elif size != n:
                raise UsageError(f"log_samples: column {key!r} has {size} rows, expected {n}")
        if n is None:
            n = 1
        step_value = self._step_value(step)
        rows: list[dict[str, Any]] = [{"step": step_value} for _ in range(n)]
        # (device, dtype) -> the parts of one gather: (key, form, width) and 1-D tensors
        groups: dict[Any, tuple[list[tuple[str, str, int]], list[Any]]] = {}
        for key, value in columns.items():
            if key == "step":
                continue
            if _is_tensor(value):
                dim = value.dim()
                if dim == 0:
                    part, flat = (key, "scalar", 1), value.reshape(1)
                elif dim == 1:
                    part, flat = (key, "column", 1), value
                elif dim == 2 and not value.is_floating_point():
                    part, flat = (key, "tokens", int(value.shape[1])), value.reshape(-1)
                else:
                    raise UsageError(f"log_samples: column {key!r} must be 1-D (or 2-D token "
                                     f"ids), got shape {tuple(value.shape)}")
                for row in rows:
                    row[key] = None  # keeps the column order; the flush fills it
                group = groups.setdefault((flat.device, flat.dtype), ([], []))
                group[0].append(part)
                group[1].append(flat)
                continue
            if _leading_len(value) is None:
                for row in rows:
                    self._put(row, key, value)
                continue
            seq = value.tolist() if isinstance(value, np.ndarray) else list(value)
            for row, v in zip(rows, seq, strict=True):
                self._put(row, key, v)
        for (device, dtype), (parts, flats) in groups.items():
            dtype, flats = self._carried(dtype, flats, parts[0][0])
            staging = self._staging.get(device) or self._open_staging(device)
            count = staging.cat(dtype, flats)
            self._records.append((staging, dtype, count, rows, parts))
        if self._samples is None:
            self._samples = _Stream(self._samples_path, self.format, self._resume)
        self._samples.rows.extend(rows)
        self._after_log()

    # ------------------------------------------------------------------ flushing
    def flush(self) -> None:
        """Write every row logged so far, waiting for device copies still in flight."""
        if self._closed:
            return
        self._hand_off()
        self._drain(wait=True)

    def close(self) -> None:
        """Flush what is buffered and close the files (idempotent)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._steps.close()
            if self._samples is not None:
                self._samples.close()
            if self._atexit is not None:
                atexit.unregister(self._atexit)
                self._atexit = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def steps_path(self) -> Path:
        """File of the step stream."""
        return self._steps.path

    @property
    def samples_path(self) -> Path:
        """File of the sample stream (exists once a sample was flushed)."""
        return self._samples_path

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("RunWriter is closed")

    def _step_value(self, step: Any) -> Any:
        if type(step) is int:
            return step
        if _is_tensor(step):
            # the step counter is a key, not a metric: a device step would need a sync anyway
            raise UsageError("log_step: pass the step as a Python int, not a tensor")
        return int(step)

    def _after_log(self) -> None:
        if self._in_flight:
            self._drain(wait=False)
        due = (len(self._steps.rows) >= self.flush_every
               or (self._samples is not None
                   and len(self._samples.rows) >= self.samples_flush_every)
               or (self.flush_seconds is not None
                   and time.monotonic() - self._last_flush >= self.flush_seconds))
        if due:
            self._hand_off()
            self._drain(wait=False)

    def _hand_off(self) -> None:
        """Start a flush: the buffered rows and one host copy per device become a batch."""
        copies = {}
        for staging in self._staging.values():
            buf, layout = staging.pack()
            copies[staging] = (dv.start_copy(buf), layout)
        samples = self._samples.rows if self._samples is not None else []
        self._in_flight.append(dv.Batch(self._steps.rows, samples, self._records, copies))
        self._steps.rows = []
        if self._samples is not None:
            self._samples.rows = []
        self._records = []
        self._staging = {}
        self._last_flush = time.monotonic()
        self.flushes += 1

    def _drain(self, *, wait: bool) -> None:
        """Write the batches whose copies have landed, oldest first (all of them if ``wait``).

        More than ``_MAX_IN_FLIGHT`` batches in flight means the device is far behind: then
        the oldest is waited for, which bounds the rows a crash can lose.
        """
        while self._in_flight:
            batch = self._in_flight[0]
            if not (wait or len(self._in_flight) > _MAX_IN_FLIGHT or batch.ready()):
                return
            self._in_flight.popleft()
            batch.resolve(self.detokenize)
            self._steps.write(batch.steps)
            if batch.samples:
                if self._samples is None:  # pragma: no cover - rows imply the stream exists
                    self._samples = _Stream(self._samples_path, self.format, self._resume)
                self._samples.write(batch.samples)

    def _stage_step(self, row: dict[str, Any], keys: list[str], values: list[Any]) -> None:
        """Gather a step's scalar tensors: one ``stack`` per device and dtype."""
        if not values:
            return
        first = values[0]
        dtype = first.dtype
        if not first.ndim and len(set(map(_DTYPE, values))) == 1 and dv.codec(dtype):
            # the common case: one dtype on one device, all 0-d. ``stack`` checks the rest
            # before it copies anything (one device, one shape); anything else is sorted out
            # below, value by value.
            device = first.device
            staging = self._staging.get(device) or self._open_staging(device)
            try:
                staging.stack(dtype, values)
            except RuntimeError:
                if len({v.device for v in values}) == 1 and not any(v.ndim for v in values):
                    raise
            else:
                self._records.append((staging, dtype, len(values), row, keys))
                return
        groups: dict[Any, tuple[list[str], list[Any]]] = {}
        for key, value in zip(keys, values, strict=True):
            if value.ndim:
                if value.numel() != 1:
                    raise UsageError(f"metric {key!r} must be a scalar, got a tensor of "
                                     f"shape {tuple(value.shape)}")
                value = value.reshape(())
            group = groups.setdefault((value.device, value.dtype), ([], []))
            group[0].append(key)
            group[1].append(value)
        for (device, dtype), (group_keys, group_values) in groups.items():
            dtype, group_values = self._carried(dtype, group_values, group_keys[0])
            staging = self._staging.get(device) or self._open_staging(device)
            staging.stack(dtype, group_values)
            self._records.append((staging, dtype, len(group_values), row, group_keys))

    def _open_staging(self, device: Any) -> dv.Staging:
        staging = self._staging[device] = dv.Staging(device)
        return staging

    def _carried(self, dtype: Any, values: list[Any], key: str) -> tuple[Any, list[Any]]:
        """The dtype the buffer carries the values in, and the values in it (float8: float32)."""
        if dv.codec(dtype) is not None:
            return dtype, values
        try:
            values = [dv.loggable(v, f"metric {key!r}") for v in values]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return values[0].dtype, values

    def _put(self, row: dict[str, Any], key: str, value: Any) -> None:
        if isinstance(value, np.ndarray):
            if value.size != 1:
                raise UsageError(f"metric {key!r} must be a scalar, got an array of shape "
                                 f"{value.shape}")
            value = value.reshape(()).item()
        if isinstance(value, (bool, np.bool_)):
            row[key] = int(value)
        elif isinstance(value, np.generic):
            row[key] = value.item()
        elif value is None or isinstance(value, (int, float, str)):
            row[key] = value
        else:
            raise UsageError(f"metric {key!r}: cannot log a value of type {type(value).__name__}")


def _leading_len(value: Any) -> int | None:
    """Rows a sample column holds, or ``None`` for a scalar (broadcast)."""
    if isinstance(value, (str, bytes)) or value is None:
        return None
    if _is_tensor(value):
        return None if value.dim() == 0 else int(value.shape[0])
    if isinstance(value, np.ndarray):
        return None if value.ndim == 0 else int(value.shape[0])
    if isinstance(value, (list, tuple)):
        return len(value)
    return None

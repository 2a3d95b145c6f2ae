"""How :class:`~forensics.trainer.writer.RunWriter` moves tensor values to the host.

Logging a tensor must not synchronise the device, must not cost a kernel per value, and must copy
the value (the caller may update the tensor in place afterwards). So each log call **gathers** its
tensors with one ``torch.stack``/``torch.cat`` per device and dtype straight into a byte buffer on
that device (a typed view of it: the gather is the copy), and each flush moves a device's buffer to
the host with **one** asynchronous copy into pinned memory, followed by one read on the host:

* a step whose tensors share one dtype costs one kernel; a step mixing dtypes costs one kernel per
  dtype, never one per value. (One kernel for mixed dtypes is not possible with stock PyTorch:
  ``cat``/``stack``/``_foreach_copy_`` fall back to a copy per input on CUDA when the dtypes
  differ, and viewing every value as bytes first costs a dispatch per value.)
* the buffer keeps every dtype's own bytes, so the host decodes them exactly: int64 in full
  range, float64 as is, float32/float16/bfloat16 written as the shortest decimal that reads back
  as the same float32, booleans as 0/1.
* on CUDA the copy is ``non_blocking`` into pinned memory with an event recorded behind it; the
  writer reads it once the event has completed (checked without blocking on later log calls) or
  when it must (``flush()``, ``close()``). On the CPU the buffer is host memory already and is
  read at once; other devices get a blocking copy.

Torch is optional: this module imports without it (the writer then logs host values only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_torch: Any
try:  # torch is optional: the writer must serve numpy-only trainers too
    import torch as _torch
except ImportError:  # pragma: no cover - exercised only where torch is absent
    _torch = None

__all__ = ["Batch", "HostCopy", "Staging", "codec", "shortest_float32", "start_copy"]

#: First byte capacity of a device's buffer; it then grows to what one flush interval used.
INITIAL_CAPACITY = 1 << 14
#: Byte alignment of every gathered group (any dtype's typed view of the buffer is aligned).
_ALIGN = 8


# --------------------------------------------------------------------------- dtypes
class Codec:
    """How one torch dtype's bytes become Python values on the host."""

    __slots__ = ("decode", "itemsize")

    def __init__(self, itemsize: int, decode: Callable[[np.ndarray], list[Any]]) -> None:
        self.itemsize = itemsize
        self.decode = decode


def _exact(np_dtype: Any) -> Callable[[np.ndarray], list[Any]]:
    return lambda raw: raw.view(np_dtype).tolist()


def _narrow(to_float32: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], list[Any]]:
    return lambda raw: shortest_float32(to_float32(raw))


def _bfloat16_to_float32(raw: np.ndarray) -> np.ndarray:
    # bfloat16 is the upper half of a float32: widen the bits, no rounding involved
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


_CODECS: dict[Any, Codec] = {}
if _torch is not None:
    _CODECS = {
        _torch.float64: Codec(8, _exact(np.float64)),
        _torch.float32: Codec(4, _narrow(lambda raw: raw.view(np.float32))),
        _torch.float16: Codec(2, _narrow(lambda raw: raw.view(np.float16).astype(np.float32))),
        _torch.bfloat16: Codec(2, _narrow(_bfloat16_to_float32)),
        _torch.int64: Codec(8, _exact(np.int64)),
        _torch.int32: Codec(4, _exact(np.int32)),
        _torch.int16: Codec(2, _exact(np.int16)),
        _torch.int8: Codec(1, _exact(np.int8)),
        _torch.uint8: Codec(1, _exact(np.uint8)),
        _torch.bool: Codec(1, lambda raw: raw.view(np.bool_).astype(np.int64).tolist()),
    }
    for _name, _np in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        if hasattr(_torch, _name):  # unsigned types beyond uint8 exist since torch 2.3
            _CODECS[getattr(_torch, _name)] = Codec(np.dtype(_np).itemsize, _exact(_np))


#: The same, by ``id(dtype)``: dtypes are singletons, and hashing them collides a lot (their
#: hashes are close integers) into a slow equality test, a microsecond a lookup.
_CODECS_BY_ID = {id(dtype): c for dtype, c in _CODECS.items()}


def codec(dtype: Any) -> Codec | None:
    """The codec of a torch dtype, or ``None`` for one the buffer does not carry as is."""
    return _CODECS_BY_ID.get(id(dtype))


def loggable(tensor: Any, what: str) -> Any:
    """``tensor`` in a dtype the buffer carries: other floats (float8) are widened to float32.

    Raises ``ValueError`` for complex tensors (a metric is a real number).
    """
    if tensor.is_complex():
        raise ValueError(f"{what}: cannot log a complex tensor ({tensor.dtype})")
    if tensor.is_floating_point():
        return tensor.float()  # one extra kernel, for dtypes no metric is normally logged in
    raise ValueError(f"{what}: cannot log a tensor of dtype {tensor.dtype}")


# --------------------------------------------------------------------------- float32 text
_POW10_MIN = -80
#: Correctly rounded powers of ten (parsed, not computed): exact from 1e-22 to 1e22.
_POW10 = np.array([float(f"1e{k}") for k in range(_POW10_MIN, -_POW10_MIN + 1)])


def _pow10(k: np.ndarray) -> np.ndarray:
    return _POW10[k - _POW10_MIN]


def shortest_float32(values: np.ndarray) -> list[float]:
    """Each float32 value as the Python float of its shortest round-tripping decimal.

    A float32 widened to float64 prints as ``0.20000000298023224``; the shortest decimal that
    reads back as the same float32 (``0.2``) is the same number to float32 precision and a third
    of the bytes. Computed for the whole array at once: for each value the least number of
    significant digits ``p`` (1 to 9; 9 always suffice) whose rounding of the value reads back
    as the same float32. Reading back is monotone in ``p``, and measured values mostly need 7 to
    9 digits, so every value is tried at 6 digits, those that fail at 7, 8 and 9 in turn, and
    those that pass are searched below 6. The decimal is then built in float64 with one correct
    rounding (``mantissa * 10**a / 10**b``, with exact powers up to 1e22); values beyond that
    (|exponent| > 22) are parsed from their digits. Non-finite values and zeros pass through.

    >>> shortest_float32(np.array([0.1, 1 / 3, -2.5e-8, 3e38, float("nan")], dtype=np.float32))
    [0.1, 0.33333334, -2.5e-08, 3e+38, nan]
    """
    target = np.asarray(values, dtype=np.float32).reshape(-1)
    wide = target.astype(np.float64)
    out = wide.copy()
    idx = np.flatnonzero(np.isfinite(wide) & (wide != 0.0))
    if idx.size == 0:
        return out.tolist()
    x = wide[idx]
    want = target[idx]
    mag = np.abs(x)
    exp10 = np.floor(np.log10(mag)).astype(np.int64)
    # log10 may land one off next to a power of ten: make 10**exp10 <= mag < 10**(exp10 + 1)
    exp10 += mag >= _pow10(exp10 + 1)
    exp10 -= mag < _pow10(exp10)
    best = x.copy()  # kept where even 9 digits fail (only through a rounded power of ten)
    digits = np.full(idx.size, 9)

    def attempt(rows: np.ndarray, p: Any) -> np.ndarray:
        """Try ``p`` digits on ``rows``; keep the passing candidates; return which passed."""
        scale = p - 1 - exp10[rows]  # the value is about mantissa * 10**-scale
        up = _pow10(np.maximum(scale, 0))
        down = _pow10(np.maximum(-scale, 0))
        mantissa = np.rint(x[rows] * up / down)
        value = mantissa * down / up  # one of the two powers is 1: a single rounding
        good = value.astype(np.float32) == want[rows]
        best[rows[good]] = value[good]
        digits[rows[good]] = p if np.isscalar(p) else p[good]
        return good

    rows = np.arange(idx.size)
    good6 = attempt(rows, 6)
    rest = rows[~good6]
    for p in (7, 8, 9):
        if not rest.size:
            break
        rest = rest[~attempt(rest, p)]
    # below six digits: a binary search between 1 and 6 over the (few) values that passed at 6
    low = rows[good6]
    lo = np.ones(low.size, dtype=np.int64)
    hi = np.full(low.size, 6)
    while low.size:
        mid = (lo + hi) // 2
        good = attempt(low, mid)
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid + 1)
        # a value whose search ended keeps the candidate of its last passing try
        keep = lo < hi
        low, lo, hi = low[keep], lo[keep], hi[keep]
    # beyond 1e+-22 a power of ten was rounded: parse the digits instead
    far = np.flatnonzero(np.abs(digits - 1 - exp10) > 22)
    for j in far.tolist():
        scale = int(digits[j]) - 1 - int(exp10[j])
        parsed = float(f"{round(float(x[j]) * 10.0 ** scale)}e{-scale}")
        if np.float32(parsed) == want[j]:
            best[j] = parsed
    out[idx] = best
    return out.tolist()


# --------------------------------------------------------------------------- device side
class Staging:
    """The bytes gathered on one device since the last flush.

    Each gathered group of values lands at an 8-byte aligned offset of a ``uint8`` buffer,
    written through a typed view of it (cached per dtype), so the gather itself is the one copy
    a log call makes. A full buffer is kept as a finished chunk and a larger one started; the
    next flush interval starts with one buffer as large as this interval needed.
    """

    __slots__ = ("buf", "capacity", "chunks", "device", "typed", "used")

    def __init__(self, device: Any, capacity: int) -> None:
        self.device = device
        self.chunks: list[tuple[Any, int]] = []
        self.capacity = capacity
        self.buf = _torch.empty(capacity, dtype=_torch.uint8, device=device)
        self.typed: dict[Any, Any] = {}
        self.used = 0

    def gather(self, dtype: Any, itemsize: int, values: Sequence[Any], stack: bool,
               count: int) -> tuple[int, int]:
        """Copy ``count`` values of one dtype into the buffer with one operation.

        ``stack`` joins 0-d tensors (``torch.stack``), otherwise 1-D ones are concatenated
        (``torch.cat``); either writes straight into a typed view of the buffer. Returns the
        chunk index and byte offset of the values.
        """
        nbytes = count * itemsize
        off = self.used
        if off + nbytes > self.capacity:
            self.chunks.append((self.buf, self.used))
            self.capacity = max(2 * self.capacity, _round_up(nbytes))
            self.buf = _torch.empty(self.capacity, dtype=_torch.uint8, device=self.device)
            self.typed = {}
            off = 0
        view = self.typed.get(dtype)
        if view is None:
            view = self.typed[dtype] = self.buf.view(dtype)
        start = off // itemsize
        out = view[start:start + count]
        # an out= copy refuses inputs that require grad while autograd records; the copy is
        # the writer's, not the model's, and switching autograd off is cheaper than looking
        # at every value (this is what torch.no_grad does, at a third of its cost)
        grad = _torch.is_grad_enabled()
        if grad:
            _torch._C._set_grad_enabled(False)
        try:
            if stack:
                _torch.stack(values, out=out)
            else:
                _torch.cat(values, out=out)
        finally:
            if grad:
                _torch._C._set_grad_enabled(True)
        self.used = off + _round_up(nbytes)  # only once the copy succeeded
        return len(self.chunks), off

    def finished(self) -> list[tuple[Any, int]]:
        """Every chunk with its bytes used, the current one last."""
        return [*self.chunks, (self.buf, self.used)]

    def bytes_used(self) -> int:
        return sum(used for _, used in self.chunks) + self.used


def _round_up(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class HostCopy:
    """One staging chunk's bytes on their way to (or already in) host memory.

    ``event`` is ``None`` when the bytes are on the host already, otherwise an object with
    ``query()`` (has the copy completed? never blocks) and ``synchronize()`` (wait for it): a
    ``torch.cuda.Event`` recorded behind the copy. ``source`` keeps the device buffer alive
    until the copy has completed.
    """

    __slots__ = ("event", "host", "source")

    def __init__(self, host: Any, event: Any = None, source: Any = None) -> None:
        self.host = host
        self.event = event
        self.source = source

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def read(self) -> np.ndarray:
        """The bytes as a numpy array: waits for the copy, then one ``tolist()`` of the chunk.

        The bytes are read as int64 words (the buffer is 8-byte aligned and padded), which
        carry any bit pattern exactly, and turned back into bytes on the host.
        """
        if self.event is not None:
            self.event.synchronize()
        words = self.host.view(_torch.int64).tolist()
        self.source = None
        return np.array(words, dtype=np.int64).view(np.uint8)


def copies_async(device: Any) -> bool:
    """Whether a device's copies to the host run asynchronously (CUDA, with an event)."""
    return bool(device.type == "cuda")


def record_event(device: Any) -> Any:
    """An event recorded on the device's current stream (after the copy just enqueued)."""
    event = _torch.cuda.Event()
    event.record(_torch.cuda.current_stream(device))
    return event


def start_copy(buf: Any, used: int) -> HostCopy:
    """Start moving ``buf[:used]`` to the host: no copy on the CPU, one per chunk elsewhere."""
    src = buf[:used]
    device = buf.device
    if device.type == "cpu" and not copies_async(device):
        return HostCopy(src)
    if not copies_async(device):  # other accelerators: a blocking copy
        host = _torch.empty(used, dtype=_torch.uint8)
        host.copy_(src)
        return HostCopy(host)
    # pinned host memory makes the copy truly asynchronous (pageable memory would stage it)
    host = _torch.empty(used, dtype=_torch.uint8, pin_memory=device.type == "cuda")
    host.copy_(src, non_blocking=True)
    return HostCopy(host, record_event(device), buf)


# --------------------------------------------------------------------------- records
class StepValues:
    """Where one gathered group of a step row goes: ``keys`` of ``row``, in order."""

    __slots__ = ("chunk", "count", "dtype", "keys", "offset", "row", "staging")

    def __init__(self, row: dict[str, Any], keys: list[str], staging: Staging, chunk: int,
                 offset: int, dtype: Any) -> None:
        self.row = row
        self.keys = keys
        self.staging = staging
        self.chunk = chunk
        self.offset = offset
        self.dtype = dtype
        self.count = len(keys)

    def fill(self, values: list[Any], pos: int, detokenize: Any) -> None:
        self.row.update(zip(self.keys, values[pos:pos + self.count], strict=False))


class SampleValues:
    """Where one gathered group of sample columns goes.

    ``parts`` lists ``(key, form, width)`` in gather order: form ``"column"`` (one value a row),
    ``"scalar"`` (one value for every row) or ``"tokens"`` (``width`` token ids a row, decoded
    to text).
    """

    __slots__ = ("chunk", "count", "dtype", "offset", "parts", "rows", "staging")

    def __init__(self, rows: list[dict[str, Any]], parts: list[tuple[str, str, int]],
                 staging: Staging, chunk: int, offset: int, dtype: Any, count: int) -> None:
        self.rows = rows
        self.parts = parts
        self.staging = staging
        self.chunk = chunk
        self.offset = offset
        self.dtype = dtype
        self.count = count

    def fill(self, values: list[Any], pos: int,
             detokenize: Callable[[Sequence[int]], str] | None) -> None:
        n = len(self.rows)
        for key, form, width in self.parts:
            if form == "scalar":
                value = values[pos]
                for row in self.rows:
                    row[key] = value
                pos += 1
            elif form == "column":
                for row, value in zip(self.rows, values[pos:pos + n], strict=True):
                    row[key] = value
                pos += n
            else:
                for i, row in enumerate(self.rows):
                    ids = values[pos + i * width:pos + (i + 1) * width]
                    row[key] = detokenize(ids) if detokenize is not None else _ids_text(ids)
                pos += n * width


def _ids_text(ids: list[Any]) -> str:
    return json.dumps(ids)


class Batch:
    """The rows of one flush and the host copies their device values travel in."""

    __slots__ = ("copies", "records", "samples", "steps")

    def __init__(self, steps: list[dict[str, Any]], samples: list[dict[str, Any]],
                 records: list[Any], copies: dict[Staging, list[HostCopy]]) -> None:
        self.steps = steps
        self.samples = samples
        self.records = records
        self.copies = copies

    def ready(self) -> bool:
        """Whether every copy has completed (never blocks)."""
        return all(c.ready() for copies in self.copies.values() for c in copies)

    def resolve(self, detokenize: Callable[[Sequence[int]], str] | None) -> None:
        """Read the copies (waiting where needed) and put the values into the rows.

        Values are decoded per dtype for the whole batch at once, then handed out in order.
        """
        if not self.records:
            return
        raw = {staging: [c.read() for c in copies] for staging, copies in self.copies.items()}
        by_dtype: dict[Any, list[Any]] = {}
        for rec in self.records:
            by_dtype.setdefault(rec.dtype, []).append(rec)
        for dtype, recs in by_dtype.items():
            dec = _CODECS_BY_ID[id(dtype)]
            size = dec.itemsize
            parts = [raw[r.staging][r.chunk][r.offset:r.offset + r.count * size] for r in recs]
            values = dec.decode(parts[0] if len(parts) == 1 else np.concatenate(parts))
            pos = 0
            for rec in recs:
                rec.fill(values, pos, detokenize)
                pos += rec.count
        self.records = []
        self.copies = {}

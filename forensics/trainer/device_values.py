"""How :class:`~forensics.trainer.writer.RunWriter` moves tensor values to the host.

Logging a tensor must not synchronise the device, must not cost a kernel per value, and must copy
the value (the caller may update the tensor in place afterwards, and a 0-d view must not keep a
large tensor alive). So:

* each log call **gathers** its tensors with one ``torch.stack`` (``log_step``) or ``torch.cat``
  (``log_samples``) per device and dtype into a new 1-D tensor on that device: the gather is the
  copy. A step whose tensors share one dtype costs one kernel; a step mixing dtypes one kernel
  per dtype, never one per value. (One kernel for mixed dtypes is not possible with stock
  PyTorch: ``cat``/``stack``/``_foreach_copy_`` fall back to a copy per input, on CUDA as on
  the CPU, when the dtypes differ, and viewing every value as bytes first costs a dispatch per
  value.)
* each flush **packs** a device's gathered tensors into one byte buffer, a region per dtype (one
  ``cat`` per dtype), and moves it to the host in **one** copy, read there once: on CUDA a
  ``non_blocking`` copy into pinned memory with an event recorded behind it, read once the event
  has completed (the writer checks without blocking on later log calls, and waits only in
  ``flush()`` and ``close()``); on the CPU the buffer is host memory already; other devices get
  a blocking copy.
* every dtype keeps its own bytes, so the host decodes them exactly: int64 in full range, float64
  as is, float32/float16/bfloat16 as the shortest decimal that reads back as the same float32,
  booleans as 0/1.

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

#: Byte alignment of each dtype's region in a packed buffer (so that any dtype's view of it is
#: aligned, and the buffer reads as whole int64 words).
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
#: Significant digits tried below seven, as a column (one row of candidates each).
_FEW_DIGITS = np.arange(1, 7)[:, None]


def shortest_float32(values: np.ndarray) -> list[float]:
    """Each float32 value as the Python float of its shortest round-tripping decimal.

    A float32 widened to float64 prints as ``0.20000000298023224``; the shortest decimal that
    reads back as the same float32 (``0.2``) is the same number to float32 precision and a third
    of the bytes. Computed for the whole array at once, in a fixed number of numpy operations:
    for each value the least number of significant digits ``p`` (1 to 9; 9 always suffice)
    whose rounding of the value reads back as the same float32. Reading back is monotone in
    ``p``, and measured values mostly need 7 or 8 digits: every value is tried at 8 and 7
    digits, the few that fail at 8 at 9, and those that pass at 7 at 1 to 6 at once. The
    decimal ``m * 10**-s`` is built in float64 with one correct rounding (``m / 10**s``, or
    ``m * 10**-s`` for large values), exact while the power of ten is (up to 1e22); beyond that
    its digits are parsed. Non-finite values and zeros pass through.

    >>> shortest_float32(np.array([0.1, 1 / 3, -2.5e-8, 3e38, float("nan")], dtype=np.float32))
    [0.1, 0.33333334, -2.5e-08, 3e+38, nan]
    """
    target = np.asarray(values, dtype=np.float32).reshape(-1)
    wide = target.astype(np.float64)
    mag = np.abs(wide)
    regular = (mag > 0.0) & (mag < np.inf)  # finite, non-zero (NaN compares false)
    idx: Any = slice(None)
    if not regular.all():
        idx = np.flatnonzero(regular)
        if not idx.size:
            return wide.tolist()
        mag = mag[idx]
    x = wide[idx]
    want = target[idx]
    exp10 = np.floor(np.log10(mag)).astype(np.int64)
    # log10 may land one off next to a power of ten: make 10**exp10 <= mag < 10**(exp10 + 1)
    exp10 += mag >= _POW10[exp10 + (1 - _POW10_MIN)]
    exp10 -= mag < _POW10[exp10 - _POW10_MIN]
    base = (-1 - _POW10_MIN) - exp10  # p digits: x scaled by _POW10[base + p] = 10**(p-1-exp10)

    def attempt(p: int, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        """The p-digit roundings of ``x[rows]`` (m / 10**s) and whether they read back."""
        power = _POW10[base[rows] + p]
        value = np.rint(x[rows] * power) / power
        return value, value.astype(np.float32) == want[rows]

    every = slice(None)
    value8, good8 = attempt(8, every)
    value7, good7 = attempt(7, every)
    best = np.where(good7, value7, value8)
    digits = np.where(good7, 7, 8)
    if not good8.all():  # the few that need all 9 digits (x itself if even 9 fail)
        rows = np.flatnonzero(~good8)
        value9, good9 = attempt(9, rows)
        best[rows] = np.where(good9, value9, x[rows])
        digits[rows] = 9
    rows = np.flatnonzero(good7)
    if rows.size:  # fewer than 7 digits: 1 to 6 at once, the least that reads back
        power = _POW10[base[rows] + _FEW_DIGITS]
        value = np.rint(x[rows] * power) / power
        good = value.astype(np.float32) == want[rows]
        fewer = good.any(axis=0)
        least = good.argmax(axis=0)[fewer]
        best[rows[fewer]] = value[least, np.flatnonzero(fewer)]
        digits[rows[fewer]] = least + 1
    # 10**s is inexact for s < 0 (large values) and beyond 1e+-22: rebuild those exactly
    if exp10.max() >= 6 or exp10.min() < -13:
        scale = digits - 1 - exp10
        rows = np.flatnonzero((scale < 0) & (scale >= -22))
        if rows.size:
            power = _POW10[-scale[rows] - _POW10_MIN]
            value = np.rint(x[rows] / power) * power
            best[rows] = np.where(value.astype(np.float32) == want[rows], value, x[rows])
        for j in np.flatnonzero((scale < -22) | (scale > 22)).tolist():
            s = int(scale[j])
            exact = float(f"{round(float(x[j]) * 10.0 ** s)}e{-s}")
            best[j] = exact if np.float32(exact) == want[j] else x[j]
    if isinstance(idx, slice):
        return best.tolist()
    wide[idx] = best
    return wide.tolist()


# --------------------------------------------------------------------------- device side
class Staging:
    """The tensor values gathered on one device since the last flush, by dtype.

    Each log call adds one gathered 1-D tensor per dtype (:meth:`stack`, :meth:`cat`); :meth:`pack`
    lays them out in one byte buffer, a region per dtype, with one ``cat`` per dtype.
    """

    __slots__ = ("device", "groups")

    def __init__(self, device: Any) -> None:
        self.device = device
        # id(dtype) -> (dtype, gathered tensors in logging order, their total number of values)
        self.groups: dict[int, tuple[Any, list[Any], list[int]]] = {}

    def stack(self, dtype: Any, values: Sequence[Any]) -> None:
        """Copy 0-d tensors of one dtype into one new tensor (one ``torch.stack``)."""
        # the copy is the writer's, not the model's: autograd must not record it (switching
        # it off is what torch.no_grad does, at a third of its cost)
        if _torch.is_grad_enabled():
            _torch._C._set_grad_enabled(False)
            try:
                gathered = _torch.stack(values)
            finally:
                _torch._C._set_grad_enabled(True)
        else:
            gathered = _torch.stack(values)
        self._keep(dtype, gathered, len(values))

    def cat(self, dtype: Any, values: Sequence[Any]) -> int:
        """Copy 1-D tensors of one dtype into one new tensor (one ``torch.cat``); their count."""
        with _torch.no_grad():
            gathered = _torch.cat(values)
        count = int(gathered.shape[0])
        self._keep(dtype, gathered, count)
        return count

    def _keep(self, dtype: Any, gathered: Any, count: int) -> None:
        group = self.groups.get(id(dtype))
        if group is None:
            self.groups[id(dtype)] = (dtype, [gathered], [count])
        else:
            group[1].append(gathered)
            group[2][0] += count

    def pack(self) -> tuple[Any, dict[int, tuple[int, int]]]:
        """One byte buffer holding every dtype's values (one ``cat`` each), and where each
        dtype's region is: ``id(dtype) -> (byte offset, number of values)``."""
        layout: dict[int, tuple[int, int]] = {}
        total = 0
        for key, (_, _, (count,)) in self.groups.items():
            layout[key] = (total, count)
            total += _round_up(count * _CODECS_BY_ID[key].itemsize)
        buf = _torch.empty(total, dtype=_torch.uint8, device=self.device)
        for key, (dtype, parts, (count,)) in self.groups.items():
            off = layout[key][0]
            _torch.cat(parts, out=buf[off:off + count * _CODECS_BY_ID[key].itemsize].view(dtype))
        self.groups = {}
        return buf, layout


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
        return np.fromiter(words, dtype=np.int64, count=len(words)).view(np.uint8)


def copies_async(device: Any) -> bool:
    """Whether a device's copies to the host run asynchronously (CUDA, with an event)."""
    return bool(device.type == "cuda")


def record_event(device: Any) -> Any:
    """An event recorded on the device's current stream (after the copy just enqueued)."""
    event = _torch.cuda.Event()
    event.record(_torch.cuda.current_stream(device))
    return event


def start_copy(buf: Any) -> HostCopy:
    """Start moving a packed buffer to the host: no copy on the CPU, one copy elsewhere."""
    device = buf.device
    if not copies_async(device):
        if device.type == "cpu":
            return HostCopy(buf)
        host = _torch.empty(buf.shape[0], dtype=_torch.uint8)
        host.copy_(buf)  # other accelerators: a blocking copy
        return HostCopy(host)
    # pinned host memory makes the copy truly asynchronous (pageable memory would stage it)
    host = _torch.empty(buf.shape[0], dtype=_torch.uint8, pin_memory=device.type == "cuda")
    host.copy_(buf, non_blocking=True)
    return HostCopy(host, record_event(device), buf)


# --------------------------------------------------------------------------- records
#: Where one gathered group goes, as a plain tuple (one is made per log call):
#: ``(staging, dtype, count, target, layout)``. Its values follow those of the earlier records
#: of the same staging and dtype. For a step row ``target`` is the row and ``layout`` its keys,
#: in gather order; for samples ``target`` is the list of rows and ``layout`` lists
#: ``(key, form, width)``: form ``"column"`` (one value a row), ``"scalar"`` (one value for every
#: row) or ``"tokens"`` (``width`` token ids a row, decoded to text).
Record = tuple[Staging, Any, int, Any, list[Any]]


def _fill_samples(rows: list[dict[str, Any]], parts: list[tuple[str, str, int]],
                  values: list[Any], pos: int,
                  detokenize: Callable[[Sequence[int]], str] | None) -> None:
    n = len(rows)
    for key, form, width in parts:
        if form == "scalar":
            value = values[pos]
            for row in rows:
                row[key] = value
            pos += 1
        elif form == "column":
            for row, value in zip(rows, values[pos:pos + n], strict=True):
                row[key] = value
            pos += n
        else:
            for i, row in enumerate(rows):
                ids = values[pos + i * width:pos + (i + 1) * width]
                row[key] = detokenize(ids) if detokenize is not None else json.dumps(ids)
            pos += n * width


class Batch:
    """The rows of one flush and the host copy (one per device) their tensor values travel in.

    ``copies`` maps each staging to its copy and the layout of its dtype regions.
    """

    __slots__ = ("copies", "records", "samples", "steps")

    def __init__(self, steps: list[dict[str, Any]], samples: list[dict[str, Any]],
                 records: list[Record],
                 copies: dict[Staging, tuple[HostCopy, dict[int, tuple[int, int]]]]) -> None:
        self.steps = steps
        self.samples = samples
        self.records = records
        self.copies = copies

    def ready(self) -> bool:
        """Whether every copy has completed (never blocks)."""
        return all(copy.ready() for copy, _ in self.copies.values())

    def resolve(self, detokenize: Callable[[Sequence[int]], str] | None) -> None:
        """Read the copies (waiting where needed) and put the values into the rows.

        Each device's region of a dtype is decoded at once, then handed out in logging order.
        """
        if not self.records:
            return
        decoded: dict[tuple[Staging, int], list[Any]] = {}
        for staging, (copy, regions) in self.copies.items():
            raw = copy.read()
            for key, (off, count) in regions.items():
                codec = _CODECS_BY_ID[key]
                decoded[(staging, key)] = codec.decode(raw[off:off + count * codec.itemsize])
        cursor: dict[tuple[Staging, int], int] = {}
        for staging, dtype, count, target, layout in self.records:
            where = (staging, id(dtype))
            values = decoded[where]
            pos = cursor.get(where, 0)
            if type(target) is dict:
                target.update(zip(layout, values[pos:pos + count], strict=False))
            else:
                _fill_samples(target, layout, values, pos, detokenize)
            cursor[where] = pos + count
        self.records = []
        self.copies = {}

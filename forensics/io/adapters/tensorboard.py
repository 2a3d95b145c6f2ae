"""TensorBoard event files (``events.out.tfevents.*``), read without TensorFlow or tensorboard.

TFRecord framing (``uint64 len | uint32 masked_crc32c(len) | data | uint32 masked_crc32c(data)``)
around ``Event`` protobufs, decoded here with a minimal protobuf wire-format reader: ``wall_time``
(field 1, double), ``step`` (2, int64), ``summary`` (5) -> repeated ``value`` {``tag`` (1),
``simple_value`` (2, float32) | ``tensor`` (8, TF2 scalars)}. Text, image and histogram
summaries are skipped (counted in a note). Tensor scalars of every numeric dtype decode
exactly (half and bfloat16 from their 16 bits, integers sign-extended, packed or not); a record
whose header claims more bytes than the file holds is a truncated record, found before reading.

A run folder often holds several event files (one per launch after restarts, sometimes in
separate subfolders): all are merged and de-duplicated by ``(tag, step)``, keeping the value with
the latest ``wall_time`` (the run that resumed wrote it last). Values are float32 (TensorBoard
stores them so). The row's "line" is the 1-based record number in its event file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import FormatError, InputError, StrictModeError
from ..limits import MAX_KEY_BYTES, MAX_RECORD_BYTES
from ._common import Row, RowSource

__all__ = ["TensorBoardSource", "detect", "encode_event", "encode_text_event", "event_files", "masked_crc32c",
           "read_events", "tfrecord"]


# --- CRC32C (Castagnoli), as TFRecord uses it ---------------------------------------------------
def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def _crc32c_py(data: bytes) -> int:
    """CRC-32C of ``data``.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # a C implementation when one is installed (optional); the pure-Python one otherwise
    from google_crc32c import value as _crc32c_c  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    try:
        from crc32c import crc32c as _crc32c_c  # type: ignore[import-not-found,no-redef]
    except ImportError:
        _crc32c_c = None

#: Event files larger than this have their payload checksums verified only with a C CRC32C
#: (the pure-Python one runs at about 2 MB/s); record lengths are always verified.
PY_CRC_LIMIT = 16 << 20


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data``.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return _crc32c_c(data) if _crc32c_c is not None else _crc32c_py(data)


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- protobuf wire format ------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)``: int (varint), bytes (length-delimited, fixed)."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        field, wt = key >> 3, key & 7
        value: Any
        if wt == 0:
            value, pos = _varint(buf, pos)
        elif wt == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wt == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > n:
            raise ValueError("truncated field")
        yield field, wt, value


# TensorProto (tensorflow/core/framework/tensor.proto) and DataType (types.proto)
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_UINT8, _DT_INT16, _DT_INT8, _DT_STRING = 1, 2, 3, 4, 5, 6, 7
_DT_INT64, _DT_BOOL, _DT_BFLOAT16, _DT_UINT16, _DT_HALF, _DT_UINT32, _DT_UINT64 = 9, 10, 14, 17, 19, 22, 23
_DT_QINT8, _DT_QUINT8, _DT_QINT32, _DT_QINT16, _DT_QUINT16 = 11, 12, 13, 15, 16
#: ``tensor_content`` layout of each numeric dtype (little-endian); bfloat16 is decoded by hand.
_CONTENT = {_DT_FLOAT: "f", _DT_DOUBLE: "d", _DT_INT32: "i", _DT_UINT8: "B", _DT_INT16: "h", _DT_INT8: "b",
            _DT_INT64: "q", _DT_BOOL: "?", _DT_UINT16: "H", _DT_HALF: "e", _DT_UINT32: "I", _DT_UINT64: "Q",
            _DT_QINT8: "b", _DT_QUINT8: "B", _DT_QINT32: "i", _DT_QINT16: "h", _DT_QUINT16: "H"}
#: The repeated field that holds each dtype's values when ``tensor_content`` is empty.
_INT_FIELD = {_DT_INT32: 7, _DT_UINT8: 7, _DT_INT16: 7, _DT_INT8: 7, _DT_UINT16: 7, _DT_QINT8: 7,
              _DT_QUINT8: 7, _DT_QINT32: 7, _DT_QINT16: 7, _DT_QUINT16: 7, _DT_INT64: 10, _DT_BOOL: 11,
              _DT_HALF: 13, _DT_BFLOAT16: 13, _DT_UINT32: 16, _DT_UINT64: 17}
_VARINT_FIELDS = frozenset({7, 10, 11, 13, 16, 17})


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _half_bits(bits: int, dtype: int) -> float:
    """A ``half_val`` entry (the value's 16 bits in an int32) as a float."""
    bits &= 0xFFFF
    if dtype == _DT_BFLOAT16:
        return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
    return float(struct.unpack("<e", struct.pack("<H", bits))[0])


def _repeated(field: int, wt: int, v: Any) -> list[Any]:
    """The values of one occurrence of a repeated TensorProto field, packed or not."""
    if field in _VARINT_FIELDS:
        if wt == 0:
            return [v]
        if wt == 2:
            out, pos = [], 0
            while pos < len(v):
                x, pos = _varint(v, pos)
                out.append(x)
            return out
    elif field == 5 and wt in (2, 5) and len(v) % 4 == 0:
        return list(struct.unpack(f"<{len(v) // 4}f", v))
    elif field == 6 and wt in (1, 2) and len(v) % 8 == 0:
        return list(struct.unpack(f"<{len(v) // 8}d", v))
    raise ValueError(f"tensor field {field} with wire type {wt}")


def _elements(shape: bytes) -> int:
    """Number of elements of a TensorShapeProto (1 for a scalar)."""
    n = 1
    for f, wt, v in _fields(shape):
        if f == 2 and wt == 2:  # dim {size, name}
            size = next((_signed(x) for df, dwt, x in _fields(v) if df == 1 and dwt == 0), 0)
            n *= size
        elif f == 3 and wt == 0 and v:  # unknown_rank
            return -1
    return n


def _tensor_scalar(buf: bytes) -> float | None:
    """The value of a scalar TensorProto (a TF2 ``tf.summary.scalar``), exactly as the dtype
    stores it: floats, doubles, halves (``half_val`` holds the 16 bits), bfloat16, signed and
    unsigned integers, booleans, packed or not. ``None`` for a string, a complex number or a
    tensor of more than one element."""
    dtype = 0
    content = b""
    shape = 1
    values: dict[int, list[Any]] = {}
    for f, wt, v in _fields(buf):
        if f == 1 and wt == 0:
            dtype = v
        elif f == 2 and wt == 2:
            shape = _elements(v)
        elif f == 4 and wt == 2:
            content = v
        elif f in _VARINT_FIELDS or f in (5, 6):
            values.setdefault(f, []).extend(_repeated(f, wt, v))
    if shape != 1:
        return None
    if content:
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            return _half_bits(struct.unpack("<H", content)[0], dtype)
        code = _CONTENT.get(dtype)
        if code is None or len(content) != struct.calcsize(code):
            return None
        return float(struct.unpack("<" + code, content)[0])
    if dtype == _DT_FLOAT or (dtype == 0 and 5 in values):
        vals = values.get(5, [])
    elif dtype == _DT_DOUBLE or (dtype == 0 and 6 in values):
        vals = values.get(6, [])
    elif dtype in _INT_FIELD:
        raw = values.get(_INT_FIELD[dtype], [])
        if dtype in (_DT_HALF, _DT_BFLOAT16):
            vals = [_half_bits(x, dtype) for x in raw]
        elif dtype in (_DT_UINT32, _DT_UINT64):
            vals = [float(x) for x in raw]
        elif dtype == _DT_BOOL:
            vals = [float(bool(x)) for x in raw]
        else:  # int32 values are sign-extended to 64 bits on the wire
            vals = [float(_signed(x)) for x in raw]
    else:
        return None
    return float(vals[0]) if len(vals) == 1 else None


_F32 = struct.Struct("<f")


def _simple_values(buf: bytes) -> list[tuple[str, float]] | None:
    """Fast path for a Summary made only of ``{tag, simple_value}`` values (what
    ``add_scalar`` writes); ``None`` sends anything else to the general decoder."""
    out: list[tuple[str, float]] = []
    pos, n = 0, len(buf)
    try:
        while pos < n:
            if buf[pos] != 0x0A:
                return None
            size = buf[pos + 1]
            if size & 0x80:
                return None
            end = pos + 2 + size
            p = pos + 2
            if end > n or p >= end or buf[p] != 0x0A:
                return None
            tlen = buf[p + 1]
            if tlen & 0x80:
                return None
            tag_end = p + 2 + tlen
            if tag_end + 5 != end or buf[tag_end] != 0x15:
                return None
            out.append((buf[p + 2:tag_end].decode("utf-8", errors="replace"), _F32.unpack_from(buf, tag_end + 1)[0]))
            pos = end
    except (IndexError, struct.error):  # a cut summary: the general decoder says what is wrong
        return None
    return out


def parse_event(data: bytes) -> tuple[float, int, list[tuple[str, float]], int]:
    """``(wall_time, step, [(tag, value)], skipped non-scalar values)`` of one Event record."""
    wall, step, scalars, other = 0.0, 0, [], 0
    for f, wt, v in _fields(data):
        if f == 1 and wt == 1:
            wall = struct.unpack("<d", v)[0]
        elif f == 2 and wt == 0:
            step = v - (1 << 64) if v >= 1 << 63 else v
        elif f == 5 and wt == 2:
            fast = _simple_values(v)
            if fast is not None:
                scalars.extend(fast)
                continue
            for vf, vwt, value in _fields(v):
                if vf != 1 or vwt != 2:
                    continue
                tag, num = "", None
                for sf, swt, sv in _fields(value):
                    if sf == 1 and swt == 2:
                        if len(sv) > MAX_KEY_BYTES:
                            raise ValueError(f"a tag of {len(sv)} bytes, over the {MAX_KEY_BYTES}-byte bound")
                        tag = sv.decode("utf-8", errors="replace")
                    elif sf == 2 and swt == 5:
                        num = struct.unpack("<f", sv)[0]
                    elif sf == 8 and swt == 2:
                        num = _tensor_scalar(sv)
                if tag and num is not None:
                    scalars.append((tag, num))
                else:
                    other += 1
    return wall, step, scalars, other


# --- TFRecord framing ----------------------------------------------------------------------------
def tfrecord(data: bytes) -> bytes:
    """One TFRecord-framed record (used by tests and the transformers callback's TB output)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _pb_key(field: int, wt: int) -> bytes:
    return _pb_varint((field << 3) | wt)


def _pb_varint(x: int) -> bytes:
    x &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        if x:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb_bytes(field: int, data: bytes) -> bytes:
    return _pb_key(field, 2) + _pb_varint(len(data)) + data


def encode_event(wall_time: float, step: int = 0, scalars: dict[str, float] | None = None,
                 file_version: str | None = None) -> bytes:
    """An ``Event`` protobuf with ``simple_value`` scalars (as ``SummaryWriter.add_scalar``)."""
    out = _pb_key(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _pb_key(2, 0) + _pb_varint(step)
    if file_version is not None:
        out += _pb_bytes(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _pb_bytes(1, _pb_bytes(1, tag.encode()) + _pb_key(2, 5) + struct.pack("<f", value))
            for tag, value in scalars.items())
        out += _pb_bytes(5, summary)
    return out


def encode_text_event(wall_time: float, step: int, tag: str, text: str) -> bytes:
    """An ``Event`` with a text summary (the TensorBoard text plugin: a string tensor)."""
    metadata = _pb_bytes(1, _pb_bytes(1, b"text"))  # SummaryMetadata.plugin_data.plugin_name
    tensor = _pb_key(1, 0) + bytes([7]) + _pb_bytes(2, b"") + _pb_bytes(8, text.encode("utf-8"))  # DT_STRING
    value = _pb_bytes(1, tag.encode()) + _pb_bytes(9, metadata) + _pb_bytes(8, tensor)
    out = _pb_key(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _pb_key(2, 0) + _pb_varint(step)
    return out + _pb_bytes(5, _pb_bytes(1, value))


def read_events(path: Path, report: Any = None, strict: bool = False) -> Iterator[tuple[int, bytes]]:
    """``(record number, data)`` of each TFRecord; a broken record is reported and skipped."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None

    def bad(n: int, reason: str, category: str) -> None:
        if strict:
            raise StrictModeError(reason, path=str(path), line=n)
        if report is not None:
            report.rows_read += 1
            report.skip(n, f"{path.name}: {reason}", category)

    check_data = _crc32c_c is not None or path.stat().st_size <= PY_CRC_LIMIT
    if not check_data and report is not None:
        report.notes.append(f"{path.name}: record payload checksums not verified (large file and no C "
                            "CRC32C: pip install google-crc32c); record lengths are verified")
    with fh:
        size = os.fstat(fh.fileno()).st_size
        n = 0
        while True:
            head = fh.read(12)
            if not head:
                return
            n += 1
            if len(head) < 12:
                bad(n, "truncated record header at end of file (writer stopped mid-write)",
                    "truncated record")
                return
            length, crc = struct.unpack("<QI", head)
            if masked_crc32c(head[:8]) != crc:
                if n == 1:
                    raise FormatError("not a TFRecord event file (bad length checksum)", path=str(path))
                bad(n, "corrupt record length (checksum mismatch); rest of file unreadable",
                    "corrupt record")
                return
            left = size - fh.tell()
            if length > MAX_RECORD_BYTES:
                bad(n, f"record length {length} is over the {MAX_RECORD_BYTES}-byte bound; rest of file "
                    "unreadable", "corrupt record")
                return
            if length + 4 > left:  # checked before reading: never a read of what is not there
                bad(n, f"truncated record at end of file (its header says {length} bytes, {max(left - 4, 0)} "
                    "are left: writer stopped mid-write)", "truncated record")
                return
            data = fh.read(length)
            tail = fh.read(4)
            if len(data) < length or len(tail) < 4:
                bad(n, "truncated record at end of file (writer stopped mid-write)", "truncated record")
                return
            if check_data and struct.unpack("<I", tail)[0] != masked_crc32c(data):
                bad(n, "corrupt record (data checksum mismatch)", "corrupt record")
                continue
            yield n, data


def event_files(path: Path) -> list[Path]:
    """Event files of a file or (recursively) a folder, oldest name first."""
    if path.is_file():
        return [path]
    return sorted((p for p in path.rglob("*tfevents*") if p.is_file()),
                  key=lambda p: (p.name.split("tfevents.")[-1], str(p)))


def _looks_like_tfrecord(head: bytes) -> bool:
    if len(head) < 12:
        return False
    return struct.unpack("<I", head[8:12])[0] == masked_crc32c(head[:8])


def detect(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return any(True for _ in path.rglob("*tfevents*"))
    return _looks_like_tfrecord(head)


class TensorBoardSource(RowSource):
    format_name = "tensorboard"

    def rows(self) -> Iterator[Row]:
        files = event_files(self.path)
        if not files:
            raise InputError("no events.out.tfevents.* files", path=str(self.path))
        # (tag, step) -> (wall_time, value); step -> (file index, record) of its first record
        best: dict[tuple[str, int], tuple[float, float]] = {}
        where: dict[int, tuple[int, int]] = {}
        seen = dupes = replaced = other = 0
        for fi, f in enumerate(files):
            for rec, data in read_events(f, self.report, self.strict):
                try:
                    wall, step, scalars, skipped = parse_event(data)
                except (ValueError, struct.error) as exc:
                    if self.strict:
                        raise StrictModeError(f"undecodable event: {exc}", path=str(f), line=rec) from None
                    self.report.rows_read += 1
                    self.report.skip(rec, f"{f.name}: undecodable event ({exc})", "corrupt record")
                    continue
                other += skipped
                for tag, value in scalars:
                    seen += 1
                    key = (tag, step)
                    old = best.get(key)
                    if old is not None:
                        dupes += 1
                        if wall < old[0]:
                            continue
                        replaced += 1
                    best[key] = (wall, value)
                    where.setdefault(step, (fi, rec))
        by_step: dict[int, dict[str, Any]] = {}
        for (tag, step), (_, value) in best.items():
            by_step.setdefault(step, {"step": step})[tag] = value
        notes = self.report.notes
        if len(files) > 1:
            dirs = sorted({str(f.parent.relative_to(self.path)) if self.path.is_dir() else "."
                           for f in files})
            notes.append(f"{len(files)} event files merged (restarts)"
                         + (f" from {len(dirs)} folders: {', '.join(dirs[:5])}" if len(dirs) > 1 else ""))
        if dupes:
            notes.append(f"{dupes} duplicate (tag, step) value(s) resolved by keeping the latest wall_time "
                         f"({replaced} replaced an earlier value)")
        if other:
            notes.append(f"{other} non-scalar summary value(s) (text, histograms, images) skipped")
        notes.append("values are float32 (TensorBoard's simple_value); line numbers are record numbers "
                     "in the event file")
        for step in sorted(by_step):
            yield where[step][1], by_step[step]

"""Convert any supported log into the canonical step stream, as Parquet.

``forensics convert trainer_state.json -o run.parquet`` reads the source with its adapter,
renames its keys to canonical names (applying unit transforms such as squaring trlX's sqrt KL),
keeps unknown keys under their own names, and writes one row per logged step in file order.
Replayed steps (resumed runs) are written as they were logged, so a scan of the Parquet file
applies the same step policy and reports the same findings as a scan of the source.

The read report (format, rows read and skipped, notes) and the column mapping are stored in the
Parquet file's key-value metadata under ``forensics``. Two passes over the source keep memory
bounded by the batch size: the first finds the columns, the second writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import InputError
from ..records import record
from ..schema import ColumnMapping
from .canonical import Canonicalizer
from .formats import detect_format as _detect
from .formats import open_source
from .inputs import local_path
from .output import Outputs, writing
from .readers import ReadReport

__all__ = ["ConvertResult", "convert", "read_convert_metadata"]

METADATA_KEY = b"forensics"


@record
class ConvertResult:
    """What :func:`convert` wrote."""

    path: Path
    rows: int
    columns: list[str]
    report: ReadReport
    mapping: ColumnMapping

    def summary(self) -> str:
        m = self.mapping
        return (f"wrote {self.path}: {self.rows} rows, {len(self.columns)} columns "
                f"({len(m.mapping)} mapped to canonical names, {len(m.unmapped)} carried through unmapped)")


def _columns(src: Path, fmt: str | None, strict: bool, batch_rows: int) -> tuple[dict[str, bool], ReadReport,
                                                                                ColumnMapping]:
    """Pass 1: every output column and whether it is text."""
    source = open_source(src, fmt, strict=strict)
    canon = Canonicalizer()
    is_text: dict[str, bool] = {}
    for raw in source.batches(batch_rows):
        batch, keep = canon(raw, source.report)
        source.report.rows_kept -= int((~keep).sum())  # skipped by the canonical layer (no step)
        for name in batch.columns:
            is_text.setdefault(name, False)
        for name in batch.text:
            is_text[name] = True
    return is_text, source.report, canon.mapping


def _array(values: np.ndarray | None, missing: np.ndarray | None, text: bool, n: int) -> pa.Array:
    if values is None:
        return pa.nulls(n, pa.string() if text else pa.float64())
    if text:
        if values.dtype != object:  # numbers in a column that is text elsewhere
            strs = [None if (missing is not None and missing[i]) else repr(float(v)) for i, v in enumerate(values)]
            return pa.array(strs, pa.string())
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.array(values.astype(np.float64, copy=False), pa.float64(), mask=missing)


def convert(src: Path | str, out: Path | str, *, fmt: str | None = None, strict: bool = False,
            batch_rows: int = 65_536, outputs: Outputs | None = None) -> ConvertResult:
    """Write the canonical step stream of ``src`` to the Parquet file ``out``.

    ``out`` is checked against ``src`` (and the inputs ``outputs`` knows) before the source is
    read, and written to a temporary file renamed into place (:class:`~forensics.io.output.Outputs`):
    an output that is the source, a link or a special file is a
    :class:`~forensics.errors.UsageError`, and a failed conversion leaves no file behind.
    """
    shown, out = Path(src), Path(out)
    outputs = outputs or Outputs()
    outputs.add(shown)
    outputs.check(out)
    src = local_path(shown, consume=True)  # a stream (stdin, a pipe) is read twice from one copy
    name = fmt or _detect(src)
    is_text, report, mapping = _columns(src, name, strict, batch_rows)
    report.path = str(shown)
    columns = ["step", *[c for c in is_text if c != "step"]]
    schema = pa.schema([pa.field("step", pa.int64())]
                       + [pa.field(c, pa.string() if is_text[c] else pa.float64()) for c in columns[1:]])
    meta = {
        "tool": f"forensics {__version__}",
        "source": str(shown),
        "format": name,
        "read_report": report.to_dict(),
        "column_mapping": mapping.to_dict(),
    }
    schema = schema.with_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True).encode()})
    source = open_source(src, name, strict=strict)
    canon = Canonicalizer()
    rows = 0
    with outputs.temporary(out) as tmp:
        writer = writing(out, pq.ParquetWriter, tmp, schema)
        try:
            for raw in source.batches(batch_rows):
                batch, keep = canon(raw, source.report)
                if not keep.all():
                    batch = batch.take(keep)
                n = len(batch)
                if not n:
                    continue
                arrays = [pa.array(batch.steps, pa.int64())]
                for c in columns[1:]:
                    values = batch.text.get(c) if is_text[c] and c in batch.text else batch.columns.get(c)
                    arrays.append(_array(values, batch.missing.get(c), is_text[c], n))
                writing(out, writer.write_table, pa.Table.from_arrays(arrays, schema=schema))
                rows += n
        finally:
            writing(out, writer.close)
        if rows == 0:  # leave nothing behind
            raise InputError(f"no usable rows ({report.rows_read} read, {report.rows_skipped} skipped)",
                             path=str(shown))
    return ConvertResult(out, rows, columns, report, mapping)


def read_convert_metadata(path: Path | str) -> dict[str, Any]:
    """The ``forensics`` metadata a :func:`convert` output carries (empty if none)."""
    md = pq.read_schema(path).metadata or {}
    raw = md.get(METADATA_KEY)
    return json.loads(raw) if raw else {}

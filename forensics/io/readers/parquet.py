"""Streaming Parquet reader: one record batch at a time; a folder of Parquet files (the parts a
killed writer leaves, a partitioned dataset) read as one stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ...errors import InputError
from ..limits import CELL_BUDGET
from .arrow import table_to_raw
from .base import RawBatch, ReadReport

if TYPE_CHECKING:  # pyarrow.parquet (and its file systems) is imported when a Parquet file is read
    import pyarrow.parquet as pq

__all__ = ["ParquetPartsSource", "ParquetSource", "parquet_files"]

_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _natural(path: Path) -> list[Any]:
    """Sort key that orders numbers by value: ``epoch=2`` before ``epoch=10``."""
    return [[int(t) if t.isdigit() else t for t in re.split(r"(\d+)", part)] for part in path.parts]


def parquet_files(folder: Path, limit: int | None = None) -> list[Path]:
    """The Parquet files under ``folder`` (recursively: a partitioned dataset), in natural name
    order; bookkeeping files (``_SUCCESS``, ``_metadata``, hidden files, ``*.tmp``) are left out.

    The order is the stream's row order: ``part-2`` before ``part-10``, ``epoch=2/`` before
    ``epoch=10/``.
    """
    found: list[Path] = []
    for p in folder.rglob("*.parquet"):
        rel = p.relative_to(folder)
        if any(part.startswith(("_", ".")) for part in rel.parts) or not p.is_file():
            continue
        found.append(p)
        if limit is not None and len(found) >= limit:
            break
    return sorted(found, key=lambda p: _natural(p.relative_to(folder)))


def _partition_values(rel: Path) -> dict[str, Any]:
    """Hive partition columns of a file's folders (``epoch=3/lr=1e-05/part-0.parquet``)."""
    out: dict[str, Any] = {}
    for part in rel.parts[:-1]:
        key, sep, value = part.partition("=")
        if not sep or not key:
            continue
        if value == _HIVE_NULL:
            out[key] = None
            continue
        try:
            out[key] = int(value) if re.fullmatch(r"-?\d{1,18}", value) else float(value)
        except ValueError:
            out[key] = value
    return out


class ParquetSource:
    """Rows of a Parquet file; ``lines`` are 1-based row numbers.

    Decimal columns are read as float64 (noted); dictionary columns are decoded; a text column
    of a numeric metric is parsed by the canonical layer (see :mod:`forensics.io.canonical`).
    """

    def __init__(self, path: Path, *, strict: bool = False, partition: dict[str, Any] | None = None,
                 report: ReadReport | None = None, row0: int = 0) -> None:
        self.path = path
        self.strict = strict
        self.report = report if report is not None else ReadReport(str(path), format="parquet")
        self.partition = partition or {}
        self.row0 = row0

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        import pyarrow.parquet as pq

        try:
            # pre_buffer=False: read column chunks as needed (halves peak memory, no slower here)
            pf = pq.ParquetFile(self.path, pre_buffer=False)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", path=str(self.path)) from None
        self._restore_origin(pf)
        schema = pf.schema_arrow
        decimals = [f.name for f in schema if pa.types.is_decimal(f.type)]
        if decimals:
            self.report.notes.append(f"{self.path.name}: decimal column(s) {', '.join(decimals[:8])} read as "
                                     "float64 (about 16 significant digits)")
        # a batch holds about CELL_BUDGET cells at most: a file of very many columns costs per row
        rows = max(min(batch_rows, CELL_BUDGET // max(len(schema), 1)), 64)
        row = self.row0 + 1
        try:
            for rb in pf.iter_batches(batch_size=rows):
                n = rb.num_rows
                table = pa.Table.from_batches([rb])
                for key, value in self.partition.items():
                    if key not in table.column_names:
                        table = table.append_column(key, pa.array([value] * n))
                self.report.rows_read += n
                self.report.rows_kept += n
                lines = np.arange(row, row + n, dtype=np.int64)
                row += n
                yield table_to_raw(table, lines)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"Parquet read failed after row {row - 1}: {exc}",
                             path=str(self.path)) from None


    def _restore_origin(self, pf: pq.ParquetFile) -> None:
        """A ``forensics convert`` output names the log it came from: its format, keys and the
        trainer config it printed go back into the report (see ReadReport.converted_from)."""
        raw = (pf.schema_arrow.metadata or {}).get(b"forensics")
        try:
            meta = json.loads(raw) if raw else {}
        except ValueError:
            return
        if not isinstance(meta, dict) or not isinstance(meta.get("column_mapping"), dict):
            return
        mapping = meta["column_mapping"]
        keys = [*(mapping.get("mapping") or {}), *(mapping.get("unmapped") or [])]
        self.report.converted_from = {"format": str(meta.get("format", "")), "path": str(meta.get("source", "")),
                                      "keys": [k for k in keys if isinstance(k, str)]}
        run_config = (meta.get("read_report") or {}).get("run_config") or {}
        if isinstance(run_config.get("values"), dict):
            self.report.run_config = run_config["values"]
            self.report.run_config_origin = f"converted from {meta.get('source')}: {run_config.get('origin', '')}"


class ParquetPartsSource:
    """A folder of Parquet files read as one stream, in natural name order (see
    :func:`parquet_files`): the parts :class:`forensics.trainer.writer.RunWriter` leaves when it
    is killed (``steps.parquet.parts/part-000000.parquet``; every part in it is whole), or a
    partitioned dataset (``pyarrow.dataset.write_dataset``, Spark: ``epoch=3/part-0.parquet``,
    whose hive partition values become columns). ``lines`` are 1-based row numbers across the
    files; each file keeps its own schema.
    """

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="parquet-parts")

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        parts = parquet_files(self.path)
        if not parts:
            raise InputError("folder holds no Parquet files", path=str(self.path))
        row = 0
        partitioned = False
        for part in parts:
            rel = part.relative_to(self.path)
            values = _partition_values(rel)
            partitioned = partitioned or bool(values)
            source = ParquetSource(part, strict=self.strict, partition=values, report=self.report, row0=row)
            for raw in source.batches(batch_rows):
                row = int(raw.lines[-1]) if len(raw) else row
                yield raw
        writer_parts = all(p.parent == self.path and p.name.startswith("part-") for p in parts)
        if self.path.name.endswith(".parts") and writer_parts:
            self.report.notes.append(f"{len(parts)} Parquet parts of a writer that did not close "
                                     "(killed?): read as one stream")
        else:
            self.report.notes.append(f"{len(parts)} Parquet file(s) read as one stream, in natural name order"
                                     + (" (hive partition values as columns)" if partitioned else ""))

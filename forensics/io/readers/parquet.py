"""Streaming Parquet reader: one record batch at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InputError
from .arrow import table_to_raw
from .base import RawBatch, ReadReport

__all__ = ["ParquetPartsSource", "ParquetSource"]


class ParquetSource:
    """Rows of a Parquet file; ``lines`` are 1-based row numbers."""

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="parquet")

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        try:
            # pre_buffer=False: read column chunks as needed (halves peak memory, no slower here)
            pf = pq.ParquetFile(self.path, pre_buffer=False)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", path=str(self.path)) from None
        self._restore_origin(pf)
        row = 1
        try:
            for rb in pf.iter_batches(batch_size=batch_rows):
                n = rb.num_rows
                self.report.rows_read += n
                self.report.rows_kept += n
                lines = np.arange(row, row + n, dtype=np.int64)
                row += n
                yield table_to_raw(pa.Table.from_batches([rb]), lines)
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
    """A folder of Parquet part files read as one stream, in name order.

    :class:`forensics.trainer.writer.RunWriter` writes one complete part per flush
    (``steps.parquet.parts/part-000000.parquet``) and merges them on close; a folder that is still
    there means the writer was killed, and every part in it is whole. ``lines`` are 1-based row
    numbers across the parts.
    """

    def __init__(self, path: Path, *, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.report = ReadReport(str(path), format="parquet-parts")

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        parts = sorted(self.path.glob("part-*.parquet"))
        if not parts:
            raise InputError("folder holds no part-*.parquet files", path=str(self.path))
        row = 1
        for part in parts:
            source = ParquetSource(part, strict=self.strict)
            for raw in source.batches(batch_rows):
                raw.lines = raw.lines + (row - 1)
                yield raw
            row += source.report.rows_read
            self.report.rows_read += source.report.rows_read
            self.report.rows_kept += source.report.rows_kept
        self.report.notes.append(f"{len(parts)} Parquet parts of a writer that did not close "
                                 "(killed?): read as one stream")

"""Readers of the canonical streams: JSON lines (optionally .gz), Parquet and Parquet parts; a pandas
DataFrame (:mod:`.frame`, loaded when a DataFrame is scanned).

Each reader is a :class:`Source` that yields raw batches and keeps a :class:`ReadReport`. Which
reader (or framework adapter) opens a file is decided in :mod:`forensics.io.formats`.
"""

from __future__ import annotations

from .base import Format, RawBatch, ReadReport, RowIssue, Source
from .jsonl import JsonlSource
from .parquet import ParquetPartsSource, ParquetSource

__all__ = ["Format", "JsonlSource", "ParquetPartsSource", "ParquetSource", "RawBatch", "ReadReport",
           "RowIssue", "Source"]

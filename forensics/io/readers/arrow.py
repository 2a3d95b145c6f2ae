"""Arrow tables, polars frames and Python rows to :class:`RawBatch` columns."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import RawBatch

if TYPE_CHECKING:
    import polars as pl

__all__ = ["frame_to_raw", "rows_to_raw", "table_to_raw"]


def _flatten(table: pa.Table) -> pa.Table:
    """Flatten nested structs into ``parent/child`` columns (as the line-by-line parse names them;
    a dot in a key is kept)."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        names: list[str] = []
        columns: list[pa.ChunkedArray] = []
        for name, col in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_struct(col.type):
                names.extend(f"{name}/{col.type.field(i).name}" for i in range(col.type.num_fields))
                columns.extend(col.flatten())  # a null parent makes its children null
            else:
                names.append(name)
                columns.append(col)
        table = pa.Table.from_arrays(columns, names=names)
    return table


def table_to_raw(table: pa.Table, lines: np.ndarray) -> RawBatch:
    """Convert an Arrow table: numbers and booleans become float64 columns, the rest text."""
    table = _flatten(table)
    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or (
            pa.types.is_null(t)
        ):
            if pa.types.is_null(t):
                values = np.full(len(col), np.nan)
            else:
                if pa.types.is_boolean(t):
                    col = pc.cast(col, pa.int8())
                values = col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
            numeric[name] = values
            if col.null_count:
                missing[name] = col.is_null().to_numpy(zero_copy_only=False)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            text[name] = col.to_numpy(zero_copy_only=False)
        else:  # lists (histograms), binary, timestamps...: carried through as text
            text[name] = np.array([None if v is None else str(v) for v in col.to_pylist()],
                                  dtype=object)
    return RawBatch(numeric, missing, text, lines)


def frame_to_raw(frame: pl.DataFrame, lines: np.ndarray) -> RawBatch:
    """Convert a flat polars frame (numeric, boolean and string columns, as the JSONL fast path
    parses them): numbers and booleans become float64 columns, strings text."""
    import polars as pl

    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    for col in frame.get_columns():
        if col.dtype == pl.String:
            text[col.name] = col.to_numpy()
            continue
        if col.dtype == pl.Boolean:
            col = col.cast(pl.Float64)
        numeric[col.name] = col.to_numpy().astype(np.float64, copy=False)
        if col.null_count():
            missing[col.name] = col.is_null().to_numpy()
    return RawBatch(numeric, missing, text, lines)


def _to_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return None


def _flat_items(row: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            items.extend(_flat_items(value, name + "/"))
        else:
            items.append((name, value))
    return items


def rows_to_raw(rows: list[dict[str, Any]], lines: np.ndarray) -> RawBatch:
    """Convert parsed JSON objects (the slow path for chunks with odd lines)."""
    flat = [dict(_flat_items(r)) for r in rows]
    keys: dict[str, None] = {}
    for r in flat:
        keys.update(dict.fromkeys(r))
    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    n = len(flat)
    for key in keys:
        values = [r.get(key) for r in flat]
        present = [v is not None for v in values]
        is_number = all(v is None or (isinstance(v, (int, float))) for v in values)
        if is_number:
            arr = np.array([np.nan if v is None else _to_float(v) for v in values],
                           dtype=np.float64)
            numeric[key] = arr
            if not all(present):
                missing[key] = ~np.array(present, dtype=bool)
        else:
            text[key] = np.array([None if v is None else (v if isinstance(v, str) else str(v))
                                  for v in values], dtype=object)
    del n
    return RawBatch(numeric, missing, text, lines)

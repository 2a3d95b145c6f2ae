"""Arrow tables, polars frames and Python rows to :class:`RawBatch` columns."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from ..limits import CELL_BUDGET
from .base import RawBatch

if TYPE_CHECKING:
    import polars as pl

__all__ = ["budget_groups", "frame_to_raw", "rows_to_raw", "table_to_raw"]

T = TypeVar("T")


def budget_groups(items: Iterable[T], max_rows: int, keys: Callable[[T], Iterable[str]]) -> Iterator[list[T]]:
    """``items`` in groups of at most ``max_rows``, cut early where rows x distinct keys would
    pass :data:`~forensics.io.limits.CELL_BUDGET` (rows that keep adding keys), so that the
    dense columns of a group cost a bounded amount per row.

    >>> [len(g) for g in budget_groups([{"a": 1}] * 5, 2, dict.keys)]
    [2, 2, 1]
    """
    group: list[T] = []
    seen: set[str] = set()
    for item in items:
        seen.update(keys(item))
        group.append(item)
        if len(group) >= max_rows or len(group) * len(seen) >= CELL_BUDGET:
            yield group
            group, seen = [], set()
    if group:
        yield group


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


def _unique(name: str, taken: dict[str, None]) -> str:
    """``name``, or ``name~2``, ``name~3``... when two columns of a batch flatten to one name
    (a key ``"a/b"`` beside a nested ``{"a": {"b": ...}}``): both are kept."""
    if name not in taken:
        return name
    k = 2
    while f"{name}~{k}" in taken:
        k += 1
    return f"{name}~{k}"


def _numeric_array(col: pa.ChunkedArray) -> np.ndarray:
    """An Arrow number or boolean column as numpy, exactly: int64 for signed and small unsigned
    integers, object for uint64 values beyond int64, bool, or float64; nulls as 0/False/NaN."""
    t = col.type
    # pyarrow.compute (fill_null, max, cast) only where a column needs it: a small scan never
    # imports it (about 0.1 s)
    if pa.types.is_boolean(t):
        return (col.fill_null(False) if col.null_count else col).to_numpy(zero_copy_only=False).astype(bool, copy=False)
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t) and col.null_count < len(col) and _max(col) > 2**63 - 1:
            return np.array([0 if v is None else v for v in col.to_pylist()], dtype=object)
        return (col.fill_null(0) if col.null_count else col).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if pa.types.is_decimal(t):
        try:
            col = col.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.array([math.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64)
    return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _max(col: pa.ChunkedArray) -> Any:
    import pyarrow.compute as pc

    return pc.max(col).as_py()


def table_to_raw(table: pa.Table, lines: np.ndarray) -> RawBatch:
    """Convert an Arrow table: numbers and booleans become numeric columns (integers exact,
    decimals as float64), dictionaries are decoded, strings are text, and the rest (lists,
    binary, timestamps) is carried as text."""
    table = _flatten(table)
    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    taken: dict[str, None] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        name = _unique(name, taken)
        taken[name] = None
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        t = col.type
        if pa.types.is_null(t):
            numeric[name] = np.full(len(col), np.nan)
            missing[name] = np.ones(len(col), dtype=bool)
        elif (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
              or pa.types.is_decimal(t)):
            numeric[name] = _numeric_array(col)
            if col.null_count:
                missing[name] = col.is_null().to_numpy(zero_copy_only=False)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            try:
                text[name] = col.to_numpy(zero_copy_only=False)
            except (pa.ArrowException, UnicodeDecodeError):  # invalid UTF-8 in a string: replaced
                text[name] = np.array([None if v is None else v.decode("utf-8", "replace")
                                       for v in col.cast(pa.binary()).to_pylist()], dtype=object)
        else:  # lists (histograms), binary, timestamps...: carried through as text
            text[name] = np.array([None if v is None else str(v) for v in col.to_pylist()],
                                  dtype=object)
    return RawBatch(numeric, missing, text, lines)


def frame_to_raw(frame: pl.DataFrame, lines: np.ndarray) -> RawBatch:
    """Convert a flat polars frame (numeric, boolean and string columns, as the JSONL fast path
    parses them): integers stay int64, floats float64, booleans bool, strings text."""
    import polars as pl

    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    for col in frame.get_columns():
        if col.dtype == pl.String:
            text[col.name] = col.to_numpy()
            continue
        nulls = col.null_count()
        if col.dtype == pl.Boolean:
            numeric[col.name] = (col.fill_null(False) if nulls else col).to_numpy().astype(bool, copy=False)
        elif col.dtype.is_integer():
            numeric[col.name] = (col.fill_null(0) if nulls else col).to_numpy().astype(np.int64, copy=False)
        else:
            numeric[col.name] = col.to_numpy().astype(np.float64, copy=False)
        if nulls:
            missing[col.name] = col.is_null().to_numpy()
    return RawBatch(numeric, missing, text, lines)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _flat_items(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in row.items():
        name = _clean(f"{prefix}{key}")
        if isinstance(value, dict):
            yield from _flat_items(value, name + "/")
        else:
            yield name, value


def _clean(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (``"\\ud800"`` in JSON, which Python's json
    accepts) cannot be written as UTF-8 and is replaced."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _as_text(value: Any) -> str:
    return _clean(value if isinstance(value, str) else str(value))


def _number_column(values: list[Any]) -> np.ndarray:
    """The numpy column of Python numbers (ints, floats, bools), exactly: int64 when every value
    is an int within int64, bool when every value is a bool, float64 when they are floats (and
    ints), object otherwise (ints beyond int64, booleans mixed with numbers)."""
    kinds = {type(v) for v in values}
    if kinds == {int}:
        if _INT64_MIN <= min(values) and max(values) <= _INT64_MAX:
            return np.array(values, dtype=np.int64)
        return np.array(values, dtype=object)
    if kinds == {bool}:
        return np.array(values, dtype=bool)
    if bool not in kinds and not (int in kinds and any(type(v) is int and abs(v) >= 2**53 for v in values)):
        try:  # (ints of 2**53 or more beside floats stay exact, as Python ints: steps)
            return np.array(values, dtype=np.float64)
        except OverflowError:  # an int beyond float64 (10**400): kept as a Python int
            pass
    return np.array(values, dtype=object)


def rows_to_raw(rows: list[dict[str, Any]], lines: np.ndarray) -> RawBatch:
    """Convert parsed JSON objects (the slow path for chunks with odd lines, and the adapters).

    The cost is one pass over the values present plus one fill per column: a key logged on a few
    rows costs those rows, not the whole batch. A column with at least one number is numeric;
    its values that are not numbers (a string, a list) are listed in ``stray`` for the canonical
    layer to parse or set aside. A column of strings only is text.
    """
    n = len(rows)
    present: dict[str, tuple[list[int], list[Any]]] = {}
    for i, row in enumerate(rows):
        for key, value in _flat_items(row):
            entry = present.get(key)
            if entry is None:
                entry = present[key] = ([], [])
            elif entry[0] and entry[0][-1] == i:  # a flattened name that collides within the row
                k = 2
                while True:
                    entry = present.setdefault(f"{key}~{k}", ([], []))
                    if not (entry[0] and entry[0][-1] == i):
                        break
                    k += 1
            if value is not None:
                entry[0].append(i)
                entry[1].append(value)
    numeric: dict[str, np.ndarray] = {}
    missing: dict[str, np.ndarray] = {}
    text: dict[str, np.ndarray] = {}
    stray: dict[str, list[tuple[int, Any]]] = {}
    for key, (index, values) in present.items():
        is_num = [isinstance(v, (int, float)) for v in values]
        n_num = sum(is_num)
        if n_num == 0 and values:
            col = np.empty(n, dtype=object)
            col[index] = [_as_text(v) for v in values]
            text[key] = col
            continue
        if n_num < len(values):
            stray[key] = [(i, v) for i, v, ok in zip(index, values, is_num) if not ok]
            index = [i for i, ok in zip(index, is_num) if ok]
            values = [v for v, ok in zip(values, is_num) if ok]
        if not values:
            numeric[key] = np.full(n, np.nan)
            missing[key] = np.ones(n, dtype=bool)
            continue
        nums = _number_column(values)
        if len(index) == n:
            numeric[key] = nums
            continue
        if nums.dtype == np.float64:
            col = np.full(n, np.nan)
        else:
            col = np.zeros(n, dtype=nums.dtype)
        col[index] = nums
        numeric[key] = col
        miss = np.ones(n, dtype=bool)
        miss[index] = False
        missing[key] = miss
    return RawBatch(numeric, missing, text, lines, stray)

"""Per-step columns kept for the reports, with memory bounded by a spill threshold.

Small runs stay in memory. Past ``spill_rows`` rows, buffered batches are written to Arrow IPC
files in a private temporary folder, so a million-step scan does not hold every column of every
step in memory; consumers stream the parts back (:meth:`MetricsStore.parts`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["MAX_COLUMNS", "MetricsStore"]


#: The most columns the per-step table holds. A log that adds a key on every row would otherwise
#: make it rows x keys (50,000 such rows: a 2.5 GB metrics.csv); later keys are left out of the
#: table (the trackers still read every batch) and the analysis says how many.
MAX_COLUMNS = 1024


#: Columns kept in float64: seconds since the epoch (about 1.7e9) are resolved to 128 s by a
#: float32, which would leave metrics.csv a timestamp that stands still for minutes.
FLOAT64_COLUMNS = frozenset({"timestamp"})


def _dtype(name: str) -> type[np.generic]:
    return np.int64 if name == "step" else np.float64 if name in FLOAT64_COLUMNS else np.float32


class MetricsStore:
    """Append-only per-step table (float32 values but :data:`FLOAT64_COLUMNS`, int64 steps),
    spilled to disk when large."""

    # one reader batch (65536 rows, ~30 float32 columns: ~8 MB) is held at most: more buys nothing
    # (the parts are read back memory-mapped) and costs peak memory. A wide log (veRL's 200
    # metrics a row) spills by cells instead: 65,536 rows of 200 columns would hold 52 MB, twice
    # while they are joined for the spill.
    def __init__(self, spill_rows: int = 65_536, spill_cells: int = 1 << 21,
                 max_columns: int = MAX_COLUMNS) -> None:
        self.spill_rows = spill_rows
        self.spill_cells = spill_cells
        self.max_columns = max_columns
        self.n = 0
        self.names: dict[str, None] = {"step": None}
        #: columns left out once the table held ``max_columns`` (a log that adds keys as it goes):
        #: how many, and the first of them
        self.dropped_count = 0
        self.dropped: dict[str, None] = {}
        self._buffer: list[dict[str, np.ndarray]] = []
        self._buffered = 0
        self._files: list[Path] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def append(self, steps: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        part = {"step": steps.astype(np.int64, copy=False)}
        for name, values in cols.items():
            if name not in self.names:
                if len(self.names) > self.max_columns:
                    if len(self.dropped) < self.max_columns:  # a bounded sample of the names
                        self.dropped[name] = None
                    self.dropped_count += 1
                    continue
                self.names[name] = None
            part[name] = values.astype(_dtype(name))
        self._buffer.append(part)
        self._buffered += len(steps)
        self.n += len(steps)
        if self._buffered >= self.spill_rows or self._buffered * len(part) >= self.spill_cells:
            self._spill()

    def _spill(self) -> None:
        if not self._buffer:
            return
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="forensics-")
        import pyarrow.feather as feather  # only a run too large to hold spills (7 ms of a start)

        table = pa.concat_tables([pa.table(p) for p in self._buffer], promote_options="default")
        path = Path(self._tmp.name) / f"part-{len(self._files):05d}.arrow"
        feather.write_feather(table, path, compression="uncompressed")
        self._files.append(path)
        self._buffer, self._buffered = [], 0

    def parts(self, columns: list[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Consecutive parts as ``{column: array}``; absent columns are NaN-filled."""
        wanted = list(self.names) if columns is None else ["step", *[c for c in columns
                                                                      if c != "step"]]
        if self._files:
            import pyarrow.feather as feather
        for path in self._files:
            table = feather.read_table(path, memory_map=True)
            names = set(table.schema.names)
            have = [c for c in wanted if c in names]
            yield self._fill({c: table[c].to_numpy() for c in have}, wanted)
        for part in self._buffer:
            yield self._fill(part, wanted)

    @staticmethod
    def _fill(part: dict[str, np.ndarray], wanted: list[str]) -> dict[str, np.ndarray]:
        n = len(part["step"])
        return {c: part[c] if c in part else np.full(n, np.nan, dtype=_dtype(c)) for c in wanted}

    def frame(self, columns: list[str] | None = None) -> dict[str, np.ndarray]:
        """Whole columns (materialised: for small runs, or a few columns of a large one).

        Each part is copied into arrays allocated once, so the peak is the result plus one part
        (not every part and then their concatenation, twice the result).
        """
        wanted = list(self.names) if columns is None else ["step", *[c for c in columns
                                                                      if c != "step"]]
        out = {c: np.empty(self.n, dtype=_dtype(c)) for c in wanted}
        pos = 0
        for part in self.parts(columns):
            k = len(part["step"])
            for c in wanted:
                out[c][pos : pos + k] = part[c]
            pos += k
        return {c: v[:pos] for c, v in out.items()}

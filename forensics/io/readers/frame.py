"""A pandas DataFrame read as a log (:func:`forensics.analysis.engine.scan_frame`): a notebook's own table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import InputError
from .base import RawBatch, ReadReport

__all__ = ["FrameSource"]


class FrameSource:
    """A pandas DataFrame as a :class:`~forensics.io.readers.Source` (rows numbered from 1)."""

    def __init__(self, frame: Any, name: str) -> None:
        import pyarrow as pa

        named_index = frame.index.name is not None or any(n is not None for n in frame.index.names[1:])
        try:
            self.table = pa.Table.from_pandas(frame, preserve_index=named_index)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InputError(f"the DataFrame cannot be read: {exc}", path=name) from None
        self.report = ReadReport(name, format="dataframe")

    def batches(self, batch_rows: int) -> Iterator[RawBatch]:
        import pyarrow as pa

        from .arrow import table_to_raw

        row = 1
        for rb in self.table.to_batches(max_chunksize=max(batch_rows, 1)):
            n = rb.num_rows
            self.report.rows_read += n
            self.report.rows_kept += n
            yield table_to_raw(pa.Table.from_batches([rb]), np.arange(row, row + n, dtype=np.int64))
            row += n

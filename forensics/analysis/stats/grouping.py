"""Group sample-stream rows by step across batches, emitting only complete steps."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["StepGrouper"]


class StepGrouper:
    """Buffers the rows of the last (possibly incomplete) step until a later step appears.

    Rows must arrive grouped by step (all responses of a step together), as trainers write them.

    >>> g = StepGrouper()
    >>> [s.tolist() for s, _ in g.push(np.array([1, 1, 2]), {"x": np.array([1., 2., 3.])})]
    [[1]]
    >>> [(s.tolist(), [d["x"].tolist() for d in gs]) for s, gs in g.flush()]
    [([2], [[3.0]])]
    """

    def __init__(self) -> None:
        self._steps = np.zeros(0, dtype=np.int64)
        self._cols: dict[str, np.ndarray] = {}

    def push(self, steps: np.ndarray, cols: dict[str, np.ndarray]
             ) -> Iterator[tuple[np.ndarray, list[dict[str, np.ndarray]]]]:
        if len(steps) == 0:
            return
        all_steps = np.concatenate([self._steps, steps.astype(np.int64)])
        all_cols = {k: np.concatenate([self._cols.get(k, np.full(len(self._steps), np.nan)), v])
                    for k, v in cols.items()}
        last = all_steps[-1]
        earlier = all_steps != last
        cut = int(len(all_steps) - np.argmax(earlier[::-1])) if earlier.any() else 0
        self._steps = all_steps[cut:]
        self._cols = {k: v[cut:] for k, v in all_cols.items()}
        if cut:
            yield self._split(all_steps[:cut], {k: v[:cut] for k, v in all_cols.items()})

    def flush(self) -> Iterator[tuple[np.ndarray, list[dict[str, np.ndarray]]]]:
        if len(self._steps):
            yield self._split(self._steps, self._cols)
        self._steps = np.zeros(0, dtype=np.int64)
        self._cols = {}

    @staticmethod
    def _split(steps: np.ndarray, cols: dict[str, np.ndarray]
               ) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
        bounds = np.flatnonzero(np.diff(steps)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(steps)]])
        groups = [{k: v[a:b] for k, v in cols.items()} for a, b in zip(starts, ends, strict=True)]
        return steps[starts], groups

"""Values made JSON-safe for the standard library (NaN and infinities as null, numpy as Python)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["jsonable"]


def jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as None, keys as strings and numpy values as Python ones.

    >>> jsonable({1: [float("nan"), np.float32(2.5)]})
    {'1': [None, 2.5]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    return obj

"""Python-repr dicts printed to a console (``str(logs)``): ``{'loss': 0.1, 'kl': nan}``."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

__all__ = ["parse_pydict"]

_WRAP = re.compile(r"\b(?:np|numpy)\.(?:float|int|uint)\d*\(([^()]*)\)|\btensor\(([^(),]*)(?:,[^()]*)?\)")
_SPECIAL = re.compile(r"(?<![\w'\".])(-?)(nan|inf)\b")
_MARK = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-nan": math.nan}


def parse_pydict(text: str) -> dict[str, Any] | None:
    """The dict a console printed, or ``None`` when it is not one.

    >>> parse_pydict("{'loss': 0.5, 'kl': nan, 'lr': np.float64(1e-06)}")
    {'loss': 0.5, 'kl': nan, 'lr': 1e-06}
    """
    s = _WRAP.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    s = _SPECIAL.sub(lambda m: repr(f"__{m.group(1)}{m.group(2)}__"), s)
    try:
        obj = ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, str) and v.startswith("__") and v.endswith("__") and v[2:-2] in _MARK:
            v = _MARK[v[2:-2]]
        out[str(k)] = v
    return out

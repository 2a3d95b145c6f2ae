"""Values to a number of significant digits, as Python's formatting gives them, for whole arrays.

The plots carry each value to six significant digits (the page to five): ``float(f"{v:.6g}")``
per value was most of a small scan's work on its plots; :func:`significant` gives the same
floats with numpy's arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["significant"]

#: Below this many values, formatting each costs less than numpy's two dozen array operations
#: (about 0.35 us a value against a fixed 25 us, measured with ``timeit``).
_FEW = 64

#: Powers of ten held exactly by a float (10**22 is the largest).
_POW10 = np.array([float(10**k) for k in range(23)])


def significant(values: Any, digits: int = 6) -> list[float]:
    """``[float(f"{v:.{digits}g}") for v in values]``, the same floats, with numpy's arithmetic.

    A value times (or over) an exact power of ten is within one rounding of the exact product,
    so its nearest integer is the correctly rounded significand unless it lies next to a half;
    the integer over (or times) the power of ten is then the float the decimal text parses to
    (one correctly rounded operation on exact operands). Values next to a half, out of the
    powers' range, zeros and non-finite values are formatted as before.

    >>> significant([0.1234567, -98765432.1, 2.5e-300, 0.0, float("inf")])
    [0.123457, -98765400.0, 2.5e-300, 0.0, inf]
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1 and len(v) < _FEW:
        return [float(f"{x:.{digits}g}") for x in v.tolist()]
    with np.errstate(all="ignore"):
        a = np.abs(v)
        k = digits - 1 - np.floor(np.log10(np.where(a > 0, a, 1.0))).astype(np.int64)
        p = _POW10[np.minimum(np.abs(k), 22)]
        y = np.where(k >= 0, a * p, a / p)
        m = np.floor(y + 0.5)
        ok = (np.isfinite(y) & (a > 0) & (np.abs(k) <= 22) & (y >= 10.0 ** (digits - 1))
              & (y < 10.0 ** digits) & (np.abs(y - np.floor(y) - 0.5) > 1e-6))
        out = np.copysign(np.where(k >= 0, m / p, m * p), v)
    result: list[float] = np.where(ok, out, v).tolist()
    for i in np.flatnonzero(~ok).tolist():
        result[i] = float(f"{result[i]:.{digits}g}")
    return result

"""YAML text for JSON-shaped data (the recommendations): block style, every value read back as
it was written, by any YAML 1.1 or 1.2 reader (PyYAML's ``safe_load`` among them).

A small writer instead of PyYAML's ``safe_dump``: its import and its pure-Python emitter cost a
small scan more than the rest of its reports together, for data of dicts, lists, strings, numbers,
booleans and nulls. What keeps each value's type:

* strings are double-quoted scalars, JSON's escapes (valid in YAML's double quotes), with the
  characters YAML does not allow raw, or reads as line breaks (C1 controls, U+2028...), escaped
  too; a string is never read as a number, a boolean or null;
* a float always has a dot or an exponent with a dot (``1.0e-06``: YAML 1.1 reads ``1e-06`` as
  a string), infinities and NaN are ``.inf``, ``-.inf`` and ``.nan``;
* keys are plain where they are words (``learning_rate``, ``kl.coef``) YAML reads as strings,
  quoted otherwise (``"yes"``, ``"1"``, ``"a: b"``).
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

__all__ = ["dump"]

#: A key written plain: a word that no YAML reader takes for a number, a boolean or a null.
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}


@functools.cache
def _unsafe() -> re.Pattern[str]:
    """Characters that YAML does not allow raw in a double-quoted scalar or folds as a line
    break (compiled when a string first needs it: most recommendations are ASCII)."""
    return re.compile("[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _string(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    if s.isascii() and "\x7f" not in s:
        return text
    return _unsafe().sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _key(k: Any) -> str:
    k = str(k)
    return k if _PLAIN_KEY.fullmatch(k) and k.lower() not in _RESERVED else _string(k)


def _float(v: float) -> str:
    if math.isnan(v):
        return ".nan"
    if math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    r = repr(v)
    if "e" in r and "." not in r:
        mantissa, exp = r.split("e")
        return f"{mantissa}.0e{exp}"
    return r


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return _float(float(v))
    return _string(str(v))


def _value(x: Any) -> str:
    """A scalar, or an empty dict or list, on its key's (or dash's) line."""
    if isinstance(x, dict):
        return "{}"
    return "[]" if isinstance(x, (list, tuple)) else _scalar(x)


def _nested(x: Any) -> bool:
    return isinstance(x, (dict, list, tuple)) and len(x) > 0


def _lines(v: Any, indent: str, out: list[str]) -> None:
    """``v`` (a non-empty dict or list) as block lines at ``indent``; an item of a list that is
    itself a dict or a list starts on the dash's line (``- key: value``, ``- - 7``)."""
    if isinstance(v, dict):
        for k, x in v.items():
            if _nested(x):
                out.append(f"{indent}{_key(k)}:")
                _lines(x, indent + "  ", out)
            else:
                out.append(f"{indent}{_key(k)}: {_value(x)}")
        return
    for x in v:
        if _nested(x):
            first = len(out)
            _lines(x, indent + "  ", out)
            out[first] = f"{indent}- {out[first][len(indent) + 2:]}"
        else:
            out.append(f"{indent}- {_value(x)}")


def dump(data: dict[str, Any]) -> str:
    """``data`` (a dict of JSON-shaped values) as YAML text, newline-terminated.

    >>> print(dump({"config_patch": {"learning_rate": 8e-07, "beta": 0.1}, "yes": [[7, 13]],
    ...             "why": "a: b", "none": None, "empty": {}}), end="")
    config_patch:
      learning_rate: 8.0e-07
      beta: 0.1
    "yes":
      - - 7
        - 13
    why: "a: b"
    none: null
    empty: {}
    """
    if not data:
        return "{}\n"
    out: list[str] = []
    _lines(data, "", out)
    return "\n".join(out) + "\n"

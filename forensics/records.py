"""``record``: :func:`dataclasses.dataclass` whose comparison, ``repr`` and hash are shared by every
record class instead of written for each one.

``dataclass`` writes each class's methods as source text and compiles it when the class is
defined (Python 3.11 compiles every method on its own). The package defines 88 dataclasses; the
68 a scan loads cost about 40 ms of every command's start that way, ``__eq__``, ``__repr__`` and
a frozen class's ``__hash__`` half of it. A record keeps its generated ``__init__`` (fast to call:
a finding or a window's moments are made thousands of times) and gets those three from here: the
same fields in the same order, so the same results as the generated methods (``__eq__`` compares
the tuples of the ``compare`` fields of two instances of the same class, ``NotImplemented``
otherwise; ``repr`` is ``Name(field=value, ...)`` over the ``repr`` fields, recursion-safe;
frozen records hash the tuple of their hashed fields, mutable ones are unhashable). A method the
class writes itself is kept, as ``dataclass`` keeps it. Everything else (``fields``,
``replace``, ``asdict``, ``frozen``, ``slots``) is ``dataclass``'s own.

>>> @record(frozen=True)
... class Point:
...     x: float
...     y: float = 0.0
>>> Point(1.0), Point(1.0) == Point(1.0, 0.0), hash(Point(1.0)) == hash((1.0, 0.0))
(Point(x=1.0, y=0.0), True, True)
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

_T = TypeVar("_T")

#: The class attribute naming, per record class, the fields each shared method reads.
_COMPARE, _REPR, _HASH = "__record_compare__", "__record_repr__", "__record_hash__"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = getattr(self, _COMPARE)
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    values = ", ".join(f"{n}={getattr(self, n)!r}" for n in getattr(self, _REPR))
    return f"{self.__class__.__qualname__}({values})"


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in getattr(self, _HASH)))


def _define(cls: type, *, frozen: bool, slots: bool, repr: bool) -> type:
    own = dict(cls.__dict__)  # before dataclass: what the class body wrote itself
    # a body that writes __eq__ gets __hash__ = None from Python: that is not an explicit hash
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    out: type = dataclasses.dataclass(cls, eq=False, repr=False, frozen=frozen, slots=slots)
    fields = dataclasses.fields(out)  # type: ignore[arg-type]
    setattr(out, _COMPARE, tuple(f.name for f in fields if f.compare))
    setattr(out, _REPR, tuple(f.name for f in fields if f.repr))
    setattr(out, _HASH, tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    if "__eq__" not in own:
        out.__eq__ = _eq  # type: ignore[assignment]
    if repr and "__repr__" not in own:
        out.__repr__ = _repr  # type: ignore[assignment]
    if not explicit_hash:  # dataclass(eq=True): frozen hashes its fields, mutable is unhashable
        out.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    return out


@overload
def record(cls: type[_T], /) -> type[_T]: ...


@overload
def record(*, frozen: bool = False, slots: bool = False,
           repr: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, slots: bool = False,
           repr: bool = True) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """``@record`` or ``@record(frozen=..., slots=..., repr=...)``: a dataclass (see the module)."""
    def wrap(c: type[_T]) -> type[_T]:
        return _define(c, frozen=frozen, slots=slots, repr=repr)  # type: ignore[return-value]

    return wrap if cls is None else wrap(cls)

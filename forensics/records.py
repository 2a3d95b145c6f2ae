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

The methods ``dataclass`` still writes (``__init__``, and a frozen record's ``__setattr__`` and
``__delattr__``: 119 for the 69 records a scan loads) are compiled once and kept between
processes, as Python keeps a module's bytecode: :class:`_Compiled` holds the code compiled from
each method's source text, in a file beside this module's own bytecode (``__pycache__``, or
``sys.pycache_prefix``), written when a process compiled something new, never where Python
writes no bytecode (``PYTHONDONTWRITEBYTECODE``). Compiling them was 12 of the 17 ms that
defining those records took at every command's start. The code is the one ``exec`` would compile
from the same text, so the methods are the same; a file of another Python, or unreadable, is
ignored and written again.

>>> @record(frozen=True)
... class Point:
...     x: float
...     y: float = 0.0
>>> Point(1.0), Point(1.0) == Point(1.0, 0.0), hash(Point(1.0)) == hash((1.0, 0.0))
(Point(x=1.0, y=0.0), True, True)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import marshal
import os
import reprlib
import sys
from collections.abc import Callable
from types import CodeType
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


class _Compiled:
    """The code of the methods ``dataclass`` writes, by their source text, kept in ``path``
    between processes (see the module). ``exec`` is what ``dataclass`` calls (it looks ``exec``
    up in its module, where :func:`_define` puts this one while it defines a record)."""

    #: More entries than this in the file (methods of records since renamed or removed): the
    #: next write keeps only those this process used.
    KEEP = 1024

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] | None = None  # read on the first record's definition
        self.used: set[str] = set()
        self.compiled = 0  # methods this process compiled (none where the file had them all)

    def _header(self) -> bytes:
        # the bytecode's version, and the optimization level its code was compiled under
        return importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize])

    def _read(self) -> dict[str, CodeType]:
        if self.path is None:
            return {}
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            header = self._header()
            if data[:len(header)] != header:
                return {}
            codes = marshal.loads(data[len(header):])
        except (OSError, ValueError, EOFError, TypeError):
            return {}
        if not isinstance(codes, dict):
            return {}
        return {k: v for k, v in codes.items() if isinstance(k, str) and isinstance(v, CodeType)}

    def exec(self, source: str, globals: dict[str, Any] | None = None,
             locals: dict[str, Any] | None = None) -> None:
        if self.codes is None:
            self.codes = self._read()
        code = self.codes.get(source)
        if code is None:
            # as exec(source) would compile it in dataclasses' module: no __future__ flags
            code = self.codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
            if not self.compiled and self.path is not None and not sys.dont_write_bytecode:
                import atexit

                atexit.register(self.write)
            self.compiled += 1
        self.used.add(source)
        exec(code, globals, locals)

    def write(self) -> None:
        """Write the file (atomically: another process reads the old file or the new one); a
        folder that cannot be written is left as it is (the methods are compiled next time)."""
        if self.path is None or self.codes is None:
            return
        codes = self.codes
        if len(codes) > self.KEEP:
            codes = {k: v for k, v in codes.items() if k in self.used}
        part = f"{self.path}.{os.getpid()}.part"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(part, "wb") as f:
                f.write(self._header() + marshal.dumps(codes))
            os.replace(part, self.path)
        except OSError:
            try:
                os.unlink(part)
            except OSError:
                pass


def _methods_path() -> str | None:
    """Where the methods' code is kept: beside this module's bytecode (None: nowhere, where
    Python keeps no bytecode for this module)."""
    try:
        pyc = importlib.util.cache_from_source(__file__)
    except (NotImplementedError, ValueError):
        return None
    return pyc.removesuffix(".pyc") + ".methods"


_METHODS = _Compiled(_methods_path())


def _define(cls: type, *, frozen: bool, slots: bool, repr: bool) -> type:
    own = dict(cls.__dict__)  # before dataclass: what the class body wrote itself
    # a body that writes __eq__ gets __hash__ = None from Python: that is not an explicit hash
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    vars(dataclasses)["exec"] = _METHODS.exec  # the methods it writes: compiled once (see the module)
    try:
        out: type = dataclasses.dataclass(cls, eq=False, repr=False, frozen=frozen, slots=slots)
    finally:
        vars(dataclasses).pop("exec", None)  # a thread defining a record too: exec again, the same
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

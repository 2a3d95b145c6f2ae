"""``record`` behaves as ``dataclass`` (the same equality, repr and hash) without generating those
methods per class (issue 25: a command's start-up compiled 275 methods for 68 classes)."""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import pkgutil
import subprocess
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

import pytest

import forensics
from forensics import records
from forensics.records import record


def _bodies() -> dict[str, dict[str, Any]]:
    """Class bodies (annotations and attributes) covering what the package's records use."""
    def own_eq(self: Any, other: Any) -> bool:
        return isinstance(other, type(self)) and self.a == other.a

    def own_repr(self: Any) -> str:
        return "mine"

    return {
        "plain": {"__annotations__": {"a": "int", "b": "float"}, "b": 0.5},
        "nan": {"__annotations__": {"a": "float"}},
        "excluded": {"__annotations__": {"a": "int", "b": "list[int]", "c": "str"},
                     "b": field(default_factory=list, compare=False), "c": field(default="x", repr=False)},
        "hash_only": {"__annotations__": {"a": "int", "b": "int"}, "b": field(default=0, hash=False)},
        "classvar": {"__annotations__": {"a": "int", "k": "ClassVar[int]"}, "k": 3},
        "own_eq": {"__annotations__": {"a": "int", "b": "int"}, "b": 0, "__eq__": own_eq},
        "own_repr": {"__annotations__": {"a": "int"}, "__repr__": own_repr},
        "empty": {"__annotations__": {}},
    }


def _pair(name: str, body: dict[str, Any], **options: Any) -> tuple[type, type]:
    """The same class made by ``dataclass`` and by ``record``."""
    made = []
    for deco in (dataclasses.dataclass(**options), record(**options)):
        ns = {**body, "__annotations__": dict(body["__annotations__"]), "__module__": __name__,
              "__qualname__": name}
        made.append(deco(type(name, (), ns)))
    return made[0], made[1]


def _values(name: str) -> list[tuple[Any, ...]]:
    return {"nan": [(1.0,), (math.nan,), (-0.0,), (0.0,)],
            "empty": [()]}.get(name, [(1,), (2,), (1,)])


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"slots": True}],
                         ids=["mutable", "frozen", "slots"])
@pytest.mark.parametrize("name", list(_bodies()))
def test_a_record_compares_prints_and_hashes_as_the_dataclass_would(name: str, options: dict[str, Any]) -> None:
    body = _bodies()[name]
    plain, rec = _pair(name, body, **options)
    assert dataclasses.is_dataclass(rec)
    assert [f.name for f in dataclasses.fields(rec)] == [f.name for f in dataclasses.fields(plain)]
    other_type = 0.25
    values = _values(name)
    for left in values:
        for right in values:
            a, b = plain(*left), plain(*right)
            x, y = rec(*left), rec(*right)
            assert (x == y) is (a == b), (left, right)
            assert (x != y) is (a != b), (left, right)
            assert repr(x).replace(rec.__qualname__, "T") == repr(a).replace(plain.__qualname__, "T")
            assert (x == x) is (a == a)
        assert (rec(*left) == other_type) is (plain(*left) == other_type)  # NotImplemented
    hashable = plain.__hash__ is not None
    assert (rec.__hash__ is not None) is hashable
    if hashable:
        for v in values:
            if name == "hash_only":
                v = v[:1]
            assert hash(rec(*v)) == hash(plain(*v))
    if options.get("frozen"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec(*values[0]).a = 9  # type: ignore[attr-defined]
    if options.get("slots"):
        assert not hasattr(rec(*values[0]), "__dict__")


def test_a_record_that_holds_itself_prints_without_recursing() -> None:
    @record
    class Node:
        child: Any = None

    plain = dataclasses.dataclass(type("Node", (), {"__annotations__": {"child": "Any"}, "child": None,
                                                     "__module__": __name__, "__qualname__": "Node"}))
    n, p = Node(), plain()
    n.child, p.child = n, p
    assert repr(n).endswith(".Node(child=...)") and repr(p) == "Node(child=...)"


def test_a_subclass_compares_its_own_fields() -> None:
    @record(frozen=True)
    class Base:
        a: int

    @record(frozen=True)
    class Child(Base):
        b: int = 0

    assert Child(1, 2) != Child(1, 3)
    assert Child(1, 2) != Base(1)  # another class
    assert repr(Child(1, 2)).endswith("Child(a=1, b=2)")
    assert hash(Child(1, 2)) == hash((1, 2))


def _package_records() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(forensics.__path__, "forensics."):
        if ".trainer" in info.name or ".integrations" in info.name or info.name.endswith("__main__"):
            continue  # torch, transformers: optional; their records are the same decorator
        module = importlib.import_module(info.name)
        found += [v for v in vars(module).values()
                  if isinstance(v, type) and v.__module__ == info.name and dataclasses.is_dataclass(v)]
    return found


def test_every_dataclass_in_the_package_is_a_record_with_the_shared_methods() -> None:
    classes = _package_records()
    assert len(classes) >= 60
    for cls in classes:
        assert hasattr(cls, records._COMPARE), f"{cls.__qualname__} is a plain dataclass: use @record"
        own_eq = cls.__eq__ is not records._eq
        assert not own_eq or "__eq__" in vars(cls), cls  # no generated __eq__
        assert cls.__repr__ is records._repr or "__repr__" in vars(cls) or cls.__repr__ is object.__repr__
        frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert cls.__hash__ is (records._hash if frozen else None) or "__hash__" in vars(cls), cls


def test_a_classvar_is_not_a_field() -> None:
    @record
    class WithConstant:
        a: int
        K: ClassVar[int] = 3

    assert [f.name for f in dataclasses.fields(WithConstant)] == ["a"]
    assert WithConstant(1) == WithConstant(1)


def _define_frozen_and_mutable() -> tuple[type, type]:
    """Two record classes whose methods ``dataclass`` writes: a frozen one (``__init__``,
    ``__setattr__``, ``__delattr__``) and one with a default factory."""
    @record(frozen=True)
    class Frozen:
        a: int
        b: str = "x"

    @record
    class Mutable:
        a: int
        items: list[int] = field(default_factory=list)

    return Frozen, Mutable


def _check_methods(frozen: type, mutable: type) -> None:
    f = frozen(1)
    assert (f.a, f.b) == (1, "x") and frozen(2, b="y").b == "y"
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del f.b
    m1, m2 = mutable(1), mutable(2)
    m1.items.append(3)
    assert m2.items == [] and m1.items == [3]  # a fresh list each
    m1.a = 5
    assert m1 == mutable(5, [3])


def test_the_methods_compiled_once_are_kept_between_processes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "records.methods")
    first = records._Compiled(path)
    monkeypatch.setattr(records, "_METHODS", first)
    _check_methods(*_define_frozen_and_mutable())
    assert first.compiled == 4  # two __init__, and the frozen class's __setattr__ and __delattr__
    first.write()

    again = records._Compiled(path)  # the next process: every method read, none compiled
    monkeypatch.setattr(records, "_METHODS", again)
    _check_methods(*_define_frozen_and_mutable())
    assert again.compiled == 0 and again.used == first.used
    assert "exec" not in vars(dataclasses)  # dataclass's own exec again once a record is defined


@pytest.mark.parametrize("content", [b"", b"not marshal data at all", b"\0\0\0\0\0" + b"\xff" * 40])
def test_an_unreadable_or_foreign_methods_file_is_compiled_again_and_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    path = tmp_path / "records.methods"
    path.write_bytes(content)
    bad = records._Compiled(str(path))
    monkeypatch.setattr(records, "_METHODS", bad)
    _check_methods(*_define_frozen_and_mutable())
    assert bad.compiled == 4
    bad.write()
    good = records._Compiled(str(path))
    assert good._read().keys() == bad.used


def test_a_folder_that_cannot_be_written_keeps_no_methods_and_fails_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    nowhere = records._Compiled(str(blocker / "sub" / "records.methods"))  # a file in the way
    monkeypatch.setattr(records, "_METHODS", nowhere)
    _check_methods(*_define_frozen_and_mutable())
    nowhere.write()
    assert blocker.read_text() == "" and not list(tmp_path.glob("**/*.part"))


@pytest.mark.parametrize("writes", [True, False])
def test_a_command_start_compiles_the_records_methods_once(tmp_path: Path, writes: bool) -> None:
    """In new processes: the first compiles the methods of the records it loads and keeps them
    beside its bytecode (here ``-X pycache_prefix``); the second compiles none. Where Python
    writes no bytecode (PYTHONDONTWRITEBYTECODE), nothing is written, and each compiles them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not writes:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = "import forensics.config, forensics.schema; from forensics.records import _METHODS; print(_METHODS.compiled)"
    runs = [subprocess.run([sys.executable, "-X", f"pycache_prefix={tmp_path}", "-c", code], env=env,
                           capture_output=True, text=True, check=True) for _ in range(2)]
    first, second = (int(r.stdout) for r in runs)
    kept = list(tmp_path.glob("**/records.*.methods"))
    assert first > 5
    if writes:
        assert second == 0 and len(kept) == 1
    else:
        assert second == first and kept == []

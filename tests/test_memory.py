"""When a scan hands freed memory back (forensics.io.memory.trim): only once the process holds
at least TRIM_ABOVE_MB and has grown TRIM_GROWTH_MB since the last trim, pinned with a stand-in
for the resident size rather than by the machine's own."""

from __future__ import annotations

import pytest

import forensics.io.memory as memory


@pytest.fixture()
def held(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[str]]:
    """(the resident sizes the next reads give, the releases made)."""
    sizes: list[float] = []
    released: list[str] = []

    class Pool:
        def release_unused(self) -> None:
            released.append("pool")

    monkeypatch.setattr(memory, "resident_mb", lambda: sizes.pop(0) if sizes else None)
    monkeypatch.setattr(memory.pa, "default_memory_pool", Pool)
    def malloc_trim(pad: int) -> int:
        released.append("malloc")
        return 1

    monkeypatch.setattr(memory, "_MALLOC_TRIM", malloc_trim)
    monkeypatch.setattr(memory, "_after_last", 0.0)
    return sizes, released


def test_a_small_process_keeps_its_freed_memory(held: tuple[list[float], list[str]]) -> None:
    sizes, released = held
    sizes += [memory.TRIM_ABOVE_MB - 1.0]
    memory.trim()
    assert released == []


def test_a_large_process_trims_then_waits_for_growth(held: tuple[list[float], list[str]]) -> None:
    sizes, released = held
    above = memory.TRIM_ABOVE_MB + 100
    sizes += [above, above - 80]  # before the trim, just after it
    memory.trim()
    assert released == ["pool", "malloc"] and memory._after_last == above - 80
    sizes += [above - 81 + memory.TRIM_GROWTH_MB]  # grown, but by less than the growth
    memory.trim()
    assert released == ["pool", "malloc"]
    sizes += [above - 80 + memory.TRIM_GROWTH_MB, above - 80]
    memory.trim()
    assert released == ["pool", "malloc"] * 2


def test_without_a_resident_size_it_always_trims(held: tuple[list[float], list[str]]) -> None:
    _, released = held
    memory.trim()
    memory.trim()
    assert released == ["pool", "malloc"] * 2


def test_zero_bounds_trim_every_time(held: tuple[list[float], list[str]]) -> None:
    sizes, released = held
    sizes += [10.0, 10.0, 10.0, 10.0]
    memory.trim(0, 0)
    memory.trim(0, 0)
    assert released == ["pool", "malloc"] * 2


def test_the_resident_size_is_read_here() -> None:
    mb = memory.resident_mb()
    assert mb is None or 10 < mb < 100_000

"""Give freed memory back to the operating system between large batches.

A scan allocates and frees arrays of a batch's size many times per batch, on several threads.
glibc's malloc keeps what is freed in per-thread arenas, and pyarrow's allocator (mimalloc)
keeps freed pages too, so the resident size of a million-step scan grows by about 130 MB of
memory that is free but not returned (measured: 405 -> 331 MB peak on the benchmark's Parquet
file with a trim after each batch). :func:`trim` returns it: ``malloc_trim(0)`` where the C
library is glibc (as Dask's workers do), and pyarrow's ``release_unused``. Elsewhere (macOS,
musl) only the latter runs.

Returned pages are faulted in again by the next batch's arrays: a million-step Parquet scan took
1.65-1.81 s trimming after every batch, 1.35-1.38 s never trimming (peaking at 410-414 MB). So a
scan trims only once it holds at least
:data:`TRIM_ABOVE_MB` resident and :data:`TRIM_GROWTH_MB` more than just after the last trim (the
resident size read from ``/proc/self/statm``; where that is unknown, it trims every time).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import pyarrow as pa

__all__ = ["TRIM_ABOVE_MB", "resident_mb", "trim"]

#: Resident size (MB) below which :func:`trim` leaves freed memory to the allocators: a scan's
#: peak budget is 400 MB, and a million-step scan that never trims peaks near 410.
TRIM_ABOVE_MB = 256
#: Growth (MB) of the resident size since the last trim below which :func:`trim` waits.
TRIM_GROWTH_MB = 48
_after_last = 0.0  # the resident size (MB) just after the last trim


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        # the process's own symbols, the C library's among them (``ctypes.util.find_library``
        # would import subprocess and run ldconfig at every start)
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn  # type: ignore[no-any-return]


_MALLOC_TRIM = _malloc_trim()


def resident_mb() -> float | None:
    """This process's resident size in MB now (Linux's ``/proc/self/statm``), or None."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return None


def trim(above_mb: float = TRIM_ABOVE_MB, growth_mb: float = TRIM_GROWTH_MB) -> None:
    """Return freed heap memory to the operating system when the process holds at least
    ``above_mb`` resident and ``growth_mb`` more than just after the last trim (0 and 0: always)."""
    global _after_last
    held = resident_mb()
    if held is not None and (held < above_mb or held - _after_last < growth_mb):
        return
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    _after_last = resident_mb() or 0.0

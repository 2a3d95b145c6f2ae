"""One fuzz case: files to lay out in a fresh folder and a command line to run on them.

Generators (one module per family of inputs) yield cases; the harness writes ``files`` into a
new temporary folder, replaces ``{dir}`` in ``argv`` with that folder, runs ``forensics *argv``
and classifies the outcome (see the harness). A case states what it expects only where one
outcome is right (``expect_exit``); otherwise every exit code of the contract (0-3) with a clear
message is acceptable, and only internal errors, crashes, hangs, silent losses and written inputs
are failures.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    """A fuzz case (see the module docstring)."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    #: the only acceptable exit code, when one is right (None: any of 0, 1, 2, 3)
    expect_exit: int | None = None
    #: for exit 0: the rows the scan must account for (read + skipped), when known
    expect_rows: int | None = None
    #: stdin bytes fed to the command (for "-" and pipes), if any
    stdin: bytes | None = None
    #: names in ``files`` laid out as FIFOs (named pipes) that a writer fills with their bytes
    fifos: tuple[str, ...] = ()
    #: for exit 0: the format the input must be read as, when only one is right
    expect_format: str | None = None

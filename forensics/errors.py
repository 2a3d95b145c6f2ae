"""Exceptions raised by forensics.

The hierarchy::

    ForensicsError                 base class; never raised itself
    ├── UsageError                 bad arguments, options or config (CLI exit 2)
    │   └── ConfigError            a TOML config or policy file is invalid
    └── InputError                 an input cannot be read or is invalid (CLI exit 3)
        ├── FormatError            the content is not in a format we can read
        └── StrictModeError        a malformed row was found while ``strict=True``

The library never calls ``sys.exit``; only ``forensics.cli`` turns these into exit codes.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ForensicsError",
    "FormatError",
    "InputError",
    "StrictModeError",
    "UsageError",
]


class ForensicsError(Exception):
    """Base class of every error forensics raises on purpose."""

    exit_code = 3


class UsageError(ForensicsError):
    """Raised for invalid arguments: an unknown option value, a missing file argument."""

    exit_code = 2


class ConfigError(UsageError):
    """Raised when a config or policy file cannot be parsed or names unknown parameters."""


class InputError(ForensicsError):
    """Raised when an input file is missing, unreadable or holds no usable rows."""

    exit_code = 3

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class FormatError(InputError):
    """Raised when a file's content matches no supported format."""


class StrictModeError(InputError):
    """Raised on the first malformed row when a scan runs with ``strict=True``."""

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

from typing import Any

__all__ = [
    "ConfigError",
    "ForensicsError",
    "FormatError",
    "InputError",
    "StrictModeError",
    "UsageError",
    "closest",
    "did_you_mean",
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


def closest(name: Any, known: Any, n: int = 3) -> list[str]:
    """The known names closest to ``name`` (difflib's ratio, at least 0.6; case ignored).

    >>> closest("kl_targt", ["kl_target", "kl_target_unit", "algorithm"])
    ['kl_target', 'kl_target_unit']
    """
    if not isinstance(name, str):
        return []
    names = {str(k).lower(): str(k) for k in known}
    import difflib  # only where a name is unknown (not at every command's start)

    return [names[m] for m in difflib.get_close_matches(name.lower(), list(names), n=n, cutoff=0.6)]


def did_you_mean(name: Any, known: Any) -> str:
    """``" (did you mean 'x'?)"`` naming the known names closest to ``name`` ("" when none is close).

    >>> did_you_mean("kl_targt", ["kl_target", "algorithm"]), did_you_mean("zzz", ["kl_target"])
    (" (did you mean 'kl_target'?)", '')
    """
    hits = closest(name, known)
    return " (did you mean " + " or ".join(repr(h) for h in hits) + "?)" if hits else ""

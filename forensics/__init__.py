"""forensics: find what went wrong in an RL/RLHF training run, where, and what to change.

The names below are loaded on first use, so a training job that imports only the trainer side
(:mod:`forensics.trainer`) never loads the analysis. The package's parts are described in
docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .analysis.engine import Scan, scan_frame, scan_path
    from .analysis.findings import Finding, Severity
    from .analysis.result import Analysis
    from .config import Config, RunMeta, load_config
    from .errors import (
        ConfigError,
        ForensicsError,
        FormatError,
        InputError,
        StrictModeError,
        UsageError,
    )

#: Public name -> the module that defines it.
_EXPORTS = {
    "Analysis": ".analysis.result",
    "Config": ".config",
    "ConfigError": ".errors",
    "Finding": ".analysis.findings",
    "ForensicsError": ".errors",
    "FormatError": ".errors",
    "InputError": ".errors",
    "RunMeta": ".config",
    "Scan": ".analysis.engine",
    "Severity": ".analysis.findings",
    "StrictModeError": ".errors",
    "UsageError": ".errors",
    "load_config": ".config",
    "scan_frame": ".analysis.engine",
    "scan_path": ".analysis.engine",
}

__all__ = [
    "Analysis",
    "Config",
    "ConfigError",
    "Finding",
    "ForensicsError",
    "FormatError",
    "InputError",
    "RunMeta",
    "Scan",
    "Severity",
    "StrictModeError",
    "UsageError",
    "__version__",
    "load_config",
    "scan_frame",
    "scan_path",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API only (``__all__``): not the helpers this module imports."""
    return sorted(__all__)

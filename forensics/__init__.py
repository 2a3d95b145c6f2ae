"""forensics: find what went wrong in an RL/RLHF training run, where, and what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from .config import Config, RunMeta, load_config
from .engine import Analysis, Scan, scan_path
from .errors import (
    ConfigError,
    ForensicsError,
    FormatError,
    InputError,
    StrictModeError,
    UsageError,
)
from .findings import Finding, Severity

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
    "scan_path",
]

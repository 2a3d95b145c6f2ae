"""The package's public surface is exactly the intended names (httpx-style)."""

from __future__ import annotations

import forensics


def test_exported_names() -> None:
    assert forensics.__all__ == sorted(forensics.__all__)
    assert set(forensics.__all__) == {
        "Analysis", "Config", "ConfigError", "Finding", "ForensicsError", "FormatError",
        "InputError", "RunMeta", "Scan", "Severity", "StrictModeError", "UsageError",
        "__version__", "load_config", "scan_path",
    }
    for name in forensics.__all__:
        assert hasattr(forensics, name)


def test_error_tree_and_exit_codes() -> None:
    assert issubclass(forensics.ConfigError, forensics.UsageError)
    assert issubclass(forensics.StrictModeError, forensics.InputError)
    assert forensics.UsageError.exit_code == 2 and forensics.InputError.exit_code == 3

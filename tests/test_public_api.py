"""The package's public surface is exactly the intended names (httpx-style)."""

from __future__ import annotations

import forensics


def test_exported_names() -> None:
    assert forensics.__all__ == sorted(forensics.__all__)
    assert set(forensics.__all__) == {
        "Analysis", "Config", "ConfigError", "Finding", "ForensicsError", "FormatError",
        "InputError", "RunMeta", "Scan", "Severity", "StrictModeError", "UsageError",
        "__version__", "load_config", "scan_frame", "scan_path",
    }
    for name in forensics.__all__:
        assert hasattr(forensics, name)


def test_error_tree_and_exit_codes() -> None:
    assert issubclass(forensics.ConfigError, forensics.UsageError)
    assert issubclass(forensics.StrictModeError, forensics.InputError)
    assert forensics.UsageError.exit_code == 2 and forensics.InputError.exit_code == 3


def test_pandas_views_of_an_analysis() -> None:
    from pathlib import Path

    import numpy as np

    run = Path(__file__).resolve().parent.parent / "fixtures" / "runs" / "ppo_lr_high"
    a = forensics.scan_path(run)
    df = a.to_pandas(["kl", "reward_mean"])
    frame = a.metrics_frame(["kl", "reward_mean"])
    assert df.index.name == "step" and df.index.tolist() == frame["step"].tolist()
    np.testing.assert_array_equal(df["kl"].to_numpy(), frame["kl"])
    found = a.findings_frame()
    assert len(found) == len(a.findings) > 0
    assert found["rule"].tolist() == [f.rule for f in a.findings]
    assert found.loc[0, "evidence"] == a.findings[0].evidence


def test_dir_shows_only_the_public_api() -> None:
    assert dir(forensics) == sorted(forensics.__all__)
    assert not {"Any", "TYPE_CHECKING", "importlib", "annotations"} & set(dir(forensics))


def test_repr_of_an_analysis_is_a_few_lines() -> None:
    from pathlib import Path

    a = forensics.scan_path(Path(__file__).resolve().parent.parent / "fixtures" / "runs" / "ppo_lr_high")
    text = repr(a)
    assert len(text.splitlines()) <= 5 and len(text) < 1000, text
    assert text.startswith("<Analysis of ") and "health: overall" in text and "critical" in text
    assert a.findings[0].rule in text

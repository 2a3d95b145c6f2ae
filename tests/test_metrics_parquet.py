"""The per-step table at scale: metrics.parquet above a row count (or on request), metrics.csv
where it is small (or on request), the same table either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.report import files
from forensics.verdicts.diff import load_saved

from .conftest import healthy_rows, write_jsonl


@pytest.fixture
def log(tmp_path: Path) -> Path:
    rows = healthy_rows(300, seed=4)
    for r in rows[::7]:
        del r["entropy"]  # gaps: missing values must stay missing
    return write_jsonl(tmp_path / "steps.jsonl", rows)


def test_small_runs_get_csv_large_runs_parquet(log: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = scan_path(log)
    paths = files.write_reports(analysis, tmp_path / "small")
    assert "metrics" in paths and "metrics_parquet" not in paths
    assert not (tmp_path / "small" / "metrics.parquet").exists()
    monkeypatch.setattr(files, "METRICS_PARQUET_ROWS", 299)
    paths = files.write_reports(analysis, tmp_path / "large")
    assert "metrics_parquet" in paths and "metrics" not in paths
    assert not (tmp_path / "large" / "metrics.csv").exists()


def test_parquet_and_csv_hold_the_same_table(log: Path, tmp_path: Path) -> None:
    analysis = scan_path(log)
    files.write_reports(analysis, tmp_path, metrics="both")
    csv = pacsv.read_csv(tmp_path / "metrics.csv")
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert table.column_names == csv.column_names
    assert table.schema.field("step").type == "int64"
    assert table.schema.field("kl").type == "float"  # float32, as the per-step store keeps it
    for name in table.column_names:
        a = table[name].to_numpy(zero_copy_only=False).astype(np.float64)
        b = csv[name].to_numpy(zero_copy_only=False).astype(np.float64)
        np.testing.assert_allclose(a, b, rtol=1e-6, equal_nan=True, err_msg=name)
    assert table["entropy"].null_count == len(range(0, 300, 7))  # missing is null, not 0


def test_diff_and_report_read_the_parquet_table(log: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "r"), "--metrics",
                                    "parquet", "-q"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "metrics.parquet").is_file() and not (tmp_path / "r" / "metrics.csv").exists()
    saved = load_saved(tmp_path / "r")
    assert len(saved.frame["step"]) == 300 and "kl" in saved.frame


def test_unknown_choice_is_a_usage_error(log: Path, tmp_path: Path) -> None:
    from forensics.errors import UsageError

    with pytest.raises(UsageError, match="unknown metrics format"):
        files.write_reports(scan_path(log), tmp_path, metrics="xlsx")


def test_parquet_is_read_alike_by_pandas_polars_and_duckdb(log: Path, tmp_path: Path) -> None:
    """The table as written (plain floats, zstd, no dictionary: files.PARQUET_OPTIONS) is the same
    table to every reader a user would open it with; duckdb where it is installed."""
    import pandas as pd
    import polars as pl

    files.write_reports(scan_path(log), tmp_path, metrics="parquet")
    path = tmp_path / "metrics.parquet"
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(0).column(meta.schema.names.index("kl"))
    assert chunk.compression == "ZSTD" and "RLE_DICTIONARY" not in chunk.encodings and "PLAIN" in chunk.encodings
    table = pq.read_table(path)
    frames = {"pandas": pd.read_parquet(path), "polars": pl.read_parquet(path).to_pandas()}
    try:
        import duckdb
    except ImportError:
        pass
    else:
        frames["duckdb"] = duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").df()
    for reader, frame in frames.items():
        assert list(frame.columns) == table.column_names, reader
        assert len(frame) == 300, reader
        for name in table.column_names:
            want = table[name].to_numpy(zero_copy_only=False).astype(np.float64)
            got = frame[name].to_numpy(dtype=np.float64, na_value=np.nan)
            np.testing.assert_array_equal(got, want, err_msg=f"{reader}: {name}")
        assert int(frame["entropy"].isna().sum()) == len(range(0, 300, 7)), reader

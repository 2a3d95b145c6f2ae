"""Logs whose every canonical metric sits in a corner real logs have: logged as 0 for the first
half (a length or a clip fraction not yet computed), signed where a positive value is expected (a
score where a length goes), constant, or pure noise. The trackers must judge them without a numpy
warning reaching the user: a RuntimeWarning printed mid-scan reads as a crash."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.shapes import CANONICAL
from forensics import scan_frame

ROWS = 6000  # past every tracker's probation and baseline, on the tracker pool


def _corner(form: str, rng: np.random.Generator) -> np.ndarray:
    noise = np.round(rng.normal(0, 1, ROWS), 6)
    if form == "zero, then noise":
        return np.where(np.arange(ROWS) < ROWS // 2, 0.0, 100.0 + noise)
    if form == "negative":
        return -1.0 - np.abs(noise)
    if form == "constant":
        return np.full(ROWS, 0.5)
    return noise


def _frame(form: str) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({"step": np.arange(ROWS), **{k: _corner(form, rng) for k in CANONICAL}})


@pytest.mark.parametrize("form", ["zero, then noise", "negative", "constant", "noise"])
def test_corner_values_under_every_name_raise_no_numpy_warning(form: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        a = scan_frame(_frame(form))
    assert a.steps["rows"] == ROWS


def test_the_command_line_prints_no_warning_for_them(tmp_path: Path) -> None:
    path = tmp_path / "zeros.jsonl"
    _frame("zero, then noise").to_json(path, orient="records", lines=True)
    out = subprocess.run([sys.executable, "-m", "forensics", "scan", str(path), "-o", str(tmp_path / "r"), "-q"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr

"""A command's start-up (issue 38, item 1), pinned by what it loads and compiles, never by a clock:
each test runs the command line in a fresh process (tests/test_small_scan.py's child) and reads
its ``sys.modules``. ``make bench`` times the same scans against ``python -c "import numpy,
pyarrow"``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import healthy_rows, write_jsonl
from .test_small_scan import CHILD, HEAVY, _loaded

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1,000-step log scanned into a report folder (analysis.json beside the log)."""
    folder = tmp_path_factory.mktemp("startup")
    log = write_jsonl(folder / "steps.jsonl", healthy_rows(1000))
    assert _loaded("scan", str(log), "-o", str(folder / "r"), "-q") == ["jinja2"]  # the page's template
    return folder


def test_a_markdown_report_loads_no_template_engine(scanned: Path, tmp_path: Path) -> None:
    """jinja2 renders report.html alone: report.md from a saved analysis loads none of the heavy
    libraries (nor the Parquet writer)."""
    watch = (*HEAVY, "pyarrow.parquet")
    assert _loaded("report", str(scanned / "r" / "analysis.json"), "-o", str(tmp_path), "--format", "md",
                   watch=watch) == []
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "report.html").exists()


def test_a_small_scan_compiles_no_pattern_for_its_timeline_or_plots(scanned: Path, tmp_path: Path) -> None:
    """The causal table's and the plotted names' patterns (a name, or a prefix and ``*``) are
    matched without a regular expression compiled for each (fnmatch's cache stays empty), and the
    plots' labels are escaped without the ``html`` module's entity tables."""
    child = CHILD.replace("print(json.dumps(sorted(", "import fnmatch\nprint(json.dumps(sorted(")
    child += "print(json.dumps([fnmatch._compile_pattern.cache_info().currsize, 'html' in sys.modules]))\n"
    out = subprocess.run([sys.executable, "-c", child, "scan", str(scanned / "steps.jsonl"), "-o",
                          str(tmp_path / "r"), "-q"], capture_output=True, text=True, cwd=ROOT, check=True)
    compiled, html_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert compiled == 0 and html_loaded is False
    assert (tmp_path / "r" / "report.html").is_file()

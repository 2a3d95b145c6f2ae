"""A command's start-up (issue 38, item 1), pinned by what it loads and compiles, never by a clock:
each test runs the command line in a fresh process (tests/test_small_scan.py's child) and reads
what it loaded. ``make bench`` times the same scans against ``python -c "import numpy,
pyarrow"``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import healthy_rows, write_jsonl
from .test_small_scan import CHILD, HEAVY, _loaded

ROOT = Path(__file__).resolve().parent.parent


def _after(report: str, *args: str) -> Any:
    """``forensics ARGS`` in a fresh process, then the JSON value of the expression ``report``
    (Python, evaluated in that process once the command is done)."""
    head = CHILD.rsplit("print(json.dumps(", 1)[0]
    child = f"{head}import fnmatch, gc\nprint(json.dumps({report}))\n"
    out = subprocess.run([sys.executable, "-c", child, *args], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
    compiled, html_loaded = _after("[fnmatch._compile_pattern.cache_info().currsize, 'html' in sys.modules]",
                                   "scan", str(scanned / "steps.jsonl"), "-o", str(tmp_path / "r"), "-q")
    assert compiled == 0 and html_loaded is False
    assert (tmp_path / "r" / "report.html").is_file()


def test_a_small_scan_starts_no_thread_pool(scanned: Path, tmp_path: Path) -> None:
    """``concurrent.futures`` (and ``logging``, which it loads: 3 ms of a start) is imported by
    the scans that run a pool (a large log's trackers and reader, a CSV's blocks), not by every
    command: a small scan's metrics.csv is formatted on a plain thread."""
    loaded = set(_after("sorted(sys.modules)", "scan", str(scanned / "steps.jsonl"), "-o", str(tmp_path / "r"), "-q"))
    assert {"forensics.analysis.engine", "forensics.io.adapters.csv_table"} <= loaded
    assert not {"concurrent.futures", "logging"} & loaded
    assert (tmp_path / "r" / "metrics.csv").is_file()


def test_the_collector_waits_for_the_start_and_then_collects(scanned: Path, tmp_path: Path) -> None:
    """The command line turns the cyclic garbage collector off while it loads its modules and on
    again when the scan begins, with what was loaded frozen out of its sight; a ``report``, which
    starts no scan, leaves it off to its end; ``watch`` and ``fleet`` turn it on at once."""
    import gc

    on, frozen = _after("[gc.isenabled(), gc.get_freeze_count()]", "scan", str(scanned / "steps.jsonl"),
                        "-o", str(tmp_path / "r"), "-q")
    assert on is True and frozen > 10_000
    assert _after("gc.isenabled()", "report", str(scanned / "r" / "analysis.json"), "-o", str(tmp_path / "m"),
                  "--format", "md") is False
    assert _after("gc.isenabled()", "watch", str(scanned / "steps.jsonl"), "--once", "-q") is True
    assert gc.isenabled()  # this process's collector is untouched

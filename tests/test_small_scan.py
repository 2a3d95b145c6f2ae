"""Small logs fast (issue 25, item 1), pinned by the work done rather than by a clock: what a
small scan imports, and that the lean paths write the same values as the general ones."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest
from click.testing import CliRunner

import forensics.report.files as files
from forensics.analysis.engine import scan_path
from forensics.cli import main

from .conftest import healthy_rows, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
#: Libraries a small JSONL scan has no use for (jinja2 renders report.html: a scan loads it, other
#: commands do not; recommendations.yaml is forensics' own writer, not PyYAML).
HEAVY = ("pandas", "polars", "plotly", "scipy", "jinja2", "yaml")
#: Parts of pyarrow a JSONL scan has no use for: Parquet and its file systems, the compute
#: functions (pyarrow.csv writes a small metrics.csv, formatting its numbers itself), and Feather
#: (the run store's spill files: a run too long to hold in memory).
ARROW_PARTS = ("pyarrow.parquet", "pyarrow.fs", "pyarrow.compute", "pyarrow.feather")
#: Standard modules forensics' own code once loaded for one call: ``importlib.abc`` (the pandas
#: guard's base class) brought importlib.resources, ``ctypes.util`` (finding the C library for
#: malloc_trim) brought subprocess and ran ldconfig; tomllib is for a config file, when given.
STDLIB = ("importlib.resources", "subprocess", "tomllib")
#: numpy's masked arrays: ``np.median``, ``np.percentile`` and pyarrow's ``pa.array`` load them on
#: their first call (13 ms of a command's start); forensics takes medians and percentiles with
#: ``stats.order`` and hands pyarrow its arrays' bytes.
NUMPY_PARTS = ("numpy.ma",)

#: ``python -m forensics ARGS`` in this process, then the heavy libraries it loaded.
CHILD = """
import json, runpy, sys
if sys.argv[1] == "--polars-after":  # the bytes left for which the JSONL reader imports polars
    import forensics.io.readers.jsonl as jsonl
    jsonl._POLARS_WORTH = int(sys.argv[2])
    del sys.argv[1:3]
sys.argv = ["forensics", *sys.argv[1:]]
import forensics.io.lean
def stay(code):  # the entry point leaves without the interpreter's exit; this child reports first
    raise SystemExit(code)
forensics.io.lean.leave = stay
try:
    runpy.run_module("forensics", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(json.dumps(sorted(m for m in WATCH if m in sys.modules)))
""".replace("WATCH", repr(HEAVY + ARROW_PARTS + STDLIB + NUMPY_PARTS))


def _loaded(*args: str, watch: tuple[str, ...] = HEAVY) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return [m for m in json.loads(out.stdout.strip().splitlines()[-1]) if m in watch]


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("small") / "steps.jsonl", healthy_rows(1000))


def test_a_small_jsonl_scan_loads_only_what_its_reports_need(small_log: Path, tmp_path: Path) -> None:
    # report.html is rendered by jinja2 (its template); nothing else heavy is loaded, plotly.js
    # is read as a file
    assert _loaded("scan", str(small_log), "-o", str(tmp_path / "r"), "-q") == ["jinja2"]
    assert (tmp_path / "r" / "report.html").is_file() and (tmp_path / "r" / "metrics.csv").is_file()


def test_a_small_jsonl_scan_loads_no_parquet_or_csv_reader(small_log: Path, tmp_path: Path) -> None:
    assert _loaded("scan", str(small_log), "-o", str(tmp_path / "r"), "-q", watch=ARROW_PARTS) == []


def test_a_scan_and_its_reports_load_no_masked_arrays(small_log: Path, tmp_path: Path) -> None:
    assert _loaded("scan", str(small_log), "-o", str(tmp_path / "r"), "-q", watch=NUMPY_PARTS) == []
    # a PPO run folder of the reference corpus, every tracker it feeds and its findings' advice
    run = ROOT / "fixtures" / "runs" / "ppo_lr_high"
    assert _loaded("scan", str(run), "-o", str(tmp_path / "p"), "-q", watch=NUMPY_PARTS) == []


def test_a_small_jsonl_scan_spawns_nothing_and_loads_no_resources_machinery(small_log: Path,
                                                                          tmp_path: Path) -> None:
    assert _loaded("scan", str(small_log), "-o", str(tmp_path / "r"), "-q", watch=STDLIB) == []


def test_a_log_large_enough_for_polars_scans_through_the_command_line(tmp_path: Path) -> None:
    """polars (with 128 MB left to parse: here from the first chunk it may parse) asks importlib
    whether pandas is there: the command line's guard answers as Python would, and still loads no
    pandas. A log of megabytes is pyarrow's alone: polars' import costs more than it saves."""
    log = write_jsonl(tmp_path / "steps.jsonl", healthy_rows(8000))
    assert log.stat().st_size > 2 << 20
    assert _loaded("scan", str(log), "-o", str(tmp_path / "r"), "-q") == ["jinja2"]
    assert _loaded("--polars-after", "0", "scan", str(log), "-o", str(tmp_path / "p"), "-q") == ["jinja2", "polars"]
    for name in ("analysis.json", "metrics.csv", "findings.csv"):  # the same values either way
        assert (tmp_path / "r" / name).read_bytes() == (tmp_path / "p" / name).read_bytes(), name


def test_only_a_log_of_several_chunks_is_read_on_a_thread(small_log: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSONL log of one chunk is one batch, with nothing to overlap: it is parsed in the
    caller's thread; a larger one on the reader thread, a chunk ahead of the trackers."""
    import forensics.io.readers.jsonl as jsonl

    threads: list[str] = []
    ahead = jsonl._ahead
    monkeypatch.setattr(jsonl, "_ahead", lambda items, depth: (threads.append("reader"), ahead(items, depth))[1])
    small = scan_path(small_log)
    assert threads == [] and small.steps["rows"] == 1000
    monkeypatch.setattr(jsonl, "_MAX_CHUNK", small_log.stat().st_size // 3)  # the same log in several chunks
    threaded = scan_path(small_log)
    assert threads == ["reader"]
    assert threaded.to_dict()["findings"] == small.to_dict()["findings"]
    assert threaded.steps == small.steps


def test_a_small_metrics_table_is_formatted_beside_the_page(small_log: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A small run's metrics.csv is formatted on a thread of its own while the page is rendered,
    and holds what it holds written in turn."""
    import threading

    from forensics.report import write_reports

    analysis = scan_path(small_log)
    where: list[str] = []
    text = files._csv_text  # pyarrow's CSV writer, the numbers' formatting
    monkeypatch.setattr(files, "_csv_text",
                        lambda *a: (where.append(threading.current_thread().name), text(*a))[1])
    write_reports(analysis, tmp_path / "beside")
    monkeypatch.setattr(files, "CSV_BESIDE_PAGE", False)
    write_reports(analysis, tmp_path / "in_turn")
    assert where[0].startswith("forensics-metrics-csv") and where[1] == threading.current_thread().name
    for name in ("metrics.csv", "analysis.json", "report.html"):
        assert (tmp_path / "beside" / name).read_bytes() == (tmp_path / "in_turn" / name).read_bytes(), name


def test_converting_or_gating_a_small_log_loads_none_of_them(small_log: Path, tmp_path: Path) -> None:
    assert _loaded("convert", str(small_log), "-o", str(tmp_path / "c.parquet"), "-q") == []
    # no report.html, and scipy (the diff's KS test) is not loaded for a gate
    assert _loaded("gate", str(small_log), "-o", str(tmp_path / "gate.json"), "--format", "json") == []


def test_the_command_line_writes_what_the_library_writes(small_log: Path, tmp_path: Path) -> None:
    """The command line (pyarrow without pandas, forensics.io.lean) and the library in this process
    (pyarrow with pandas loaded) write byte-identical files."""
    _loaded("scan", str(small_log), "-o", str(tmp_path / "cli"), "-q")
    import pandas  # noqa: F401  (pyarrow's pandas integration on, whatever ran before)

    assert CliRunner().invoke(main, ["scan", str(small_log), "-o", str(tmp_path / "lib"), "-q"]).exit_code == 0
    for name in ("analysis.json", "summary.json", "metrics.csv", "findings.csv", "report.md"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "lib" / name).read_bytes(), name


def test_a_small_metrics_table_holds_the_values_polars_writes(small_log: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = scan_path(small_log)
    out: dict[str, bytes] = {}
    for name, small_rows in (("arrow", 10**9), ("polars", 0)):
        monkeypatch.setattr(files, "SMALL_CSV_ROWS", small_rows)
        buf = io.BytesIO()
        monkeypatch.setattr(files.Outputs, "open", lambda self, path, mode="w", buf=buf: _Keep(buf))
        files.write_metrics_csv(analysis, Path("metrics.csv"))
        out[name] = buf.getvalue()
    arrow, polars = (pacsv.read_csv(io.BytesIO(out[k])) for k in ("arrow", "polars"))
    assert arrow.num_rows == polars.num_rows == 1000
    assert arrow.schema == polars.schema and arrow.equals(polars)
    assert out["arrow"].splitlines()[0] == out["polars"].splitlines()[0]  # the same header


class _Keep:
    """A context manager around a buffer that stays readable after the ``with``."""

    def __init__(self, buf: io.BytesIO) -> None:
        self.buf = buf

    def __enter__(self) -> io.BytesIO:
        return self.buf

    def __exit__(self, *exc: object) -> None:
        return None


def test_significant_digits_are_the_floats_formatting_gives() -> None:
    """The plots' rounding (numpy's arithmetic) gives exactly ``float(f"{v:.{d}g}")``, halves,
    powers of ten, extremes and non-finite values included."""
    from forensics.analysis.stats.digits import significant

    rng = np.random.default_rng(25)
    values = np.concatenate([
        rng.standard_normal(20_000) * 10.0 ** rng.integers(-30, 30, 20_000),
        np.round(rng.standard_normal(5_000), 7), rng.integers(-10**9, 10**9, 5_000).astype(float),
        10.0 ** np.arange(-320, 309),
        [0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308, 1.234565, 0.1234565,
         123456.5, 999999.5, 9999995.0, 0.5, 2.5]])
    for digits in (5, 6):
        want = [float(f"{v:.{digits}g}") for v in values.tolist()]
        assert [repr(v) for v in significant(values, digits)] == [repr(v) for v in want]


def test_few_segments_accumulate_to_the_floats_numpy_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's moments from a few segments (Python floats) are those of the numpy path, field
    for field, NaN segments, zeros and a continued window included."""
    import dataclasses

    from forensics.analysis.stats import moments as m

    rng = np.random.default_rng(25)
    for trial in range(600):
        x = rng.standard_normal(int(rng.integers(2, 40))) * 10.0 ** int(rng.integers(-3, 4))
        x[rng.random(len(x)) < 0.2] = np.nan
        x[rng.random(len(x)) < (0.3 if trial % 5 == 0 else 0.0)] = 0.0
        shift = float(rng.standard_normal()) if trial % 3 else 0.0
        starts = np.unique(np.r_[0, rng.integers(0, len(x), int(rng.integers(0, 8)))])
        total = m.Moments(shift) if trial % 2 else m.accumulate(
            m.Moments(shift), m.segment_moments(rng.standard_normal(5), np.array([0, 2]), shift))
        seg = m.segment_moments(x, starts, shift)
        few = m.accumulate(total, seg)
        monkeypatch.setattr(m, "_FEW_SEGMENTS", 0)
        arrays = m.accumulate(total, seg)
        monkeypatch.undo()
        assert [repr(v) for v in dataclasses.astuple(few)] == [repr(v) for v in dataclasses.astuple(arrays)]


LEAVE = """
import atexit, sys, threading, time
from forensics.io.lean import leave
atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
if sys.argv[2] == "thread":  # a thread still running: the usual exit, which waits for it
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
print("no newline at the end", end="")
leave(int(sys.argv[3]) if sys.argv[3].isdigit() else sys.argv[3])
"""


def _leave(tmp_path: Path, mode: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LEAVE, str(tmp_path / "atexit.txt"), mode, code],
                          capture_output=True, text=True, cwd=ROOT)


def test_leaving_flushes_the_output_and_runs_the_atexit_functions(tmp_path: Path) -> None:
    """The command line ends without the interpreter's teardown (forensics.io.lean.leave): the
    exit code, the output and the atexit functions are as a normal exit leaves them."""
    done = _leave(tmp_path, "alone", "3")
    assert done.returncode == 3 and done.stdout == "no newline at the end" and done.stderr == ""
    assert (tmp_path / "atexit.txt").read_text() == "atexit ran"
    waited = _leave(tmp_path, "thread", "0")
    assert waited.returncode == 0 and waited.stdout.endswith("thread done\n")
    said = _leave(tmp_path, "alone", "a message")  # a SystemExit message: printed, exit code 1
    assert said.returncode == 1 and said.stderr.strip() == "a message"


def test_the_command_line_exit_codes_and_files_survive_the_quick_exit(small_log: Path, tmp_path: Path) -> None:
    run = [sys.executable, "-m", "forensics"]
    scan = subprocess.run([*run, "scan", str(small_log), "-o", str(tmp_path / "r"), "-q"], cwd=ROOT,
                          capture_output=True, text=True)
    assert scan.returncode == 0 and scan.stdout == scan.stderr == ""
    assert json.loads((tmp_path / "r" / "analysis.json").read_text())["steps"]["rows"] == 1000
    missing = subprocess.run([*run, "scan", str(tmp_path / "absent.jsonl")], cwd=ROOT, capture_output=True,
                             text=True)
    assert missing.returncode == 3 and "no such file" in missing.stderr
    gate = subprocess.run([*run, "gate", str(ROOT / "fixtures" / "runs" / "ppo_lr_high")], cwd=ROOT,
                          capture_output=True, text=True)
    assert gate.returncode == 1 and gate.stdout.startswith("gate FAILED") and gate.stdout.endswith("\n")

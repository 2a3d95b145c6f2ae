"""Machine-readable outputs. The JSON is deterministic: same input, byte-identical file."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..analysis.result import Analysis
from ..errors import UsageError
from ..io.output import CURRENT, GENERATION_PREFIX, LOCK_FILE, STORE_DIR, Outputs, is_report_link
from . import yaml_text
from .jsonsafe import jsonable

__all__ = ["ANALYSIS_FILE", "MANIFEST_FILE", "METRICS_FORMATS", "METRICS_PARQUET_ROWS", "summary_dict", "to_json",
           "write_reports"]

ANALYSIS_FILE = "analysis.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.csv"
METRICS_PARQUET_FILE = "metrics.parquet"
FINDINGS_FILE = "findings.csv"
WINDOWS_FILE = "windows.csv"
RECOMMENDATIONS_JSON = "recommendations.json"
RECOMMENDATIONS_YAML = "recommendations.yaml"
HTML_FILE = "report.html"
MARKDOWN_FILE = "report.md"
#: Every file ``write_reports`` may write (all are checked before the first is written).
REPORT_FILES = (ANALYSIS_FILE, SUMMARY_FILE, METRICS_FILE, METRICS_PARQUET_FILE, FINDINGS_FILE, WINDOWS_FILE,
                RECOMMENDATIONS_JSON, RECOMMENDATIONS_YAML, HTML_FILE, MARKDOWN_FILE, "plotly-basic.min.js")
#: Runs of more steps than this get the per-step table as metrics.parquet instead of metrics.csv
#: (``auto``): a million steps of 30 columns are a 260 MB CSV and a 50 MB Parquet file.
METRICS_PARQUET_ROWS = 100_000
#: Choices for the per-step table: by size (``auto``), or csv, parquet or both on request.
METRICS_FORMATS = ("auto", "csv", "parquet", "both")


#: orjson's options for :func:`to_json`: the layout of ``json.dumps(indent=2, sort_keys=True)``.
_ORJSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def to_json(data: dict[str, Any]) -> str:
    """Stable JSON: sorted keys, NaN and infinities as null, newline-terminated.

    orjson writes it (an analysis with its plots is most of a megabyte: the standard library's
    indenting encoder, pure Python, took longer than the scan of a small log); what orjson
    refuses (a key that is not a string, a lone surrogate, an integer beyond 64 bits) goes
    through the standard library as before.

    >>> print(to_json({"b": float("nan"), "a": [1, 2.5]}), end="")
    {
      "a": [
        1,
        2.5
      ],
      "b": null
    }
    """
    return json_bytes(data).decode()


def json_bytes(data: dict[str, Any]) -> bytes:
    """:func:`to_json` as the UTF-8 bytes a file holds (a report's analysis.json is written and
    read back without being decoded to text and encoded again)."""
    try:
        return orjson.dumps(data, option=_ORJSON_OPTIONS | orjson.OPT_APPEND_NEWLINE, default=_orjson_default)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(jsonable(data), sort_keys=True, indent=2, allow_nan=False) + "\n").encode()


def _orjson_default(obj: Any) -> Any:
    """What orjson does not serialise itself (a numpy scalar it does not know, a set...): its
    value as :func:`jsonable` gives it, or a TypeError (the standard library then decides)."""
    value = jsonable(obj)
    if value is obj:
        raise TypeError(f"not serialisable: {type(obj).__name__}")
    return value


def summary_dict(analysis: Analysis | dict[str, Any], top: int = 10) -> dict[str, Any]:
    """The short health summary: scores, counts, the top findings (from an analysis or its
    analysis dict)."""
    d = analysis if isinstance(analysis, dict) else analysis.to_dict()
    return {
        "schema_version": d["schema_version"],
        "run": d["run"],
        "rows": d["steps"]["rows"],
        "steps": {"first": d["steps"]["first"], "last": d["steps"]["last"]},
        "rows_skipped": sum(r["rows_skipped"] for r in d["inputs"]),
        "health": d["health"],
        "findings_by_severity": d["findings_by_severity"],
        "top_findings": [
            {k: f[k] for k in ("rule", "severity", "first_step", "last_step", "onset_step",
                               "message", "remedy")}
            for f in d["findings"][:top]
        ],
    }


#: Runs of at most this many steps get metrics.csv from pyarrow (already loaded by the scan)
#: instead of polars, whose import costs more than writing a small table.
SMALL_CSV_ROWS = 20_000
#: A small run's metrics.csv (:data:`SMALL_CSV_ROWS`) is formatted on a thread while the page is
#: rendered: the tables are built here, and the thread only runs pyarrow's CSV writer, which
#: formats the numbers into its own buffer without the GIL (a 1,000-step run's table: about
#: 3 ms, which then costs nothing; Python work on that thread would stall this one for the
#: interpreter's switch interval). False: in turn (the tests' call counter follows one thread).
CSV_BESIDE_PAGE = True


def _small(analysis: Analysis) -> bool:
    """Whether metrics.csv is a small run's (pyarrow's writer, not polars')."""
    return (analysis.steps.get("rows") or 0) <= SMALL_CSV_ROWS


def _table_columns(part: dict[str, np.ndarray]) -> list[str]:
    """The columns of metrics.csv and metrics.parquet, in order: ``step``, then the metrics by name."""
    return ["step"] + sorted(k for k in part if k != "step")


def write_metrics_csv(analysis: Analysis, path: Path, outputs: Outputs | None = None) -> None:
    """One row per step, part by part of the per-step store (memory bounded by a part); a
    non-finite value (NaN, an infinity) is an empty cell, as it is null in analysis.json (the
    ``*.nonfinite`` findings say where a metric was logged non-finite). polars writes it: about 4x pyarrow's CSV
    writer on float columns (a million steps of 30 columns: 1.5 s instead of 6 s); a small run's
    table is written by :func:`small_metrics_csv` in the same text."""
    outputs = outputs or Outputs()
    if _small(analysis):
        outputs.write_bytes(path, small_metrics_csv(analysis))
        return
    import polars as pl

    with outputs.open(path, "wb") as fh:
        names: list[str] | None = None
        for part in analysis.metrics_parts():
            if names is None:
                names = _table_columns(part)
            pl.DataFrame({k: _finite(part[k]) for k in names}).fill_nan(None).write_csv(
                fh, include_header=fh.tell() == 0)


def small_metrics_csv(analysis: Analysis) -> bytes:
    """metrics.csv of a small run (:data:`SMALL_CSV_ROWS` steps at most) in polars' text."""
    return _csv_text(*_csv_tables(analysis))


def _csv_tables(analysis: Analysis) -> tuple[bytes, list[Any]]:
    """The header line and the pyarrow tables (one per part of the per-step store) whose CSV
    rows are metrics.csv's (see :func:`_arrow_table`)."""
    names: list[str] = []
    tables = []
    for part in analysis.metrics_parts():
        if not names:
            names = _table_columns(part)
        tables.append(_arrow_table({k: _finite(part[k]) for k in names}))
    return ((",".join(_csv_name(k) for k in names) + "\n").encode() if names else b""), tables


def _csv_text(header: bytes, tables: list[Any]) -> bytes:
    """The header and the tables' rows, by pyarrow's CSV writer into its own buffer: the numbers
    are formatted without the GIL."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sink = pa.BufferOutputStream()
    sink.write(header)
    for table in tables:
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    return sink.getvalue().to_pybytes()


def _finite(values: np.ndarray) -> np.ndarray:
    """A float column with its infinities as NaN (an empty cell, as NaN is)."""
    if values.dtype.kind != "f" or bool(np.isfinite(values[~np.isnan(values)]).all()):
        return values
    return np.where(np.isinf(values), np.nan, values)


def _arrow_table(columns: dict[str, np.ndarray]) -> Any:
    """``columns`` as the pyarrow table whose CSV rows are in polars' text (see
    :func:`write_metrics_csv`): pyarrow writes floats in their shortest form as polars does, but a
    whole number without its ``.0``, added here as text; NaN is null, an empty cell. pyarrow's
    CSV writer formats the numbers itself (no ``pyarrow.compute``: its import costs more than a
    small scan)."""
    import pyarrow as pa

    table = pa.table({k: _arrow_column(v) for k, v in columns.items()})  # NaN -> null
    for i, (name, values) in enumerate(columns.items()):
        if values.dtype.kind == "f" and bool(np.any(np.isfinite(values) & (np.floor(values) == values))):
            table = table.set_column(i, name, _whole_with_point(table.column(i), values))  # "3" -> "3.0"
    return table


def _arrow_column(values: np.ndarray, nan_is_null: bool = True) -> Any:
    """``pa.array(values, from_pandas=nan_is_null)`` of a numeric column, made from the array's own
    bytes (and, for NaN, a validity bitmap): pyarrow's conversion asks whether the array is a
    masked one, which imports ``numpy.ma`` (13 ms of a small scan's start)."""
    import pyarrow as pa

    v = np.ascontiguousarray(values)
    if v.dtype.kind not in "iuf" or v.ndim != 1:
        return pa.array(v, from_pandas=nan_is_null)
    bitmap, nulls = None, 0
    if nan_is_null and v.dtype.kind == "f":
        valid = ~np.isnan(v)
        nulls = len(v) - int(np.count_nonzero(valid))
        if nulls:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(v.dtype), len(v), [bitmap, pa.py_buffer(v)],
                                 null_count=nulls)


def _whole_with_point(column: Any, values: np.ndarray) -> Any:
    """A float column (``values`` in pyarrow) as the CSV writer's text, cells of digits alone (a
    whole number) with ``.0`` added, as polars writes them."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sink = pa.BufferOutputStream()
    pacsv.write_csv(pa.table({"v": column}), sink, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    cells = sink.getvalue().to_pybytes().decode().split("\n")[:-1]
    with np.errstate(invalid="ignore"):
        whole = np.flatnonzero(np.isfinite(values) & (np.floor(values) == values)).tolist()
    for i in whole:  # only these cells can be digits alone
        if cells[i].lstrip("-").isdigit():
            cells[i] += ".0"
    return pa.array(cells, pa.string())


def _csv_name(name: str) -> str:
    """A header cell as polars writes it: quoted (quotes doubled) when it holds a comma, a quote
    or a line break."""
    return '"' + name.replace('"', '""') + '"' if any(c in name for c in ',"\n\r') else name


#: How metrics.parquet is written (:func:`write_metrics_parquet`): columns of floats, most of them
#: distinct values, for which pyarrow's default dictionary encoding is work thrown away (each
#: column hashed, then its dictionary abandoned as too large) and a larger file. Plain encoding with
#: zstd at its fastest level, statistics for ``step`` alone (a reader's filter on a step range):
#: a million steps of 29 columns written in a fifth of the time (0.3-0.5 s instead of 1.5-2.4 s on a
#: busy 2-core machine), in 91 MB instead of 142 MB, read by pyarrow, pandas, polars and duckdb as
#: before (tests/test_metrics_parquet.py).
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1, "use_dictionary": False,
                                   "write_statistics": ["step"]}


def write_metrics_parquet(analysis: Analysis, path: Path, outputs: Outputs | None = None) -> None:
    """The per-step table of :func:`write_metrics_csv` as Parquet (:data:`PARQUET_OPTIONS`), one
    row group per part of the per-step store (memory bounded by a part). Columns as in the CSV;
    NaN is null (a missing value), ``step`` is int64, ``timestamp`` float64 (seconds since the epoch:
    float32 would resolve them to minutes) and every other column float32."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with (outputs or Outputs()).temporary(path) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            for part in analysis.metrics_parts():
                names = _table_columns(part)
                table = pa.table({k: _arrow_column(part[k], nan_is_null=k != "step") for k in names})
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **PARQUET_OPTIONS)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()


def metrics_formats(rows: int, choice: str = "auto") -> tuple[str, ...]:
    """Which per-step tables to write for a run of ``rows`` steps.

    >>> metrics_formats(1_000), metrics_formats(1_000_000), metrics_formats(10, "both")
    (('csv',), ('parquet',), ('csv', 'parquet'))
    """
    if choice not in METRICS_FORMATS:
        raise UsageError(f"unknown metrics format {choice!r}; known: {', '.join(METRICS_FORMATS)}")
    if choice == "auto":
        return ("parquet",) if rows > METRICS_PARQUET_ROWS else ("csv",)
    return ("csv", "parquet") if choice == "both" else (choice,)


def write_findings_csv(analysis: Analysis, path: Path, outputs: Outputs | None = None) -> None:
    cols = ["rule", "severity", "tracker", "first_step", "last_step", "onset_step", "episodes",
            "message", "remedy", "evidence"]
    with (outputs or Outputs()).open(path) as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for f in analysis.findings:
            d = f.to_dict()
            d["evidence"] = json.dumps(jsonable(d["evidence"]), sort_keys=True)
            # every episode's range (one row per finding, never per step or per episode)
            d["episodes"] = ";".join(f"{a}-{b}" for a, b, _ in f.episode_ranges())
            w.writerow([d[c] for c in cols])


#: The files the last scan wrote into a folder (hidden): the next scan into the same folder
#: removes those it does not write again, and never touches any other file.
MANIFEST_FILE = ".forensics-files.json"
#: What a scan may write into its folder: the names an older folder (no manifest yet) is known
#: to hold from a scan, when its analysis.json is a forensics analysis.
SCAN_FILES = ("analysis.json", "summary.json", "metrics.csv", "metrics.parquet", "findings.csv", "windows.csv",
              "recommendations.json", "recommendations.yaml", "report.html", "report.md", "plotly-basic.min.js",
              "plotly.min.js")  # the full library that earlier versions shared
#: A generation folder's name, as :func:`_generation` makes it (``tempfile.mkdtemp``: the prefix
#: and eight letters, digits or underscores): the only folders a scan ever removes.
_GENERATION_NAME = re.compile(re.escape(GENERATION_PREFIX) + r"[a-z0-9_]{8}")
_LINK_SUFFIX = ".forensics-link"
#: How long a scan waits for another scan writing the same folder before it gives up (seconds).
LOCK_WAIT = 600.0


def _owned(out_dir: Path) -> set[str]:
    """Names of the files an earlier scan wrote into ``out_dir`` (its manifest; for a folder from
    before manifests, the scan's file names, when its analysis.json is one forensics wrote)."""
    try:
        data = json.loads((out_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = data.get("files") if isinstance(data, dict) else None
        if isinstance(files, list):
            return {f for f in files if isinstance(f, str) and f and "/" not in f and f not in (".", "..")}
    except (OSError, ValueError):
        pass
    try:
        with open(out_dir / ANALYSIS_FILE, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return set()
    # the writer sorts keys: an analysis opens with "column_mapping"
    if head.lstrip().startswith(b"{") and b'"column_mapping"' in head:
        return {n for n in SCAN_FILES if (out_dir / n).is_file()}
    return set()


@contextlib.contextmanager
def _locked(store: Path) -> Iterator[None]:
    """Hold the report store's lock (``flock``: released by the kernel when a holder is killed);
    wait up to :data:`LOCK_WAIT` for another scan writing the same folder, then fail naming it."""
    import fcntl

    lock = store / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot lock the output folder ({lock}): {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "another process"
                    raise UsageError(f"{store.parent} is being written by another scan ({holder}, lock file "
                                     f"{lock}); waited {LOCK_WAIT:.0f} s") from None
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _generation_in(store: Path, name: str | None) -> str | None:
    """``name`` when it names a generation folder of ``store`` (a real folder, by the name a scan
    gives one), else None: never ``..``, ``.``, a path, a link or a folder someone else made."""
    if name is None or not _GENERATION_NAME.fullmatch(name):
        return None
    path = store / name
    return name if path.is_dir() and not path.is_symlink() else None


def _current(store: Path) -> str | None:
    """The generation ``current`` links to; None when it is absent or leads anywhere else (a
    ``current`` pointing outside the store is never followed, and nothing is removed through it)."""
    try:
        return _generation_in(store, os.readlink(store / CURRENT))
    except (OSError, ValueError):
        return None


def _clean_stale(out_dir: Path, store: Path) -> None:
    """Remove what killed scans left (under the lock, every generation but the current one is
    stale): generation folders in the store and the temporary links of a rename never made. Only
    names a scan makes are removed; any other file or folder, in the store or beside it, stays."""
    current = _current(store)
    for folder in (store, out_dir):
        for p in folder.iterdir():
            if p.is_symlink():
                if p.name.startswith(".") and p.name.endswith(_LINK_SUFFIX):  # a link not renamed into place
                    p.unlink(missing_ok=True)
            elif folder is store and p.name != current and _generation_in(store, p.name):
                shutil.rmtree(p, ignore_errors=True)


def _refuse_inputs_in(store: Path, inputs: list[Path]) -> None:
    """A :class:`UsageError` when an input lives in the report store (a file of a generation, or
    a hard link of one, or of the lock): the store's files are replaced and removed by scans."""
    if not store.is_dir() or not inputs:
        return
    ids: dict[tuple[int, int], Path] = {}
    for p in inputs:
        try:
            st = p.stat()
        except (OSError, ValueError):
            continue
        ids[(st.st_dev, st.st_ino)] = p
        with contextlib.suppress(OSError, ValueError):
            if p.resolve().is_relative_to(store.resolve()):
                raise UsageError(f"{p} is inside the report store {store}, which scans replace and clean; "
                                 "copy it out of there first")
    for root, _, files in os.walk(store):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(root, name), follow_symlinks=False)
                if (st.st_dev, st.st_ino) in ids:
                    raise UsageError(f"{ids[(st.st_dev, st.st_ino)]} is the same file as {root}/{name} in the "
                                     "report store, which scans replace and clean; copy it out first")


def _store(out_dir: Path) -> Path:
    store = out_dir / STORE_DIR
    try:
        store.mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write into {out_dir}: {exc.strerror or exc}") from None
    if store.is_symlink() or not store.is_dir():
        raise UsageError(f"cannot write into {out_dir}: {store} is not a folder forensics made")
    return store


def _generation(store: Path) -> Path:
    """A new, empty generation folder in the store (an ordinary folder's permissions)."""
    gen = Path(tempfile.mkdtemp(prefix=GENERATION_PREFIX, dir=store))
    mask = os.umask(0o22)
    os.umask(mask)
    gen.chmod(0o777 & ~mask)
    return gen


def _link(path: Path, target: str) -> None:
    """Make ``path`` the link ``target`` (atomically, over what is there)."""
    if os.path.islink(path) and os.readlink(path) == target:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}{_LINK_SUFFIX}")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def write_reports(analysis: Analysis, out_dir: Path | str, *, script: str = "inline", metrics: str = "auto",
                  rendered: bool | tuple[str, ...] = True, outputs: Outputs | None = None,
                  plotly_src: str | None = None) -> dict[str, Path]:
    """Write the reports into ``out_dir`` (a str or a Path); return their paths by kind.

    ``script``: how report.html carries plotly.js (see :func:`forensics.report.html.render_html`);
    ``plotly_src`` (with ``script="file"``): where the page finds a library that the caller writes
    (a fleet's one copy, ``../plotly-basic.min.js``), instead of a copy beside it.
    ``metrics`` chooses the per-step table: ``auto`` writes metrics.csv up to
    :data:`METRICS_PARQUET_ROWS` steps and metrics.parquet above; ``csv``, ``parquet`` or
    ``both`` on request. ``rendered=False`` leaves out report.html and report.md (a fleet of
    thousands of runs; ``forensics report`` renders them later from analysis.json); a tuple
    names the pages to render (``("html",)``).

    ``outputs`` knows the inputs (see :mod:`forensics.io.output`): every file is checked against
    them before any is written (an output that would replace an input, a link or a special file
    is a :class:`~forensics.errors.UsageError`). The files the scan read are added to it here.

    The report is all-or-nothing, under a kill and under concurrent scans: it is written whole
    into a new generation folder of the hidden store ``out_dir/.forensics/``, and published by
    one atomic step, the rename of the store's ``current`` link to it. The names in ``out_dir``
    (``analysis.json``...) are links through ``current``, so every state of the folder a reader
    can see is a complete old or a complete new report. Scans into one folder take turns (a lock
    in the store); each removes what killed scans left (stale generations, older versions'
    temporary folders), the files an earlier scan wrote there and this one did not, and writes the
    manifest :data:`MANIFEST_FILE` (a link too). No other file, and never an input, is touched.
    """
    out_dir = Path(out_dir)
    tables = metrics_formats(analysis.steps.get("rows") or 0, metrics)
    outputs = outputs or Outputs()
    outputs.reports = True  # this is the writer of the report's own names
    outputs.add(*(r.path for r in analysis.inputs))
    outputs.folder(out_dir)
    _refuse_inputs_in(out_dir / STORE_DIR, [Path(r.path) for r in analysis.inputs if r.path])
    for name in REPORT_FILES:
        outputs.check(out_dir / name)
    store = _store(out_dir)
    try:
        with _locked(store):
            _clean_stale(out_dir, store)
            pages = ("html", "md") if rendered is True else tuple(rendered or ())
            written = _publish(analysis, out_dir, store, ((script, plotly_src), tables, pages), outputs)
    except OSError as exc:
        raise UsageError(f"cannot write reports to {out_dir}: {exc.strerror or exc}") from None
    return {kind: out_dir / p.name for kind, p in written.items()}


def _publish(analysis: Analysis, out_dir: Path, store: Path,
             how: tuple[tuple[str, str | None], tuple[str, ...], tuple[str, ...]],
             outputs: Outputs) -> dict[str, Path]:
    """Write a generation, link its names, switch ``current`` to it (the commit), then tidy."""
    previous = _owned(out_dir)
    old = _current(store)
    if old is None and previous:
        old = _adopt(out_dir, store, previous, outputs)
    gen = _generation(store)
    try:
        earlier = store / old if old else None  # the generation replaced
        written = _write_files(analysis, gen, *how, _InGeneration(outputs), earlier)
        names = sorted(p.name for p in gen.iterdir() if p.is_file())
        (gen / MANIFEST_FILE).write_text(json.dumps({"written_by": "forensics scan", "files": names}, indent=1)
                                         + "\n", encoding="utf-8")
        for name in [*names, MANIFEST_FILE]:  # a new name's link dangles (is absent) until the commit
            outputs.check(out_dir / name)
            _link(out_dir / name, f"{STORE_DIR}/{CURRENT}/{name}")
        _link(store / CURRENT, gen.name)  # the commit: one rename
    except BaseException:
        shutil.rmtree(gen, ignore_errors=True)
        raise
    for name in sorted(previous - set(names) - {MANIFEST_FILE}):
        _remove_owned(out_dir / name, outputs)
    if old and old != gen.name:
        shutil.rmtree(store / old, ignore_errors=True)
    return written


class _InGeneration(Outputs):
    """The writer of a new generation folder: the folder is this scan's own (a fresh name, empty,
    published whole by the commit or removed), so each file is written in place, not through a
    temporary file renamed over it (two system calls and a rename fewer a file)."""

    def __init__(self, outputs: Outputs) -> None:
        super().__init__()
        self.__dict__.update(outputs.__dict__)  # the same inputs protected

    @contextlib.contextmanager
    def temporary(self, path: Path) -> Iterator[Path]:
        self.check(path)
        yield path


def _adopt(out_dir: Path, store: Path, owned: set[str], outputs: Outputs) -> str:
    """Make a folder written before the report store (regular files) its first generation (hard
    links of those files), so that the first publish into it is atomic too; the generation's name."""
    gen = _generation(store)
    for name in sorted(owned | {MANIFEST_FILE}):
        src = out_dir / name
        if src.is_file() and not src.is_symlink():
            try:
                outputs.check(src)
            except UsageError:
                continue
            os.link(src, gen / name)
    _link(store / CURRENT, gen.name)
    return gen.name


def _remove_owned(target: Path, outputs: Outputs) -> None:
    """Remove a file (or link) an earlier scan wrote and this one did not: a link into the store,
    or (a folder from before the store) a file of a name a scan writes; never an input, never a
    file of another name (a manifest can be edited)."""
    try:
        outputs.check(target)
    except UsageError:
        return  # never remove an input (or anything but a regular file)
    if is_report_link(target) or (target.name in SCAN_FILES and target.is_file() and not target.is_symlink()):
        target.unlink(missing_ok=True)


class _OnThread:
    """``fn(*args)`` on a thread of its own; :meth:`result` waits for it and gives its value or
    raises its error (a pool of ``concurrent.futures`` for one call would load it, and ``logging``
    with it: a few milliseconds of a small scan's start)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), name="forensics-metrics-csv")
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self._error = exc

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


def _write_files(analysis: Analysis, out_dir: Path, script: tuple[str, str | None], tables: tuple[str, ...],
                 pages: tuple[str, ...], outputs: Outputs, earlier: Path | None = None) -> dict[str, Path]:
    paths = {
        "analysis": out_dir / ANALYSIS_FILE,
        "summary": out_dir / SUMMARY_FILE,
        **({"metrics": out_dir / METRICS_FILE} if "csv" in tables else {}),
        **({"metrics_parquet": out_dir / METRICS_PARQUET_FILE} if "parquet" in tables else {}),
        "findings": out_dir / FINDINGS_FILE,
    }
    beside = CSV_BESIDE_PAGE and "metrics" in paths and _small(analysis)
    with contextlib.ExitStack() as stack:
        if beside:  # formatted while the files below are written and the page rendered
            table = _OnThread(_csv_text, *_csv_tables(analysis))  # the thread holds no GIL
            stack.callback(table.wait)  # finished before this returns or raises
        d = analysis.to_dict()
        raw = json_bytes(d)
        outputs.write_bytes(paths["analysis"], raw)
        outputs.write_text(paths["summary"], to_json(summary_dict(d)))
        if "metrics_parquet" in paths:
            write_metrics_parquet(analysis, paths["metrics_parquet"], outputs)
        write_findings_csv(analysis, paths["findings"], outputs)
        paths.update(write_training_files(d, out_dir, outputs))
        if pages:
            paths.update(write_rendered(orjson.loads(raw), out_dir, pages, script=script[0], outputs=outputs,
                                        plotly_src=script[1], earlier=earlier))
        if beside:
            outputs.write_bytes(paths["metrics"], table.result())
        elif "metrics" in paths:
            write_metrics_csv(analysis, paths["metrics"], outputs)
    return paths


WINDOW_COLUMNS = ("window", "first_step", "last_step", "rows", "reward_mean", "loss_mean", "loss_metric",
                  "reward_var", "kl", "reward_trend", "loss_trend", "reward_direction", "loss_direction",
                  "status", "issues", "findings")


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, (list, tuple)):
        return ";".join(str(x) for x in v)
    return v


def write_training_files(d: dict[str, Any], out_dir: Path, outputs: Outputs | None = None) -> dict[str, Path]:
    """windows.csv (when the run has a window table) and recommendations.{json,yaml}, from the
    analysis dict (``Analysis.to_dict()``). The YAML (:mod:`forensics.report.yaml_text`) reads
    back as the JSON's values: numbers stay numbers (``8.0e-07`` is a float), text stays text."""
    outputs = outputs or Outputs()
    out: dict[str, Path] = {}
    if d.get("windows"):
        out["windows"] = out_dir / WINDOWS_FILE
        with outputs.open(out["windows"]) as fh:
            w = csv.writer(fh)
            w.writerow(WINDOW_COLUMNS)
            for row in d["windows"]:
                w.writerow([_cell(row.get(c)) for c in WINDOW_COLUMNS])
    if d.get("recommendations"):
        rec = jsonable(d["recommendations"])
        out["recommendations"] = outputs.write_text(out_dir / RECOMMENDATIONS_JSON, to_json(rec))
        out["recommendations_yaml"] = outputs.write_text(
            out_dir / RECOMMENDATIONS_YAML,
            "# forensics: recommended changes (recommendations.json holds the same data)\n"
            + yaml_text.dump(rec))
    return out


def write_rendered(data: dict[str, Any], out_dir: Path, formats: tuple[str, ...] = ("html", "md"),
                   script: str = "inline", outputs: Outputs | None = None,
                   plotly_src: str | None = None, earlier: Path | None = None) -> dict[str, Path]:
    """Write report.html and/or report.md for an analysis dict (a scan or a saved analysis.json);
    ``script="file"`` shares plotly.js as one file per folder instead of inlining it (or, with
    ``plotly_src``, refers to the copy the caller writes there; ``earlier``: a folder whose copy
    may be linked, see :func:`~forensics.report.html.write_plotly_asset`)."""
    from .html import PLOTLY_FILE, render_html_bytes, write_plotly_asset
    from .markdown import render_markdown

    outputs = outputs or Outputs()
    out: dict[str, Path] = {}
    if "html" in formats:
        page = render_html_bytes(data, script=script, plotly_src=plotly_src or PLOTLY_FILE)
        out["html"] = outputs.write_bytes(out_dir / HTML_FILE, page)
        if script == "file" and plotly_src is None:  # shared by every report in the folder
            write_plotly_asset(out_dir, outputs, earlier)
    if "md" in formats:
        out["markdown"] = outputs.write_text(out_dir / MARKDOWN_FILE, render_markdown(data))
    return out

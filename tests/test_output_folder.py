"""The output folder is all-or-nothing under SIGKILL and concurrent scans (issue 22, item 2).

A child process writes reports into one folder again and again (two runs of different lengths in
turn) and is killed with SIGKILL at random moments; after each kill the folder must hold a
complete old or a complete new report, and the next scan removes what the killed one left. Eight
scans into one folder at once take turns; every state an observer sees meanwhile is complete.
``FORENSICS_KILLS`` sets the number of kills (``make test``: a reduced count; ``make fuzz``: 200).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from forensics.analysis.engine import scan_path
from forensics.io.output import CURRENT, STORE_DIR
from forensics.report.files import MANIFEST_FILE, write_reports

KILLS = int(os.environ.get("FORENSICS_KILLS", "25"))


def _log(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"step": i, "kl": 0.01 + (i % 7) * 1e-3, "reward_mean": 0.001 * i,
                                        "loss": 1.0 / i}) + "\n" for i in range(1, n + 1)))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list:
    d = tmp_path_factory.mktemp("logs")
    return [scan_path(_log(d / "short.jsonl", 300)), scan_path(_log(d / "long.jsonl", 2000))]


def observe(out: Path) -> int | None:
    """The rows of the report a reader sees in ``out`` (None: no report yet); fails unless the
    report is complete and every visible name is a file of it."""
    store = out / STORE_DIR
    try:
        gen = store / os.readlink(store / CURRENT)
    except FileNotFoundError:
        return None
    files = set(json.loads((gen / MANIFEST_FILE).read_text())["files"])
    assert {p.name for p in gen.iterdir() if not p.name.startswith(".")} == files
    rows = json.loads((gen / "analysis.json").read_text())["steps"]["rows"]
    assert json.loads((gen / "summary.json").read_text())["rows"] == rows
    assert pq.ParquetFile(gen / "metrics.parquet").metadata.num_rows == rows
    return rows


def observe_stable(out: Path) -> int | None:
    """:func:`observe` while scans run: a report replaced (and its old generation removed) while it
    was being read is read again, as a reader would; a report that stays current must be whole."""
    while True:
        try:
            before = os.readlink(out / STORE_DIR / CURRENT)
        except FileNotFoundError:
            return None
        try:
            return observe(out)
        except (AssertionError, FileNotFoundError, ValueError):
            if os.readlink(out / STORE_DIR / CURRENT) == before:
                raise


def visible(out: Path) -> set[str]:
    return {p.name for p in out.iterdir() if not p.name.startswith(".") and p.exists()}


def write(analysis: object, out: Path) -> None:
    """A scan's writes (Parquet: polars' thread pool does not survive a fork, pyarrow's does)."""
    write_reports(analysis, out, rendered=False, metrics="parquet")  # type: ignore[arg-type]


def _child(fn) -> int:  # type: ignore[no-untyped-def]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            fn()
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def test_a_killed_scan_leaves_a_complete_report(tmp_path: Path, runs: list) -> None:
    out = tmp_path / "out"
    write(runs[0], out)
    rng = random.Random(22)
    seen = set()
    killed_mid_write = 0  # kills that left a generation half written (the next scan removes it)
    for k in range(KILLS):
        first = k % 2

        def loop(first: int = first) -> None:
            i = first
            while True:
                write(runs[i % 2], out)
                i += 1

        pid = _child(loop)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        killed_mid_write += len([p for p in (out / STORE_DIR).iterdir() if p.name.startswith("r-")]) > 1
        rows = observe(out)
        assert rows in (300, 2000)
        assert visible(out) == set(json.loads((out / MANIFEST_FILE).read_text())["files"])
        seen.add(rows)
    print(f"{KILLS} kills, {killed_mid_write} in the middle of a write, reports seen: {sorted(seen)}")
    # the next scan publishes and removes every leftover of the killed ones
    write(runs[1], out)
    assert observe(out) == 2000
    assert [p.name for p in (out / STORE_DIR).iterdir() if p.name.startswith("r-")] == \
        [os.readlink(out / STORE_DIR / CURRENT)]
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name.endswith("link")]


def test_concurrent_scans_into_one_folder_take_turns(tmp_path: Path, runs: list) -> None:
    out = tmp_path / "out"
    pids = [_child(lambda i=i: [write(runs[(i + j) % 2], out) for j in range(2)])
            for i in range(8)]
    states = set()
    deadline = time.monotonic() + 120
    while pids:
        assert time.monotonic() < deadline, "scans did not finish"
        states.add(observe_stable(out))
        for pid in list(pids):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                pids.remove(pid)
    assert observe(out) in (300, 2000) and states <= {None, 300, 2000}
    assert len([p for p in (out / STORE_DIR).iterdir() if p.name.startswith("r-")]) == 1


def test_a_report_written_again_links_the_plotly_copy_it_replaces(tmp_path: Path) -> None:
    """The shared plotly.js of a folder's new report generation is a hard link of the one it
    replaces when that is the vendored file's copy (its size and modification time), not 1.2 MB
    copied again; a copy that differs is not linked."""
    from forensics.report.html import PLOTLY_FILE, PLOTLY_SOURCE

    analysis = scan_path(Path(__file__).resolve().parent.parent / "fixtures" / "runs" / "ppo_lr_high")
    out = tmp_path / "r"
    lib = out / PLOTLY_FILE
    write_reports(analysis, out, script="file")
    first = lib.stat()
    assert first.st_mtime_ns == PLOTLY_SOURCE.stat().st_mtime_ns and lib.read_bytes() == PLOTLY_SOURCE.read_bytes()
    write_reports(analysis, out, script="file")
    assert lib.stat().st_ino == first.st_ino  # the work not done: linked, not copied
    os.utime(lib, ns=(0, 0))  # not the vendored file's copy any more
    write_reports(analysis, out, script="file")
    again = lib.stat()
    assert again.st_ino != first.st_ino and lib.read_bytes() == PLOTLY_SOURCE.read_bytes()
    assert again.st_mtime_ns == PLOTLY_SOURCE.stat().st_mtime_ns


def _cli(*args: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from forensics.cli import main

    return CliRunner().invoke(main, list(args))


def _rows(out: Path) -> int:
    return int(json.loads((out / "analysis.json").read_text())["steps"]["rows"])


def test_the_folder_keeps_every_folder_a_scan_did_not_make(tmp_path: Path) -> None:
    """Folders named like an old version's temporary ones (``.forensics-mine``, holding the
    scan's own input; ``.forensics-cache``) and folders in the store a scan did not make stay;
    only generations go."""
    out = tmp_path / "o"
    mine = out / ".forensics-mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    log = _log(mine / "steps.jsonl", 200)
    (out / ".forensics-cache").mkdir()
    for _ in range(2):
        assert _cli("scan", str(log), "-o", str(out), "-q").exit_code in (0, 1)
    (out / STORE_DIR / "r-notmine").mkdir()
    (out / STORE_DIR / "keep").mkdir()
    assert _cli("scan", str(log), "-o", str(out), "-q").exit_code in (0, 1)
    assert (mine / "notes.txt").read_text() == "mine" and log.is_file() and (out / ".forensics-cache").is_dir()
    assert (out / STORE_DIR / "r-notmine").is_dir() and (out / STORE_DIR / "keep").is_dir()
    gens = [p for p in (out / STORE_DIR).iterdir() if p.name.startswith("r-") and p.name != "r-notmine"]
    assert len(gens) == 1 and _rows(out) == 200  # the one generation published; the old one went


@pytest.mark.parametrize("target", ["..", ".", "../..", "/"])
def test_a_current_link_out_of_the_store_is_never_followed(tmp_path: Path, target: str) -> None:
    """``current`` pointing at the run folder (``..``) made the next scan delete the folder's log
    and files; now it is a link to no generation, replaced by the commit."""
    run = tmp_path / "run"
    run.mkdir()
    log = _log(run / "steps.jsonl", 200)
    (run / "notes.md").write_text("keep")
    assert _cli("scan", str(log), "-o", str(run), "-q").exit_code in (0, 1)
    current = run / STORE_DIR / CURRENT
    current.unlink()
    current.symlink_to(target)
    res = _cli("scan", str(log), "-o", str(run), "-q")
    assert res.exit_code in (0, 1), res.output
    assert log.is_file() and (run / "notes.md").read_text() == "keep" and (run / STORE_DIR).is_dir()
    assert _rows(run) == 200


def test_an_input_inside_the_store_is_refused(tmp_path: Path) -> None:
    """An input in a generation folder, or a hard link of the lock, would be replaced or
    truncated by the scan: exit 2, nothing touched."""
    out = tmp_path / "o"
    log = _log(tmp_path / "steps.jsonl", 200)
    assert _cli("scan", str(log), "-o", str(out), "-q").exit_code in (0, 1)
    inside = out / STORE_DIR / os.readlink(out / STORE_DIR / CURRENT) / "metrics.csv"
    before = inside.read_bytes()
    res = _cli("scan", str(inside), "-o", str(out), "-q")
    assert res.exit_code == 2 and ("inside the report store" in res.output or "it is the input" in res.output)
    assert inside.read_bytes() == before
    lock = out / STORE_DIR / "lock"
    linked = tmp_path / "also.jsonl"
    lock.unlink()
    os.link(log, lock)  # the input hard-linked as the store's lock
    res = _cli("scan", str(linked if linked.exists() else log), "-o", str(out), "-q")
    assert res.exit_code == 2 and "same file as" in res.output, res.output
    assert log.read_text().count("\n") == 200


def test_other_commands_never_write_through_a_reports_links(tmp_path: Path) -> None:
    """``convert``, ``gate -o``, ``rules -o`` and ``watch --jsonl`` wrote (or appended) through the
    links of a published report; refused now (exit 2), the report untouched. ``report`` renders
    its pages again in place."""
    out = tmp_path / "o"
    log = _log(tmp_path / "steps.jsonl", 200)
    assert _cli("scan", str(log), "-o", str(out), "-q").exit_code in (0, 1)
    snapshot = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for args in (("convert", str(log), "-o", str(out / "metrics.csv")),
                 ("gate", str(log), "-o", str(out / "findings.csv")),
                 ("rules", "-o", str(out / "report.md")),
                 ("watch", str(log), "--once", "-q", "--jsonl", str(out / "summary.json"))):
        res = _cli(*args)
        assert res.exit_code == 2 and "a file of the report in" in res.output, (args, res.output)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == snapshot
    res = _cli("report", str(out), "-q")
    assert res.exit_code == 0, res.output
    assert (out / "report.html").is_file() and _rows(out) == 200


@pytest.mark.parametrize("command", [("scan", "{p}.jsonl"), ("gate", "{p}.jsonl"), ("report", "{p}"),
                                     ("convert", "{p}.jsonl", "-o", "x.csv"), ("watch", "{p}.jsonl", "--once"),
                                     ("diff", "{p}", "{p}")])
def test_a_path_the_system_refuses_is_an_input_error_naming_it(command: tuple[str, ...]) -> None:
    """A 300-character file name (ENAMETOOLONG) was an internal error (exit 4) in every command."""
    long = "a" * 300
    res = _cli(*(c.format(p=long) for c in command))
    assert res.exit_code == 3 and "cannot use this path: File name too long" in res.output, res.output
    assert "internal error" not in res.output

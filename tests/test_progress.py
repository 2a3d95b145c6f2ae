"""Progress that tells the truth (issue 25, item 5): a bar for gzip inputs from the compressed
bytes read, and no 100% when a scan stops early. Nothing here is timed."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import forensics.analysis.engine as engine
import forensics.progress as progress
from forensics.analysis.engine import scan_path
from forensics.cli import EXIT_INTERRUPTED, main
from forensics.io.inputs import compressed_offset
from forensics.progress import scan_progress

from .conftest import healthy_rows


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _gz_log(path: Path, rows: int) -> Path:
    lines = "".join(json.dumps(r) + "\n" for r in healthy_rows(rows))
    path.write_bytes(gzip.compress(lines.encode(), compresslevel=1))
    return path


def test_a_gzip_log_gets_a_bar_from_its_compressed_offset(tmp_path: Path) -> None:
    log = _gz_log(tmp_path / "steps.jsonl.gz", 20_000)
    seen: list[int] = []

    def offset(p: Path) -> int | None:
        at = compressed_offset(p)
        seen.append(at or 0)
        return at

    stream = _Tty()
    tick, done = scan_progress([log], stream=stream, min_bytes=0, offset=offset)
    assert tick is not None
    scan_path(log, progress=tick, batch_rows=1000)
    before = stream.getvalue()
    done()
    assert len(seen) > 2 and seen == sorted(seen) and len(set(seen)) > 1  # it moves, never back
    assert seen[-1] == log.stat().st_size  # the last batch comes after the last byte
    assert "scanning steps.jsonl.gz" in before and "100%" not in before  # 100% only when done
    assert "100%" in stream.getvalue()


def test_a_gzip_log_without_an_offset_reader_gets_no_bar(tmp_path: Path) -> None:
    log = _gz_log(tmp_path / "steps.jsonl.gz", 200)
    assert scan_progress([log], stream=_Tty(), min_bytes=0)[0] is None
    assert compressed_offset(log) is None  # nothing open


def test_a_gzip_log_counts_as_its_text_towards_the_bar_threshold(tmp_path: Path) -> None:
    log = _gz_log(tmp_path / "steps.jsonl.gz", 200)
    size = log.stat().st_size
    assert scan_progress([log], stream=_Tty(), min_bytes=3 * size, offset=compressed_offset)[0] is not None
    assert scan_progress([log], stream=_Tty(), min_bytes=5 * size, offset=compressed_offset)[0] is None


def test_a_scan_that_stops_early_leaves_the_bar_short_of_100(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in healthy_rows(2000)))
    stream = _Tty()
    tick, done = scan_progress([log], stream=stream, min_bytes=0)
    assert tick is not None
    tick(500)
    done(finished=False)
    assert "scanning steps.jsonl" in stream.getvalue() and "100%" not in stream.getvalue()


def test_an_interrupted_scan_exits_130_and_its_bar_is_not_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in healthy_rows(50)))
    calls: list[Any] = []

    def fake_progress(files: Any, **kwargs: Any) -> Any:
        return (lambda n: calls.append(("tick", n))), (lambda finished=True: calls.append(("done", finished)))

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        kwargs["progress"](10)
        raise KeyboardInterrupt

    monkeypatch.setattr(progress, "scan_progress", fake_progress)
    monkeypatch.setattr(engine, "scan_path", interrupted)
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "r")])
    assert res.exit_code == EXIT_INTERRUPTED == 130
    assert "Interrupted." in res.output
    assert calls == [("tick", 10), ("done", False)]
    assert not (tmp_path / "r" / "analysis.json").exists()

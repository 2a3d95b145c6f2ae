"""`make bench-peers` (bench/bench_peers.py) without the peers or a clock: a tool that cannot read
a format, is stopped or fails is listed as such, never skipped; the corpus counts keep unread runs
apart; forensics is run and judged by its own command; the table lands between the
markers of docs/peers.md and nowhere else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import bench_peers as peers
from bench.bench_peers import Outcome

from .conftest import healthy_rows, write_jsonl


class FakeTools:
    """Answers per (tool, file name): an outcome given in advance."""

    def __init__(self, answers: dict[tuple[str, str], Outcome]) -> None:
        self.answers = answers

    def run(self, tool: str, log: Path) -> Outcome:
        return self.answers[(tool, log.name)]


def test_a_tool_that_cannot_read_or_fails_is_listed_not_skipped(tmp_path: Path) -> None:
    log = tmp_path / "steps.parquet"
    log.write_bytes(b"x" * 2000)
    tools = FakeTools({("forensics", log.name): Outcome(1.25, 190.0),
                       ("rldoctor", log.name): Outcome(failure="cannot read this format"),
                       ("rlwatch", log.name): Outcome(failure="killed at 6 GB resident after 100 s")})
    rows = peers.size_table(tools, [("Parquet 10 rows", log)])  # type: ignore[arg-type]
    assert rows[0] == "| input | forensics | rldoctor | rlwatch |"
    assert rows[2] == ("| Parquet 10 rows (0.0 MB) | 1.25 s, 190 MB | cannot read this format | "
                       "killed at 6 GB resident after 100 s |")


def test_the_corpus_counts_keep_unread_runs_apart() -> None:
    runs = [("a", Path("a"), "kl_runaway"), ("b", Path("b"), None), ("c", Path("c"), "grad_explode"),
            ("d", Path("d"), None)]
    answers = {}
    for tool in peers.TOOLS:
        answers[(tool, "a")] = Outcome(flagged=True)
        answers[(tool, "b")] = Outcome(flagged=tool == "rlwatch")  # a false alarm
        answers[(tool, "c")] = Outcome(failure="cannot read this format") if tool == "rldoctor" \
            else Outcome(flagged=False)
        answers[(tool, "d")] = Outcome(flagged=False)
    lines = peers.corpus_row(FakeTools(answers), "trl", runs)  # type: ignore[arg-type]
    assert lines == ["| trl | forensics | 1 of 2 | 0 of 2 | - |",
                     "| trl | rldoctor | 1 of 2 | 0 of 2 | 1 |",
                     "| trl | rlwatch | 1 of 2 | 1 of 2 | - |"]


def test_a_run_past_its_time_is_stopped_and_says_so() -> None:
    res, _ = peers.measure([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3, mem_gb=6)
    assert res.failure == "stopped after 0.3 s" and res.flagged is None


def test_a_failing_run_is_named_by_its_exit_and_last_line() -> None:
    res, _ = peers.measure([sys.executable, "-c", "import sys; sys.exit('no such key: step')"],
                           timeout=60, mem_gb=6)
    assert res.failure == "exit 1: no such key: step"


def test_forensics_is_judged_by_its_own_command(tmp_path: Path) -> None:
    tools = peers.Tools(tmp_path / "no-venv", timeout=120, mem_gb=6)
    healthy = tools.forensics(write_jsonl(tmp_path / "steps.jsonl", healthy_rows(300)))
    assert not healthy.failure and healthy.flagged is False and healthy.findings == []
    junk = tmp_path / "notes.bin"
    junk.write_bytes(b"\x00\x01 not a training log")
    unread = tools.forensics(junk)
    assert unread.failure.startswith("cannot read: ") and unread.flagged is None


def test_the_table_goes_between_the_page_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "peers.md"
    page.write_text(f"# x\nbefore\n{peers.MARK_BEGIN}\nold table\n{peers.MARK_END}\nafter\n")
    monkeypatch.setattr(peers, "ROOT", tmp_path)
    peers.write_page(f"{peers.MARK_BEGIN}\nnew table\n{peers.MARK_END}")
    assert page.read_text() == f"# x\nbefore\n{peers.MARK_BEGIN}\nnew table\n{peers.MARK_END}\nafter\n"
    page.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        peers.write_page("table")

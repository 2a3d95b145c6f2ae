"""Live use: ``forensics watch`` on growing files, and the transformers TrainerCallback."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from forensics.analysis.findings import Severity
from forensics.cli import main
from forensics.live.transformers import ForensicsCallback
from forensics.live.watch import Watcher

from .conftest import FIXTURES, VERL, healthy_rows

FMT = FIXTURES / "formats"


def spiky_rows() -> list[dict]:
    rows = healthy_rows(400, seed=3)
    for r in rows[300:308]:  # eight rows: longer than an isolated excursion, so a warning
        r["kl"] *= 6.0
    return rows


def lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_finding_printed_once_when_it_appears(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    rows = spiky_rows()
    p.write_text(lines(rows[:250]))
    out: list[str] = []
    w = Watcher(p, echo=out.append, min_severity=Severity.WARNING)
    assert w.poll() == []  # healthy so far
    with open(p, "a") as fh:
        fh.write(lines(rows[250:320]))
    new = [f for f in w.poll() if f.rule.startswith("kl.")]
    assert [f.rule for f in new] == ["kl.spike"]
    assert new[0].onset_step >= 300
    with open(p, "a") as fh:
        fh.write(lines(rows[320:]))
    assert [f for f in w.poll() if f.rule == "kl.spike"] == []  # not printed again
    assert sum("kl.spike" in line for line in out) == 1


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    rows = healthy_rows(10)
    text = lines(rows)
    cut = text.index("\n", len(text) // 2) + 20
    p.write_text(text[:cut])
    w = Watcher(p, echo=lambda s: None)
    w.poll()
    n = w.scan.rows
    assert w.report.rows_skipped == 0  # the half line is not an error
    p.write_text(text)
    w.poll()
    assert w.scan.rows == 10 > n
    assert w.report.rows_skipped == 0


def test_truncated_file_is_read_again(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    p.write_text(lines(healthy_rows(20)))
    out: list[str] = []
    w = Watcher(p, echo=out.append)
    w.poll()
    p.write_text(lines(healthy_rows(5)))  # a restarted writer truncates its file
    w.poll()
    assert any("truncated or replaced" in line for line in out)


def test_watch_in_a_thread_sees_appended_lines(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    rows = spiky_rows()
    p.write_text(lines(rows[:200]))

    def writer() -> None:
        for i in range(200, 400, 50):
            time.sleep(0.05)
            with open(p, "a") as fh:
                fh.write(lines(rows[i:i + 50]))

    t = threading.Thread(target=writer)
    out: list[str] = []
    w = Watcher(p, echo=out.append)
    t.start()
    w.run(interval=0.02, timeout=1.0)
    t.join()
    assert w.scan.rows == 400
    assert any("kl.spike" in line for line in out)
    assert out[-1].startswith("stopped: 400 step rows")


def test_watch_console_log_grows_line_by_line(tmp_path: Path) -> None:
    src = (FMT / "deepspeed_chat_step3.log").read_text().splitlines(keepends=True)
    p = tmp_path / "ds.log"
    p.write_text("".join(src[:10]))
    w = Watcher(p, echo=lambda s: None)
    w.poll()
    for line in src[10:]:
        with open(p, "a") as fh:
            fh.write(line)
        w.poll()
    w.poll(final=True)
    assert w.scan.rows == 16


def test_watch_rereads_whole_document_formats(tmp_path: Path) -> None:
    full = json.loads((FMT / "trl_grpo_trainer_state.json").read_text())
    p = tmp_path / "trainer_state.json"
    part = dict(full, log_history=full["log_history"][:10])
    p.write_text(json.dumps(part, indent=2))
    w = Watcher(p, echo=lambda s: None)
    w.poll()
    first = w.scan.rows
    p.write_text(json.dumps(full, indent=2) + "\n ")  # size changes: re-read, feed only new steps
    w.poll()
    assert first < w.scan.rows == 40
    assert w.scan.order.replays == []


def test_watch_cli_once_on_file_that_grows_between_polls(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    p.write_text(lines(spiky_rows()))
    res = CliRunner().invoke(main, ["watch", str(p), "--once"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "kl.spike" in res.output and "watching" in res.output


def test_watch_verl_log_reports_entropy_decline(tmp_path: Path) -> None:
    src = VERL.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    p = tmp_path / "verl.log"
    p.write_text("".join(src[:800]))
    out: list[str] = []
    w = Watcher(p, echo=out.append)
    w.poll()
    for i in range(800, len(src), 60):
        with open(p, "a") as fh:
            fh.write("".join(src[i:i + 60]))
        w.poll()
    assert w.scan.rows == 105
    assert any("entropy." in line for line in out)


def test_watch_missing_file_waits_only_with_wait(tmp_path: Path) -> None:
    # without --wait: an error at once (exit 3), never "0 step rows analysed" and exit 0
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["watch", str(tmp_path / "later.jsonl"), "--timeout", "30"],
                             catch_exceptions=False)
    assert res.exit_code == 3 and "no such file" in res.output and "--wait" in res.output
    assert time.monotonic() - t0 < 10  # did not wait for the timeout
    res = CliRunner().invoke(main, ["watch", str(tmp_path / "later.jsonl"), "--wait", "--timeout", "0.1",
                                    "--interval", "0.05"], catch_exceptions=False)
    assert res.exit_code == 3 and "0 step rows" in res.output
    assert "no such file" in res.output


def test_watch_unusable_folder_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    res = CliRunner().invoke(main, ["watch", str(tmp_path), "--timeout", "30"])
    assert res.exit_code == 3 and "no training log" in res.output


# --- transformers / TRL callback, driven the way Trainer drives it -----------------------------

def test_trainer_callback_writes_streams_and_prints_findings(tmp_path: Path) -> None:
    args = SimpleNamespace(output_dir=str(tmp_path), max_grad_norm=1.0, beta=0.04, run_name="t")
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    control = SimpleNamespace()
    out: list[str] = []
    cb = ForensicsCallback(echo=out.append, check_every=25)
    cb.on_train_begin(args, state, control)
    for i, r in enumerate(spiky_rows()):
        state.global_step = i + 1
        logs = {"loss": 0.1, "grad_norm": r["grad_norm"], "learning_rate": 1e-6, "kl": r["kl"],
                "reward": r["reward_mean"], "entropy": r["entropy"], "epoch": i / 400}
        cb.on_log(args, state, control, logs=logs)
        if (i + 1) % 100 == 0:
            cb.on_log(args, state, control, logs={"eval_loss": 0.2, "eval_reward": 0.5, "epoch": i / 400})
    cb.on_log(args, state, control, logs={"train_runtime": 10.0, "train_loss": 0.1, "epoch": 1.0})
    cb.on_train_end(args, state, control)
    run_dir = tmp_path / "forensics"
    steps = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 400 and steps[0]["step"] == 1
    assert "reward_mean" in steps[0] and "reward" not in steps[0]  # canonical names
    assert len((run_dir / "eval.jsonl").read_text().splitlines()) == 4
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["max_grad_norm"] == 1.0 and meta["kl_coef_init"] == 0.04
    assert meta["config"]["train_summary"]["train_runtime"] == 10.0
    assert sum(a["rule"] == "kl.spike" and a["event"] == "new" for a in cb.alerts) == 1
    assert out[-1].startswith("forensics: 400 step rows")
    res = CliRunner().invoke(main, ["scan", str(run_dir), "-o", str(tmp_path / "rep"), "-q"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output


def test_trainer_callback_only_on_main_process(tmp_path: Path) -> None:
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=1, is_world_process_zero=False)
    cb = ForensicsCallback(live=False)
    cb.on_train_begin(args, state, None)
    cb.on_log(args, state, None, logs={"loss": 1.0})
    cb.on_train_end(args, state, None)
    assert not (tmp_path / "forensics").exists()


# --- hostile input (issue 11) -------------------------------------------------------------------

@pytest.mark.parametrize("opt", [["--interval", "nan"], ["--timeout", "nan"], ["--timeout", "inf"],
                                 ["--interval", "inf"]])
def test_watch_rejects_numbers_that_would_hang(tmp_path: Path, opt: list[str]) -> None:
    p = tmp_path / "steps.jsonl"
    p.write_text(lines(healthy_rows(10)))
    res = CliRunner().invoke(main, ["watch", str(p), "--timeout", "1", *opt])
    assert res.exit_code == 2, res.output


@pytest.mark.parametrize("kind", ["missing", "empty", "garbage", "wrong-format"])
def test_watch_once_that_reads_nothing_is_an_input_error(tmp_path: Path, kind: str) -> None:
    p = tmp_path / "steps.jsonl"
    extra: list[str] = []
    if kind == "empty":
        p.write_text("")
    elif kind == "garbage":
        p.write_bytes(bytes(range(256)) * 4)
    elif kind == "wrong-format":
        p.write_text(lines(healthy_rows(10)))
        extra = ["--format", "verl-console"]
    res = CliRunner().invoke(main, ["watch", str(p), "--once", *extra])
    assert res.exit_code == 3, res.output


def test_watch_follows_a_growing_gzip(tmp_path: Path) -> None:
    import zlib

    rows = spiky_rows()
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    p = tmp_path / "steps.jsonl.gz"
    w = Watcher(p, echo=lambda s: None)
    with open(p, "wb") as fh:
        for i in range(0, 400, 100):
            fh.write(comp.compress(lines(rows[i:i + 100]).encode()) + comp.flush(zlib.Z_SYNC_FLUSH))
            fh.flush()
            w.poll()
        fh.write(comp.flush())
    w.poll(final=True)
    assert w.scan.rows == 400


def test_watch_reads_a_fifo_as_a_stream_and_stops_at_its_timeout(tmp_path: Path) -> None:
    import os

    p = tmp_path / "pipe"
    os.mkfifo(p)
    rows = spiky_rows()

    def writer() -> None:
        with open(p, "w") as fh:  # blocks until watch opens the FIFO
            fh.write(lines(rows[:200]))
            fh.flush()
            time.sleep(0.2)
            fh.write(lines(rows[200:]))

    t = threading.Thread(target=writer)
    t.start()
    out: list[str] = []
    w = Watcher(p, echo=out.append)
    w.run(interval=0.05, timeout=10)
    t.join()
    assert w.scan.rows == 400 and any("kl.spike" in line for line in out)
    # no writer at all: the timeout still ends it (exit 3: nothing read)
    q = tmp_path / "silent"
    os.mkfifo(q)
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["watch", str(q), "--timeout", "0.5", "--interval", "0.1"])
    assert res.exit_code == 3 and time.monotonic() - t0 < 5


def test_watch_catching_up_feeds_scan_sized_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted work, not time: a poll that brings n rows feeds ceil(n / batch) batches, so 10x the
    NaN rows cost 10x the per-row work and no more per-batch overhead than a scan."""
    from forensics.analysis.engine import Scan

    calls: list[int] = []
    feed = Scan.feed

    def counting(self, raw, report):  # type: ignore[no-untyped-def]
        calls.append(len(raw))
        return feed(self, raw, report)

    monkeypatch.setattr(Scan, "feed", counting)
    for n in (2_000, 20_000):
        calls.clear()
        p = tmp_path / f"nan{n}.jsonl"
        p.write_text("".join(f'{{"step": {i}, "kl": NaN, "grad_norm": NaN}}\n' for i in range(n)))
        w = Watcher(p, echo=lambda s: None)
        w.run(once=True)
        assert sum(calls) == n and len(calls) == -(-n // w.batch_rows)


def test_watch_and_fleet_stop_on_sigint_from_a_non_interactive_shell(tmp_path: Path) -> None:
    """A CI runner cancelling a job sends SIGINT to a process a non-interactive shell started in
    the background, which inherits SIGINT ignored: both stop, exit 130."""
    import shutil
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("forensics")
    if shutil.which("bash") is None or not exe.exists():
        pytest.skip("bash or the forensics command is not here")
    log = tmp_path / "steps.jsonl"
    log.write_text(lines(spiky_rows()[:100]))
    runs = tmp_path / "runs"
    text = lines(spiky_rows())
    for i in range(150):  # a fleet that takes longer than the 2 s before the signal
        (runs / f"r{i}").mkdir(parents=True)
        (runs / f"r{i}" / "steps.jsonl").write_text(text)
    for cmd in (f"{exe} watch {log} --interval 0.2 -q", f"{exe} fleet {runs} -o {tmp_path / 'fleet'} --workers 1"):
        script = f"{cmd} > {tmp_path / 'out.txt'} 2>&1 & pid=$!; sleep 2; kill -INT $pid; wait $pid; echo rc=$?"
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
        out = (tmp_path / "out.txt").read_text()
        assert res.stdout.strip() == "rc=130", (cmd, res.stdout, out)
        assert "Interrupted." in out

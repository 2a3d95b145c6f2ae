"""The reader of last resort (forensics.io.adapters.kv_console): a custom loop's console of
``name: value`` pairs read as a step log, and files that are not logs still refused."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main
from forensics.io.formats import detect_format

from .fuzz import consoles
from .fuzz.harness import FAILURES, run_cases


def _epoch_log(path: Path, n: int = 120) -> Path:
    """The console of issue 36 item 5, one line a step, a preamble and noise among them."""
    rng = np.random.default_rng(0)
    lines = ["Loading model...", "config: lr=3e-7 batch=8"]
    for i in range(1, n + 1):
        lines.append(f"Epoch:[1/1]({i}/9751), Reward: {-1.5 + 0.004 * i + rng.normal(0, 0.02):.4f}, "
                     f"KL_ref: {0.03 + rng.normal(0, 0.002):.4f}, Adv Std: 0.93, "
                     f"Actor Loss: {rng.normal(0.006, 0.001):.5f}, Avg Response Len: {280 + rng.normal(0, 3):.2f}, "
                     "Learning Rate: 0.0000003")
        if i % 40 == 0:
            lines.append(f"saving checkpoint-{i}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_custom_console_is_read_as_a_step_log(tmp_path: Path) -> None:
    log = _epoch_log(tmp_path / "train.log")
    assert detect_format(log) == "kv-console"
    a = scan_path(log)
    r = a.inputs[0]
    assert (r.format, r.rows_read, a.steps["first"], a.steps["last"]) == ("kv-console", 120, 1, 120)
    mapping = a.mappings[str(log)].mapping
    assert {mapping[k] for k in ("reward", "kl_ref", "adv_std", "actor_loss", "avg_response_len", "learning_rate")} \
        == {"reward_mean", "kl", "advantage_std", "policy_loss", "response_length_mean", "learning_rate"}
    notes = " ".join(r.notes)
    assert "the step from the counter '(i/N)'" in notes
    assert "1 line(s) of pairs before the first step counter skipped" in notes  # the printed config
    assert "4 line(s) without two numeric pairs skipped" in notes  # 'Loading', three checkpoints


@pytest.mark.parametrize(("text", "steps", "key"), [
    # veRL-like pairs with a step key and pipes
    ("".join(f"step:{i} | policy_loss=-0.0005 | kl_divergence=0.0006 | mean_reward=0.14 | grad_norm=90.75\n"
             for i in range(1, 31)), (1, 30), "kl_divergence"),
    # Python logging lines with a nested dict (flattened), no counter: one row per line
    ("".join(f"2025-09-23 09:01:{i % 60:02d},984 - train - INFO - rl_loss: -0.0027, time: 109.1, "
             f"l2_norm: 0.141, token_entropy: 0.82, reward_data: {{'total_num': 256, 'total_reward': {i}.0}}\n"
             for i in range(30)), (1, 30), "reward_data/total_reward"),
    # a counter in words ("rollout batch N"), then the pairs
    ("".join(f"[rank0] rollout batch {i}: reward=0.{i:02d} kl=0.01 entropy=0.8\n" for i in range(1, 26)),
     (1, 25), "entropy"),
    # an iteration counter spread over two lines a step
    ("".join(f"iteration {i}: loss=0.5 lr=1e-5\n  reward=0.{i} kl=0.01\n".replace("iteration ", "iteration=")
             for i in range(1, 21)), (1, 20), "kl"),
])
def test_the_spellings_custom_loops_print(tmp_path: Path, text: str, steps: tuple[int, int], key: str) -> None:
    log = tmp_path / "train.log"
    log.write_text(text)
    a = scan_path(log)
    assert a.inputs[0].format == "kv-console"
    assert (a.steps["first"], a.steps["last"]) == steps and a.steps["rows"] == steps[1] - steps[0] + 1
    keys = set(a.mappings[str(log)].mapping) | set(a.mappings[str(log)].unmapped)
    assert key in keys


@pytest.mark.parametrize("name", sorted(consoles._REFUSED))
def test_files_that_are_not_logs_are_refused(tmp_path: Path, name: str) -> None:
    p = tmp_path / "x.log"
    p.write_bytes(consoles._REFUSED[name])
    res = CliRunner().invoke(main, ["scan", str(p), "-q", "-o", str(tmp_path / "o")])
    # unrecognised, or (a JSON document) read as JSON lines that hold no row: exit 3 either way
    assert res.exit_code == 3 and ("unrecognised content" in res.output or "no usable rows" in res.output), \
        res.output


def test_the_specific_formats_keep_their_files() -> None:
    """No format fixture changes hands: the reader of last resort is tried after every other."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
    for f in sorted(fixtures.iterdir()):
        if f.is_file() and f.suffix in (".log", ".jsonl", ".csv", ".json", ".txt", ".md"):
            try:
                assert detect_format(f) != "kv-console", f.name
            except Exception as exc:  # a fixture that is not a log at all (README): refused, fine
                assert "unrecognised" in str(exc) or f.suffix == ".md", (f.name, exc)


def test_a_fuzz_slice_of_consoles_and_non_logs() -> None:
    cases = [c for c in consoles.generate(random.Random(36), 30) if "1000000" not in c.name]
    cases = [c for c in cases if len(next(iter(c.files.values()))) < 5_000_000]
    results = list(run_cases(cases, workers=2, timeout=60))
    bad = [(r.outcome, r.case.name, r.detail) for r in results if r.outcome in FAILURES]
    assert bad == []


def test_a_large_file_that_is_not_a_log_is_refused_quickly(tmp_path: Path) -> None:
    """The late scan (up to 64 MiB of a text file for a console whose first metric line comes
    late) asks the last-resort reader of every block: a line that cannot hold two pairs (no two
    ':' or '=') is never parsed, so 24 MB of prose is refused in well under its old 6 s."""
    from forensics.io.adapters import kv_console

    line = b"the quick brown fox jumps over the lazy dog while nothing here is a metric\n"
    block = line * (65536 // len(line))
    calls = []
    real = kv_console.pairs
    try:
        kv_console.pairs = lambda text: calls.append(text) or real(text)  # type: ignore[assignment]
        assert not kv_console.detect(tmp_path, block)
    finally:
        kv_console.pairs = real  # type: ignore[assignment]
    assert calls == []  # no line of prose reached the parser


@pytest.mark.parametrize(("line", "expected"), [
    # ROLL's stdout tracker: the metrics object's keys unprefixed, as written (no lower-casing)
    ('[INFO] metrics_tag: {"step": 3, "metrics": {"actor/pg_loss": -0.1, "E2E latency": 2, "hist": [1, 2]}}',
     {"step": 3.0, "actor/pg_loss": -0.1, "E2E latency": 2.0}),
    # nested objects flattened; text, booleans, nulls and integers beyond a float are not pairs
    ('2025 INFO {"train": {"loss": 0.5, "ok": true, "name": "x", "n": null}, "big": ' + "9" * 400 + '}',
     {"train/loss": 0.5}),
    # a JSON list (a pipeline's examples) holds no pairs of the line; the pairs around a tail still count
    ('INFO [{"prompt": "2+3?", "response": "5"}]', {}),
    ('step=4 lr=1e-6 {"reward": 0.25}', {"reward": 0.25, "step": 4.0, "lr": 1e-6}),
    # an object nested deeper than a metric ever is: its deep numbers left out, never a RecursionError
    ('x ' + '{"a": ' * 990 + "1" + "}" * 990, {}),
])
def test_a_json_object_after_a_log_prefix(line: str, expected: dict[str, float]) -> None:
    from forensics.io.adapters.kv_console import pairs

    assert pairs(line) == expected

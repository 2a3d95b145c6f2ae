"""``forensics convert``: canonical Parquet that scans to the same findings as its source."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.io.convert import convert, read_convert_metadata

from .conftest import FIXTURES, RLDK, VERL, healthy_rows

FMT = FIXTURES / "formats"


def key(a) -> list:  # type: ignore[no-untyped-def]
    return sorted((f.rule, f.severity.value, f.first_step, f.last_step, f.onset_step, f.message) for f in a.findings)


@pytest.mark.parametrize("src", [VERL, RLDK, FMT / "trl_ppo_trainer_state.json", FMT / "tensorboard_restart",
                                 FMT / "trl_dpo_trainer_state.json", FMT / "deepspeed_chat_step3.log"],
                         ids=lambda p: p.name)
def test_round_trip_gives_the_same_findings(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    res = convert(src, out)
    a, b = scan_path(src), scan_path(out)
    assert key(a) == key(b)
    assert b.steps["rows"] == a.steps["rows"] == res.rows
    fr_a, fr_b = a.metrics_frame(), b.metrics_frame()
    for name in ("kl", "kl_seq", "entropy", "reward_mean", "grad_norm"):
        if name in fr_a:
            assert fr_b[name].tobytes() == fr_a[name].tobytes(), name


def test_parquet_has_canonical_columns_and_notes(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    convert(VERL, out)
    t = pq.read_table(out)
    assert t.schema.field("step").type.bit_width == 64
    assert {"entropy", "reward_mean", "policy_loss"} <= set(t.column_names)
    assert "actor/entropy" not in t.column_names
    assert t.num_rows == 105
    md = read_convert_metadata(out)
    assert md["format"] == "verl-console"
    assert md["column_mapping"]["mapping"]["actor/entropy"] == "entropy"
    assert any("lost precision" in n for n in md["read_report"]["notes"])
    # a value below print precision stays missing (null), not zero
    assert t.column("learning_rate").null_count == 105


def test_cli_convert(tmp_path: Path) -> None:
    out = tmp_path / "x" / "run.parquet"
    res = CliRunner().invoke(main, ["convert", str(FMT / "trl_ppo_trainer_state.json"), "-o", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "objective/kl -> kl_seq" in res.output and "30 rows" in res.output
    assert out.exists()


def test_cli_convert_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "junk.txt"
    p.write_text("hello\n")
    res = CliRunner().invoke(main, ["convert", str(p), "-o", str(tmp_path / "o.parquet")], catch_exceptions=False)
    assert res.exit_code == 3 and "Traceback" not in res.output
    assert not (tmp_path / "o.parquet").exists()
    res = CliRunner().invoke(main, ["convert", str(VERL), "--format", "hf-trainer-state", "-o",
                                    str(tmp_path / "o.parquet")], catch_exceptions=False)
    assert res.exit_code == 3 and "log_history" in res.output


def test_convert_and_scan_read_stdin_once_to_the_end(tmp_path: Path) -> None:
    data = "".join(json.dumps(r) + "\n" for r in healthy_rows(3000))
    res = CliRunner().invoke(main, ["convert", "-", "-o", str(tmp_path / "x.parquet")], input=data)
    assert res.exit_code == 0, res.output
    meta = read_convert_metadata(tmp_path / "x.parquet")
    assert meta["source"] == "-" and meta["read_report"]["rows_read"] == 3000
    assert pq.read_table(tmp_path / "x.parquet").num_rows == 3000
    res = CliRunner().invoke(main, ["scan", "-", "-o", str(tmp_path / "r"), "-q"], input=data)
    assert res.exit_code == 0, res.output
    analysis = json.loads((tmp_path / "r" / "analysis.json").read_text())
    assert analysis["steps"]["rows"] == 3000 and analysis["inputs"][0]["path"] == "-"


def test_convert_report_accounts_for_every_row(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 0, "kl": 1}\n{"kl": 2}\n{"step": "x", "kl": 1}\nnot json\n{"step": 3, "kl": 1}\n')
    r = convert(p, tmp_path / "o.parquet").report
    assert r.rows_read == 5 and r.rows_kept == 2 and r.rows_skipped == 3

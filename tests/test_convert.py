"""``forensics convert``: canonical Parquet that scans to the same findings as its source."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.io.convert import convert, read_convert_metadata

from .conftest import FIXTURES, RLDK, VERL

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

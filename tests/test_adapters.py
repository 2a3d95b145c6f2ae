"""Framework adapters: detection from content, known values in the right canonical columns,
step counts, units, notes, and clear errors on bad input."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics.analysis.engine import scan_path
from forensics.analysis.result import Analysis
from forensics.analysis.trackers import TRACKERS
from forensics.cli import main
from forensics.io.canonical import Canonicalizer
from forensics.io.formats import detect_format, open_source
from forensics.io.readers import ReadReport
from forensics.schema import canonical_name

from .conftest import FIXTURES, RLDK, VERL, healthy_rows, write_jsonl

FMT = FIXTURES / "formats"


def frame(a: Analysis) -> dict[int, dict[str, float]]:
    fr = a.metrics_frame()
    names = [k for k in fr if k != "step"]
    return {int(s): {k: float(fr[k][i]) for k in names} for i, s in enumerate(fr["step"])}


def mapping(a: Analysis) -> dict[str, str]:
    (m,) = a.mappings.values()
    return m.mapping


def notes(a: Analysis) -> str:
    return "\n".join(n for r in a.inputs for n in r.notes)


@pytest.mark.parametrize(("path", "fmt"), [
    (VERL, "verl-console"),
    (RLDK, "jsonl"),
    (FMT / "trl_grpo_trainer_state.json", "hf-trainer-state"),
    (FMT / "trl_ppo_trainer_state.json", "hf-trainer-state"),
    (FMT / "trl_dpo_trainer_state.json", "hf-trainer-state"),
    (FMT / "llamafactory_trainer_log.jsonl", "llamafactory"),
    (FMT / "verl_file_logger.jsonl", "verl-jsonl"),
    (FMT / "verl_v05_console.log", "verl-console"),
    (FMT / "wandb_chart_export.csv", "wandb-csv"),
    (FMT / "wandb_history.csv", "wandb-history"),
    (FMT / "tensorboard_restart", "tensorboard"),
    (next((FMT / "tensorboard_restart").rglob("*tfevents*")), "tensorboard"),
    (FMT / "openrlhf_console.log", "openrlhf-console"),
    (FMT / "deepspeed_chat_step3.log", "deepspeed-chat"),
    (FMT / "hf_console.log", "hf-console"),
])
def test_detected_from_content(path: Path, fmt: str) -> None:
    assert detect_format(path) == fmt


# --- real logs -----------------------------------------------------------------------------------

def test_verl_v04_console_real_log() -> None:
    a = scan_path(VERL)
    rows = frame(a)
    (r,) = a.inputs
    assert r.format == "verl-console" and r.rows_skipped == 0
    # 105 training steps (1..105); the step-0 validation line is kept apart
    assert sorted(rows) == list(range(1, 106))
    assert rows[1]["entropy"] == pytest.approx(0.336)
    assert rows[105]["entropy"] == pytest.approx(0.064)
    assert rows[1]["reward_mean"] == pytest.approx(0.259)
    assert rows[105]["reward_mean"] > rows[1]["reward_mean"]
    m = mapping(a)
    assert m["actor/entropy"] == "entropy" and m["critic/score/mean"] == "reward_mean"
    assert m["actor/pg_loss"] == "policy_loss"
    # 3-decimal rounding: actor/lr printed 0.000 is missing, not zero, and the report says why
    assert all(math.isnan(v["learning_rate"]) for v in rows.values())
    text = notes(a)
    assert "lost precision" in text and "actor/lr printed as 0.000 on 105 row(s)" in text
    assert "non-metric line(s) ignored" in text
    assert "validation-only line(s) kept out" in text and "step 0" in text
    assert "val-core/openai/gsm8k/reward/mean@1" in a.mappings[str(VERL)].unmapped


def test_verl_real_log_reports_entropy_decline() -> None:
    a = scan_path(VERL)
    found = [f for f in a.findings if f.rule.startswith("entropy.")]
    assert found, [f.rule for f in a.findings]
    assert found[0].evidence.get("source_keys", {}).get("entropy") == "actor/entropy"


def test_rldk_wide_jsonl() -> None:
    a = scan_path(RLDK)
    rows = frame(a)
    assert len(rows) == 1000
    assert mapping(a)["grad_norm_policy"] == "grad_norm"
    assert rows[0]["kl"] == pytest.approx(0.070969)
    assert rows[0]["grad_norm"] == pytest.approx(0.696225)


# --- trainer_state.json --------------------------------------------------------------------------

def test_trl_grpo_trainer_state() -> None:
    a = scan_path(FMT / "trl_grpo_trainer_state.json")
    rows = frame(a)
    assert sorted(rows) == list(range(5, 205, 5))  # 40 training rows, summary row left out
    assert rows[5]["kl"] == pytest.approx(0.0123)
    assert rows[5]["entropy"] == pytest.approx(0.875)
    m = mapping(a)
    assert m["reward"] == "reward_mean"
    assert m["rewards/accuracy_reward/mean"] == "reward/accuracy_reward"
    assert m["completions/mean_length"] == "response_length_mean"
    assert m["clip_ratio/region_mean"] == "clip_frac"
    # eval rows: their own columns at their step, never in the training metrics
    assert not math.isnan(rows[50]["eval_loss"]) and math.isnan(rows[45]["eval_loss"])
    assert rows[50]["loss"] != rows[50]["eval_loss"]
    text = notes(a)
    assert "final summary row" in text and "train_runtime=789.838" in text
    assert "4 evaluation row(s)" in text


def test_trl_ppo_units_seq_sums() -> None:
    a = scan_path(FMT / "trl_ppo_trainer_state.json")
    rows = frame(a)
    assert sorted(rows) == list(range(1, 31))
    assert rows[10]["kl_seq"] == pytest.approx(3.25)  # objective/kl is a per-sequence sum
    assert rows[10]["entropy_seq"] == pytest.approx(44.5)  # objective/entropy: summed NLL
    assert rows[10]["entropy"] == pytest.approx(1.25)  # policy/entropy_avg: per-token entropy
    assert "kl" not in rows[10]
    m = mapping(a)
    assert m["objective/kl"] == "kl_seq" and m["objective/entropy"] == "entropy_seq"
    assert m["objective/scores"] == "reward_mean" and m["objective/rlhf_reward"] == "reward_penalized"
    assert m["lr"] == "learning_rate"


def test_trl_dpo_nan_literal_is_a_logged_nan() -> None:
    a = scan_path(FMT / "trl_dpo_trainer_state.json")
    rows = frame(a)
    assert len(rows) == 20
    assert math.isnan(rows[70]["grad_norm"])
    nonfinite = [f for f in a.findings if f.rule == "grad.nonfinite"]
    if "grad_norms" in TRACKERS and nonfinite:
        assert nonfinite[0].onset_step == 70
    # implicit DPO rewards are not reward components
    assert not any(k.startswith("reward/") for k in rows[10])


def test_trainer_state_truncated_keeps_complete_rows(tmp_path: Path) -> None:
    text = (FMT / "trl_grpo_trainer_state.json").read_text()
    cut = tmp_path / "trainer_state.json"
    cut.write_text(text[: len(text) // 2])
    a = scan_path(cut)
    (r,) = a.inputs
    assert r.rows_kept > 5 and r.rows_skipped == 1
    assert r.issues[0].line > 1 and "invalid JSON" in r.issues[0].reason


@pytest.mark.parametrize("where", [0, 20, 39])
def test_trainer_state_bad_entry_costs_only_itself(tmp_path: Path, where: int) -> None:
    """An entry nested 5,000 deep, one with a 5,000-digit step and one with a bad value are
    each skipped with their line; every entry after them is read (first, middle or last)."""
    entries = [json.dumps({"step": s + 1, "loss": 0.5, "learning_rate": 1e-6, "grad_norm": 0.3})
               for s in range(40)]
    bad = ['{"step": 100, "x": ' + "[" * 5000 + "]" * 5000 + "}",
           '{"step": ' + "9" * 5000 + ', "loss": 0.1}', '{"step": 101, "loss": oops, "y": "}"}']
    entries[where:where] = bad
    p = tmp_path / "trainer_state.json"
    p.write_text('{"global_step": 40, "log_history": [\n' + ",\n".join(entries) + "\n]}\n")
    (r,) = scan_path(p).inputs
    assert (r.rows_read, r.rows_kept, r.rows_skipped) == (43, 40, 3)
    assert [i.line for i in r.issues] == [where + 2, where + 3, where + 4]


# --- JSONL families ------------------------------------------------------------------------------

def test_llamafactory_trainer_log() -> None:
    a = scan_path(FMT / "llamafactory_trainer_log.jsonl")
    rows = frame(a)
    assert sorted(rows) == list(range(10, 260, 10))
    assert rows[10]["loss"] == pytest.approx(0.852)
    assert rows[10]["elapsed_time"] == pytest.approx(464.0)
    assert mapping(a)["lr"] == "learning_rate"
    assert not math.isnan(rows[100]["eval_loss"]) and math.isnan(rows[90]["eval_loss"])


def test_verl_file_logger_jsonl() -> None:
    a = scan_path(FMT / "verl_file_logger.jsonl")
    rows = frame(a)
    assert sorted(rows) == list(range(1, 31))
    assert rows[5]["entropy"] == pytest.approx(0.358)
    assert math.isnan(rows[5]["grad_norm"])
    assert mapping(a)["actor/kl_loss"] == "kl"
    assert "validation-only" in notes(a)


# --- consoles ------------------------------------------------------------------------------------

def test_verl_v05_console_numpy_wrapped_values() -> None:
    a = scan_path(FMT / "verl_v05_console.log")
    rows = frame(a)
    assert sorted(rows) == list(range(1, 21))
    assert rows[7]["entropy"] == pytest.approx(0.1194)
    assert rows[7]["value_loss"] == pytest.approx(0.007)
    assert rows[7]["learning_rate"] == pytest.approx(1e-6)  # full precision: not flagged
    assert "lost precision" not in notes(a)


def test_verl_console_parser_edge_cases(tmp_path: Path) -> None:
    p = tmp_path / "verl.log"
    p.write_text(
        "+ python3 -m verl.trainer.main_ppo\n"
        "\x1b[36m(main_task pid=54569)\x1b[0m step:0 - val/test_score/gsm8k:0.100\n"
        "\x1b[36m(main_task pid=54569)\x1b[0m step:1 - critic/kl:0.000 - critic/kl_coeff:0.001 - "
        "actor/entropy_loss:1.234 - critic/lr(1e-4):0.100 - actor/lr(1e-4):0.100\n"
        "(main_task pid=54569) \rTraining Progress: 1/2\r step:2 - critic/kl:0.002 - actor/entropy_loss:1.200\n"
        "(main_task pid=54569) step:2 - val/test_score/gsm8k:0.300\n"
        "(main_task pid=54569) step:3 - \n")
    a = scan_path(p)
    rows = frame(a)
    assert sorted(rows) == [1, 2]
    assert rows[1]["entropy"] == pytest.approx(1.234)  # v0.1 actor/entropy_loss is the entropy
    assert math.isnan(rows[1]["kl"])  # 0.000 on a 3-decimal line: below print precision
    assert rows[2]["kl"] == pytest.approx(0.002)
    assert rows[1]["learning_rate"] == pytest.approx(1e-5)  # actor/lr(1e-4) is in units of 1e-4
    text = notes(a)
    assert "critic/kl printed as 0.000 on 1 row(s)" in text
    assert "step 0" in text and "val/test_score/gsm8k" in text
    (r,) = a.inputs
    assert r.rows_skipped == 1 and r.issues[0].line == 6


def test_openrlhf_console() -> None:
    a = scan_path(FMT / "openrlhf_console.log")
    rows = frame(a)
    assert sorted(rows) == list(range(1, 21))
    assert rows[4]["kl"] == pytest.approx(0.0123)
    m = mapping(a)
    assert m["actor_lr"] == "learning_rate" and m["critic_loss"] == "value_loss"
    assert m["reward"] == "reward_mean" and "return" in a.mappings[str(FMT / "openrlhf_console.log")].unmapped
    (r,) = a.inputs
    assert r.rows_skipped == 1 and r.issues[0].line == 23  # the truncated last line


def test_deepspeed_chat_console() -> None:
    a = scan_path(FMT / "deepspeed_chat_step3.log")
    rows = frame(a)
    assert sorted(rows) == list(range(16))  # two epochs of 8: step made global
    assert rows[2]["policy_loss"] == pytest.approx(0.1148681640625)
    assert rows[2]["reward_mean"] == pytest.approx(-0.61328125)
    assert rows[3]["ds_engine/overflows"] == 2 and rows[2]["ds_engine/overflows"] == 0
    assert rows[8]["epoch"] == 1 and rows[8]["ds_step"] == 0
    assert "OVERFLOW" in notes(a) and "restarts every epoch" in notes(a)


def test_hf_console() -> None:
    a = scan_path(FMT / "hf_console.log")
    rows = frame(a)
    assert len(rows) == 11
    assert rows[3]["kl"] == pytest.approx(0.0123)
    assert math.isnan(rows[7]["loss"])
    assert "carry no step" in notes(a)


# --- W&B and TensorBoard ---------------------------------------------------------------------------

def test_wandb_chart_export() -> None:
    a = scan_path(FMT / "wandb_chart_export.csv")
    rows = frame(a)
    assert len(rows) == 39 and 100 not in rows
    assert rows[50]["kl"] == pytest.approx(0.0123)
    assert mapping(a)["train/kl"] == "kl"
    assert rows[50]["train/kl__MAX"] == pytest.approx(0.0123 * 1.1, rel=1e-4)
    assert "'baseline'" in notes(a)


def test_wandb_history_uses_global_step_and_merges_eval_rows() -> None:
    a = scan_path(FMT / "wandb_history.csv")
    rows = frame(a)
    assert sorted(rows) == list(range(5, 155, 5))
    assert rows[50]["kl"] == pytest.approx(0.0123)
    assert rows[50]["eval/reward"] == pytest.approx(0.5)
    assert not math.isnan(rows[50]["loss"])
    m = mapping(a)
    assert m["train/reward"] == "reward_mean" and m["_timestamp"] == "timestamp"


def test_tensorboard_restart_dedup_keeps_latest_wall_time() -> None:
    d = FMT / "tensorboard_restart"
    a = scan_path(d)
    rows = frame(a)
    assert sorted(rows) == list(range(1, 41))
    assert rows[10]["kl"] == pytest.approx(0.011, rel=1e-6)  # only the first launch
    assert rows[25]["kl"] == pytest.approx(0.01 + 0.001 + 0.0025, rel=1e-6)  # the resumed launch wins
    assert rows[25]["reward_mean"] == pytest.approx(0.125, rel=1e-6)
    assert "2 event files merged" in notes(a) and "40 duplicate" in notes(a)
    assert mapping(a)["train/kl"] == "kl"


def test_tensorboard_corrupt_and_truncated_records(tmp_path: Path) -> None:
    src = next((FMT / "tensorboard_restart").rglob("*tfevents*"))
    data = bytearray(src.read_bytes())
    data[200] ^= 0xFF  # corrupt one record's payload
    p = tmp_path / "events.out.tfevents.1.host.1.0"
    p.write_bytes(bytes(data[:-7]))  # and cut the last record
    a = scan_path(p)
    (r,) = a.inputs
    assert r.rows_skipped == 2
    assert {i.reason.split(": ", 1)[1].split(" (")[0] for i in r.issues} >= {"corrupt record"}
    assert len(frame(a)) >= 28


# --- units, aliases, source keys --------------------------------------------------------------------

@pytest.mark.parametrize(("key", "canonical", "transform"), [
    ("objective/kl", "kl_seq", None),
    ("train/objective/kl", "kl_seq", None),
    ("objective/entropy", "entropy_seq", None),
    ("policy/entropy_avg", "entropy", None),
    ("ppo/policy/entropy", "entropy", None),
    ("policy/sqrt_kl", "kl_seq", "square"),
    ("policy/kl_per_token", "kl", "square"),
    ("actor/kl_loss", "kl", None),
    ("actor/reward_kl_penalty", "kl", None),
    ("critic/score/mean", "reward_mean", None),
    ("critic/rewards/mean", "reward_penalized", None),
    ("objective/rlhf_reward", "reward_penalized", None),
    ("actor/lr(1e-4)", "learning_rate", "times_1e-4"),
    ("train_rollouts/fraction_of_samples_properly_ended", "truncation_rate", "one_minus"),
    ("reward", "reward_mean", None),
    ("clip_ratio", "clip_frac", None),
])
def test_alias_units(key: str, canonical: str, transform: str | None) -> None:
    canon = Canonicalizer()
    canon.rename({key: 1.0}, ReadReport("t"))
    m = canon.mapping
    assert m.mapping[key] == canonical
    assert m.transforms.get(key) == transform


def test_not_mapped_where_meaning_differs() -> None:
    assert canonical_name("rewards/chosen_sum") is None  # KTO implicit reward, not a component
    assert canonical_name("rewards/margins")[0] == "pref_margin"  # DPO's implicit reward margin
    assert canonical_name("perf/total_num_tokens") is None  # per step, not cumulative
    assert canonical_name("eval/kl") is None


def test_evidence_names_the_source_key(tmp_path: Path) -> None:
    rows = healthy_rows(400, seed=3)
    for i, r in enumerate(rows):
        # a spike to ~0.6 nats/token (x12): a level that matters, not only a ratio
        r["objective/kl"] = r.pop("kl") * 200 * (12.0 if 300 <= i < 305 else 1.0)
    a = scan_path(write_jsonl(tmp_path / "ppo.jsonl", rows))
    spikes = [f for f in a.findings if f.rule.startswith("kl.")]
    assert spikes, [f.rule for f in a.findings]
    assert spikes[0].evidence["source_keys"] == {"kl": "objective/kl"}


# --- bad input ---------------------------------------------------------------------------------------

def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_forced_wrong_format_is_a_clear_error(tmp_path: Path) -> None:
    res = run("scan", str(FMT / "trl_grpo_trainer_state.json"), "--format", "verl-console", "-o", str(tmp_path))
    assert res.exit_code == 3 and "no usable rows" in res.output and "Traceback" not in res.output


def test_unknown_format_name_is_usage_error(tmp_path: Path) -> None:
    res = run("scan", str(VERL), "--format", "nope", "-o", str(tmp_path))
    assert res.exit_code == 2 and "verl-console" in res.output


def test_strict_mode_stops_at_first_bad_line(tmp_path: Path) -> None:
    res = run("scan", str(FMT / "openrlhf_console.log"), "--strict", "-o", str(tmp_path))
    assert res.exit_code == 3 and "openrlhf_console.log:23" in res.output


def test_empty_folder_is_not_a_log(tmp_path: Path) -> None:
    res = run("scan", str(tmp_path), "-o", str(tmp_path / "out"))
    assert res.exit_code == 3 and "Traceback" not in res.output


def test_every_adapter_reads_in_small_batches_the_same() -> None:
    for p in [FMT / "deepspeed_chat_step3.log", FMT / "trl_grpo_trainer_state.json", FMT / "wandb_history.csv"]:
        one = [b for b in open_source(p).batches(1)]
        big = [b for b in open_source(p).batches(10_000)]
        assert sum(len(b) for b in one) == sum(len(b) for b in big)
        assert np.array_equal(np.concatenate([b.lines for b in one]), big[0].lines)
        assert json.dumps(sorted(big[0].numeric)) == json.dumps(sorted({k for b in one for k in b.numeric}))


def test_wandb_history_jsonl(tmp_path: Path) -> None:
    import csv

    with open(FMT / "wandb_history.csv", newline="") as fh:
        recs = [{k: (float(v) if v else None) for k, v in r.items()} for r in csv.DictReader(fh)]
    p = tmp_path / "history.jsonl"
    p.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in recs))
    assert detect_format(p) == "wandb-history"
    rows = frame(scan_path(p))
    assert sorted(rows) == list(range(5, 155, 5))
    assert rows[50]["kl"] == pytest.approx(0.0123) and rows[50]["eval/reward"] == pytest.approx(0.5)


def test_tensorboard_tf2_tensor_scalars(tmp_path: Path) -> None:
    import struct

    from forensics.io.adapters.tensorboard import _pb_bytes, _pb_key, _pb_varint, encode_event, tfrecord

    def tensor_event(step: int, tag: str, value: float) -> bytes:
        tensor = _pb_key(1, 0) + _pb_varint(1) + _pb_bytes(4, struct.pack("<f", value))  # DT_FLOAT content
        val = _pb_bytes(1, tag.encode()) + _pb_bytes(8, tensor)
        return (_pb_key(1, 1) + struct.pack("<d", 1.0 + step) + _pb_key(2, 0) + _pb_varint(step)
                + _pb_bytes(5, _pb_bytes(1, val)))

    p = tmp_path / "events.out.tfevents.1.host.1.0"
    p.write_bytes(tfrecord(encode_event(1.0, file_version="brain.Event:2"))
                  + b"".join(tfrecord(tensor_event(s, "actor/entropy", 0.5 - 0.01 * s)) for s in range(1, 6)))
    rows = frame(scan_path(p))
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert rows[3]["entropy"] == pytest.approx(0.47, rel=1e-6)


# --- hostile input (issue 11) -------------------------------------------------------------------

def test_verl_console_tensor_values_and_bad_values_located(tmp_path: Path) -> None:
    p = tmp_path / "verl.log"
    p.write_text("step:1 - actor/entropy:tensor(0.5, device='cuda:0') - actor/pg_loss:oops - actor/lr:1e-06\n"
                 "step:2 - actor/entropy:tensor(0.4, device='cuda:0') - actor/lr:1e-06\n"
                 "step:" + "9" * 5000 + " - actor/entropy:0.3\n")
    src = open_source(p)
    raws = list(src.batches(100))
    assert raws[0].numeric["actor/entropy"].tolist() == [0.5, 0.4]
    rep = src.report
    assert rep.values_set_aside == {"actor/pg_loss": 1} and rep.value_issues[0].line == 1
    assert rep.skipped == {"step is not an integer": 1} and "beyond int64" in rep.issues[0].reason


def test_wandb_nan_step_is_a_located_skip(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("_step,_runtime,loss\n0,1.0,0.5\nnan,2.0,0.4\ninf,3.0,0.3\n3,4.0,0.2\n")
    a = scan_path(p)
    rep = a.inputs[0]
    assert a.steps["rows"] == 2 and rep.skipped == {"step is not an integer": 2}
    assert [i.line for i in rep.issues] == [3, 4]


def test_tensorboard_record_lengths_checked_before_reading(tmp_path: Path) -> None:
    import struct

    from forensics.io.adapters.tensorboard import encode_event, masked_crc32c, tfrecord

    good = b"".join(tfrecord(encode_event(1.0 + s, s, {"loss": 0.5})) for s in range(1, 4))
    for length in (2**40, 2**63):
        head = struct.pack("<Q", length)
        p = tmp_path / f"events.out.tfevents.{length}"
        p.write_bytes(good + head + struct.pack("<I", masked_crc32c(head)) + b"abc")
        src = open_source(p)
        assert sum(len(r) for r in src.batches(100)) == 3
        assert src.report.skipped in ({"truncated record": 1}, {"corrupt record": 1})


def _tensor_event(step: int, tensor: bytes) -> bytes:
    from forensics.io.adapters.tensorboard import _pb_bytes, _pb_key, _pb_varint

    value = _pb_bytes(1, b"x") + _pb_bytes(8, tensor)
    return (_pb_key(1, 1) + struct.pack("<d", 1.0) + _pb_key(2, 0) + _pb_varint(step)
            + _pb_bytes(5, _pb_bytes(1, value)))


def test_tensorboard_tensor_scalars_of_every_dtype_match_tensorboard() -> None:
    """Our decoder against tensorboard's own (make_tensor_proto / make_ndarray), for every
    numeric dtype, in tensor_content and in the typed value fields."""
    tb = pytest.importorskip("tensorboard.util.tensor_util")
    from forensics.io.adapters.tensorboard import _tensor_scalar

    for dtype in ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                  "uint32", "uint64", "bool"]:
        for value in ([1.5, -2.25, 0.0, 65504.0] if dtype.startswith("float") else [0, 1, 7, 100]):
            if dtype == "bool":
                value = bool(value)
            elif dtype.startswith("int") or dtype.startswith("uint"):
                value = int(value) * (-1 if dtype.startswith("int") else 1)
            arr = np.array(value, dtype=dtype)
            proto = tb.make_tensor_proto(arr)
            for p in (proto, tb.make_tensor_proto(arr.reshape(1))):
                try:  # tensorboard's reader, where it decodes the dtype (not uint32/uint64 value fields)
                    assert float(tb.make_ndarray(p).reshape(-1)[0]) == float(arr), (dtype, value)
                except TypeError:
                    pass
                assert _tensor_scalar(p.SerializeToString()) == float(arr), (dtype, value, p)
            content = type(proto)()
            content.CopyFrom(proto)
            content.tensor_content = arr.tobytes()
            for f in ("half_val", "float_val", "double_val", "int_val", "int64_val", "bool_val", "uint32_val",
                      "uint64_val"):
                content.ClearField(f)
            assert float(tb.make_ndarray(content)) == float(arr)
            assert _tensor_scalar(content.SerializeToString()) == float(arr), dtype


def test_tensorboard_half_scalar_is_read_not_skipped(tmp_path: Path) -> None:
    """A half-precision tensor scalar (half_val holds its 16 bits: 1.5 is 15872) decodes as 1.5."""
    from forensics.io.adapters.tensorboard import _pb_key, _pb_varint, tfrecord

    half = _pb_key(1, 0) + _pb_varint(19) + _pb_key(13, 0) + _pb_varint(15872)
    p = tmp_path / "events.out.tfevents.1"
    p.write_bytes(b"".join(tfrecord(_tensor_event(s, half)) for s in range(1, 4)))
    src = open_source(p)
    raws = list(src.batches(10))
    assert raws[0].numeric["x"].tolist() == [1.5, 1.5, 1.5]
    assert not any("non-scalar" in n for n in src.report.notes)

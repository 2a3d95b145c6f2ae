"""Issue 40: every layout a trainer writes is read with its steps and keys, and the read report
names the reader and what it skipped.

The keys of ROLL and open-instruct are checked against the meanings docs/trainer-keys.md gives
them (from the trainers' public source); a ROLL run exported from W&B is read with its names.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from forensics import scan_path
from forensics.analysis.result import Analysis
from forensics.io.readers.base import ReadReport
from forensics.schema import ColumnMapping, canonical_name

ROLL_KEYS = {
    # read already under veRL's names, same meaning in ROLL's metrics_manager.py / actor_worker.py
    "critic/score/mean": "reward_mean", "critic/advantages/mean": "advantage_mean", "actor/pg_loss": "policy_loss",
    "actor/kl_loss": "kl", "actor/lr": "learning_rate", "critic/grad_norm": "grad_norm_value",
    # ROLL's own names
    "actor/approxkl": "approx_kl", "actor/clipfrac": "clip_frac", "actor/total_loss": "loss",
    "actor_train/grad_norm": "grad_norm", "critic/entropy/mean": "entropy",
    "token/response_length/mean": "response_length_mean", "tokens/response_length/max": "response_length_max",
}
OPEN_INSTRUCT_KEYS = {
    "objective/kl_avg": "kl", "objective/kl0_avg": "kl", "loss/total_avg": "loss", "scores": "reward_mean",
    "val/sequence_lengths": "response_length_mean", "val/sequence_lengths_max": "response_length_max",
    "val/advantages_mean": "advantage_mean", "val/advantages_max": "advantage_max",
}
#: keys whose unit or timing differs from any canonical name: carried through under their own names
CARRIED = ("actor/policykl", "actor/ppo_ratio_clipfrac", "time/step_total", "system/tps", "math_rule/critic/kl",
           "objective/kl1_avg", "objective/kl2_avg", "val/stop_rate")


@pytest.mark.parametrize("table", [ROLL_KEYS, OPEN_INSTRUCT_KEYS], ids=["roll", "open-instruct"])
def test_trainer_keys_map_as_their_sources_define_them(table: dict[str, str]) -> None:
    assert {k: (canonical_name(k) or ("",))[0] for k in table} == table


def test_keys_of_another_unit_are_carried_through() -> None:
    assert {k: canonical_name(k) for k in CARRIED} == dict.fromkeys(CARRIED)


def test_a_roll_run_exported_from_wandb_is_read_with_its_names(tmp_path: Path) -> None:
    """A W&B history export of a ROLL RLVR run (``_step`` plus ROLL's keys): the policy signals map,
    the one-step-late step time and the domain-prefixed KL are carried through."""
    rng = np.random.default_rng(40)
    keys = ["_step", "critic/score/mean", "actor/kl_loss", "actor_train/grad_norm", "critic/entropy/mean",
            "token/response_length/mean", "actor/approxkl", "actor/clipfrac", "actor/total_loss", "time/step_total",
            "math_rule/critic/kl"]
    path = tmp_path / "roll_history.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for s in range(60):
            w.writerow([s, 0.3 + 0.005 * s, 0.001, 0.2 + rng.normal(0, 0.01), 0.6 - 0.001 * s, 400 + s, 1e-4, 0.01,
                        rng.normal(0, 0.01), 120.0, 0.002])
    a = scan_path(path)
    m = a.mappings[str(path)]
    assert {k: m.mapping[k] for k in keys[1:9]} == {
        "critic/score/mean": "reward_mean", "actor/kl_loss": "kl", "actor_train/grad_norm": "grad_norm",
        "critic/entropy/mean": "entropy", "token/response_length/mean": "response_length_mean",
        "actor/approxkl": "approx_kl", "actor/clipfrac": "clip_frac", "actor/total_loss": "loss"}
    assert {"time/step_total", "math_rule/critic/kl"} <= set(m.unmapped)
    assert (a.steps["first"], a.steps["last"], a.steps["rows"]) == (0, 59, 60)


# --- one log per layout (fixtures/layouts/README.md) ---------------------------------------------

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "layouts"


def test_a_real_hf_console_excerpt_is_read_with_its_steps_and_keys() -> None:
    """JuncyLu/trl_DAPO's console (Apache-2.0): six dicts carry no step; the progress bar before each
    says it is step 10, 20, ... 60. The length collapse of the full log is already in its second
    row (53.35 -> 2.6 tokens)."""
    path = LAYOUTS / "trl_dapo_console_excerpt.md"
    a = scan_path(path)
    r = a.inputs[0]
    assert (r.format, r.rows_read, r.rows_kept) == ("hf-console", 6, 6)
    assert (a.steps["first"], a.steps["last"]) == (10, 60)
    m = a.mappings[str(path)].mapping
    assert {m[k] for k in ("completions/mean_length", "completions/clipped_ratio", "reward", "entropy",
                           "grad_norm")} == {"response_length_mean", "truncation_rate", "reward_mean", "entropy",
                                             "grad_norm"}
    frame = a.metrics_frame()
    assert [round(float(x), 2) for x in frame["response_length_mean"]] == [53.35, 2.6, 2.45, 2.25, 2.4, 2.6]
    assert "global step 10*i, from the training progress bar" in " ".join(r.notes)


def _read(name: str, reader: str, rows: int) -> tuple[Analysis, ReadReport, ColumnMapping]:
    """A layout fixture scanned: read by ``reader``, ``rows`` rows, steps 1..rows."""
    path = LAYOUTS / name
    a = scan_path(path)
    r = a.inputs[0]
    assert (r.format, r.rows_read, a.steps["first"], a.steps["last"]) == (reader, rows, 1, rows)
    return a, r, a.mappings[str(path)]


def test_a_custom_loop_console_is_read_and_its_report_says_which_lines_it_took() -> None:
    _, r, m = _read("custom_loop_console.log", "kv-console", 30)
    assert {m.mapping[k] for k in ("kl_ref", "token_entropy")} == {"kl", "entropy"}
    assert {"reward_data/total_reward", "rl_loss", "l2_norm"} <= set(m.unmapped)
    notes = r.notes
    assert notes[0] == ("read as a console of name: value pairs (the reader of last resort; the step from the "
                        "counter 'rollout batch', rows from lines 4-37)")
    assert "1 line(s) of pairs before the first step counter skipped (a printed config or banner; line 2)" in notes
    # the eval lines repeat the step's keys without its counter: skipped as such, not as lines without pairs
    assert ("3 line(s) of pairs without the step counter whose keys the step already has skipped "
            "(lines 14, 26, 38)") in notes
    assert "5 line(s) without two numeric pairs skipped (not rows, not errors; lines 1, 3, 15, 27, 39)" in notes


def test_column_major_scalars_are_read_and_their_report_names_the_reader() -> None:
    a, r, m = _read("nemo_rl_scalars.json", "column-json", 40)
    assert {m.mapping[k] for k in ("train/reward", "train/kl_penalty", "train/grad_norm", "train/lr")} == {
        "reward_mean", "kl", "grad_norm", "learning_rate"}
    assert r.notes == ["read as column-major metric JSON (metric -> {step: value}): 8 metric(s), 40 step(s), "
                       "the steps from the keys"]
    # validation/accuracy is logged every 10th step: present there, missing (not zero) elsewhere
    assert int(np.isfinite(a.metrics_frame()["validation/accuracy"]).sum()) == 4


# --- the read report, as a user sees it ------------------------------------------------------------

def _scan(args: list[str]) -> tuple[int, str]:
    from click.testing import CliRunner

    from forensics.cli import main

    res = CliRunner().invoke(main, ["scan", *args], catch_exceptions=False)
    return res.exit_code, res.output


def test_the_read_report_of_column_json_names_what_it_set_aside(tmp_path: Path) -> None:
    """A map of strings, a map keyed by words, a config value and a list among genuine metrics:
    the terminal's read report and analysis.json both name the reader and each thing left out."""
    import json

    doc = {"train/reward": {str(s): 0.1 * s for s in range(1, 21)},
           "train/loss": {str(s): (0.5 if s % 5 else [s]) for s in range(1, 21)},
           "train/phase": {str(s): "warmup" for s in range(1, 21)},
           "train/by_name": {"alice": 0.3, "bob": 0.4},
           "config": "grpo.yaml"}
    path = tmp_path / "scalars.json"
    path.write_text(json.dumps(doc, indent=2))
    code, out = _scan([str(path), "-o", str(tmp_path / "out")])
    assert code == 0
    head = out.splitlines()[:6]
    assert head[0] == f"{path} [column-json]: 20 rows read, 20 kept"
    expected = [
        "read as column-major metric JSON (metric -> {step: value}): 2 metric(s), 20 step(s), the steps from the keys",
        "1 key(s) whose value is not a map of step to number set aside: config",
        "2 map(s) with no number under an integer step set aside: train/phase, train/by_name",
        "2 value(s) under a key that is not an integer step skipped, under train/by_name",
        "values set aside: 4 value(s) that do not fit their column read as missing, rows kept: train/loss (4) "
        "(first: line 5: train/loss: step 5: a list, not a number)",
    ]
    assert head[1:6] == [f"  note: {n}" for n in expected]
    report = json.loads((tmp_path / "out" / "analysis.json").read_text())["inputs"][0]
    assert (report["format"], report["notes"], report["values_set_aside_by_key"]) == (
        "column-json", expected, {"train/loss": 4})


@pytest.mark.parametrize(("text", "claimed"), [
    # nulls first: the head is not this layout's; read as JSON lines, no usable row
    ('{\n  "train/reward": {\n    "1": null,\n    "2": null\n  }\n}\n', False),
    # a number first, but under a step beyond int64: claimed, then refused as holding no step
    ('{\n  "train/reward": {\n    "9999999999999999999": 0.5\n  }\n}\n', True),
])
def test_json_with_no_number_under_a_step_is_refused(tmp_path: Path, text: str, claimed: bool) -> None:
    from forensics.io.adapters.column_json import detect

    path = tmp_path / "m.json"
    path.write_text(text)
    assert detect(path, path.read_bytes()) is claimed
    code, out = _scan([str(path), "-q", "-o", str(tmp_path / "out")])
    assert code == 3 and "Traceback" not in out
    if claimed:
        assert "none of which holds a number keyed by an integer step" in out


def test_a_fuzz_slice_of_json_that_is_not_metrics() -> None:
    """tests/fuzz/json_docs.py at a small count (``make fuzz`` runs it at full size): configs,
    package.json, tsconfig, JSON-LD, notebooks, GeoJSON, tables keyed by names, huge arrays, deep
    nesting and column-json lookalikes, each with the one right exit code, never a traceback."""
    import random

    from .fuzz import json_docs
    from .fuzz.harness import FAILURES, run_cases

    cases = list(json_docs.generate(random.Random(40), 27))
    assert {c.expect_exit for c in cases} == {0, 1, 3}  # every family of the module is in the slice
    results = list(run_cases(cases, workers=2, timeout=120))
    assert [(r.outcome, r.case.name, r.detail) for r in results if r.outcome in FAILURES] == []


def test_a_roll_stdout_console_is_read_with_its_steps_and_keys() -> None:
    """ROLL's stdout tracker: one JSON object a step after a log prefix, its metrics unprefixed;
    the pipeline's examples (a JSON list) and its bare metrics dump are not rows."""
    path = LAYOUTS / "roll_stdout_console.log"
    a = scan_path(path)
    r = a.inputs[0]
    assert (r.format, r.rows_read, a.steps["first"], a.steps["last"]) == ("kv-console", 25, 0, 24)
    m = a.mappings[str(path)]
    assert {k: m.mapping[k] for k in ("critic/score/mean", "actor/kl_loss", "actor_train/grad_norm",
                                      "token/response_length/mean", "actor/approxkl", "critic/entropy/mean")} == {
        "critic/score/mean": "reward_mean", "actor/kl_loss": "kl", "actor_train/grad_norm": "grad_norm",
        "token/response_length/mean": "response_length_mean", "actor/approxkl": "approx_kl",
        "critic/entropy/mean": "entropy"}
    assert {"time/step_total", "math_rule/critic/kl", "actor/policykl"} <= set(m.unmapped)
    assert ("5 line(s) of pairs without the step counter whose keys the step already has skipped "
            "(lines 6, 28, 50, 72, 94)") in r.notes
    assert int(np.isfinite(a.metrics_frame()["entropy"]).sum()) == 25

"""Column-major metric JSON (forensics.io.adapters.column_json): NeMo-RL's TensorBoard scalars as
one object of metric -> {step: value}, read as a step log with its steps from the keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main
from forensics.io.formats import detect_format


def nemo_rl_json(path: Path, n: int = 120, every: int = 1) -> Path:
    """A NeMo-RL GRPO run's scalars: the KL runs away from step 60, the reward stalls."""
    rng = np.random.default_rng(40)
    steps = range(1, n + 1)
    series = {
        "train/reward": {str(s): round(0.3 + 0.001 * s + float(rng.normal(0, 0.02)), 5) for s in steps},
        "train/loss": {str(s): round(float(rng.normal(0, 0.01)), 5) for s in steps},
        "train/grad_norm": {str(s): round(0.3 * float(np.exp(rng.normal(0, 0.1))), 5) for s in steps},
        "train/kl_penalty": {str(s): round(0.01 if s < 60 else 0.01 + 0.03 * (s - 60), 5) for s in steps},
        "train/lr": {str(s): 1e-6 for s in steps},
        "train/token_mult_prob_error": {str(s): 1.01 for s in steps},
        "train/advantages/mean": {str(s): 0.0 for s in steps if s % every == 0},
        "config": "grpo_math_1B.yaml",  # not a metric: set aside with a note
    }
    path.write_text(json.dumps(series, indent=2))
    return path


def test_column_major_metric_json_is_a_step_log(tmp_path: Path) -> None:
    log = nemo_rl_json(tmp_path / "metrics.json", every=10)
    assert detect_format(log) == "column-json"
    a = scan_path(log)
    r = a.inputs[0]
    assert (r.format, r.rows_read, a.steps["first"], a.steps["last"]) == ("column-json", 120, 1, 120)
    mapping = a.mappings[str(log)].mapping
    assert {mapping[k] for k in ("train/reward", "train/kl_penalty", "train/grad_norm", "train/lr",
                                 "train/advantages/mean")} == {"reward_mean", "kl", "grad_norm", "learning_rate",
                                                               "advantage_mean"}
    assert "train/token_mult_prob_error" in a.mappings[str(log)].unmapped  # carried through
    notes = " ".join(r.notes)
    assert "1 key(s) whose value is not a map of step to number set aside: config" in notes
    assert "read as column-major metric JSON (metric -> {step: value}): 7 metric(s), 120 step(s)" in notes
    # a metric logged every 10th step: present there, missing elsewhere (not zero)
    frame = a.metrics_frame()
    assert np.isfinite(frame["advantage_mean"]).sum() == 12
    kl = [f for f in a.findings if f.rule.startswith("kl.") and f.severity.value != "info"]
    assert kl and min(f.onset_step for f in kl) >= 60


def test_files_that_only_look_alike_are_refused_or_read_elsewhere(tmp_path: Path) -> None:
    # a JSON object of configs (no step-keyed maps): not this layout
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model": {"name": "x", "size": 7}, "lr": 1e-6}, indent=2))
    assert CliRunner().invoke(main, ["scan", str(cfg), "-q", "-o", str(tmp_path / "o")]).exit_code == 3
    # a map whose keys are not steps
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train/reward": {"1": 0.5, "two": 0.6, "3": 0.7}}))
    a = scan_path(bad)
    assert a.steps["rows"] == 2 and "1 value(s) under a key that is not an integer step skipped" in " ".join(
        a.inputs[0].notes)


def test_the_keys_of_nemo_rl_and_open_instruct_map_as_their_sources_define_them() -> None:
    """docs/trainer-keys.md: each key's canonical name, and the per-sequence/per-token split kept
    (open-instruct's objective/kl_avg is per token, TRL's objective/kl a per-sequence sum)."""
    from forensics.schema import canonical_name

    expected = {"train/kl_penalty": "kl", "train/reward": "reward_mean", "train/advantages/max": "advantage_max",
                "objective/kl_avg": "kl", "objective/kl": "kl_seq", "loss/policy_avg": "policy_loss",
                "iteration": "step", "gnorm": "grad_norm", "kl_divergence": "kl"}
    assert {k: (canonical_name(k) or ("",))[0] for k in expected} == expected
    for carried in ("train/token_mult_prob_error", "train/gen_kl_error", "objective/kl2_avg"):
        assert canonical_name(carried) is None

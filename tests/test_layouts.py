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
from forensics.schema import canonical_name

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

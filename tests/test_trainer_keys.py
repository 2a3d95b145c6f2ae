"""Trainer config keys are declared once (``trainer_keys.CONFIG_KEYS``): the run context, the
online health check and the recommendations all read that one table."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.analysis import trainer_keys
from forensics.analysis.context import infer_context
from forensics.analysis.trackers.health_check import HealthCheck
from forensics.analysis.trainer_keys import CONFIG_KEYS, ConfigKey, trainer_for


def _declining_check(config: dict) -> list[dict]:
    """The adjustments of a window whose reward fell (the health check's doctest run)."""
    hc = HealthCheck(config=config)
    rng = np.random.default_rng(0)
    for _ in range(5):
        hc.after_epoch({"reward": 0.5 + rng.normal(0, 0.01, 50), "loss": 1 + rng.normal(0, 0.01, 50)})
    rep = hc.after_epoch({"reward": 0.2 + rng.normal(0, 0.01, 50), "loss": 1 + rng.normal(0, 0.01, 50)})
    assert rep.issues == ["reward_declining"]
    return rep.adjustments


def test_a_key_added_to_the_table_is_seen_by_every_user(monkeypatch: pytest.MonkeyPatch) -> None:
    new_verl = ConfigKey("actor_rollout_ref.actor.optim.new_lr", ("verl",))
    new_generic = ConfigKey("my_lr", ("generic",))
    monkeypatch.setitem(CONFIG_KEYS, "learning_rate", (new_verl, *CONFIG_KEYS["learning_rate"], new_generic))
    # the run context, reading a trainer's printed config
    ctx = infer_context(["reward"], "verl-console", {"actor_rollout_ref.actor.optim.new_lr": 3e-6})
    assert ctx.values["learning_rate"] == 3e-6
    assert ctx.sources["learning_rate"].endswith("actor_rollout_ref.actor.optim.new_lr=3e-06")
    # the online health check, finding the key in the config it was given
    (adj,) = _declining_check({"my_lr": 1e-5})
    assert (adj["parameter"], adj["config_key"], adj["new"]) == ("learning_rate", "my_lr", 8e-06)
    # the recommendations, writing the trainer's key (its first) and run.json's config key
    assert trainer_for(["verl-console"], "ppo").key("learning_rate") == "actor_rollout_ref.actor.optim.new_lr"
    assert trainer_for(["jsonl"], "ppo", run_config={"my_lr": 1e-3}).key("learning_rate") == "config.my_lr"


def test_without_the_added_keys_nobody_sees_them() -> None:
    ctx = infer_context(["reward"], "verl-console", {"actor_rollout_ref.actor.optim.new_lr": 3e-6})
    assert "learning_rate" not in ctx.values
    (adj,) = _declining_check({"my_lr": 1e-5})
    assert adj["config_key"] is None
    assert trainer_for(["jsonl"], "ppo", run_config={"my_lr": 1e-3}).key("learning_rate") is None


def test_no_other_module_spells_a_trainer_key_table() -> None:
    """The readers hold no key lists of their own (a veRL key appears in trainer_keys only)."""
    import inspect

    from forensics.analysis import context
    from forensics.analysis.diagnosis import recommendations
    from forensics.analysis.trackers import health_check

    for module in (context, health_check, recommendations):
        assert "actor_rollout_ref.actor.grad_clip" not in inspect.getsource(module), module.__name__
    assert "actor_rollout_ref.actor.grad_clip" in inspect.getsource(trainer_keys)

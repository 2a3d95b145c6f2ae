"""The run context read from the logs: algorithm, family and the trainer's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import scan_path
from forensics.analysis.context import infer_context
from forensics.cli import main
from forensics.io.adapters.run_config import ConfigCapture

from .conftest import RLDK, VERL

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def test_verl_console_config_dump_gives_the_context() -> None:
    a = scan_path(VERL)
    m = a.meta
    assert (m.algorithm, m.family) == ("gpg", "group")
    assert (m.learning_rate, m.max_grad_norm, m.clip_range) == (1e-6, 1.0, 0.2)
    assert (m.max_length, m.group_size, m.kl_penalty) == (1024, 5, "none")
    ctx = a.to_dict()["run_context"]
    assert "algorithm.adv_estimator=gpg" in ctx["algorithm"]["from"]
    assert "config printed at line 383" in ctx["learning_rate"]["from"]
    assert a.inputs[0].run_config["trainer.total_epochs"] == 15


@pytest.mark.parametrize(("name", "algorithm", "family", "kl_penalty"), [
    ("trl_grpo_trainer_state.json", "grpo", "group", "loss"),
    ("trl_ppo_trainer_state.json", "ppo", "critic", "reward"),
    ("trl_dpo_trainer_state.json", "dpo", "preference", None),
])
def test_trl_algorithm_from_the_key_set(name: str, algorithm: str, family: str,
                                        kl_penalty: str | None) -> None:
    a = scan_path(FORMATS / name)
    assert (a.meta.algorithm, a.meta.family, a.meta.kl_penalty) == (algorithm, family, kl_penalty)
    assert "key set" in a.to_dict()["run_context"]["algorithm"]["from"]


def test_rldk_group_size_says_group_method() -> None:
    a = scan_path(RLDK)
    assert a.meta.algorithm is None and a.meta.family == "group"


def test_run_json_wins_over_inference(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps.jsonl").write_text("".join(
        json.dumps({"step": i, "loss": 0.5, "rewards/margins": 0.1 * i}) + "\n" for i in range(5)))
    (run / "run.json").write_text(json.dumps({"algorithm": "ipo", "learning_rate": 5e-7}))
    a = scan_path(run)
    ctx = a.to_dict()["run_context"]
    assert a.meta.algorithm == "ipo" and ctx["algorithm"]["from"] == "run.json"
    assert ctx["learning_rate"] == {"value": 5e-7, "from": "run.json"}


def test_unknown_algorithm_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "f.toml"
    cfg.write_text('[run]\nalgorithm = "grpoo"\n')
    res = CliRunner().invoke(main, ["scan", str(RLDK), "--config", str(cfg), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "grpoo" in res.output and "valid:" in res.output and "grpo" in res.output


def test_config_capture_reads_a_dump_and_overrides() -> None:
    cap = ConfigCapture()
    lines = ["++ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.max_response_length=512",
             "noise",
             "{'algorithm': {'adv_estimator': 'gae',",
             "               'kl_ctrl': {'kl_coef': 0.05, 'type': 'adaptive', 'target_kl': 0.1,",
             "                           'horizon': 10000}, 'use_kl_in_reward': True},",
             " 'data': {'max_response_length': 'abc' 'def'}}",
             "after"]
    consumed = [cap.feed(i + 1, text) for i, text in enumerate(lines)]
    assert consumed == [True, False, True, True, True, True, False]
    cfg = cap.config
    assert cfg["algorithm.adv_estimator"] == "gae"  # the printed dump wins over the overrides
    assert cfg["data.max_response_length"] == "abcdef"
    ctx = infer_context([], "verl-console", cfg, cap.origin)
    assert ctx.values["algorithm"] == "ppo" and ctx.values["kl_penalty"] == "reward"
    assert ctx.values["kl_controller"] == "adaptive" and ctx.values["kl_target"] == 0.1


def test_a_broken_dump_is_ignored_not_fatal() -> None:
    cap = ConfigCapture()
    for i, text in enumerate(["{'algorithm': {'x': __import__('os')}}"]):
        cap.feed(i, text)
    assert cap.config == {}


def test_model_size_from_model_files_and_config_keys(tmp_path: Path) -> None:
    """The model's size from config.json (not from a config.json that is no model's, nor from a
    broken one), LoRA from adapter_config.json or a LoRA rank of 0 or more."""
    from forensics.io.adapters.model_config import read_model_config

    assert read_model_config(tmp_path) == ({}, "")
    (tmp_path / "config.json").write_text('{"learning_rate": 1e-5}')  # a trainer's, not a model's
    assert read_model_config(tmp_path) == ({}, "")
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ')  # cut short
    assert read_model_config(tmp_path) == ({}, "")
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
        "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
        "hidden_act": "silu", "tie_word_embeddings": True}))
    found, origin = read_model_config(tmp_path)
    assert origin.endswith("config.json")
    ctx = infer_context([], "hf-trainer-state", found, origin)
    assert 4.8e8 < ctx.values["model_params"] < 5.0e8 and ctx.values["lora"] is False  # Qwen2.5-0.5B: 494M
    verl = infer_context([], "verl-console", {"actor_rollout_ref.model.path": "~/models/Qwen2.5-3B",
                                              "actor_rollout_ref.model.lora_rank": 0})
    assert verl.values["model_params"] == 3e9 and verl.values["lora"] is False


def test_the_key_set_evidence_names_the_logs_first_reward_function() -> None:
    """The evidence is the same in every process: it names the log's first per-function reward
    key, not whichever a set of the keys gave first (that changed with the string hashing)."""
    base = ["completions/mean_length", "reward", "reward_std"]
    funcs = ["rewards/soft_format_reward_func/mean", "rewards/correctness_reward_func/mean"]
    for order in (funcs, funcs[::-1]):
        ctx = infer_context([*base, *order], "hf-trainer-state")
        assert f"{order[0]}: grpo" in ctx.sources["algorithm"], ctx.sources["algorithm"]

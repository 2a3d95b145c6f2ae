"""Every real log layout is read, with its real steps, and gives the run context.

The real logs live in ``../shared/real-logs`` (most have no licence that allows copying them
here); tests that need one skip when it is absent. Layouts with no real log at hand (veRL 0.1's
dict dump, veRL 0.2's multi-line command, Tinker's metrics.jsonl, LLaMA-Factory preference runs)
are small fixtures written from what those trainers print.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path

import pytest

from forensics.analysis.context import infer_context
from forensics.analysis.engine import scan_path
from forensics.analysis.result import Analysis
from forensics.io.adapters.hf_console import StepSurvey, step_interval
from forensics.io.formats import detect_format, open_source

from .conftest import FIXTURES, ROOT

SHARED = ROOT.parent / "shared" / "real-logs"
CALIBRATION = SHARED / "calibration"


def real(name: str) -> Path:
    path = CALIBRATION / name
    if not path.exists():
        pytest.skip(f"real log {name} not found under {CALIBRATION}")
    return path


def column(a: Analysis, name: str) -> dict[int, float]:
    fr = a.metrics_frame()
    return {int(s): float(v) for s, v in zip(fr["step"], fr[name], strict=True)}


def notes(a: Analysis) -> str:
    return "\n".join(n for r in a.inputs for n in r.notes)


def context_of(path: Path) -> tuple[str | None, str | None, str]:
    """The inferred (algorithm, family, evidence) of a log: its first row's keys and printed config,
    read without running the trackers."""
    source = open_source(path)
    keys: list[str] = []
    for batch in source.batches(100_000):
        if not keys and len(batch):
            keys = [k for k in batch.numeric if not (k in batch.missing and batch.missing[k][0])]
    r = source.report
    ctx = infer_context(keys, r.format, r.run_config, r.run_config_origin)
    return ctx.values.get("algorithm"), ctx.values.get("family"), ctx.sources.get("algorithm", "")


# --- DeepSpeed-Chat step 3, 2023 layout ------------------------------------------------------------

def test_dschat_2023_layout_with_its_launcher_banner() -> None:
    path = real("dschat_ppo_llama7b_rlhf_rewardstagnation.log")
    assert detect_format(path) == "deepspeed-chat"
    a = scan_path(path)
    assert a.steps["rows"] == 617 and a.inputs[0].rows_skipped == 0
    reward = column(a, "reward_mean")
    assert sorted(reward) == list(range(617))
    assert reward[0] == pytest.approx(3.58203125) and column(a, "policy_loss")[0] == pytest.approx(2.140625)
    assert column(a, "value_loss")[1] == pytest.approx(1.064453125)
    # 23 fp16 overflow lines, each a skipped optimizer step, counted in the step that they precede
    overflows = column(a, "ds_engine/overflows")
    assert sum(overflows.values()) == 23 and overflows[0] == 2 and overflows[6] == 0
    assert "23 fp16 OVERFLOW" in notes(a)
    # the engine's every-10-steps line: the actor's learning rate, then the critic's
    lr = column(a, "learning_rate")
    assert lr[9] == pytest.approx(6.755e-07) and column(a, "ds_engine/critic_lr")[9] == pytest.approx(1.5e-07)
    assert math.isnan(lr[10])
    # the algorithm from the layout (a critic loss) and the launcher's options
    assert (a.meta.algorithm, a.meta.family) == ("ppo", "critic")
    assert a.meta.learning_rate == pytest.approx(9.65e-6) and a.meta.max_length == 256
    assert "actor_learning_rate=9.65e-06" in a.to_dict()["run_context"]["learning_rate"]["from"]


def test_dschat_2023_healthy_log_reads_every_step() -> None:
    a = scan_path(real("dschat_ppo_opt1.3b-lora_rlhf_healthy.log"))
    reward = column(a, "reward_mean")
    assert sorted(reward) == list(range(120)) and reward[119] == pytest.approx(7.453125)
    assert column(a, "step_time")[0] == pytest.approx(4.42)
    assert a.meta.algorithm == "ppo" and "OVERFLOW" not in notes(a)


# --- Hugging Face / TRL consoles: quoted values, late first dict, real steps ------------------------

def test_trl_console_with_quoted_values_and_a_late_first_dict() -> None:
    path = real("trl_dpo_qwen3.5-9b-lora_deltacoder_healthy.log")
    assert detect_format(path) == "hf-console"  # the first dict is 2 MB into the file
    a = scan_path(path)
    loss = column(a, "loss")
    assert sorted(loss) == list(range(5, 285, 5))  # logging every 5 of 283 steps
    assert loss[5] == pytest.approx(0.6969) and column(a, "pref_margin")[5] == pytest.approx(-0.006554)
    assert (a.meta.algorithm, a.meta.family) == ("dpo", "preference")
    assert "quoted strings" in notes(a) and "global step 5*i" in notes(a)


@pytest.mark.parametrize(("name", "every", "last"), [
    ("trl_grpo_qwen3b-lora_hotpotqa-v3_healthy.log", 20, 920),  # a progress bar before every dict
    ("trl_grpo_qwen3b-lora_hotpotqa_klblowup.log", 20, 1860),   # 93 dicts over a finished 1875 steps
    ("trl_dapo_qwen2.5vl-3b_aokvqa_lengthcollapse-deadgroups.md", 10, 490),
    ("trl_dpo_gams9b-translation-small_healthy.log", 10, 1880),
])
def test_trl_console_steps_are_the_global_steps(name: str, every: int, last: int) -> None:
    a = scan_path(real(name))
    steps = sorted(column(a, "loss"))
    assert steps[0] == every and steps[-1] == last
    assert all(b - a_ == every for a_, b in pairwise(steps))


def test_a_console_that_does_not_prove_its_steps_keeps_row_numbers() -> None:
    a = scan_path(real("trl_dpo_gams9b-translation_overoptimisation.log"))  # no bar, no way to tell
    assert sorted(column(a, "loss")) == list(range(1, 617))
    assert "does not prove the global step" in notes(a)


def test_step_interval_refuses_what_the_console_does_not_prove() -> None:
    # logging_first_step: the bar reads 1, 10, 20: no single interval
    assert step_interval(StepSurvey([(1, 100), (10, 100), (20, 100)], [0.01, 0.1, 0.2])) is None
    # 9 dicts of a finished 90-step run: every 10 steps, if the printed epochs agree
    bar = [(0, 90)] + [None] * 8
    agreeing = [round(i / 9, 2) for i in range(1, 10)]
    assert step_interval(StepSurvey(bar, agreeing, 1.0)) == (
        10, "9 dicts over the 90 steps of a finished run (progress bar k/90), every printed epoch agreeing")
    assert step_interval(StepSurvey(bar, [round(i / 18, 2) for i in range(1, 10)], 1.0)) is None
    assert step_interval(StepSurvey([None] * 9, agreeing, 1.0)) is None  # no bar: no total
    assert step_interval(StepSurvey(bar, agreeing, None)) is None  # not finished


def test_a_printed_sample_dict_is_not_a_row() -> None:
    a = scan_path(real("trl_grpo_qwen0.5b_olympiadzh_truncation-correctnessfloor.txt"))
    assert a.steps["rows"] == 101 and "without a numeric value" in notes(a)
    assert a.meta.algorithm == "grpo"


def test_a_console_after_a_long_preamble_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    preamble = "Mismatch between tokenized prompt and the start of tokenized prompt+chosen.\n" * 3000
    rows = "".join(f"{{'loss': '{0.69 - 0.01 * i:.4f}', 'rewards/margins': '{0.02 * i}', "
                   f"'epoch': '{i / 10}'}}\n" for i in range(1, 11))
    path.write_text(preamble + rows)
    assert detect_format(path) == "hf-console"
    a = scan_path(path)
    assert column(a, "loss")[3] == pytest.approx(0.66, rel=1e-6)


# --- the inferred algorithm of every calibration log and every TRL fixture --------------------------

#: LABELS.md's algorithm column; the custom JSONL logs only reward (no key says which method).
CALIBRATION_ALGORITHMS = {
    "verl_grpo_qwen7b-lora_econagent_healthy.log": "grpo",
    "verl_grpo_qwen7b-lora_econagent-v3reward_healthy.log": "grpo",
    "trl_dpo_qwen3.5-9b-lora_deltacoder_healthy.log": "dpo",
    "trl_grpo_qwen3b-lora_hotpotqa-v3_healthy.log": "grpo",
    "trlcustom_grpo_qwen3b_memredteam-stage1_healthy.jsonl": None,
    "dschat_ppo_opt1.3b-lora_rlhf_healthy.log": "ppo",
    "trl_grpo_qwen3b-lora_memredteam_rewardfloor-deadgroups_trainer_state.json": "grpo",
    "trl_grpo_qwen3b-lora_hotpotqa_klblowup.log": "grpo",
    "trl_grpo_qwen0.5b_patch2prod_alltruncated-saturated.txt": "grpo",
    "trl_grpo_smallbase_gsm8k_rewardfloor-deadgroups.txt": "grpo",
    "trl_grpo_qwen0.5b_olympiadzh_truncation-correctnessfloor.txt": "grpo",
    "trl_dapo_qwen2.5vl-3b_aokvqa_lengthcollapse-deadgroups.md": "grpo",  # DAPO changes on TRL GRPO
    "dschat_ppo_llama7b_rlhf_rewardstagnation.log": "ppo",
    "trl_grpo_azr-qlora_selfplay_unlabelled_trainer_state.json": "grpo",
    "trl_dpo_gams9b-translation-1605steps_healthy.log": "dpo",
    "trl_dpo_gams9b-translation-small_healthy.log": "dpo",
    "trl_dpo_gams9b-translation-bigmargin_healthy.log": "dpo",
    "trl_dpo_gams9b-translation_deadgradients.log": "dpo",
    "trl_dpo_gams9b-translation_refmismatch-lossaboveln2.log": "dpo",
    "trl_dpo_gams9b-translation_overoptimisation.log": "dpo",
    "trl_dpo_gams9b-translation_warmup-longer-than-run.log": "dpo",
    # set 2
    "verl_grpo_deepseek7b-gsm8k_healthy-gradspikes.log": "grpo",
    "verl_ppo_deepseek7b-gsm8k_healthy-gradspikes.log": "ppo",
    "verl_ppo_qwen2.5-0.5b-gsm8k_healthy-gradspike.log": "ppo",
    "verl_ppo_gemma2-2b-gsm8k_healthy.log": "ppo",
    "verl_gpg_qwen2-7b-gsm8k-math_lengthblowup-repetition.log": "gpg",
    "llamafactory_orpo_glm4-9b-lora-recsys_healthy_trainer_state.json": "orpo",
    # LLaMA-Factory's trainer_log.jsonl names no ORPO key (loss, accuracy, learning rate only):
    # a preference log, read as DPO, the family's default
    "llamafactory_orpo_glm4-9b-lora-recsys_healthy_trainer_log.jsonl": "dpo",
    "trl_grpo_llama3.2-1b-chaoseconomy_truncation_trainer_state.json": "grpo",
    # RLDK's synthetic fields (group_size, kl_coef) say a group method, not which one
    "rldk_grpo_synthetic-seed1_healthy-klspike.jsonl": None,
    "rldk_grpo_synthetic-seed3_healthy-klspike.jsonl": None,
    # on-policy distillation prints no adv_estimator in these W&B output.log captures
    "verl_opd_qwen3-4b-retool-klcoef0.02_collapse.log": None,
    "verl_opd_qwen2.5-3b-retool-tokenkl_lengthblowup-toolcollapse.log": None,
    "verl_opd_qwen2.5-3b-retool-klcoef0.05_lengthcollapse.log": None,
    "verl_opd_qwen2.5-3b-retool-tokenkl_lengthdrift.log": None,
    "verl_opd_qwen2.5-3b-retool-klcoef0.0005_healthy.log": None,
    "dschat_ppo_opt1.3b-rmstatic_healthy-lossoscillation.log": "ppo",
    "trl_grpo_gpt-oss-20b-minesweeper_truncation-deadgroups_trainer_state.json": "grpo",
    "trl_grpo_llama3.1-8b-gsm8k_healthy-klspike_trainer_state.json": "grpo",
    # Tinker's metrics.jsonl names no algorithm (policy gradient with group-mean baselines)
    "tinker_grpo_llama3.2-1b-leetcode_proxyhack-restarts.jsonl": None,
    "trl_grpo_qwen3.5-9b-lora-gsm8k_truncation-deadgroups.log": "grpo",
    "trl_grpo_gemma3-1b-gsm8k_healthy_trainer_state.json": "grpo",
}


def test_the_table_covers_every_calibration_log() -> None:
    if not CALIBRATION.is_dir():
        pytest.skip(f"{CALIBRATION} not found")
    assert sorted(p.name for p in CALIBRATION.iterdir() if p.name != "LABELS.md") == sorted(CALIBRATION_ALGORITHMS)


@pytest.mark.parametrize(("name", "algorithm"), sorted(CALIBRATION_ALGORITHMS.items()))
def test_calibration_log_algorithm(name: str, algorithm: str | None) -> None:
    assert context_of(real(name))[0] == algorithm


def _trl_fixtures() -> list[Path]:
    return sorted(p for p in (FIXTURES / "trl").iterdir() if p.is_dir())


@pytest.mark.parametrize("run", _trl_fixtures(), ids=lambda p: p.name)
def test_trl_fixture_algorithm(run: Path) -> None:
    expected = json.loads((run / "manifest.json").read_text())["algorithm"]
    algorithm, family, evidence = context_of(run / "trainer_state.json")
    if expected == "rloo":
        # TRL >= 0.23 RLOO logs GRPO's key set exactly: a group method, and the evidence says so
        assert (algorithm, family) == ("grpo", "group") and "RLOO" in evidence
    else:
        assert algorithm == expected


# --- veRL: config as a Python dict (0.1), a multi-line command (0.2), Hydra overrides ---------------

_V01_METRICS = ("step:{s} - timing/gen:21.470 - critic/kl:0.000 - critic/kl_coeff:0.001 - critic/vf_loss:0.482 - "
                "critic/grad_norm:35.133 - critic/lr(1e-4):0.100 - actor/entropy_loss:0.541 - "
                "actor/pg_loss:0.016 - actor/pg_clipfrac:0.002 - actor/ppo_kl:0.000 - actor/grad_norm:4.137 - "
                "actor/lr(1e-4):0.010 - critic/score/mean:0.{s:03d} - critic/rewards/mean:0.004 - "
                "response_length/mean:219.582 - response_length/clip_ratio:0.328")

# veRL 0.1 main_task: pprint(OmegaConf.to_container(config, resolve=True)) through a Ray actor
VERL_V01 = """\
2024-11-20 10:12:01,233\tINFO worker.py:1821 -- Started a local Ray instance.
(main_task pid=28435) {'actor_rollout_ref': {'actor': {'clip_ratio': 0.2,
(main_task pid=28435)                                  'entropy_coeff': 0.001,
(main_task pid=28435)                                  'grad_clip': 1.0,
(main_task pid=28435)                                  'optim': {'lr': 1e-06,
(main_task pid=28435)                                            'lr_warmup_steps_ratio': 0.0,
(main_task pid=28435)                                            'total_training_steps': -1,
(main_task pid=28435)                                            'warmup_style': 'constant'},
(main_task pid=28435)                                  'ppo_mini_batch_size': 64,
(main_task pid=28435)                                  'strategy': 'fsdp'},
(main_task pid=28435)                        'model': {'path': '~/models/deepseek-llm-7b-chat'},
(main_task pid=28435)                        'rollout': {'n': 1,
(main_task pid=28435)                                    'name': 'vllm',
(main_task pid=28435)                                    'response_length': 256,
(main_task pid=28435)                                    'temperature': 1.0}},
(main_task pid=28435)  'algorithm': {'adv_estimator': 'gae',
(main_task pid=28435)                'gamma': 1.0,
(main_task pid=28435)                'kl_ctrl': {'kl_coef': 0.001, 'type': 'fixed'},
(main_task pid=28435)                'kl_penalty': 'kl',
(main_task pid=28435)                'lam': 1.0},
(main_task pid=28435)  'critic': {'grad_clip': 1.0, 'optim': {'lr': 1e-05}},
(main_task pid=28435)  'data': {'max_prompt_length': 512,
(main_task pid=28435)           'max_response_length': 256,
(main_task pid=28435)           'train_batch_size': 256},
(main_task pid=28435)  'trainer': {'logger': ['console'], 'total_epochs': 15}}
""" + "".join(f"(main_task pid=28435) {_V01_METRICS.format(s=s)}\n" for s in range(1, 9))

# a fork's print(config) on one line, in the config's own order
VERL_V01_ONE_LINE = (
    "(main_task pid=1200) {'data': {'max_prompt_length': 512, 'max_response_length': 400, 'train_batch_size': 128}, "
    "'actor_rollout_ref': {'actor': {'grad_clip': 0.5, 'clip_ratio': 0.2, 'optim': {'lr': 3e-07}}, "
    "'rollout': {'n': 8}}, 'algorithm': {'adv_estimator': 'grpo', 'kl_ctrl': {'kl_coef': 0.002, "
    "'type': 'fixed'}}}\n"
    + "".join(f"(main_task pid=1200) {_V01_METRICS.format(s=s)}\n" for s in range(1, 6)))

# veRL 0.2 example script, echoed into the log as written, then its console
VERL_V02 = """\
set -x

python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files=$HOME/data/gsm8k/train.parquet \\
    data.train_batch_size=1024 \\
    data.max_prompt_length=512 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct \\
    actor_rollout_ref.actor.optim.lr=1e-6 \\
    ++actor_rollout_ref.actor.grad_clip=0.5 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.actor.kl_loss_coef=0.001 \\
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \\
    actor_rollout_ref.rollout.n=5 \\
    +trainer.val_before_train=False \\
    trainer.logger=['console'] \\
    trainer.total_epochs=15 $@
""" + "".join(
    f"(main_task pid=9123) step:{s} - timing_s/gen:30.1 - actor/kl_loss:0.00{s} - actor/kl_coef:0.001 - "
    f"actor/entropy_loss:0.61 - actor/pg_loss:-0.02 - actor/grad_norm:0.31 - actor/lr:0.000 - "
    f"critic/score/mean:0.{s}1 - response_length/mean:301.2\n" for s in range(1, 9))


@pytest.mark.parametrize(("text", "expected"), [
    (VERL_V01, {"algorithm": "ppo", "learning_rate": 1e-6, "max_grad_norm": 1.0, "clip_range": 0.2,
                "max_length": 256, "group_size": 1, "kl_penalty": "reward", "kl_coef_init": 0.001,
                "kl_controller": "fixed"}),
    (VERL_V01_ONE_LINE, {"algorithm": "grpo", "learning_rate": 3e-7, "max_grad_norm": 0.5,
                         "max_length": 400, "group_size": 8, "kl_penalty": "reward", "kl_coef_init": 0.002}),
    (VERL_V02, {"algorithm": "grpo", "learning_rate": 1e-6, "max_grad_norm": 0.5, "max_length": 1024,
                "group_size": 5, "kl_penalty": "loss", "kl_coef_init": 0.001, "kl_controller": "fixed"}),
], ids=["v0.1-pprint-dict", "v0.1-one-line-dict", "v0.2-multiline-command"])
def test_verl_config_layouts_give_the_context(tmp_path: Path, text: str, expected: dict) -> None:
    path = tmp_path / "verl.log"
    path.write_text(text)
    a = scan_path(path)
    assert a.inputs[0].format == "verl-console" and a.steps["rows"] >= 5
    got = {name: getattr(a.meta, name) for name in expected}
    assert got == expected
    assert "trainer config" in a.to_dict()["run_context"]["algorithm"]["from"]


def test_verl_v02_command_is_read_over_its_continuations(tmp_path: Path) -> None:
    path = tmp_path / "verl.log"
    path.write_text(VERL_V02)
    a = scan_path(path)
    config = a.inputs[0].run_config
    assert config["trainer.val_before_train"] is False and config["trainer.logger"] == ["console"]
    assert "command line at line 3" in a.to_dict()["run_context"]["learning_rate"]["from"]


def test_real_verl_logs_keep_their_context() -> None:
    for name in ("verl_grpo_qwen7b-lora_econagent_healthy.log", "verl_v04_console_qwen2_7b_math_megatron.log"):
        path = CALIBRATION / name if (CALIBRATION / name).exists() else SHARED / name
        if not path.exists():
            pytest.skip(f"{name} not found")
        _, family, evidence = context_of(path)
        assert family == "group" and "adv_estimator" in evidence


# --- Tinker cookbook metrics.jsonl -------------------------------------------------------------------

def _tinker_row(step: int) -> dict:
    return {"step": step, "progress/batch": step, "progress/done_frac": (step + 1) / 40, "optim/lr": 4e-5,
            "env/all/ac_tokens_per_turn": 200.0 + step, "env/all/ob_tokens_per_turn": 96.0,
            "env/all/turns_per_episode": 1.0, "env/all/total_episodes": 512, "env/all/reward/total": 0.3 + 0.01 * step,
            "env/all/correct": 0.25 + 0.01 * step, "env/all/format": 0.9, "env/all/by_group/frac_mixed": 0.6,
            "env/all/by_group/frac_all_good": 0.1, "env/all/by_group/frac_all_bad": 0.3,
            "optim/kl_sample_train_v1": 0.0008, "optim/kl_sample_train_v2": 0.0004, "optim/entropy": 0.52,
            "time/total": 84.0}


def test_tinker_metrics_jsonl_is_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(_tinker_row(s)) + "\n" for s in range(40)))
    a = scan_path(path)
    m = a.mappings[str(path)].mapping
    assert {m[k] for k in ("env/all/reward/total", "optim/lr", "optim/entropy", "optim/kl_sample_train_v2",
                           "env/all/ac_tokens_per_turn", "time/total", "env/all/by_group/frac_mixed")} == {
        "reward_mean", "learning_rate", "entropy", "approx_kl", "response_length_mean", "step_time",
        "frac_reward_zero_std"}
    assert column(a, "reward_mean")[5] == pytest.approx(0.35)
    assert column(a, "frac_reward_zero_std")[5] == pytest.approx(0.4)  # 1 - frac_mixed: the tied groups
    assert a.meta.family == "group"


def test_reward_mean_is_the_total_reward_not_a_component(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "reward/mean": 0.1 * s, "policy/entropy": 0.5}) + "\n"
                            for s in range(20)))
    m = scan_path(path).mappings[str(path)].mapping
    assert (m["reward/mean"], m["policy/entropy"]) == ("reward_mean", "entropy")


# --- LLaMA-Factory trainer_log.jsonl of a preference run --------------------------------------------

def _llamafactory(tmp_path: Path, extra: dict) -> Path:
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("".join(json.dumps({"current_steps": s, "total_steps": 300, "loss": 0.69 - 0.001 * s, **extra,
                                        "lr": 5e-7, "epoch": s / 100, "percentage": s / 3,
                                        "elapsed_time": "0:01:00", "remaining_time": "0:10:00"}) + "\n"
                            for s in range(10, 310, 10)))
    return path


@pytest.mark.parametrize("extra", [
    {"accuracy": 0.6},  # LogCallback's copy of rewards/accuracies
    {"rewards/chosen": 0.1, "rewards/rejected": -0.1, "rewards/margins": 0.2, "rewards/accuracies": 0.6,
     "logps/chosen": -120.0, "logps/rejected": -140.0},
], ids=["accuracy", "rewards-and-logps"])
def test_llamafactory_preference_run_is_dpo(tmp_path: Path, extra: dict) -> None:
    a = scan_path(_llamafactory(tmp_path, extra))
    assert (a.meta.algorithm, a.meta.family) == ("dpo", "preference")
    assert column(a, "pref_accuracy")[10] == pytest.approx(0.6)


def test_llamafactory_fixture_is_a_preference_run() -> None:
    a = scan_path(FIXTURES / "formats" / "llamafactory_trainer_log.jsonl")
    assert a.meta.family == "preference" and "accuracy read as rewards/accuracies" in notes(a)


def test_openrlhf_launch_command_names_rloo(tmp_path: Path) -> None:
    path = tmp_path / "openrlhf.log"
    rows = "".join(f"✨ Global step {s}: {{'policy_loss': 0.01, 'kl': 0.00{s}, 'reward': 0.{s}, "
                   f"'response_length': 310.0, 'actor_lr': 5e-07}}\n" for s in range(1, 9))
    path.write_text("+ python3 -m openrlhf.cli.train_ppo_ray \\\n"
                    "   --advantage_estimator rloo \\\n"
                    "   --n_samples_per_prompt 8 --actor_learning_rate 5e-7 \\\n"
                    "   --generate_max_len 1024 --init_kl_coef 1e-3\n" + rows)
    a = scan_path(path)
    assert (a.meta.algorithm, a.meta.family) == ("rloo", "group")
    assert (a.meta.group_size, a.meta.learning_rate, a.meta.max_length) == (8, 5e-7, 1024)
    assert "advantage_estimator=rloo" in a.to_dict()["run_context"]["algorithm"]["from"]

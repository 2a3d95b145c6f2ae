"""Recommendations: derived from the causal chain, never contradictory, valued from the log, and
written in the keys and types of the trainer that wrote the log."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from forensics.analysis.diagnosis.recommendations import ACTIONS, TEXT_ONLY, applicable_actions
from forensics.analysis.engine import scan_path
from forensics.analysis.trackers import all_rules
from forensics.config import Config, RunMeta
from forensics.report.files import write_reports

from .conftest import FIXTURES, ROOT, healthy_rows, write_jsonl

SHARED_LOGS = ROOT.parent / "shared" / "real-logs"  # ../shared/real-logs beside the repository


def _every_log() -> list[Path]:
    """Every fixture run (both corpora), every format fixture and every real log (the shared
    copies too)."""
    paths = sorted((FIXTURES / "runs").iterdir())
    paths += sorted(p for p in (FIXTURES / "trl").iterdir() if p.is_dir())
    paths += sorted(p for p in (FIXTURES / "formats").iterdir() if p.suffix not in (".md", ".py"))
    paths += sorted(p for p in (FIXTURES / "real-logs").iterdir() if p.suffix != ".md")
    for base in (SHARED_LOGS, Path("/work/shared/real-logs")):
        if base.is_dir():  # the logs at its root (calibration/ is a folder of logs, not a run)
            paths += sorted(p for p in base.iterdir() if p.is_file() and p.suffix != ".md")
            break
    return paths


@pytest.fixture(scope="module")
def every_analysis() -> dict[str, dict[str, Any]]:
    from forensics.errors import InputError

    out = {}
    for p in _every_log():
        try:
            out[str(p)] = scan_path(p).to_dict()
        except InputError:  # a real log the readers reject today (LABELS.md names them)
            assert "real-logs" in str(p), p
    return out


def test_demo_first_recommendation_restores_the_learning_rate(tmp_path: Path) -> None:
    d = scan_path(FIXTURES / "runs" / "ppo_lr_high").to_dict()
    rec = d["recommendations"]
    first = rec["adjustments"][0]
    assert first["parameter"] == "learning_rate" and first["source"] == "hyperparams.lr_change"
    assert first["first_domino"]
    assert first["new"] == pytest.approx(0.001) and first["current"] == pytest.approx(0.03)
    assert first["priority"] == "immediate" and "x30 jump at step 100" in first["text"]
    assert rec["priorities"]["immediate"][0].startswith("learning rate: 0.03 -> 0.001 (restore)")
    assert "x30" in rec["priorities"]["immediate"][0]
    assert rec["config_patch"]["config"] == {"lr": 0.001}  # run.json's own key, a number
    assert rec["first_domino"]["rule"] == "hyperparams.lr_change"
    # the adaptive controller's beta (about 5 by the end) is not patched with a made-up value
    assert "kl_coef_init" not in rec["config_patch"] and "beta" not in json.dumps(rec["config_patch"])




def test_no_parameter_raised_and_lowered_and_no_finding_contradicted(
        every_analysis: dict[str, dict[str, Any]]) -> None:
    for path, d in every_analysis.items():
        rec = d["recommendations"]
        by_param: dict[str, set[str]] = {}
        for a in rec["adjustments"]:
            by_param.setdefault(a["parameter"], set()).add(a["direction"])
        assert all(len(v) == 1 for v in by_param.values()), (path, by_param)
        held = {(a["parameter"], h["source"]) for a in rec["adjustments"] for h in a["held_back"]}
        for f in d["findings"]:
            if f["severity"] == "info":
                continue
            acts = applicable_actions(f, d["findings"])
            for a in rec["adjustments"]:
                dirs = {x.direction for x in acts if x.parameter == a["parameter"]} - {
                    "restore", "restore_first", "set", "suggested"}
                if dirs and a["direction"] in ("lower", "raise") and a["direction"] not in dirs:
                    assert (a["parameter"], f["rule"]) in held, (path, f["rule"], a["text"])
        # a learning rate a finding calls far too high is not kept (nor merely cut 20%)
        lr = next((a for a in rec["adjustments"] if a["parameter"] == "learning_rate"), None)
        for f in d["findings"]:
            ev = f.get("evidence") or {}
            if f["rule"] == "hyperparams.lr_out_of_range" and ev["learning_rate"] > ev["prior_high"]:
                assert lr is not None and lr["new"] is not None and lr["new"] <= ev["prior_high"], (path, lr)
        # the patch holds numbers only (a list of numbers for reward_weights), under real keys
        for value in _leaves(rec["config_patch"]):
            numbers = value if isinstance(value, list) else [value]
            assert numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers), \
                (path, value)


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [tree]


_PARAM_WORDS = {"learning_rate": r"learning rate|\bit\b(?= back| if it decayed)", "kl_coef": r"KL coefficient",
                "temperature": r"temperature", "max_length": r"max_length", "max_grad_norm":
                r"gradient clipping|max_grad_norm", "batch_size": r"batch size", "reward_weight": r"reward weight",
                "clip_range": r"clip range"}
_VERBS = {"lower": r"lower|cut|tighten", "raise": r"raise|restore|increase|lengthen"}


def test_every_action_stands_for_words_of_its_remedy() -> None:
    remedies = {r.id: r.remedy for _, r in all_rules()}
    for rule, actions in ACTIONS.items():
        assert rule in remedies, rule
        for a in actions:
            assert re.search(a.phrase, remedies[rule], re.IGNORECASE), (rule, a.phrase)
    # and every directed change a remedy names is an action, or stays in words for a stated reason
    for rule, remedy in remedies.items():
        for clause in re.split(r"[;.]", remedy):
            for parameter, words in _PARAM_WORDS.items():
                for direction, verbs in _VERBS.items():
                    if re.search(rf"\b({verbs})\b[^;,.]*?({words})|({words})\s+[\d-]+%\s+({verbs})",
                                 clause, re.IGNORECASE):
                        known = {a.parameter for a in ACTIONS.get(rule, ())}
                        assert parameter in known or (rule, parameter) in TEXT_ONLY, \
                            (rule, parameter, direction, clause)


def _grpo_state(tmp_path: Path, n: int = 200) -> Path:
    """A TRL GRPO trainer_state.json whose learning rate is far too high: KL runs away, the
    gradients spike, the entropy collapses while the reward sits at its maximum."""
    rng = np.random.default_rng(0)
    hist = []
    for i in range(n):
        s = i + 1
        kl = 0.002 * np.exp(s / 25) * np.exp(rng.normal(0, 0.05))
        hist.append({"step": s, "epoch": s / n, "learning_rate": 5e-5, "loss": float(0.04 * kl),
                     "grad_norm": float(0.4 * np.exp(rng.normal(0, 0.1)) * (30 if s in (120, 121) else 1)),
                     "kl": float(kl), "reward": float(min(1.0, 0.5 + s / 100) - abs(rng.normal(0, 0.01))),
                     "reward_std": 0.1, "entropy": float(0.9 * np.exp(-s / 60)),
                     "completions/mean_length": float(300 + rng.normal(0, 5)),
                     "completions/clipped_ratio": 0.01})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": n, "logging_steps": 1, "log_history": hist}))
    return path


GRPO_FIELDS = {"learning_rate", "beta", "max_grad_norm", "temperature", "max_completion_length", "epsilon",
               "epsilon_high", "per_device_train_batch_size"}


def test_trl_grpo_patch_uses_grpo_config_fields_and_numbers(tmp_path: Path) -> None:
    log = _grpo_state(tmp_path)
    a = scan_path(log, config=Config(run=RunMeta(algorithm="grpo")))
    paths = write_reports(a, tmp_path / "out")
    rec = json.loads(paths["recommendations"].read_text())
    assert rec["trainer"] == {"name": "TRL", "config": "GRPOConfig"}
    assert rec["adjustments"], "a run this broken needs changes"
    assert set(rec["config_patch"]) <= GRPO_FIELDS
    assert all(isinstance(v, float) for v in rec["config_patch"].values())
    lr = next(x for x in rec["adjustments"] if x["parameter"] == "learning_rate")
    # from the log's own value; KL reaches 6 nats/token (kl.excessive): a 10x cut, not 20%
    assert lr["current"] == pytest.approx(5e-5) and lr["new"] == pytest.approx(5e-6)
    assert rec["config_patch"]["learning_rate"] == pytest.approx(5e-6)
    assert "--learning_rate 5e-06" in rec["command_line"]
    # no reward weight or threshold: TRL has no such key, and a reward at its maximum needs none
    assert not any(x["parameter"].startswith("reward") for x in rec["adjustments"])
    assert yaml.safe_load(paths["recommendations_yaml"].read_text())["config_patch"] == rec["config_patch"]


def test_veRL_OpenRLHF_and_run_json_keys(tmp_path: Path) -> None:
    verl = scan_path(FIXTURES / "formats" / "verl_file_logger.jsonl").to_dict()["recommendations"]
    assert verl["trainer"]["name"] == "veRL"
    assert verl["config_patch"] == {"actor_rollout_ref": {"actor": {"optim": {"lr": 8e-07}}}}
    assert verl["command_line"] == ["actor_rollout_ref.actor.optim.lr=8e-07"]
    from forensics.analysis.trainer_keys import trainer_for

    orl = trainer_for(["openrlhf-console"], "ppo")
    assert orl is not None and orl.command_line("learning_rate", 8e-7) == "--actor_learning_rate 8e-07"
    assert orl.key("kl_coef") == "init_kl_coef" and orl.key("clip_range_high") is None
    rows = healthy_rows(300)
    for r in rows:
        r["learning_rate"] = 3e-6  # the log says 3e-6; the config default below says 1e-5
    for r in rows[150:154]:
        r["grad_norm"] *= 40
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "steps.jsonl", rows)
    (run / "run.json").write_text(json.dumps({"algorithm": "ppo", "max_grad_norm": 1.0,
                                              "config": {"learning_rate": 1e-5}}))
    rec = scan_path(run).to_dict()["recommendations"]
    lr = next(x for x in rec["adjustments"] if x["parameter"] == "learning_rate")
    assert lr["current"] == pytest.approx(3e-6) and lr["new"] == pytest.approx(2.4e-6)
    assert rec["config_patch"]["config"]["learning_rate"] == pytest.approx(2.4e-6)


def test_unknown_trainer_or_value_is_given_in_words(tmp_path: Path) -> None:
    from .synth import kl_spike

    rec = scan_path(write_jsonl(tmp_path / "k.jsonl", kl_spike(width=8))).to_dict()["recommendations"]
    assert rec["not_in_config"] and all("learning rate" in w or "KL" in w for w in rec["not_in_config"])
    # an event (the RLDK log's spike recovered with nothing else moving) asks for no change
    rec = scan_path(FIXTURES / "real-logs" / "rldk_grpo_synthetic_seed2.jsonl").to_dict()["recommendations"]
    assert rec["config_patch"] == {} and rec["not_in_config"] == []


def test_yaml_reads_back_numbers(tmp_path: Path) -> None:
    paths = write_reports(scan_path(FIXTURES / "runs" / "ppo_lr_high"), tmp_path)
    text = paths["recommendations_yaml"].read_text()
    back = yaml.safe_load(text)
    assert back == json.loads(paths["recommendations"].read_text())
    assert back["config_patch"]["config"]["lr"] == 0.001
    # the x30 jump is fixed alone; what else is advised waits until it is
    assert back["config_patch"] == {"config": {"lr": 0.001}}
    assert all(isinstance(v, float) for v in back["if_persists_patch"].values())


def test_healthy_runs_need_no_change(every_analysis: dict[str, dict[str, Any]]) -> None:
    for path, d in every_analysis.items():
        if "healthy" in path:
            assert d["recommendations"]["priorities"]["immediate"] == [], path


def test_messages_say_one_step_as_a_step_and_no_range_twice(every_analysis: dict[str, dict[str, Any]]) -> None:
    from forensics.analysis.spans import step_span, with_span

    seen = 0
    for path, d in every_analysis.items():
        for f in d["findings"]:
            msg = f["message"]
            assert not re.search(r"\bsteps (\d+)-\1\b", msg), (path, msg)  # never "100-100"
            text = step_span(f["first_step"], f["last_step"])
            assert msg.count(text) <= 1, (path, msg)
            line = with_span(msg, f["first_step"], f["last_step"])
            assert line.count(text) == 1, (path, line)  # what the terminal prints: the range once
            seen += f["first_step"] == f["last_step"] and text in msg
    assert seen  # single-step findings were there to check
    from forensics.report.terminal import render_summary

    out = render_summary(scan_path(FIXTURES / "runs" / "ppo_lr_high"))
    assert "steps 100-100" not in out and "step 100" in out
    for line in out.splitlines():
        ranges = re.findall(r"\bsteps? \d+(?:-\d+)?\b", line)
        assert len(ranges) == len(set(ranges)), line


def test_no_kl_penalty_and_a_drifting_policy_turns_the_penalty_on() -> None:
    """TRL GRPO with beta 0 and a hackable reward: entropy doubles and completions run to the
    cap. The first thing to do is to turn the KL penalty on (GRPOConfig.beta), at the top of the
    usual range for a KL term in the loss (0.1): the reward pays for length and pulls for as long
    as the run trains; no healthy run is told anything of the kind."""
    d = scan_path(FIXTURES / "trl" / "grpo_kl_off_hack").to_dict()
    rec = d["recommendations"]
    assert rec["priorities"]["immediate"][0].startswith("KL coefficient: set to 0.1, no KL penalty")
    assert "the reward pays for length: the top of the usual range" in rec["priorities"]["immediate"][0]
    assert rec["config_patch"]["beta"] == 0.1
    for run in sorted((FIXTURES / "trl").glob("*healthy*")):
        adj = scan_path(run).to_dict()["recommendations"]["adjustments"]
        assert not any(a["source"] == "kl_penalty_off" for a in adj), run.name


# -- root cause before symptoms ----------------------------------------------------------------------
def _rec(run: str) -> dict[str, Any]:
    return scan_path(FIXTURES / "trl" / run).to_dict()["recommendations"]


@pytest.mark.parametrize("run", ["grpo_lr_high", "rloo_lr_high", "ppo_lr_high", "dpo_lr_high", "kto_lr_high"])
def test_a_catastrophic_learning_rate_is_fixed_alone(run: str) -> None:
    """A learning rate 100-500x too high: the patch holds the rate alone; clip-higher, a warmer
    sampling temperature, a larger beta wait in the "if it persists after the fix" list."""
    rec = _rec(run)
    assert rec["root_cause"] == "hyperparams.lr_out_of_range"
    # the centre of the usual range for the family at this model's size (92k parameters, read from
    # its config.json: 42x a 7B model's rates), inside it: RL 4.2e-5 to 4.2e-4, preference half that
    low, high = (2.1e-5, 2.1e-4) if run[:3] in ("dpo", "kto") else (4.2e-5, 4.2e-4)
    lr = rec["config_patch"]["learning_rate"]
    assert list(rec["config_patch"]) == ["learning_rate"] and low < lr < high
    assert lr == pytest.approx((low * high) ** 0.5, rel=0.05)
    assert "of a model of 92.1k parameters" in rec["priorities"]["immediate"][0]
    said = " ".join(p for ps in rec["priorities"].values() for p in ps)
    assert "temperature" not in said and "clip" not in said and "beta" not in said, said
    if run == "rloo_lr_high":  # the symptoms' remedies wait, in the trainer's keys
        assert {"temperature": pytest.approx(1.1), "epsilon_high": 0.28}.items() <= rec["if_persists_patch"].items()
        assert any(p.startswith("sampling temperature: 1 -> 1.1") for p in rec["if_persists"])
    if run == "dpo_lr_high":  # the chosen responses lose likelihood before the pairs are won: no beta yet
        assert "beta" not in rec["config_patch"]


def test_a_learning_rate_jump_is_restored_alone() -> None:
    rec = _rec("grpo_lr_jump")
    assert rec["root_cause"] == "hyperparams.lr_change" and rec["config_patch"] == {"learning_rate": 0.0001}
    assert rec["if_persists_patch"] == {"max_grad_norm": 0.8}


def test_a_reward_that_pays_for_length_is_named_as_the_cause() -> None:
    """grpo_length_reward: reward = sentiment + 0.15 per word; the mean length doubles with the
    reward (r = 1.00). The cause is the reward function: no optimiser setting is patched, the
    advice names the component and the fixes, and the cap is a stop-gap with its logged value."""
    rec = _rec("grpo_length_reward")
    assert rec["root_cause"] == "reward_pays_for_length" and rec["config_patch"] == {}
    first = rec["priorities"]["immediate"][0]
    assert first.startswith("The reward pays for length: reward/sentiment_plus_length rises with")
    assert "length penalty" in first and "`sentiment_plus_length`" in first
    assert "max_completion_length (24 now)" in first and "stop-gap" in first
    # the learning-rate cut for its KL, and a longer cap for its truncation, wait
    assert rec["if_persists_patch"] == {"max_completion_length": 36, "learning_rate": pytest.approx(1e-5)}
    for run in sorted((FIXTURES / "trl").glob("*")):
        if run.is_dir() and ("healthy" in run.name or "lr_" in run.name or "max_len" in run.name):
            assert _rec(run.name)["root_cause"] != "reward_pays_for_length", run.name


def test_kl_penalty_off_is_fixed_alone_and_read_from_the_log() -> None:
    """GRPO with beta 0 (no kl logged) and PPO whose log shows a penalty of 0 while its KL climbs
    to 23 nats: the KL coefficient alone, in each trainer's key and default."""
    grpo = _rec("grpo_kl_off_hack")
    assert grpo["root_cause"] == "kl_penalty_off" and grpo["config_patch"] == {"beta": 0.1}
    assert "learning_rate" in grpo["if_persists_patch"]
    # the hackable reward is named too, after the penalty
    assert grpo["priorities"]["immediate"][1].startswith("The reward pays for length: reward/positive_words")
    ppo = _rec("ppo_kl_off_hack")
    assert ppo["root_cause"] == "kl_penalty_off" and ppo["config_patch"] == {"kl_coef": 0.05}
    assert "KL coefficient 0, read from the log: -objective/non_score_reward / objective/kl" in \
        ppo["priorities"]["immediate"][0]


# -- advice in the trainer's language -----------------------------------------------------------------
def test_remedies_declare_the_algorithms_they_apply_to() -> None:
    from forensics.analysis.diagnosis.recommendations import fit_remedy

    def finding(rule: str) -> dict[str, Any]:
        return {"rule": rule, "severity": "warning", "onset_step": 1, "evidence": {}}

    kinds = lambda rule, algo: {a.parameter for a in applicable_actions(finding(rule), [], algorithm=algo)}  # noqa: E731
    assert kinds("entropy.collapse", "grpo") == {"temperature", "clip_range_high"}
    assert kinds("entropy.collapse", "dpo") == set()  # no sampling in DPO
    assert kinds("kl.runaway", "dpo") == {"learning_rate"}  # a DPO beta is not a KL weight
    assert kinds("pref.overfit", "dpo") == {"kl_coef", "learning_rate"}
    assert kinds("pref.overfit", "orpo") == {"learning_rate"}  # ORPO's beta weighs no reference
    assert kinds("pref.overfit", "grpo") == {"learning_rate"}  # GRPO's beta is a KL weight
    blowup = next(r.remedy for _, r in all_rules() if r.id == "adv.blowup")
    gae = fit_remedy(blowup, "critic")
    assert "scale_rewards" not in gae and "Dr. GRPO" not in gae and "clip advantages" in gae
    assert fit_remedy(blowup, "group") == blowup and fit_remedy(blowup, None) == blowup


def test_every_adjustment_has_the_trainers_key_and_a_logged_value() -> None:
    """DPO's beta (0.1, read from the log: the implicit rewards over the log-probability change),
    GRPO's truncation cap read from the log (completions/max_length), the same on a real TRL
    console log. A cap that cut every response from the first step goes back to the trainer's
    default (GRPOConfig's 512), bounded by the model's context (64 in the corpus's config.json);
    one that starts cutting later is raised 50% (the length grew)."""
    overfit = _rec("dpo_overfit")
    beta = next(a for a in overfit["adjustments"] if a["parameter"] == "kl_coef")
    assert beta["key"] == "beta" and beta["current"] == 0.1 and beta["new"] == 0.2
    assert beta["current_from"].startswith("read from the log: the change of the reward margin")
    # a DPO learning rate of 1e-3 is the root cause (critical for preference optimisation): beta waits
    assert overfit["root_cause"] == "hyperparams.lr_out_of_range" and overfit["if_persists_patch"]["beta"] == 0.2
    grpo = _rec("grpo_max_len_small")
    assert grpo["config_patch"] == {"max_completion_length": 64}
    assert "the model's context (max_position_embeddings 64), below the trainer's default 512" in \
        grpo["priorities"]["immediate"][0]
    assert _rec("rloo_max_len_small")["config_patch"] == {"max_completion_length": 64}
    assert _rec("grpo_length_reward")["if_persists_patch"]["max_completion_length"] == 36  # 24 x 1.5
    real = SHARED_LOGS / "calibration" / "trl_grpo_qwen0.5b_patch2prod_alltruncated-saturated.txt"
    if real.exists():  # every completion cut at 192 tokens from the first step; no config.json
        rec = scan_path(real).to_dict()["recommendations"]
        assert rec["trainer"]["config"] == "GRPOConfig"
        assert rec["config_patch"]["max_completion_length"] == 512


def test_a_veRL_key_the_printed_config_lacks_gets_hydras_plus() -> None:
    from forensics.analysis.trainer_keys import trainer_for

    printed = ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.clip_ratio", "data.max_response_length"]
    verl = trainer_for(["verl-console"], "ppo", printed=printed)
    assert verl is not None
    assert verl.command_line("clip_range_high", 0.28) == "+actor_rollout_ref.actor.clip_ratio_high=0.28"
    assert verl.command_line("max_length", 1536) == "data.max_response_length=1536"
    assert verl.command_line("learning_rate", 1e-6) == "actor_rollout_ref.actor.optim.lr=1e-06"
    # without a printed config nothing is known to be missing
    assert trainer_for(["verl-console"], "ppo").command_line("clip_range_high", 0.28) == \
        "actor_rollout_ref.actor.clip_ratio_high=0.28"


# -- coefficients read from the log -------------------------------------------------------------------
def test_the_logged_kl_coefficient_is_reasoned_from() -> None:
    """A real TRL GRPO log whose loss is 0.01 x kl on every row while the KL runs to 2-3 nats:
    the penalty is on (0.01, read from the log), too weak: raise it to 0.04."""
    real = SHARED_LOGS / "calibration" / "trl_grpo_qwen3b-lora_hotpotqa_klblowup.log"
    if not real.exists():
        pytest.skip(f"{real}: the shared real logs are not here")
    rec = scan_path(real).to_dict()["recommendations"]
    said = " ".join(p for ps in rec["priorities"].values() for p in ps)
    assert "check that the KL penalty is on" not in said
    assert "the KL penalty is on (coefficient 0.01, read from the log: loss / kl" in said
    weak = next(a for a in rec["adjustments"] if a["source"] == "kl_coef_weak")
    assert weak["current"] == 0.01 and weak["new"] == 0.04


def test_a_kl_penalty_that_dominates_the_score_is_lowered_from_its_value(tmp_path: Path) -> None:
    """TRL PPO whose KL-in-reward coefficient (0.02, read from objective/non_score_reward /
    objective/kl) makes the penalty 20x the score while the score collapses: lower it to level
    them, not "check that the KL penalty is on"."""
    state = json.loads((FIXTURES / "trl" / "ppo_healthy_s0" / "trainer_state.json").read_text())
    for i, row in enumerate(state["log_history"]):
        if "objective/kl" not in row:
            continue
        kl = 10.0 + 0.5 * i
        row["objective/kl"], row["objective/non_score_reward"] = kl, -0.02 * kl
        row["objective/scores"] = max(0.6 - 0.02 * i, 0.01)
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    rec = scan_path(tmp_path).to_dict()["recommendations"]
    dom = next((a for a in rec["adjustments"] if a["source"] == "kl_penalty_dominates"), None)
    assert dom is not None, rec["adjustments"]
    assert dom["key"] == "kl_coef" and dom["current"] == 0.02 and dom["new"] < 0.002


# -- levels by algorithm and model size ---------------------------------------------------------------
def test_the_model_size_is_read_where_the_run_shows_it(tmp_path: Path) -> None:
    """A TRL output folder's config.json (the architecture gives the parameter count, no
    adapter_config.json: the whole model trains); a checkpoint folder reads the output folder
    above it, where adapter_config.json means LoRA and names the base model (its size in the
    name); veRL's model.path and lora_rank, DeepSpeed-Chat's model name and lora_dim."""
    import shutil

    run = scan_path(FIXTURES / "trl" / "grpo_lr_high").to_dict()["run"]
    assert run["model_params"] == 92096 and run["lora"] is False
    ck = tmp_path / "out" / "checkpoint-60"
    ck.mkdir(parents=True)
    shutil.copy(FIXTURES / "trl" / "grpo_lr_high" / "trainer_state.json", ck)
    (ck.parent / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 16, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}))
    d = scan_path(tmp_path / "out").to_dict()
    assert d["run"]["model_params"] == 5e8 and d["run"]["lora"] is True
    # 0.5B with LoRA: 2.4x a 7B model's rates, LoRA's top: 2e-2 is still far out, the centre 2.4e-5
    assert d["recommendations"]["config_patch"] == {"learning_rate": 2.4e-05}
    for name, size, lora in (("verl_grpo_qwen7b-lora_econagent_healthy.log", 7e9, True),
                             ("dschat_ppo_opt1.3b-lora_rlhf_healthy.log", 1.3e9, True)):
        real = SHARED_LOGS / "calibration" / name
        if real.exists():
            run = scan_path(real).to_dict()["run"]
            assert (run["model_params"], run["lora"]) == (size, lora), name


def test_learning_rate_levels_follow_the_family_and_the_model_size(tmp_path: Path) -> None:
    """The same GRPO log at 2e-2: with its config.json (92k parameters, the whole model) the
    usual range is 42x a 7B model's and the rate goes to its centre, 1.3e-4 (the corpus's healthy
    runs train at 1e-4); without it the size is unknown, the finding says so, the 7B thresholds
    stand (critical above 1e-2) and the rate goes to the 7B range's centre. DPO's range is half
    RL's; no healthy run of the corpus is out of its range."""
    import shutil

    sized = scan_path(FIXTURES / "trl" / "grpo_lr_high").to_dict()
    f = next(f for f in sized["findings"] if f["rule"] == "hyperparams.lr_out_of_range")
    assert "RL fine-tuning of a model of 92.1k parameters: 4.2e-05 to 0.00042 in full fine-tuning" in f["message"]
    assert f["evidence"]["prior_high"] == pytest.approx(1e-3 * (7e9 / 92096) ** (1 / 3) / 10, rel=1e-3)
    assert sized["recommendations"]["config_patch"] == {"learning_rate": 0.00013}
    shutil.copy(FIXTURES / "trl" / "grpo_lr_high" / "trainer_state.json", tmp_path)
    unknown = scan_path(tmp_path).to_dict()
    f = next(f for f in unknown["findings"] if f["rule"] == "hyperparams.lr_out_of_range")
    assert "of a language model of unknown size (the range for 7B)" in f["message"]
    assert f["evidence"]["tracker_severity"] == "critical" and f["evidence"]["prior_high"] == 1e-3
    assert unknown["recommendations"]["config_patch"] == {"learning_rate": 3.2e-06}
    assert _rec("dpo_lr_high")["config_patch"] == {"learning_rate": 6.7e-05}
    for run in sorted((FIXTURES / "trl").glob("*healthy*")):
        rules = {f["rule"] for f in scan_path(run).to_dict()["findings"]}
        assert "hyperparams.lr_out_of_range" not in rules, run.name


def test_a_beta_below_its_range_is_read_from_the_log_and_raised() -> None:
    """dpo_beta_tiny (beta 0.001): the log-probabilities move as in the healthy run while the
    implicit rewards move 100x less; their ratio is beta. Below the usual range (0.01 to 0.5) with
    the pairs not separating: beta back to 0.1. The healthy runs read 0.1 and get nothing."""
    rec = _rec("dpo_beta_tiny")
    assert rec["config_patch"] == {"beta": 0.1} and rec["first_domino"]["rule"] == "pref.not_learning"
    beta = next(a for a in rec["adjustments"] if a["parameter"] == "kl_coef")
    assert 0.0007 <= beta["current"] <= 0.0014 and beta["first_domino"]  # the run's beta: 0.001
    assert rec["priorities"]["immediate"][0].startswith(f"beta: {beta['current']:g} -> 0.1 (set), beta ")
    assert "read from the log: the change of the reward margin" in rec["priorities"]["immediate"][0]
    for run in ("dpo_healthy_s0", "dpo_healthy_s1", "dpo_overfit"):  # beta 0.1, read as 0.1
        assert _rec(run)["adjustments"] == [] or all(
            a["source"] != "beta_too_small" for a in _rec(run)["adjustments"]), run


def test_a_flipped_reward_weight_is_patched_in_the_trainers_key() -> None:
    rec = _rec("grpo_reward_sign")
    assert rec["config_patch"] == {"reward_weights": [1.0]} and rec["command_line"] == ["--reward_weights 1.0"]
    first = rec["priorities"]["immediate"][0]
    assert first.startswith("reward weights: [-1] -> [1] (set), the weight of reward/sentiment")


def test_a_spike_that_grows_into_an_explosion_lowers_the_learning_rate_first() -> None:
    """kto_unstable_s1: one gradient spike, then a sustained rise (grad.explode): the spike is not
    isolated, so its "if spikes repeat" change (the learning rate) comes before clipping."""
    rec = _rec("kto_unstable_s1")
    assert list(rec["config_patch"].items()) == [("learning_rate", 4e-05), ("max_grad_norm", 0.8)]


def test_the_rules_catalogue_gives_the_ranges_with_their_sources() -> None:
    from forensics.analysis.ranges import KL_RANGES, LR_RANGES

    doc = (ROOT / "docs" / "rules.md").read_text()
    assert "## Learning rates and KL coefficients: the usual ranges" in doc
    for r in [*LR_RANGES.values(), *KL_RANGES.values()]:
        assert r.sources in doc


def test_windows_are_matched_to_many_episodes_as_to_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """The array comparison of many window-episode pairs gives each window the rules and the
    critical flag that the pair-by-pair comparison gives (rules in order of first appearance)."""
    from forensics.analysis.diagnosis import recommendations as rec

    rng = np.random.default_rng(5)
    windows = [{"first_step": int(a), "last_step": int(a) + 49} for a in range(0, 2000, 50)]
    starts = rng.integers(-20, 2020, 3000)
    serious = [(f"rule.{rng.integers(6)}", "critical" if rng.random() < 0.01 else "warning", int(a),
                int(a + rng.integers(0, 120))) for a in starts]
    assert len(windows) * len(serious) > rec._MANY_PAIRS
    many = rec._window_hits(windows, serious)
    monkeypatch.setattr(rec, "_MANY_PAIRS", 10**9)
    assert rec._window_hits(windows, serious) == many
    assert any(crit for _, crit in many) and not all(crit for _, crit in many)
    assert any(len(rules) > 2 for rules, _ in many)


def test_the_advice_and_the_patch_round_a_value_alike() -> None:
    """The text says the value the patch sets (never '-> 5e-06' beside 4.99681e-06), and a do-now
    line says the change, not the finding's message again."""
    for run in ("grpo_lr_high", "ppo_lr_high", "dpo_overfit", "grpo_max_len_small"):
        rec = _rec(run)
        for a in rec["adjustments"]:
            if isinstance(a.get("new"), float) and a["change"] != "restore":
                assert float(f"{a['new']:.3g}") == a["new"] and f"{a['new']:.3g}" in a["text"], a
        root = rec.get("first_domino") or {}
        for line in rec["priorities"]["immediate"]:
            assert not root.get("message") or root["message"] not in line, line

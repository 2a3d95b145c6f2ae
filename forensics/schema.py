"""Canonical metric names, their meaning and units, and the aliases that map other names onto them.

This module is the single owner of the vocabulary. Every entry point (scan, watch, the trainer
callback) renames source keys through one resolver, :class:`~forensics.io.canonical.Canonicalizer`,
which reads these tables; every tracker asks for canonical names only. Columns that map to
nothing are carried through unchanged (they appear in the per-step CSV and are listed in the
report as unmapped), never dropped.

Three streams exist:

* the **step stream**: one row per optimizer step (``STEP`` metrics below);
* the **sample stream**: one row per generated response (``SAMPLE`` metrics);
* **run metadata**: one JSON object per run (:class:`forensics.config.RunMeta`).

Units matter more than names: ``kl`` is always the *per-token mean* KL to the reference policy.
A source that logs the per-sequence *sum* (TRL PPO ``objective/kl``) maps to ``kl_seq`` instead,
and trackers compare each with targets in its own unit; a source that logs the square root of KL
(trlX ``policy/sqrt_kl``) is squared on the way in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

import numpy as np

from .records import record

__all__ = [
    "ALIASES",
    "METRICS",
    "SAMPLE",
    "STEP",
    "Alias",
    "ColumnMapping",
    "Metric",
    "UserColumn",
    "alias_rank",
    "canonical_name",
    "user_columns",
]

STEP = "step"
SAMPLE = "sample"


@record(frozen=True)
class Metric:
    """One canonical metric.

    Parameters
    ----------
    name
        canonical column name.
    meaning
        one sentence a user can read in ``forensics rules --metrics``.
    unit
        unit of the values (``nats/token``, ``tokens``, ``1`` for dimensionless, ...).
    stream
        ``"step"`` or ``"sample"``.

    Which trackers read a metric is each tracker's ``requires`` (the one statement of it;
    ``forensics.analysis.catalogue.readers`` turns it around).
    """

    name: str
    meaning: str
    unit: str
    stream: str = STEP


def _m(name: str, meaning: str, unit: str, stream: str = STEP) -> Metric:
    return Metric(name, meaning, unit, stream)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        # --- axes -----------------------------------------------------------------------
        _m("step", "Optimizer step (global_step); the row key of the step stream.", "steps"),
        _m("epoch", "Epoch, fractional where the trainer logs it so.", "epochs"),
        _m("timestamp", "Wall-clock time the row was written.", "s since epoch"),
        # --- KL to the reference policy ------------------------------------------------
        _m("kl", "Mean per-token KL(policy || reference) of the sampled responses.", "nats/token"),
        _m("kl_seq", "KL(policy || reference) summed over response tokens, averaged over responses.",
           "nats/sequence"),
        _m("kl_coef", "KL penalty coefficient beta in force at this step.", "1"),
        # --- policy ----------------------------------------------------------------------
        _m("entropy", "Mean per-token entropy of the policy on sampled responses.", "nats/token"),
        _m("entropy_seq", "Negative log-likelihood of the sampled responses summed over tokens, averaged "
           "over responses (TRL PPO/OnlineDPO objective/entropy): a sequence-level sample estimate, not "
           "the per-token entropy.", "nats/sequence"),
        _m("approx_kl", "Approximate KL between the old and the updated policy (trust region).",
           "nats/token"),
        _m("clip_frac", "Fraction of tokens whose probability ratio was clipped.", "1"),
        _m("learning_rate", "Learning rate of the policy optimizer.", "1"),
        _m("clip_range", "PPO clip range: the probability ratio is clipped to 1 +- this.", "1"),
        _m("batch_size", "Batch size in force at this step (sequences per optimizer update).", "sequences"),
        # --- losses ----------------------------------------------------------------------
        _m("loss", "Total training loss.", "1"),
        _m("policy_loss", "Policy-gradient (surrogate) loss.", "1"),
        _m("value_loss", "Value-function loss.", "1"),
        _m("entropy_loss", "Entropy bonus term of the loss.", "1"),
        _m("explained_variance", "Explained variance of returns by the value head.", "1"),
        # --- gradients -------------------------------------------------------------------
        _m("grad_norm", "Global L2 norm of the policy gradient before clipping.", "1"),
        _m("grad_norm_value", "Global L2 norm of the value-head gradient before clipping.", "1"),
        _m("grad_norm_clipped", "Global L2 norm of the policy gradient after clipping.", "1"),
        # --- advantages ------------------------------------------------------------------
        _m("advantage_mean", "Mean advantage over the batch (tokens or responses).", "1"),
        _m("advantage_std", "Standard deviation of the advantages over the batch.", "1"),
        _m("advantage_min", "Smallest advantage in the batch.", "1"),
        _m("advantage_max", "Largest advantage in the batch.", "1"),
        _m("advantage_skew", "Sample skewness of the advantages.", "1"),
        _m("advantage_kurtosis", "Excess kurtosis (Fisher) of the advantages.", "1"),
        _m("advantage_p01", "1st percentile of the advantages.", "1"),
        _m("advantage_p99", "99th percentile of the advantages.", "1"),
        # --- reward ----------------------------------------------------------------------
        _m("reward_mean", "Mean task reward (score before any KL penalty) of the batch.", "1"),
        _m("reward_std", "Standard deviation of the task reward over the batch.", "1"),
        _m("reward_min", "Smallest reward in the batch.", "1"),
        _m("reward_max", "Largest reward in the batch (best-of-N where groups are sampled).", "1"),
        _m("reward_penalized", "Mean reward after the KL penalty (score - beta * KL).", "1"),
        _m("frac_reward_zero_std", "Fraction of prompt groups whose rewards all tie.", "1"),
        _m("group_size", "Responses sampled per prompt (GRPO/RLOO group size).", "responses"),
        # --- lengths ---------------------------------------------------------------------
        _m("response_length_mean", "Mean response length.", "tokens"),
        _m("response_length_max", "Longest response.", "tokens"),
        _m("truncation_rate", "Fraction of responses cut at the maximum length.", "1"),
        # --- throughput and resources ------------------------------------------------------
        _m("step_time", "Wall-clock seconds of the whole step.", "s"),
        _m("gen_tokens_per_s", "Generation throughput.", "tokens/s"),
        _m("train_tokens_per_s", "Forward+backward (training) throughput.", "tokens/s"),
        _m("samples_per_s", "Responses processed per second.", "samples/s"),
        _m("num_tokens", "Tokens processed so far (cumulative).", "tokens"),
        _m("mfu", "Model FLOP utilisation.", "1"),
        _m("gpu_mem_allocated_gb", "Peak GPU memory allocated.", "GB"),
        _m("gpu_mem_reserved_gb", "GPU memory reserved by the allocator.", "GB"),
        _m("ram_gb", "Host memory used by the trainer.", "GB"),
        _m("cpu_percent", "Host CPU utilisation.", "%"),
        _m("api_tokens_sent", "Tokens sent to a teacher or judge API during the step.", "tokens"),
        _m("api_tokens_received", "Tokens received from a teacher or judge API.", "tokens"),
        _m("api_input_tokens_per_s", "Tokens sent to a teacher or judge API per second of step time "
           "(derived from api_tokens_sent / step_time when not logged).", "tokens/s"),
        _m("api_output_tokens_per_s", "Tokens received from a teacher or judge API per second of "
           "step time (derived when not logged).", "tokens/s"),
        _m("mfu_estimated", "MFU estimated as 6 * param_count * train_tokens_per_s / peak_flops "
           "(derived).", "1"),
        _m("reward_best_of_n_gap", "reward_max - reward_mean: what best-of-N sampling would gain "
           "over the average response (derived).", "1"),
        # --- preference optimisation (DPO, IPO, ORPO, KTO, SimPO, CPO) ---------------------
        _m("pref_reward_chosen", "Implicit reward of the chosen responses, beta * log(pi/pi_ref) "
           "(DPO family), batch mean.", "1"),
        _m("pref_reward_rejected", "Implicit reward of the rejected responses, batch mean.", "1"),
        _m("pref_margin", "Implicit reward of chosen minus rejected, batch mean.", "1"),
        _m("pref_accuracy", "Share of pairs whose chosen response has the higher implicit reward.",
           "1"),
        _m("logp_chosen", "Log-probability of the chosen responses under the policy, summed over "
           "tokens, batch mean.", "nats/sequence"),
        _m("logp_rejected", "Log-probability of the rejected responses, summed over tokens, batch "
           "mean.", "nats/sequence"),
        _m("logits_chosen", "Mean logit of the chosen responses.", "1"),
        _m("logits_rejected", "Mean logit of the rejected responses.", "1"),
        _m("log_odds_ratio", "ORPO: log-sigmoid of the log odds ratio of chosen over rejected.", "1"),
        _m("log_odds_chosen", "ORPO: log odds of chosen over rejected.", "1"),
        _m("nll_loss", "Negative log-likelihood (SFT) term on the chosen responses.", "nats/token"),
        # --- sample stream -----------------------------------------------------------------
        _m("length", "Response length.", "tokens", stream=SAMPLE),
        _m("reward", "Total reward of the response.", "1", stream=SAMPLE),
        _m("truncated", "1 when the response hit the maximum length.", "1",
           stream=SAMPLE),
        _m("advantage", "Advantage assigned to the response.", "1", stream=SAMPLE),
        _m("group", "Prompt (group) identifier within the step.", "id", stream=SAMPLE),
        _m("prompt", "Prompt text.", "text", stream=SAMPLE),
        _m("completion", "Response text.", "text", stream=SAMPLE),
    ]
}

#: Reward components: a family of columns ``reward/<name>`` (per-function mean on the step stream,
#: per-response value on the sample stream).
REWARD_COMPONENT_PREFIX = "reward/"


def _square(x: np.ndarray) -> np.ndarray:
    return np.square(x)


#: Value transforms an alias may name; each maps source values into the canonical unit.
def _times_1e_4(x: np.ndarray) -> np.ndarray:
    return x * 1e-4


def _one_minus(x: np.ndarray) -> np.ndarray:
    return 1.0 - x


def _times_0_01(x: np.ndarray) -> np.ndarray:
    return x * 0.01


def _times_1e_3(x: np.ndarray) -> np.ndarray:
    return x * 1e-3


TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "square": _square,
    "times_1e-4": _times_1e_4,
    "one_minus": _one_minus,
    "times_0.01": _times_0_01,  # a percentage given as a fraction (user column maps: unit "percent")
    "times_1e-3": _times_1e_3,  # milliseconds as seconds (user column maps: unit "ms")
}


@record(frozen=True)
class Alias:
    """A source key that means a canonical metric.

    ``transform`` names an entry of :data:`TRANSFORMS` applied to the values; ``framework`` and
    ``note`` document where the key comes from and any trap in its meaning.
    """

    source: str
    canonical: str
    framework: str
    transform: str | None = None
    note: str = ""


def _aliases(framework: str, pairs: Iterable[tuple[str, str]]) -> list[Alias]:
    return [Alias(src, dst, framework) for src, dst in pairs]


# Order matters: when several source keys of one row map to the same canonical name, the earlier
# alias wins and the others are carried through under their own names (listed as "shadowed").
#
# Units (FORMATS.md sections 0, 1 and 4): per-token means map to ``kl``/``entropy``; per-sequence
# sums to ``kl_seq``/``entropy_seq``; square roots are squared; the task score maps to
# ``reward_mean`` and the KL-penalised reward to ``reward_penalized``. Keys whose unit could not be
# verified from the trainer's source are left unmapped (carried through, listed as unmapped).
ALIASES: tuple[Alias, ...] = tuple(
    # the writer (forensics.trainer.writer) uses canonical names, plus these spellings of its helpers
    _aliases("forensics", [
        ("grad_norm_policy", "grad_norm"),
        ("grad_norm_pre_clip", "grad_norm"),
        ("grad_norm_post_clip", "grad_norm_clipped"),
        ("lr", "learning_rate"),
        ("kl_mean", "kl"),
        ("beta", "kl_coef"),
        ("adv_mean", "advantage_mean"),
        ("adv_std", "advantage_std"),
        ("response_length", "response_length_mean"),
        ("length_mean", "response_length_mean"),
        ("time", "timestamp"),
        ("global_step", "step"),
        # hyperparameters logged per step under their config names (forensics.analysis.trackers.hyperparams)
        ("cliprange", "clip_range"),
        ("clip_eps", "clip_range"),
        ("eps_clip", "clip_range"),
        ("clip_epsilon", "clip_range"),
        ("train_batch_size", "batch_size"),
        ("global_batch_size", "batch_size"),
        ("rollout_batch_size", "batch_size"),
    ])
    # preference optimisation: TRL DPO/CPO/ORPO/OnlineDPO, LLaMA-Factory, OpenRLHF, NeMo-Aligner
    + _aliases("trl", [
        ("rewards/chosen", "pref_reward_chosen"),
        ("rewards/rejected", "pref_reward_rejected"),
        ("rewards/margins", "pref_margin"),
        ("rewards/accuracies", "pref_accuracy"),
        ("logps/chosen", "logp_chosen"),
        ("logps/rejected", "logp_rejected"),
        ("logits/chosen", "logits_chosen"),
        ("logits/rejected", "logits_rejected"),
    ])
    + _aliases("openrlhf", [
        ("chosen_reward", "pref_reward_chosen"),
        ("reject_reward", "pref_reward_rejected"),
        ("acc", "pref_accuracy"),
    ])
    + _aliases("nemo-aligner", [
        ("rewards_chosen_mean", "pref_reward_chosen"),
        ("rewards_rejected_mean", "pref_reward_rejected"),
    ])
    + [
        Alias("preference_loss", "loss", "nemo-aligner", note="NeMo-Aligner DPO: the preference term"),
        Alias("sft_loss", "nll_loss", "llamafactory",
              note="LLaMA-Factory ORPO/SimPO and NeMo-Aligner DPO: the SFT term on chosen"),
    ]
    # NeMo-RL GRPO (nemo_rl/algorithms/grpo.py and loss_functions.py; logged with a train/ prefix,
    # which canonical_name strips): kl_penalty is the penalty term divided by its coefficient, the
    # per-token KL to the reference; token_mult_prob_error, gen_kl_error and
    # sampling_importance_ratio (generation vs training log-probabilities) are carried through
    + _aliases("nemo-rl", [
        ("kl_penalty", "kl"),
        ("advantages/mean", "advantage_mean"),
        ("advantages/max", "advantage_max"),
        ("advantages/min", "advantage_min"),
    ])
    # open-instruct (open_instruct/grpo_fast.py, ppo.py): objective/kl_avg is the masked mean of the
    # k1 estimate per token (TRL's objective/kl is a per-sequence sum: kl_seq); policy/clipfrac_avg
    # and loss/policy_avg are read under TRL's PPO names already
    + _aliases("open-instruct", [
        ("objective/kl_avg", "kl"),
        # later grpo_fast.py logs the four estimators as kl0..kl3; kl0 is k1 (model_utils.estimate_kl)
        ("objective/kl0_avg", "kl"),
        ("loss/total_avg", "loss"),
        # data_loader.py's step metrics: the batch's mean verifier score, response lengths in tokens
        ("scores", "reward_mean"),
        ("val/sequence_lengths", "response_length_mean"),
        ("val/sequence_lengths_max", "response_length_max"),
        ("val/advantages_mean", "advantage_mean"),
        ("val/advantages_min", "advantage_min"),
        ("val/advantages_max", "advantage_max"),
    ])
    # ROLL RLVR pipeline (roll/pipeline/base_worker.py, rlvr/actor_worker.py, utils/metrics/
    # metrics_manager.py, the strategies' "<worker>/grad_norm"); critic/score/*, critic/rewards/mean,
    # critic/advantages/*, actor/pg_loss, actor/kl_loss and actor/lr are veRL's names, read already.
    # actor/approxkl is the k2 ("mse") estimate against the old policy; critic/entropy/mean the
    # token-mean entropy of the old log-probabilities
    + _aliases("roll", [
        ("actor/approxkl", "approx_kl"),
        ("actor/clipfrac", "clip_frac"),
        ("actor/total_loss", "loss"),
        ("actor_train/grad_norm", "grad_norm"),
        ("critic/entropy/mean", "entropy"),
        ("token/response_length/mean", "response_length_mean"),
        ("token/response_length/max", "response_length_max"),
        ("tokens/response_length/mean", "response_length_mean"),
        ("tokens/response_length/max", "response_length_max"),
    ])
    # custom training loops (their consoles are read by forensics.io.adapters.kv_console, which
    # writes keys lower case with spaces as underscores): the spellings that mean one thing only
    + _aliases("custom-loop", [
        ("iteration", "step"),
        ("iter", "step"),
        ("gnorm", "grad_norm"),
        ("grad_norm_total", "grad_norm"),
        ("kl_divergence", "kl"),
        ("kl_ref", "kl"),
        ("mean_reward", "reward_mean"),
        ("avg_reward", "reward_mean"),
        ("average_reward", "reward_mean"),
        ("avg_response_len", "response_length_mean"),
        ("avg_response_length", "response_length_mean"),
        ("mean_response_length", "response_length_mean"),
        ("token_entropy", "entropy"),
    ])
    # RLDK-style wide rows
    + _aliases("rldk", [
        ("reward", "reward_mean"),
        ("kl_div", "kl"),
        ("entropy_mean", "entropy"),
        ("policy_grad_norm", "grad_norm"),
        ("value_grad_norm", "grad_norm_value"),
        ("advantages_mean", "advantage_mean"),
        ("advantages_std", "advantage_std"),
        ("wall_time", "timestamp"),
        ("tokens_out", "response_length_mean"),
    ])
    # Hugging Face Trainer / TRL GRPO (and RLOO >= 0.23), DPO family: kl and entropy are per-token
    + _aliases("trl", [
        ("completions/mean_length", "response_length_mean"),
        ("completion_length", "response_length_mean"),
        ("completions/max_length", "response_length_max"),
        ("completions/clipped_ratio", "truncation_rate"),
        ("clip_ratio/region_mean", "clip_frac"),
        ("step_time", "step_time"),
    ])
    + [
        Alias("clip_ratio", "clip_frac", "trl",
              note="TRL GRPO 0.16 policy clip fraction (not a truncation rate)"),
        # TRL PPO new API (PPOv2 >= 0.9, RLOO <= 0.21), OnlineDPO: objective/* are per-sequence sums
        Alias("objective/kl", "kl_seq", "trl",
              note="TRL PPO/OnlineDPO log KL summed over response tokens (kl.sum(1).mean())"),
        Alias("objective/entropy", "entropy_seq", "trl",
              note="TRL PPO/OnlineDPO: summed NLL of the samples ((-logprobs).sum(1).mean()), not "
                   "the per-token entropy"),
        Alias("policy/entropy_avg", "entropy", "trl", note="TRL PPO new API: true per-token entropy"),
        Alias("objective/scores", "reward_mean", "trl", note="reward-model score before the KL penalty"),
        Alias("objective/rlhf_reward", "reward_penalized", "trl", note="score minus the KL penalty"),
        Alias("objective/kl_coef", "kl_coef", "trl"),
    ]
    + _aliases("trl", [
        ("loss/policy_avg", "policy_loss"),
        ("loss/value_avg", "value_loss"),
        ("policy/approxkl_avg", "approx_kl"),
        ("policy/clipfrac_avg", "clip_frac"),
        ("eps", "samples_per_s"),
    ])
    # old TRL PPOTrainer.step (<= 0.11): objective/* as above; ppo/policy/entropy is per-token
    + _aliases("trl-ppo-old", [
        ("ppo/policy/entropy", "entropy"),
        ("ppo/mean_scores", "reward_mean"),
        ("env/reward_mean", "reward_mean"),
        ("ppo/std_scores", "reward_std"),
        ("env/reward_std", "reward_std"),
        ("ppo/loss/policy", "policy_loss"),
        ("ppo/loss/value", "value_loss"),
        ("ppo/loss/total", "loss"),
        ("ppo/policy/approxkl", "approx_kl"),
        ("ppo/policy/clipfrac", "clip_frac"),
        ("ppo/policy/advantages_mean", "advantage_mean"),
        ("ppo/val/var_explained", "explained_variance"),
        ("ppo/learning_rate", "learning_rate"),
        ("tokens/responses_len_mean", "response_length_mean"),
        ("time/ppo/total", "step_time"),
    ])
    # veRL: actor/kl_loss and actor/reward_kl_penalty are per-token means; critic/score is the task
    # score, critic/rewards the reward after the in-reward KL penalty
    + _aliases("verl", [
        ("actor/kl_loss", "kl"),
        ("actor/reward_kl_penalty", "kl"),
        ("critic/kl", "kl"),
        ("actor/kl_coef", "kl_coef"),
        ("actor/reward_kl_penalty_coeff", "kl_coef"),
        ("critic/kl_coeff", "kl_coef"),
        ("actor/entropy", "entropy"),
        ("actor/entropy_loss", "entropy"),
        ("actor/pg_loss", "policy_loss"),
        ("critic/vf_loss", "value_loss"),
        ("actor/grad_norm", "grad_norm"),
        ("critic/grad_norm", "grad_norm_value"),
        ("actor/lr", "learning_rate"),
        ("actor/ppo_kl", "approx_kl"),
        ("actor/pg_clipfrac", "clip_frac"),
        ("critic/vf_explained_var", "explained_variance"),
        ("critic/score/mean", "reward_mean"),
        ("critic/score/max", "reward_max"),
        ("critic/score/min", "reward_min"),
        ("critic/rewards/mean", "reward_penalized"),
        ("critic/advantages/mean", "advantage_mean"),
        ("critic/advantages/max", "advantage_max"),
        ("critic/advantages/min", "advantage_min"),
        ("response_length/mean", "response_length_mean"),
        ("response_length/max", "response_length_max"),
        ("response_length/clip_ratio", "truncation_rate"),
        ("perf/throughput", "train_tokens_per_s"),
        ("Tokens/Sec/GPU", "train_tokens_per_s"),
        ("perf/time_per_step", "step_time"),
        ("timing_s/step", "step_time"),
        ("time_per_step", "step_time"),
        ("perf/mfu/actor", "mfu"),
        ("mfu/actor", "mfu"),
        ("perf/max_memory_allocated_gb", "gpu_mem_allocated_gb"),
        ("perf/max_memory_reserved_gb", "gpu_mem_reserved_gb"),
        ("perf/cpu_memory_used_gb", "ram_gb"),
        ("training/epoch", "epoch"),
        ("training/global_step", "step"),
    ])
    + [
        Alias("actor/lr(1e-4)", "learning_rate", "verl", transform="times_1e-4",
              note="veRL v0.1 prints the learning rate in units of 1e-4"),
        # trlX: both KL keys are square roots
        Alias("policy/sqrt_kl", "kl_seq", "trlx", transform="square",
              note="trlX logs the square root of the per-sequence KL"),
        Alias("policy/kl_per_token", "kl", "trlx", transform="square",
              note="trlX logs the square root of the per-token KL"),
    ]
    + _aliases("trlx", [
        ("kl_ctl_value", "kl_coef"),
        ("losses/total_loss", "loss"),
        ("losses/policy_loss", "policy_loss"),
        ("losses/value_loss", "value_loss"),
        ("policy/approx_kl", "approx_kl"),
        ("policy/clipfrac", "clip_frac"),
        ("rollout_scores/mean", "reward_mean"),
        ("rollout_scores/std", "reward_std"),
        ("learning_rate_group_0", "learning_rate"),
    ])
    # OpenRLHF: kl is the per-token (per-sample mean) KL; reward is the score, return includes KL
    + _aliases("openrlhf", [
        ("actor_lr", "learning_rate"),
        ("critic_loss", "value_loss"),
        ("ppo_clip_ratio", "clip_frac"),
        ("ppo_kl", "approx_kl"),
        ("actor_grad_norm", "grad_norm"),
        ("critic_grad_norm", "grad_norm_value"),
        ("score", "reward_mean"),
        ("rollout/reward_mean", "reward_mean"),
        ("rollout/reward_std", "reward_std"),
        ("rollout/response_length_mean", "response_length_mean"),
        ("rollout/truncated_rate", "truncation_rate"),
        ("timing/step_total", "step_time"),
    ])
    # DeepSpeed-Chat step 3 (console 2023 and current spellings, TensorBoard tags)
    + _aliases("deepspeed-chat", [
        ("act_loss", "policy_loss"),
        ("Actor Loss", "policy_loss"),
        ("actor_loss", "policy_loss"),
        ("cri_loss", "value_loss"),
        ("Critic Loss", "value_loss"),
        ("average reward score", "reward_mean"),
        ("Average reward score", "reward_mean"),
        ("E2E latency", "step_time"),
        ("CurSamplesPerSec", "samples_per_s"),
    ])
    # NeMo-Aligner (init_policy_kl is left unmapped: its unit is not documented)
    + _aliases("nemo-aligner", [
        ("train_rollouts/rewards", "reward_mean"),
        ("train_rollouts/rewards_with_kl", "reward_penalized"),
        ("train_rollouts/advantages_mean", "advantage_mean"),
        ("train_rollouts/advantages_std", "advantage_std"),
        ("train_rollouts/generation_length", "response_length_mean"),
        ("train_optim/loss", "policy_loss"),
        ("train_optim/grad_norm", "grad_norm"),
        ("train_optim/lr", "learning_rate"),
        ("train_optim/ppo_ratio_clamped", "clip_frac"),
    ])
    # Tinker cookbook metrics.jsonl (rl/train.py, rl/metric_util.py): env/all/* are means over
    # the batch's trajectories; optim/kl_sample_train_v2 is half the mean squared log-ratio of the
    # sampler against the learner (the k2 estimate TRL's policy/approxkl_avg uses)
    + _aliases("tinker", [
        ("env/all/reward/total", "reward_mean"),
        ("optim/lr", "learning_rate"),
        ("optim/entropy", "entropy"),
        ("optim/kl_sample_train_v2", "approx_kl"),
        ("env/all/ac_tokens_per_turn", "response_length_mean"),
        ("time/total", "step_time"),
        ("reward/total", "reward_mean"),
        ("reward/mean", "reward_mean"),
        ("policy/entropy", "entropy"),
        ("ds_engine/lr", "learning_rate"),
    ])
    + [
        Alias("env/all/by_group/frac_mixed", "frac_reward_zero_std", "tinker", transform="one_minus",
              note="Tinker: the share of groups whose rewards differ; its complement is the share that tie"),
        Alias("train_rollouts/fraction_of_samples_properly_ended", "truncation_rate", "nemo-aligner",
              transform="one_minus", note="NeMo-Aligner logs the complement (responses that ended)"),
        # LLaMA-Factory trainer_log.jsonl and W&B history
        Alias("current_steps", "step", "llamafactory"),
        Alias("_timestamp", "timestamp", "wandb"),
    ]
)

#: Unit and meaning notes for aliases declared in bulk above (shown in the report's column mapping).
_UNIT_NOTES: dict[str, str] = {
    "actor/kl_loss": "veRL: per-token mean KL of the KL loss (GRPO-style), not a sequence sum",
    "actor/reward_kl_penalty": "veRL: per-token mean KL applied in the reward",
    "critic/kl": "veRL <= 0.3: per-token mean KL applied in the reward",
    "actor/entropy": "veRL: per-token mean entropy",
    "actor/entropy_loss": "veRL <= 0.3: the per-token mean entropy (despite the name)",
    "critic/score/mean": "veRL: task score before any KL penalty",
    "critic/rewards/mean": "veRL: reward after the in-reward KL penalty",
    "ppo/policy/entropy": "old TRL PPO: per-token entropy (objective/entropy is the sequence NLL)",
    "reward": "batch mean reward (TRL GRPO: weighted sum over reward functions; OpenRLHF: score, "
              "not the KL-including return)",
    "score": "OpenRLHF >= 0.9: raw reward-function score",
    "actor_lr": "OpenRLHF: last value of the update",
    "perf/throughput": "veRL: tokens per second per GPU over the whole step",
    "E2E latency": "DeepSpeed-Chat: generation + training seconds of the step",
    "eps": "TRL PPO new API: episodes (responses) per second",
    "env/all/reward/total": "Tinker: mean total reward of the batch's trajectories",
    "optim/entropy": "Tinker: per-token entropy estimated from the sampled tokens' log-probabilities",
    "optim/kl_sample_train_v2": "Tinker: sampler vs learner KL (k2 estimate), the off-policy drift of the update",
    "env/all/ac_tokens_per_turn": "Tinker: action (response) tokens per turn, one turn per episode in single-turn envs",
    "time/total": "Tinker: wall-clock seconds of the whole step",
    "reward/mean": "batch mean of the total reward (not a reward component named 'mean')",
    "ds_engine/lr": "DeepSpeed-Chat: the actor's learning rate from the engine's every-steps_per_print line",
}
ALIASES = tuple(a if a.note or a.source not in _UNIT_NOTES else
                Alias(a.source, a.canonical, a.framework, a.transform, _UNIT_NOTES[a.source]) for a in ALIASES)

#: Prefixes that loggers put in front of a trainer's own keys (HF ``rewrite_logs`` and OpenRLHF
#: write ``train/<key>`` to W&B and TensorBoard); a prefixed key maps like the bare key.
TRAIN_PREFIXES = ("train/",)

_ALIAS_BY_SOURCE: dict[str, Alias] = {}
for _a in ALIASES:
    _ALIAS_BY_SOURCE.setdefault(_a.source, _a)

# TRL per-reward-function means: rewards/<f>/mean (>= 0.17) and rewards/<f> (0.14-0.16).
#: DPO/KTO implicit-reward keys that look like reward components but are not.
_NOT_COMPONENTS = ("chosen", "rejected", "margins", "accuracies")
_REWARD_COMPONENT = re.compile(r"^(?:rewards?|reward_components?)/(?P<name>[^/]+?)(?:/mean)?$")


#: The core training signals: a log that gives none of them is not judged (a learning rate alone
#: says nothing of how training went), whatever else was read.
CORE_SIGNALS = ("reward_mean", "kl", "kl_seq", "grad_norm", "loss", "policy_loss", "value_loss", "entropy",
                "entropy_seq", "response_length_mean", "pref_margin", "pref_accuracy")
#: Words of a key that say what it most likely means, for keys no alias knows (a guess: --map it).
_GUESS_WORDS = (("kl", "kl"), ("grad", "grad_norm"), ("gnorm", "grad_norm"), ("reward", "reward_mean"),
                ("score", "reward_mean"), ("entropy", "entropy"), ("loss", "loss"), ("len", "response_length_mean"),
                ("lr", "learning_rate"))


def suggest_canonical(key: str) -> tuple[str, bool] | None:
    """The canonical name a key no alias knows most likely means: ``(name, sure)``, sure when a
    path segment or a spelling of the key is a known alias (``policy/kl_divergence`` -> ``kl``),
    a guess from its words otherwise (``my_reward`` -> ``reward_mean``); None when nothing fits.

    >>> suggest_canonical("policy/kl_divergence"), suggest_canonical("my_reward")
    (('kl', True), ('reward_mean', False))
    >>> suggest_canonical("Avg Response Len"), suggest_canonical("wall_clock") is None
    (('response_length_mean', True), True)
    """
    flat = re.sub(r"[\s\-]+", "_", key.strip()).lower()
    for candidate in (flat, *reversed(flat.split("/")), flat.replace("/", "_")):
        hit = canonical_name(candidate) if candidate else None
        if hit is not None and hit[0] in METRICS:
            return hit[0], True
    words = [w for w in re.split(r"[^a-z0-9]+", flat) if w]
    for word, name in _GUESS_WORDS:
        if word in words or (len(word) > 3 and any(word in w for w in words)):
            return name, False
    return None


def canonical_name(key: str, stream: str = STEP) -> tuple[str, Alias | None] | None:
    """Return ``(canonical, alias)`` for a source key, or ``None`` when the key is unknown.

    >>> canonical_name("kl")
    ('kl', None)
    >>> canonical_name("grad_norm_policy")[0]
    'grad_norm'
    >>> canonical_name("rewards/format_reward_fn/mean")[0]
    'reward/format_reward_fn'
    >>> canonical_name("my_custom_metric") is None
    True
    >>> canonical_name("train/objective/kl")[0], canonical_name("objective/entropy")[0]
    ('kl_seq', 'entropy_seq')

    A sample-stream name logged on the step stream is an alias there (a step row's ``reward`` is
    the batch mean):

    >>> canonical_name("reward")[0], canonical_name("reward", stream="sample")[0]
    ('reward_mean', 'reward')
    >>> canonical_name("train.objective.kl")[0]
    'kl_seq'
    """
    metric = METRICS.get(key)
    if metric is not None and (metric.stream == stream or stream == SAMPLE):
        return key, None
    alias = _ALIAS_BY_SOURCE.get(key)
    if alias is not None:
        return alias.canonical, alias
    if metric is not None:
        return key, None
    match = _REWARD_COMPONENT.match(key)
    if match and match.group("name") not in _NOT_COMPONENTS and not match.group("name").endswith("_sum"):
        canonical = REWARD_COMPONENT_PREFIX + match.group("name")
        return canonical, Alias(key, canonical, "reward-component")
    for prefix in TRAIN_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            hit = canonical_name(key[len(prefix):], stream)
            if hit is None:
                return None
            canonical, inner = hit
            return canonical, Alias(key, canonical, inner.framework if inner else "prefixed",
                                    inner.transform if inner else None,
                                    f"logger prefix {prefix!r} stripped" + (f"; {inner.note}" if inner and
                                                                           inner.note else ""))
    if "." in key:  # a logger that nests with dots (``train.loss``): the same names with slashes
        hit = canonical_name(key.replace(".", "/"), stream)
        if hit is not None:
            canonical, inner = hit
            return canonical, Alias(key, canonical, inner.framework if inner else "dotted",
                                    inner.transform if inner else None, "dots read as '/'")
    return None


# --- the user's own key names ----------------------------------------------------------------

#: Where a user column map comes from, as the analysis lists it.
USER_MAP_CONFIG = "config [columns]"
USER_MAP_OPTION = "--map"


@record(frozen=True)
class UserColumn:
    """A user's own key name for a canonical metric (``[columns]`` in a config, ``--map``).

    ``canonical`` is the name the key feeds (after the unit is applied: ``unit = "sequence"`` on
    ``kl`` feeds ``kl_seq``), ``transform`` names an entry of :data:`TRANSFORMS` that turns the
    values into the canonical unit, ``origin`` says where the map was given.
    """

    source: str
    canonical: str
    unit: str | None = None
    transform: str | None = None
    origin: str = USER_MAP_CONFIG

    @property
    def note(self) -> str:
        unit = f", unit {self.unit}" if self.unit else ""
        return f"mapped by {self.origin}{unit}"


#: Units a user may give for a key, per canonical unit: ``unit -> (canonical sibling or None,
#: transform or None)``. The canonical unit itself (or its short form) is always accepted.
_USER_UNITS: dict[str, dict[str, tuple[str | None, str | None]]] = {
    "kl": {"token": (None, None), "sequence": ("kl_seq", None), "nats/sequence": ("kl_seq", None),
           "sqrt": (None, "square")},
    "kl_seq": {"sequence": (None, None), "token": ("kl", None), "nats/token": ("kl", None)},
    "entropy": {"token": (None, None), "sequence": ("entropy_seq", None), "nats/sequence": ("entropy_seq", None)},
    "entropy_seq": {"sequence": (None, None), "token": ("entropy", None), "nats/token": ("entropy", None)},
}
_BY_UNIT: dict[str, dict[str, tuple[str | None, str | None]]] = {
    "1": {"fraction": (None, None), "percent": (None, "times_0.01"), "%": (None, "times_0.01")},
    "s": {"ms": (None, "times_1e-3")},
}


def _user_units(canonical: str) -> dict[str, tuple[str | None, str | None]]:
    metric = METRICS.get(canonical)
    units: dict[str, tuple[str | None, str | None]] = {}
    if metric is not None:
        units[metric.unit] = (None, None)
        units.update(_BY_UNIT.get(metric.unit, {}))
    units.update(_USER_UNITS.get(canonical, {}))
    return units


def _user_target(canonical: str) -> bool:
    return canonical in METRICS or (canonical.startswith(REWARD_COMPONENT_PREFIX)
                                    and len(canonical) > len(REWARD_COMPONENT_PREFIX))


def user_column(source: str, canonical: str, unit: str | None = None,
                origin: str = USER_MAP_CONFIG) -> UserColumn:
    """One checked user column map; a :class:`~forensics.errors.ConfigError` names what is wrong.

    >>> user_column("policy/kl_divergence", "kl").canonical
    'kl'
    >>> c = user_column("kl_sum", "kl", "sequence"); c.canonical, c.transform
    ('kl_seq', None)
    >>> user_column("clipped_pct", "clip_frac", "percent").transform
    'times_0.01'
    >>> user_column("x", "klx")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    forensics.errors.ConfigError: config [columns]: x = 'klx': not a canonical metric name ...
    """
    from .errors import ConfigError

    if not isinstance(source, str) or not source:
        raise ConfigError(f"{origin}: a source key must be a non-empty string, got {source!r}")
    if not isinstance(canonical, str) or not _user_target(canonical):
        from .errors import did_you_mean

        raise ConfigError(f"{origin}: {source} = {canonical!r}: not a canonical metric name"
                          f"{did_you_mean(canonical, METRICS)} (forensics rules --metrics lists them)")
    transform = None
    if unit is not None:
        units = _user_units(canonical)
        if not isinstance(unit, str) or unit not in units:
            raise ConfigError(f"{origin}: {source} = {canonical!r}: unit {unit!r} is not one forensics can "
                              f"convert; allowed for {canonical}: " + ", ".join(sorted(units) or ["none"]))
        sibling, transform = units[unit]
        canonical = sibling or canonical
    return UserColumn(source, canonical, unit, transform, origin)


def user_columns(table: Any, origin: str = USER_MAP_CONFIG) -> dict[str, UserColumn]:
    """The ``[columns]`` table of a config: ``source = "canonical"`` or ``source = {name =
    "canonical", unit = "..."}``.

    >>> cols = user_columns({"iteration": "step", "gnorm": {"name": "grad_norm"},
    ...                      "kl_sum": {"name": "kl", "unit": "sequence"}})
    >>> {k: c.canonical for k, c in cols.items()}
    {'iteration': 'step', 'gnorm': 'grad_norm', 'kl_sum': 'kl_seq'}
    """
    from .errors import ConfigError

    if not isinstance(table, dict):
        raise ConfigError(f"{origin} must be a table of source key = canonical name")
    out: dict[str, UserColumn] = {}
    taken: dict[str, str] = {}
    for source, spec in table.items():
        if isinstance(spec, dict):
            extra = set(spec) - {"name", "unit"}
            if extra or "name" not in spec:
                raise ConfigError(f"{origin}: {source} = {spec!r}: takes name (required) and unit")
            col = user_column(source, spec["name"], spec.get("unit"), origin)
        else:
            col = user_column(source, spec, None, origin)
        if col.canonical in taken:
            raise ConfigError(f"{origin}: {source} and {taken[col.canonical]} both map to {col.canonical}: "
                              "one source per canonical name")
        taken[col.canonical] = source
        out[source] = col
    return out


def parse_map_option(text: str) -> UserColumn:
    """``--map SRC=CANONICAL`` (or ``SRC=CANONICAL:UNIT``): split at the last ``=`` (a source key
    may hold one; a canonical name never does).

    >>> c = parse_map_option("train/my kl=kl:sequence"); c.source, c.canonical
    ('train/my kl', 'kl_seq')
    """
    from .errors import UsageError

    source, sep, target = text.rpartition("=")
    if not sep or not source or not target:
        raise UsageError(f"--map {text!r}: expected SRC=CANONICAL or SRC=CANONICAL:UNIT "
                         "(forensics rules --metrics lists the canonical names)")
    name, _, unit = target.partition(":")
    return user_column(source, name, unit or None, USER_MAP_OPTION)


def merge_user_columns(*maps: dict[str, UserColumn]) -> dict[str, UserColumn]:
    """Later maps win per source key (``--map`` over ``[columns]``); two sources for one
    canonical name are a :class:`~forensics.errors.ConfigError`."""
    from .errors import ConfigError

    out: dict[str, UserColumn] = {}
    for m in maps:
        for src, col in m.items():
            out.pop(src, None)
            clash = next((c for c in out.values() if c.canonical == col.canonical), None)
            if clash is not None:
                if col.origin == clash.origin:
                    raise ConfigError(f"{col.origin}: {src} and {clash.source} both map to {col.canonical}: "
                                      "one source per canonical name")
                out.pop(clash.source)  # the later map (the command line) wins
            out[src] = col
    return out


@record
class ColumnMapping:
    """How the keys of one source were mapped: ``source -> canonical``, and the keys left as they are.

    ``shadowed`` lists source keys that mapped to a canonical name another, higher-priority key of
    the same source already took; they are carried through under their own name.
    """

    mapping: dict[str, str] = field(default_factory=dict)
    transforms: dict[str, str] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    shadowed: list[str] = field(default_factory=list)
    #: unit and meaning notes of the aliases used (``source -> note``), e.g. a per-sequence sum
    notes: dict[str, str] = field(default_factory=dict)
    #: keys mapped by the user's own column map, and where it was given (``source -> origin``)
    user: dict[str, str] = field(default_factory=dict)

    def map_user(self, key: str, col: UserColumn) -> None:
        """Map ``key`` as the user's own column map says (its origin, note and transform kept)."""
        self.mapping[key] = col.canonical
        self.user[key] = col.origin
        self.notes[key] = col.note
        if col.transform:
            self.transforms[key] = col.transform

    def map_alias(self, key: str, canonical: str, alias: Alias | None) -> None:
        """Map ``key`` to ``canonical``, directly or through ``alias`` (its transform and note kept)."""
        self.mapping[key] = canonical
        if alias is not None and alias.transform:
            self.transforms[key] = alias.transform
        if alias is not None and alias.note:
            self.notes[key] = alias.note

    def target(self, key: str) -> str:
        """Column name a source key is stored under."""
        return self.mapping.get(key, key)

    def source_of(self, canonical: str) -> str | None:
        """Source key that feeds ``canonical``, if any."""
        for src, dst in self.mapping.items():
            if dst == canonical:
                return src
        return None

    def to_dict(self) -> dict[str, object]:
        return {
            "mapping": dict(sorted(self.mapping.items())),
            "transforms": dict(sorted(self.transforms.items())),
            "unmapped": sorted(self.unmapped),
            "shadowed": sorted(self.shadowed),
            "notes": dict(sorted(self.notes.items())),
            **({"user_mapped": dict(sorted(self.user.items()))} if self.user else {}),
        }


_ALIAS_RANK = {a.source: i for i, a in enumerate(ALIASES)}


def alias_rank(key: str, alias: Alias | None) -> int:
    """Priority of ``key`` among the keys that map to one canonical name (lower wins): the
    canonical name itself (-1), then aliases in the order of :data:`ALIASES`."""
    return -1 if alias is None else _ALIAS_RANK.get(key, len(_ALIAS_RANK))

"""The run's context, read from the logs: the algorithm and the trainer's settings.

A log rarely says "this is GRPO", but its key set does: TRL's GRPO logs ``frac_reward_zero_std``,
its DPO ``rewards/margins``, its PPO ``loss/value_avg``; veRL prints its whole config
(``algorithm.adv_estimator``, the learning rate, the clip range, where the KL penalty sits). The
context fills the fields of :class:`~forensics.config.RunMeta` that the user did not set, and
records where each value came from, so the analysis can say "algorithm grpo, inferred from the
key set (frac_reward_zero_std, completions/mean_length)".

Precedence, highest first: the command line and the config file, run.json, the trainer's config
as the log prints it, inference from the key set. Nothing is unpickled (TRL's
``training_args.bin`` is never read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field, fields
from typing import Any

from ..config import RunMeta, algorithm_family, normalise_algorithm
from ..records import record
from .trainer_keys import printed_keys

__all__ = ["RunContext", "infer_context", "key_set_algorithm", "loss_is_progress"]


def loss_is_progress(name: str, family: str | None) -> bool:
    """Whether a loss series measures progress, so that its spikes and rises mean something: the
    one rule of the losses tracker and the window check (a window cannot alert on a loss the
    trackers set aside).

    A policy-gradient surrogate does not: PPO's policy loss swings around zero with the
    advantages of each batch, a group-relative (GRPO, RLOO) loss is zero-mean noise plus
    beta x KL. Only a preference loss (DPO's -log sigmoid of the margin), the value loss (the
    critic's fit) and the entropy bonus are judged; when the algorithm is unknown, the total
    loss is not judged either (it may be any of them).

    >>> loss_is_progress("loss", "preference"), loss_is_progress("loss", "group")
    (True, False)
    >>> loss_is_progress("policy_loss", "critic"), loss_is_progress("value_loss", None)
    (False, True)
    """
    if name in ("value_loss", "entropy_loss"):
        return True
    return name == "loss" and family == "preference"


@record(frozen=True)
class _Signature:
    """Keys that identify an algorithm: any one of ``any_of`` (and every key of ``all_of``)."""

    algorithm: str | None
    family: str
    any_of: tuple[str, ...]
    all_of: tuple[str, ...] = ()
    none_of: tuple[str, ...] = ()
    note: str = ""


#: Stands for any per-reward-function key (TRL GRPO ``rewards/<func>``, ``rewards/<func>/mean``).
_REWARD_FUNC = "rewards/<func>"
_REWARD_FUNC_KEY = re.compile(r"^rewards/(?!(?:chosen|rejected|margins|accuracies)(?:/|$))[^/]+(?:/mean)?$")

# Order matters: the first signature that matches wins. Preference optimisation first (its
# implicit rewards share names with RL rewards), then actor-critic (a value loss), then the
# critic-free group methods. Key sets from FORMATS.md section 1 and the trainers' sources.
_SIGNATURES = (
    _Signature("orpo", "preference", ("log_odds_ratio", "log_odds_chosen", "odds_ratio_loss")),
    _Signature("kto", "preference", ("rewards/chosen_sum", "rewards/rejected_sum", "count/chosen",
                                     "logps/chosen_sum")),
    _Signature("kto", "preference", ("rewards/margins", "rewards/chosen"), all_of=("kl",),
               none_of=("rewards/accuracies", "objective/kl"),
               note="TRL KTO: a batch KL estimate, no pairwise accuracy"),
    _Signature("online_dpo", "preference", ("objective/scores_margin",)),
    _Signature("online_dpo", "preference", ("rewards/margins",), all_of=("objective/kl",)),
    _Signature("dpo", "preference", ("rewards/margins", "rewards/accuracies", "rewards/chosen",
                                     "logps/chosen", "chosen_reward", "train/rewards_chosen_mean",
                                     "preference_loss"),
               note="IPO, SimPO and CPO log the same keys"),
    _Signature("ppo", "critic", ("loss/value_avg", "val/clipfrac_avg", "ppo/loss/value",
                                 "critic/vf_loss", "critic_loss", "cri_loss", "Critic Loss",
                                 "losses/value_loss", "value_loss")),
    _Signature("rloo", "group", ("objective/rlhf_reward",), all_of=("policy/approxkl_avg",),
               note="TRL RLOO <= 0.21 (PPO-style keys without a value loss)"),
    _Signature("grpo", "group", ("frac_reward_zero_std",),
               note="TRL's RLOO >= 0.23 logs the identical key set, so a TRL RLOO run reads as GRPO; "
                    "both are group methods"),
    _Signature("grpo", "group", ("completion_length", "completions/mean_length"),
               all_of=("reward", "reward_std", _REWARD_FUNC),
               note="TRL GRPO 0.14-0.17, before frac_reward_zero_std (and Unsloth's GRPO)"),
    _Signature(None, "group", ("group_size", "group_reward_std", "actor/kl_loss")),
    _Signature(None, "group", ("env/all/by_group/frac_mixed",),
               note="Tinker cookbook RL: rewards centred within each group of rollouts"),
)

#: veRL's ``algorithm.adv_estimator`` -> algorithm (``gae`` is PPO with a critic).
_VERL_ESTIMATORS = {
    "gae": "ppo", "grpo": "grpo", "rloo": "rloo", "rloo_vectorized": "rloo",
    "reinforce_plus_plus": "reinforce_pp", "reinforce_plus_plus_baseline": "reinforce_pp",
    "remax": "remax", "gpg": "gpg", "grpo_passk": "grpo", "dr_grpo": "dr_grpo",
}

#: OpenRLHF's ``--advantage_estimator`` -> algorithm (``group_norm`` is GRPO's normalisation).
_OPENRLHF_ESTIMATORS = {
    "gae": "ppo", "group_norm": "grpo", "rloo": "rloo", "reinforce": "reinforce_pp",
    "reinforce_baseline": "reinforce_pp", "dr_grpo": "dr_grpo",
}
#: Config keys that name the advantage estimator, with their value -> algorithm tables.
_ESTIMATOR_KEYS = (("algorithm.adv_estimator", _VERL_ESTIMATORS), ("advantage_estimator", _OPENRLHF_ESTIMATORS))

#: The RunMeta fields read from a trainer's printed config, under any trainer's key for them
#: (:data:`forensics.analysis.trainer_keys.CONFIG_KEYS`, dotted as the log prints them; first
#: match wins).
_CONFIG_FIELDS = ("learning_rate", "max_grad_norm", "clip_range", "max_length", "group_size")


@record
class RunContext:
    """What the logs say about the run, with where each value came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    #: fields whose value is the framework's default (the log does not record it)
    defaults: set[str] = field(default_factory=set)

    def set(self, name: str, value: Any, source: str) -> None:
        if name not in self.values and value is not None:
            self.values[name] = value
            self.sources[name] = source

    def apply(self, meta: RunMeta, explicit: dict[str, str]) -> tuple[RunMeta, dict[str, dict[str, Any]]]:
        """``meta`` with the unset fields filled from the context, and the provenance of every
        field that has a value (``explicit`` names the source of the fields the user set)."""
        provenance: dict[str, dict[str, Any]] = {}
        if meta.algorithm is not None and meta.family is None:
            meta.family = algorithm_family(meta.algorithm)
            explicit = {**explicit, "family": explicit.get("algorithm", "run metadata")}
        names = {f.name for f in fields(RunMeta)} - {"config", "kl_target_unit", "assumed"}
        for name in sorted(names):
            current = getattr(meta, name)
            if current is not None:
                provenance[name] = {"value": current, "from": explicit.get(name, "run metadata")}
            elif name in self.values:
                setattr(meta, name, self.values[name])
                provenance[name] = {"value": self.values[name], "from": self.sources[name]}
                if name in self.defaults:
                    meta.assumed = sorted({*meta.assumed, name})
        return meta, provenance


def key_set_algorithm(keys: Iterable[str]) -> tuple[str | None, str | None, str]:
    """``(algorithm, family, evidence)`` from a log's key set; ``(None, None, "")`` if unknown.

    >>> key_set_algorithm(["loss", "rewards/margins", "logps/chosen"])[:2]
    ('dpo', 'preference')
    >>> key_set_algorithm(["kl", "reward", "frac_reward_zero_std"])[:2]
    ('grpo', 'group')
    >>> key_set_algorithm(["objective/kl", "loss/value_avg", "policy/approxkl_avg"])[:2]
    ('ppo', 'critic')
    >>> key_set_algorithm(["completion_length", "kl", "reward", "reward_std", "rewards/f1"])[:2]
    ('grpo', 'group')
    >>> key_set_algorithm(["loss", "grad_norm"])
    (None, None, '')
    """
    present = _present(keys)
    for sig in _SIGNATURES:
        hits = sorted(k for k in sig.any_of if k in present)
        if (not hits or not all(k in present for k in sig.all_of)
                or any(k in present for k in sig.none_of)):
            continue
        evidence = ", ".join(hits + [present.get(k) or k for k in sig.all_of])
        what = sig.algorithm or f"a {sig.family} method"
        note = f"; {sig.note}" if sig.note else ""
        return sig.algorithm, sig.family, f"inferred from the key set ({evidence}: {what}{note})"
    return None, None, ""


def _present(keys: Iterable[str]) -> dict[str, str]:
    """The keys (a logger's ``train/`` prefix dropped), each standing for itself, and
    :data:`_REWARD_FUNC` for the first per-function reward key."""
    present: dict[str, str] = {}
    for key in keys:
        bare = key[len("train/"):] if key.startswith("train/") else key
        present.setdefault(bare, key)
        if _REWARD_FUNC_KEY.match(bare):
            present.setdefault(_REWARD_FUNC, key)
    return present


def _first(config: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for key in keys:
        value = config.get(key)
        if value is not None and not isinstance(value, (dict, list)):
            return key, value
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return None


def _from_config(ctx: RunContext, config: dict[str, Any], origin: str) -> None:
    """Fields read from a trainer's printed config (veRL's dotted keys, OpenRLHF's arguments)."""
    where = f"trainer config ({origin})" if origin else "trainer config"
    for key, table in _ESTIMATOR_KEYS:
        estimator = config.get(key)
        if isinstance(estimator, str):
            algo = table.get(estimator.lower()) or normalise_algorithm(estimator)
            if algo is not None:
                ctx.set("algorithm", algo, f"{where}: {key}={estimator}")
                ctx.set("family", algorithm_family(algo), f"{where}: {key}={estimator}")
    for name in _CONFIG_FIELDS:
        hit = _first(config, printed_keys(name))
        if hit is not None and _number(hit[1]) is not None:
            ctx.set(name, _number(hit[1]), f"{where}: {hit[0]}={hit[1]}")
    _kl_from_verl(ctx, config, where)
    _model_size(ctx, config, where)


#: Config keys that name the policy model (a path or a hub name), first match wins.
_MODEL_NAME_KEYS = ("actor_rollout_ref.model.path", "actor_model_name_or_path", "pretrain",
                    "model_name_or_path", "model._name_or_path", "adapter.base_model_name_or_path")
#: Config keys that give the LoRA rank (0: the whole model trains).
_LORA_KEYS = ("actor_rollout_ref.model.lora_rank", "actor_lora_dim", "lora_rank", "adapter.r")
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


def size_from_name(name: str) -> float | None:
    """A model's parameter count from its name (the last part of a path), or None.

    >>> size_from_name("/models/Qwen2.5-7B-Instruct"), size_from_name("EleutherAI/pythia-160m")
    (7000000000.0, 160000000.0)
    >>> size_from_name("output/actor-models/1.3b"), size_from_name("gpt2"), size_from_name("v0.1")
    (1300000000.0, None, None)
    """
    m = _SIZE_IN_NAME.search(name.rstrip("/").rsplit("/", 1)[-1])
    if m is None:
        return None
    return float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6)


def params_from_model_config(config: dict[str, Any]) -> float | None:
    """The parameters of a decoder-only transformer from its Hugging Face config (``model.*``
    keys): embeddings, attention, the MLP (gated in Llama-style models) and the norms.

    >>> params_from_model_config({"model.vocab_size": 77, "model.hidden_size": 64,
    ...     "model.num_hidden_layers": 2, "model.intermediate_size": 128, "model.num_attention_heads": 4,
    ...     "model.num_key_value_heads": 4, "model.hidden_act": "silu", "model.tie_word_embeddings": False})
    92096.0
    """
    def get(*names: str) -> float | None:
        hit = _first(config, tuple(f"model.{n}" for n in names))
        return _number(hit[1]) if hit else None

    if (n := get("num_parameters")) is not None:
        return n
    vocab, width, layers = get("vocab_size"), get("hidden_size", "n_embd", "d_model"), \
        get("num_hidden_layers", "n_layer", "num_layers")
    if vocab is None or width is None or layers is None:
        return None
    heads = get("num_attention_heads") or 1.0
    head_dim = get("head_dim") or width / heads
    kv = (get("num_key_value_heads") or heads) * head_dim
    ffn = get("intermediate_size", "n_inner", "ffn_dim") or 4 * width
    gated = str(config.get("model.hidden_act", "")).lower() in ("silu", "swiglu", "swish")
    experts = get("num_experts", "num_local_experts") or 1.0
    attention = 2 * width * heads * head_dim + 2 * width * kv
    mlp = (3 if gated else 2) * width * ffn * experts
    tied = config.get("model.tie_word_embeddings") is not False
    return float(layers * (attention + mlp + 2 * width) + width + vocab * width * (1 if tied else 2))


def _model_size(ctx: RunContext, config: dict[str, Any], where: str) -> None:
    """``model_params`` and ``lora`` from a model config (config.json, adapter_config.json), a
    model name with its size (Qwen2.5-7B) or a LoRA rank in the trainer's config."""
    params = params_from_model_config(config)
    if params is not None:
        ctx.set("model_params", params, f"{where}: the model's architecture")
    name = _first(config, _MODEL_NAME_KEYS)
    if name is not None and isinstance(name[1], str) and (size := size_from_name(name[1])) is not None:
        ctx.set("model_params", size, f"{where}: {name[0]}={name[1]}")
    rank = _first(config, _LORA_KEYS)
    if rank is not None and isinstance(rank[1], (int, float)) and not isinstance(rank[1], bool):
        ctx.set("lora", rank[1] > 0, f"{where}: {rank[0]}={rank[1]}")
    elif "adapter.peft_type" in config:
        ctx.set("lora", True, f"{where}: adapter_config.json (peft_type {config['adapter.peft_type']})")
    elif params is not None:
        ctx.set("lora", False, f"{where}: the whole model's config.json, no adapter_config.json")


def _kl_from_verl(ctx: RunContext, config: dict[str, Any], where: str) -> None:
    in_reward = config.get("algorithm.use_kl_in_reward")
    in_loss = config.get("actor_rollout_ref.actor.use_kl_loss")
    if in_reward is None and in_loss is None and "algorithm.kl_ctrl.kl_coef" not in config:
        return
    if in_reward is None:  # veRL <= 0.3 (0.1 has no use_kl_loss): the penalty sat in the reward
        in_reward = not in_loss and "algorithm.kl_ctrl.kl_coef" in config  # unless the KL loss was on
    if in_reward:
        ctx.set("kl_penalty", "reward", f"{where}: algorithm.use_kl_in_reward={in_reward}")
        coef = _number(config.get("algorithm.kl_ctrl.kl_coef"))
        ctx.set("kl_coef_init", coef, f"{where}: algorithm.kl_ctrl.kl_coef")
        kind = config.get("algorithm.kl_ctrl.type")
        if kind in ("fixed", "adaptive"):
            ctx.set("kl_controller", kind, f"{where}: algorithm.kl_ctrl.type={kind}")
            if kind == "adaptive":
                # veRL feeds the controller the per-token mean KL (SIGNATURES section 4.3)
                ctx.set("kl_target", _number(config.get("algorithm.kl_ctrl.target_kl")),
                        f"{where}: algorithm.kl_ctrl.target_kl (per token)")
                ctx.set("kl_horizon", _number(config.get("algorithm.kl_ctrl.horizon")),
                        f"{where}: algorithm.kl_ctrl.horizon")
    elif in_loss:
        ctx.set("kl_penalty", "loss", f"{where}: actor_rollout_ref.actor.use_kl_loss=True")
        ctx.set("kl_coef_init", _number(config.get("actor_rollout_ref.actor.kl_loss_coef")),
                f"{where}: actor_rollout_ref.actor.kl_loss_coef")
        ctx.set("kl_controller", "fixed", f"{where}: the KL loss has a fixed coefficient")
    else:
        ctx.set("kl_penalty", "none", f"{where}: use_kl_in_reward=False, use_kl_loss=False")


def _from_key_set(ctx: RunContext, keys: list[str], fmt: str) -> None:
    algo, family, evidence = key_set_algorithm(keys)
    if algo is None and fmt == "llamafactory" and "reward" in keys:
        algo, family, evidence = "ppo", "critic", "inferred: LLaMA-Factory logs reward from its PPO stage only"
    ctx.set("algorithm", algo, evidence)
    ctx.set("family", family, evidence)
    if fmt in ("hf-trainer-state", "hf-console"):
        # the Hugging Face Trainer (and TRL's configs, which inherit its arguments) clips
        # gradients at 1.0 unless told otherwise; the log does not record the setting
        ctx.set("max_grad_norm", 1.0, "assumed: transformers' TrainingArguments default "
                                      "(max_grad_norm=1.0; not recorded in the log)")
        ctx.defaults.add("max_grad_norm")
        # TRL: GRPO and RLOO log `kl` only when beta != 0 (the KL term sits in the loss); PPO
        # puts the KL penalty in the reward (objective/kl, objective/non_score_reward)
        if algo in ("grpo", "rloo") or family == "group":
            if "kl" in keys:
                ctx.set("kl_penalty", "loss", "inferred: TRL GRPO/RLOO log kl only when beta > 0")
            else:
                ctx.set("kl_penalty", "none", "inferred: TRL GRPO/RLOO log no kl when beta = 0")
        elif algo in ("ppo", "online_dpo") or "objective/non_score_reward" in keys:
            ctx.set("kl_penalty", "reward", "inferred: TRL PPO puts the KL penalty in the reward")


def infer_context(keys: Iterable[str], fmt: str = "", run_config: dict[str, Any] | None = None,
                  run_config_origin: str = "") -> RunContext:
    """The run context from the keys of a log's first row, its format and its printed config."""
    ctx = RunContext()
    if run_config:
        _from_config(ctx, run_config, run_config_origin)
    # in the log's order, each once: the evidence names the first per-function reward key of
    # the log (a set's order changed with the interpreter's string hashing, run to run)
    _from_key_set(ctx, list(dict.fromkeys(keys)), fmt)
    return ctx


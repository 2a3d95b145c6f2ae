"""The trainers' own configuration keys for the parameters forensics recommends changing.

A recommendation is only useful in the trainer's own words: ``beta`` in a TRL ``GRPOConfig``,
``kl_coef`` in a TRL ``PPOConfig``, ``actor_rollout_ref.actor.optim.lr`` in veRL,
``--actor_learning_rate`` for OpenRLHF. The trainer is chosen from the format that was read (and
the algorithm); a parameter the trainer has no key for is given in words, never under a made-up
key. Every key below was read from the trainer's source:

* TRL: ``trl/trainer/grpo_config.py`` (``beta``, ``epsilon``, ``epsilon_high``, ``temperature``,
  ``max_completion_length``), ``rloo_config.py`` (the same names since v0.23; earlier RLOO and
  PPO: ``kl_coef``, ``cliprange``), ``ppo_config.py`` / ``OnPolicyConfig`` in ``trainer/utils.py``
  (``kl_coef``, ``cliprange``, ``temperature``, ``response_length``), ``dpo_config.py``
  (``beta``); ``learning_rate``, ``max_grad_norm``, ``per_device_train_batch_size`` come from
  transformers' ``TrainingArguments``.
* veRL: ``verl/trainer/config/ppo_trainer.yaml``: ``actor_rollout_ref.actor.optim.lr``,
  ``actor_rollout_ref.actor.kl_loss_coef`` (KL as a loss, GRPO) or
  ``algorithm.kl_ctrl.kl_coef`` (KL in the reward, PPO), ``algorithm.kl_ctrl.horizon``,
  ``actor_rollout_ref.actor.grad_clip``, ``actor_rollout_ref.rollout.temperature``,
  ``data.max_response_length``, ``actor_rollout_ref.actor.clip_ratio`` (and ``clip_ratio_high``),
  ``data.train_batch_size``.
* OpenRLHF: ``openrlhf/cli/train_ppo_ray.py`` arguments ``--actor_learning_rate``,
  ``--init_kl_coef``, ``--kl_horizon``, ``--max_norm``, ``--temperature``, ``--generate_max_len``,
  ``--eps_clip``, ``--train_batch_size``.
* The canonical streams: ``run.json`` fields (``kl_coef_init``, ``kl_horizon``,
  ``max_grad_norm``, ``max_length``) and the keys its ``config`` object already holds.

A veRL key that the log's printed config lacks is new to Hydra's structured config, which rejects
it unless it is written ``+key=value``; the command line does so. Where the log records neither
the value nor the setting, a trainer's documented default stands in (``defaults``, TRL's
``beta=0.1`` of ``DPOConfig`` and ``KTOConfig``), and the advice says it is assumed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from ..config import algorithm_family
from ..records import record

__all__ = ["CONFIG_KEYS", "PARAMETERS", "ConfigKey", "Trainer", "config_keys", "printed_keys", "set_key",
           "trainer_for", "trainer_keys"]

#: The parameters recommendations change, with their names in words.
PARAMETERS = {
    "learning_rate": "learning rate",
    "kl_coef": "KL coefficient",
    "kl_horizon": "KL controller horizon",
    "max_grad_norm": "gradient clipping threshold",
    "temperature": "sampling temperature",
    "max_length": "maximum response length",
    "clip_range": "clip range",
    "clip_range_high": "upper clip range (clip-higher)",
    "batch_size": "batch size",
    "reward_weights": "reward weights",
}

@record(frozen=True)
class ConfigKey:
    """One key a parameter is stored under, and who uses that spelling: the key sets of the
    trainers that write it (:data:`KEY_SETS`), and ``generic`` for a spelling a free-form config
    (run.json's ``config``, a config passed to the online health check) may use."""

    key: str
    used_by: tuple[str, ...]


_K = ConfigKey
#: TRL's trainers inherit transformers' TrainingArguments.
_HF = ("transformers", "trl_group", "trl_on_policy", "trl_dpo")

#: The one table of trainer config keys: parameter -> its keys, in the order a config is searched
#: (first match wins). Every reader and writer derives from it: the run context reads the
#: trainers' keys from a printed config (:func:`printed_keys`), the online health check and
#: run.json's ``config`` the keys they may hold (:func:`config_keys`), and a recommendation writes
#: each trainer's first key (:func:`trainer_keys`).
CONFIG_KEYS: dict[str, tuple[ConfigKey, ...]] = {
    "learning_rate": (_K("actor_rollout_ref.actor.optim.lr", ("verl",)),
                      _K("actor_learning_rate", ("openrlhf",)),
                      _K("learning_rate", (*_HF, "generic")),
                      _K("lr", ("generic",))),
    "kl_coef": (_K("kl_coef", ("trl_on_policy",)),
                _K("beta", ("trl_group", "trl_dpo")),
                _K("init_kl_coef", ("openrlhf",)),
                # veRL: KL as a loss (GRPO) or in the reward (PPO); trainer_for picks by the log
                _K("actor_rollout_ref.actor.kl_loss_coef", ("verl_kl_loss",)),
                _K("algorithm.kl_ctrl.kl_coef", ("verl_kl_reward",))),
    "kl_horizon": (_K("algorithm.kl_ctrl.horizon", ("verl",)),
                   _K("kl_horizon", ("openrlhf",))),
    "max_grad_norm": (_K("actor_rollout_ref.actor.grad_clip", ("verl",)),
                      _K("actor_rollout_ref.actor.optim.clip_grad", ("verl_megatron",)),
                      _K("max_norm", ("openrlhf",)),
                      _K("max_grad_norm", _HF)),
    "temperature": (_K("temperature", ("trl_group", "trl_on_policy", "openrlhf", "generic")),
                    _K("actor_rollout_ref.rollout.temperature", ("verl",))),
    "max_length": (_K("data.max_response_length", ("verl",)),
                   _K("actor_rollout_ref.rollout.response_length", ("verl_rollout",)),
                   _K("generate_max_len", ("openrlhf",)),
                   _K("max_answer_seq_len", ("deepspeed_chat",)),
                   _K("max_completion_length", ("trl_group",)),
                   _K("response_length", ("trl_on_policy",))),
    "clip_range": (_K("actor_rollout_ref.actor.clip_ratio", ("verl",)),
                   _K("actor_rollout_ref.actor.clip_ratio_low", ("verl_dual_clip",)),
                   _K("eps_clip", ("openrlhf", "generic")),
                   _K("cliprange", ("trl_on_policy", "generic")),
                   _K("epsilon", ("trl_group",)),
                   _K("clip_range", ("generic",)),
                   _K("clip_eps", ("generic",))),
    "clip_range_high": (_K("actor_rollout_ref.actor.clip_ratio_high", ("verl",)),
                        _K("epsilon_high", ("trl_group",))),
    "reward_weights": (_K("reward_weights", ("trl_group",)),),
    "batch_size": (_K("data.train_batch_size", ("verl",)),
                   _K("train_batch_size", ("openrlhf",)),
                   _K("per_device_train_batch_size", _HF),
                   _K("batch_size", ("generic",))),
    "group_size": (_K("actor_rollout_ref.rollout.n", ("verl",)),
                   _K("n_samples_per_prompt", ("openrlhf",)),
                   _K("num_generations", ("trl_group",))),
}


def trainer_keys(key_set: str) -> dict[str, str]:
    """Parameter -> the key a trainer's key set writes it under (its first key in the table).

    >>> trainer_keys("trl_dpo")
    {'learning_rate': 'learning_rate', 'kl_coef': 'beta', 'max_grad_norm': 'max_grad_norm', \
'batch_size': 'per_device_train_batch_size'}
    """
    out: dict[str, str] = {}
    for parameter, keys in CONFIG_KEYS.items():
        key = next((k.key for k in keys if key_set in k.used_by), None)
        if key is not None and parameter in PARAMETERS:
            out[parameter] = key
    return out


def printed_keys(parameter: str) -> tuple[str, ...]:
    """The keys a trainer's printed config may hold ``parameter`` under (any trainer's spelling)."""
    return tuple(k.key for k in CONFIG_KEYS.get(parameter, ()) if set(k.used_by) - {"generic"})


def config_keys(parameter: str, generic_only: bool = False) -> tuple[str, ...]:
    """Every key a config may hold ``parameter`` under (``generic_only``: the spellings of a
    free-form config, as run.json's ``config``)."""
    return tuple(k.key for k in CONFIG_KEYS.get(parameter, ()) if not generic_only or "generic" in k.used_by)


_RUN_JSON = {"kl_coef": "kl_coef_init", "kl_horizon": "kl_horizon", "max_grad_norm": "max_grad_norm",
             "max_length": "max_length"}


@record(frozen=True)
class Trainer:
    """A trainer's configuration: its name, the config it reads, parameter -> key, and how a
    change is written (``style``: ``fields`` for a dataclass's fields, ``dotted`` for Hydra
    overrides, ``arguments`` for command-line flags, ``run.json`` for the canonical metadata)."""

    name: str
    config: str
    style: str
    keys: Mapping[str, str] = field(default_factory=dict)
    #: the keys of the config the log printed (veRL): a key outside it is new to Hydra
    printed: frozenset[str] = frozenset()
    #: parameter -> the trainer's default, for a setting the log does not record
    defaults: Mapping[str, float] = field(default_factory=dict)

    def key(self, parameter: str) -> str | None:
        return self.keys.get(parameter)

    def new_key(self, parameter: str) -> bool:
        """Whether the key is missing from the config the log printed (Hydra needs ``+``)."""
        key = self.key(parameter)
        return bool(self.style == "dotted" and self.printed and key and key not in self.printed)

    def command_line(self, parameter: str, value: Any) -> str | None:
        """The change as the trainer's command line takes it (None for run.json)."""
        key = self.key(parameter)
        if key is None:
            return None
        if self.style == "arguments":
            return f"--{key} {value}"
        if self.style == "dotted":
            return f"{'+' if self.new_key(parameter) else ''}{key}={value}"
        if self.style == "fields":
            return f"--{key} {value}"  # HfArgumentParser turns every field into a flag
        return None


#: GRPOConfig's and RLOOConfig's sampling temperature (TRL 1.16), which the log does not record
_GROUP_DEFAULTS = {"temperature": 1.0}


def _trl(algorithm: str | None, source_keys: Iterable[str]) -> Trainer:
    algo = algorithm or ""
    family = algorithm_family(algo)
    if algo == "ppo":
        return Trainer("TRL", "PPOConfig", "fields", trainer_keys("trl_on_policy"))
    if algo == "rloo":
        if any(k.startswith("objective/") for k in source_keys):  # RLOO before v0.23 (on-policy API)
            return Trainer("TRL", "RLOOConfig (before v0.23)", "fields", trainer_keys("trl_on_policy"))
        return Trainer("TRL", "RLOOConfig", "fields", trainer_keys("trl_group"), defaults=_GROUP_DEFAULTS)
    if family == "group":
        return Trainer("TRL", "GRPOConfig", "fields", trainer_keys("trl_group"), defaults=_GROUP_DEFAULTS)
    if family == "preference":
        # TRL's DPOConfig and KTOConfig default beta to 0.1 (ORPO, CPO: their own beta)
        return Trainer("TRL", "DPOConfig" if algo in ("dpo", "ipo", "online_dpo") else f"{algo.upper()}Config",
                       "fields", trainer_keys("trl_dpo"),
                       defaults={"kl_coef": 0.1} if algo in ("dpo", "ipo", "kto") else {})
    return Trainer("TRL", "TrainingArguments (algorithm unknown)", "fields", trainer_keys("transformers"))


def _keys_read(context: Mapping[str, Any] | None, known: Mapping[str, str]) -> dict[str, str]:
    """The config keys the run context took each parameter from (``... clip_grad=1.0``).

    >>> _keys_read({"max_grad_norm": {"value": 1.0, "from": "trainer config: "
    ...             "actor_rollout_ref.actor.optim.clip_grad=1.0"}}, trainer_keys("verl"))
    {'max_grad_norm': 'actor_rollout_ref.actor.optim.clip_grad'}
    """
    out = {}
    for parameter in known:
        entry = (context or {}).get(parameter)
        found = re.findall(r"([A-Za-z_][\w.]*\.[\w]+)=", str(entry.get("from", ""))) \
            if isinstance(entry, dict) else []
        if len(found) == 1:
            out[parameter] = found[0]
    return out


def trainer_for(formats: Iterable[str], algorithm: str | None, source_keys: Iterable[str] = (),
                run_config: Mapping[str, Any] | None = None,
                context: Mapping[str, Any] | None = None,
                printed: Iterable[str] = ()) -> Trainer | None:
    """The trainer whose keys a recommendation uses, from the formats read (first step input
    first), the run's algorithm, the source keys of the log and run.json's ``config``. For veRL,
    a key the run context read from the log's printed config wins over the usual one (a Megatron
    actor's gradient clipping is ``actor.optim.clip_grad``, not ``actor.grad_clip``).

    >>> trainer_for(["hf-trainer-state"], "grpo").key("kl_coef")
    'beta'
    >>> trainer_for(["hf-trainer-state"], "ppo").key("kl_coef")
    'kl_coef'
    >>> trainer_for(["verl-console"], "grpo", ["actor/kl_loss"]).key("kl_coef")
    'actor_rollout_ref.actor.kl_loss_coef'
    >>> trainer_for(["jsonl"], "ppo", run_config={"lr": 0.001}).key("learning_rate")
    'config.lr'
    >>> trainer_for(["wandb-csv"], "ppo") is None
    True
    >>> trainer_for(["verl-console"], "ppo", printed=["actor_rollout_ref.actor.clip_ratio"]
    ...             ).command_line("clip_range_high", 0.28)
    '+actor_rollout_ref.actor.clip_ratio_high=0.28'

    ``printed``: the keys of the config the log printed (veRL), so a key it lacks gets Hydra's ``+``.
    """
    keys = set(source_keys)
    for fmt in formats:
        if fmt == "hf-trainer-state":
            return _trl(algorithm, keys)
        if fmt in ("verl-console", "verl-jsonl"):
            kl_loss = any(k.startswith("actor/kl_loss") for k in keys) or (
                algorithm_family(algorithm) == "group" and not any("kl_penalty" in k for k in keys))
            verl = {**trainer_keys("verl"), **trainer_keys("verl_kl_loss" if kl_loss else "verl_kl_reward")}
            return Trainer("veRL", "veRL config (Hydra overrides)", "dotted",
                           {**verl, **_keys_read(context, verl)}, frozenset(printed))
        if fmt == "openrlhf-console":
            return Trainer("OpenRLHF", "OpenRLHF arguments (train_ppo_ray)", "arguments", trainer_keys("openrlhf"))
        if fmt == "hf-console" and algorithm_family(algorithm or "") is not None:
            return _trl(algorithm, keys)  # TRL's trainers print their metric dicts to the console too
        if fmt in ("llamafactory", "hf-console"):
            return Trainer("Hugging Face Trainer", "TrainingArguments", "fields", trainer_keys("transformers"))
        if fmt in ("jsonl", "parquet", "parquet-parts"):
            found = dict(_RUN_JSON)
            for parameter in PARAMETERS:
                for name in config_keys(parameter, generic_only=True):
                    if name in (run_config or {}):
                        found[parameter] = f"config.{name}"
                        break
            return Trainer("canonical streams", "run.json", "run.json", found)
    return None


def set_key(patch: dict[str, Any], key: str, value: Any, nested: bool) -> None:
    """Put ``value`` under ``key`` in ``patch`` (a dotted key as nested objects when ``nested``).

    >>> p = {}
    >>> set_key(p, "actor_rollout_ref.actor.optim.lr", 8e-07, True); p
    {'actor_rollout_ref': {'actor': {'optim': {'lr': 8e-07}}}}
    """
    if not nested:
        patch[key] = value
        return
    parts = key.split(".")
    node = patch
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value

"""Run metadata, tracker parameters and the TOML config file that overrides them.

A config file looks like::

    [run]                       # run metadata (overrides run.json beside the logs)
    algorithm = "ppo"
    kl_target = 6.0
    kl_target_unit = "sequence"

    [kl_schedule]               # one table per tracker, keys are its parameters
    spike_z = 8.0

    [scan]
    batch_rows = 65536

``forensics rules`` lists every tracker parameter with its default and meaning.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, InputError

__all__ = ["ALGORITHMS", "Config", "RunMeta", "algorithm_family", "load_config", "load_run_meta",
           "normalise_algorithm", "param"]

#: The algorithms forensics knows, by name, and the family that decides which rules apply:
#: ``critic`` (PPO: a value model, KL in the reward, approx_kl and clip fractions), ``group``
#: (critic-free policy gradient with group or leave-one-out baselines: KL, if any, in the loss
#: with a fixed coefficient; the loss is not a progress signal), ``preference`` (offline or online
#: preference optimisation: implicit rewards, margins, accuracies; no sampling KL controller).
ALGORITHMS: dict[str, str] = {
    "ppo": "critic",
    "grpo": "group", "dr_grpo": "group", "dapo": "group", "gspo": "group", "rloo": "group",
    "reinforce_pp": "group", "remax": "group", "gpg": "group",
    "dpo": "preference", "ipo": "preference", "orpo": "preference", "kto": "preference",
    "simpo": "preference", "cpo": "preference", "online_dpo": "preference",
}
_ALGORITHM_SPELLINGS = {"reinforce++": "reinforce_pp", "reinforce_plus_plus": "reinforce_pp",
                        "drgrpo": "dr_grpo", "onlinedpo": "online_dpo"}


def normalise_algorithm(name: str) -> str | None:
    """The known algorithm ``name`` stands for (case, '-' and spaces ignored), or None.

    >>> normalise_algorithm("GRPO"), normalise_algorithm("Reinforce++"), normalise_algorithm("grpoo")
    ('grpo', 'reinforce_pp', None)
    """
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALGORITHM_SPELLINGS.get(key, key)
    return key if key in ALGORITHMS else None


def algorithm_family(name: str | None) -> str | None:
    """``critic``, ``group`` or ``preference`` for a known algorithm, else None."""
    return ALGORITHMS.get(normalise_algorithm(name) or "") if name else None


#: Below this many trainable parameters a policy is a toy, not a language model: the priors of LM
#: fine-tuning (KL, entropy and learning-rate levels) do not apply to it.
LM_MIN_PARAMS = 1e6


def param(default: Any, doc: str) -> Any:
    """Declare a tracker parameter with its default and a one-line meaning."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class RunMeta:
    """What a run says about itself (``run.json`` written by the trainer, or ``[run]`` in a config).

    Every field is optional; trackers say in their findings when a check was skipped because a
    field was missing.
    """

    name: str | None = param(None, "Run name.")
    algorithm: str | None = param(None, "The algorithm (ppo, grpo, rloo, dpo, ...: forensics.config.ALGORITHMS); "
                                        "gates algorithm-specific rules.")
    family: str | None = param(None, "'critic', 'group' or 'preference' (see ALGORITHMS); set from "
                               "the algorithm when it is known.")
    kl_target: float | None = param(None, "Target KL to the reference policy.")
    kl_target_unit: str = param("token", "'token' (per-token mean, column kl) or 'sequence' (kl_seq).")
    kl_controller: str | None = param(None, "'adaptive' (Ziegler et al. 2019) or 'fixed'.")
    kl_horizon: float | None = param(None, "Adaptive controller horizon H (episodes).")
    kl_batch_size: float | None = param(None, "Episodes per controller update n_t.")
    kl_coef_init: float | None = param(None, "Initial KL coefficient beta_0.")
    max_grad_norm: float | None = param(None, "Gradient clipping threshold.")
    learning_rate: float | None = param(None, "Learning rate of the policy optimizer, as configured.")
    clip_range: float | None = param(None, "PPO clip range epsilon of the policy ratio.")
    kl_penalty: str | None = param(None, "Where the KL regularisation sits: 'reward' (PPO style), "
                                   "'loss' (GRPO style) or 'none' (KL to the reference is not "
                                   "penalised: KL rules report, they do not warn).")
    group_size: float | None = param(None, "Responses sampled per prompt (GRPO, RLOO).")
    beta: float | None = param(None, "Preference-loss beta (DPO, IPO, ORPO, KTO, SimPO); not a KL "
                               "coefficient.")
    max_length: float | None = param(None, "Maximum response length in tokens.")
    advantage_normalization: bool | None = param(None, "Whether advantages are whitened.")
    param_count: float | None = param(None, "Trainable parameters (for MFU).")
    language_model: bool | None = param(None, "Whether the policy is a language model, so the priors "
                                        "of LM fine-tuning apply (levels of KL, entropy and learning "
                                        "rate no healthy run reaches). Default: yes, unless "
                                        "param_count is below 1e6 (a toy policy).")
    peak_flops: float | None = param(None, "Peak FLOP/s of the hardware (for MFU).")
    config: dict[str, Any] = field(default_factory=dict, metadata={"doc": "Trainer config."})
    assumed: list[str] = field(default_factory=list, metadata={
        "doc": "Fields filled with the trainer framework's default, not read from the run."})

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "run metadata") -> RunMeta:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        known = {k: v for k, v in data.items() if k in names}
        meta = cls(**known)
        if unknown:
            # keep what we do not know as trainer config, never drop it
            meta.config = {**{k: data[k] for k in unknown}, **meta.config}
        meta._check(source)
        return meta

    def _check(self, source: str) -> None:
        if self.algorithm is not None:
            known = normalise_algorithm(self.algorithm) if isinstance(self.algorithm, str) else None
            if known is None:
                raise ConfigError(f"{source}: algorithm {self.algorithm!r} is not known; valid: "
                                  + ", ".join(sorted(ALGORITHMS)))
            self.algorithm = known
            self.family = ALGORITHMS[known]
        if self.family not in (None, "critic", "group", "preference"):
            raise ConfigError(f"{source}: family must be 'critic', 'group' or 'preference', "
                              f"not {self.family!r}")
        if self.kl_target_unit not in ("token", "sequence"):
            raise ConfigError(f"{source}: kl_target_unit must be 'token' or 'sequence', "
                              f"not {self.kl_target_unit!r}")
        if self.kl_controller not in (None, "adaptive", "fixed"):
            raise ConfigError(f"{source}: kl_controller must be 'adaptive' or 'fixed', "
                              f"not {self.kl_controller!r}")
        if self.kl_penalty not in (None, "reward", "loss", "none"):
            raise ConfigError(f"{source}: kl_penalty must be 'reward', 'loss' or 'none', "
                              f"not {self.kl_penalty!r}")
        for name in ("kl_target", "kl_horizon", "kl_batch_size", "max_grad_norm", "max_length",
                     "learning_rate", "clip_range", "group_size", "beta"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"{source}: {name} must be a positive number, not {value!r}")

    @property
    def lm_priors(self) -> bool:
        """Whether the language-model priors apply (see ``language_model``)."""
        if self.language_model is not None:
            return bool(self.language_model)
        return self.param_count is None or self.param_count >= LM_MIN_PARAMS

    def merged(self, other: RunMeta) -> RunMeta:
        """Fields set in ``other`` override this one's."""
        defaults = RunMeta()
        out = dataclasses.replace(self)
        for f in dataclasses.fields(RunMeta):
            value = getattr(other, f.name)
            if f.name == "config":
                out.config = {**self.config, **other.config}
            elif value != getattr(defaults, f.name):
                setattr(out, f.name, value)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, {}, [])}


@dataclass
class Config:
    """Everything a scan is configured by: run metadata, per-tracker parameters, scan options."""

    run: RunMeta = field(default_factory=RunMeta)
    trackers: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_rows: int = 65536
    strict: bool = False
    source: str | None = None
    #: the user's own key names (``[columns]``, ``--map``): source key -> UserColumn
    columns: dict[str, Any] = field(default_factory=dict)


def load_run_meta(path: Path) -> RunMeta:
    """Read a ``run.json`` file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read run metadata: {exc}", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"run metadata is not valid JSON: {exc.msg}", path=str(path),
                         line=exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError("run metadata must be a JSON object", path=str(path))
    try:
        return RunMeta.from_dict(data, source=str(path))
    except ConfigError as exc:
        raise InputError(str(exc), path=str(path)) from None


def load_config(path: Path | None) -> Config:
    """Read a TOML config; ``None`` gives the defaults. Unknown tracker parameters are errors."""
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    cfg = Config(source=str(path))
    run = data.pop("run", {})
    if not isinstance(run, dict):
        raise ConfigError(f"{path}: [run] must be a table")
    cfg.run = RunMeta.from_dict(run, source=f"{path} [run]")
    scan = data.pop("scan", {})
    for key, value in scan.items():
        if key == "batch_rows" and isinstance(value, int) and value > 0:
            cfg.batch_rows = value
        elif key == "strict" and isinstance(value, bool):
            cfg.strict = value
        else:
            raise ConfigError(f"{path}: [scan] {key} = {value!r} is not a valid scan option")
    from .schema import user_columns

    cfg.columns = user_columns(data.pop("columns", {}), f"{path}: [columns]")
    for section, values in data.items():
        # tracker tables are checked against the tracker registry when a scan is built
        # (forensics.analysis.trackers.build_params); this module does not know the trackers
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        cfg.trackers[section] = dict(values)
    return cfg


def params_doc(params_cls: type) -> list[tuple[str, Any, str]]:
    """``(name, default, meaning)`` for every parameter of a tracker."""
    return [(f.name, f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(params_cls)]

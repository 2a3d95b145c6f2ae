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

    [[rules]]                   # your own rules (forensics.analysis.trackers.custom)
    id = "throughput_floor"
    metric = "tokens_per_sec"
    kind = "below"
    threshold = 2000.0

More ``[[rules]]`` can live in files of their own, named by ``rules_files = ["team.rules.toml"]``
at the top of the config, before its first table (paths relative to the config's folder; see
``RULES_FILES_DOC``).

``forensics rules`` lists every tracker parameter with its default and meaning.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import stat
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, ForensicsError, InputError, closest, did_you_mean
from .records import record

if TYPE_CHECKING:
    from .schema import UserColumn

__all__ = ["ALGORITHMS", "DIFF_TOLERANCE", "LM_MIN_PARAMS", "MAX_COUNT", "Allowed", "Config", "Relations", "RunMeta",
           "algorithm_family", "allowed_of", "closest", "did_you_mean", "load_config", "load_run_meta", "make_config",
           "normalise_algorithm", "param", "read_json", "read_toml", "run_field", "scan_option"]

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

#: The largest count (rows, steps, characters) an integer parameter accepts unless it says
#: otherwise: beyond any real run, small enough that no buffer sized by it can exhaust memory.
MAX_COUNT = 100_000


def show_value(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, safe for any value (even a 5,000-digit int).

    >>> show_value("x" * 100, 12), show_value(10**5000)
    ("'xxxxxxxx...", 'an integer of about 5001 digits')
    """
    if isinstance(value, bool) or value is None:  # as TOML and JSON spell them
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@record(frozen=True)
class Allowed:
    """The values a parameter accepts: a type and, for numbers, a range; for text, choices or a
    regular expression. ``describe()`` says it in words (``forensics rules`` lists it) and
    ``check()`` applies it.

    Numbers: ``bool`` is never a number; an ``int`` parameter takes integers only; a ``float``
    takes ints and floats, finite unless ``nan`` is set (then NaN means "not set"; infinities are
    never accepted). ``optional`` accepts ``None``.

    >>> Allowed(int, ge=1, le=10).describe()
    'an integer from 1 to 10'
    >>> Allowed(float, gt=0, le=1).check(0.5, "x")
    0.5
    >>> Allowed(float, gt=0).check(float("nan"), "[kl_schedule] spike_z")
    Traceback (most recent call last):
    ...
    forensics.errors.ConfigError: [kl_schedule] spike_z = nan: expected a finite number > 0
    """

    type: type
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    nan: bool = False
    optional: bool = False
    regex: bool = False

    def describe(self) -> str:
        """What is allowed, in words."""
        if self.type is bool:
            text = "true or false"
        elif self.type is dict:
            text = "a table (a JSON object)"
        elif self.type is list:
            text = "a list"
        elif self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.type is str:
            text = "a regular expression (a string)" if self.regex else "a string"
        else:
            noun = "an integer" if self.type is int else "a finite number"
            lo = (">=", self.ge) if self.ge is not None else (">", self.gt) if self.gt is not None else None
            hi = ("<=", self.le) if self.le is not None else ("<", self.lt) if self.lt is not None else None
            if lo and hi and lo[0] == ">=" and hi[0] == "<=":
                text = f"{noun} from {_num(lo[1])} to {_num(hi[1])}"
            elif lo and hi:
                text = (f"{noun} in {'[' if lo[0] == '>=' else '('}{_num(lo[1])}, "
                        f"{_num(hi[1])}{']' if hi[0] == '<=' else ')'}")
            elif lo or hi:
                op, bound = lo or hi  # type: ignore[misc]
                text = f"{noun} {op} {_num(bound)}"
            else:
                text = noun
            if self.nan:
                text += " (or nan: not set)"
        return text + (" (or unset)" if self.optional and self.type not in (dict, list) else "")

    def check(self, value: Any, where: str) -> Any:
        """``value`` when it is allowed, else a :class:`ConfigError` naming ``where`` (the file and
        key), the value and what is allowed."""
        if value is None and self.optional:
            return value
        if not self._ok(value):
            raise ConfigError(f"{where} = {show_value(value)}: expected {self.describe()}")
        if self.type is float and isinstance(value, int) and abs(value) >= 2**63:
            return float(value)  # numpy takes an int beyond int64 as an object, not a number
        if self.regex:
            try:
                re.compile(value)
            except (re.error, RecursionError, OverflowError) as exc:
                raise ConfigError(f"{where} = {show_value(value)}: not a valid regular expression "
                                  f"({exc})") from None
        return value

    def _ok(self, value: Any) -> bool:
        if self.type in (bool, dict, str, list):
            return isinstance(value, self.type) and (self.choices is None or value in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type is int and not isinstance(value, int):
            return False
        if self.type is float and isinstance(value, int):
            try:
                value = float(value)
            except OverflowError:  # beyond any float: not a finite number
                return False
        if isinstance(value, float) and not math.isfinite(value):
            return self.nan and math.isnan(value)
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


def infer_allowed(default: Any, *, type: type | None = None, ge: float | None = None,
                  gt: float | None = None, le: float | None = None, lt: float | None = None,
                  choices: tuple[Any, ...] | None = None, regex: bool = False) -> Allowed:
    """What a parameter accepts: what is declared, the rest inferred from its default.

    An ``int`` parameter is a count: an integer from 1 to :data:`MAX_COUNT` unless declared
    otherwise. A ``float`` is finite and keeps the sign of its default (a positive default: > 0;
    a negative one: < 0); a NaN default means "not set", so NaN is accepted. A ``None`` default
    makes the parameter optional (its type must then be declared).

    >>> infer_allowed(100).describe(), infer_allowed(6.0).describe(), infer_allowed(-0.01).describe()
    ('an integer from 1 to 100000', 'a finite number > 0', 'a finite number < 0')
    >>> infer_allowed(10, ge=0).describe(), infer_allowed(0.3, le=1).describe()
    ('an integer from 0 to 100000', 'a finite number in (0, 1]')
    """
    kind = type or (bool if isinstance(default, bool) else builtins_type(default))
    if kind is None:
        raise TypeError(f"param({default!r}): declare its type")
    nan = False
    if kind is int:
        if ge is None and gt is None:
            ge = 1
        if le is None and lt is None:
            le = MAX_COUNT
    elif kind is float and ge is None and gt is None and le is None and lt is None:
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if math.isnan(default):
                nan = True
            elif default > 0:
                gt = 0
            elif default < 0:
                lt = 0
    elif kind is float and gt is None and ge is None and isinstance(default, (int, float)) and default > 0:
        gt = 0  # a declared upper bound keeps the inferred lower one
    return Allowed(kind, ge=ge, gt=gt, le=le, lt=lt, choices=choices, nan=nan,
                   optional=default is None, regex=regex)


def builtins_type(default: Any) -> type | None:
    for kind in (bool, int, float, str, dict):
        if isinstance(default, kind):
            return kind
    return None


#: Rules between two parameters of one Params class, declared on it as ``relations``:
#: ``(a, op, times, b)`` means ``a op times * b`` must hold (``op`` one of ``<=``, ``<``, ``>=``),
#: checked after each parameter's own range (:func:`forensics.analysis.trackers.build_params`).
Relations = tuple[tuple[str, str, int, str], ...]


def param(default: Any, doc: str, *, type: type | None = None, ge: float | None = None,
          gt: float | None = None, le: float | None = None, lt: float | None = None,
          choices: tuple[Any, ...] | None = None, regex: bool = False) -> Any:
    """Declare a parameter with its default, a one-line meaning and what it accepts.

    What is not declared is inferred from the default (see :func:`infer_allowed`): an ``int`` is
    a count >= 1, a ``float`` is finite with the sign of its default. Declare ``ge=0`` for a count
    that may be zero, ``le=1`` for a share, ``choices`` for an enum, ``regex=True`` for a pattern.
    Rules between parameters (``persist_k <= persist_m``) live with the parameters they
    constrain: the Params class's ``relations`` (:data:`Relations`); a pattern whose group 1 is
    read is named in its ``regex_groups``.
    """
    allowed = infer_allowed(default, type=type, ge=ge, gt=gt, le=le, lt=lt, choices=choices,
                            regex=regex)
    return field(default=default, metadata={"doc": doc, "allowed": allowed})


def allowed_of(f: dataclasses.Field[Any]) -> Allowed:
    """What a dataclass field declared with :func:`param` accepts (inferred for older fields)."""
    allowed = f.metadata.get("allowed")
    if allowed is None:
        default = f.default if f.default is not dataclasses.MISSING else None
        allowed = infer_allowed(default, type=builtins_type(default) or str)
    return allowed


@record
class RunMeta:
    """What a run says about itself (``run.json`` written by the trainer, or ``[run]`` in a config).

    Every field is optional; trackers say in their findings when a check was skipped because a
    field was missing.
    """

    name: str | None = param(None, "Run name.", type=str)
    algorithm: str | None = param(None, "The algorithm (ppo, grpo, rloo, dpo, ...: forensics.config.ALGORITHMS); "
                                        "gates algorithm-specific rules.", type=str,
                                        choices=tuple(ALGORITHMS))
    family: str | None = param(None, "'critic', 'group' or 'preference' (see ALGORITHMS); set from "
                               "the algorithm when it is known.", type=str,
                               choices=("critic", "group", "preference"))
    kl_target: float | None = param(None, "Target KL to the reference policy.", type=float, gt=0)
    kl_target_unit: str = param("token", "'token' (per-token mean, column kl) or 'sequence' (kl_seq).",
                                choices=("token", "sequence"))
    kl_controller: str | None = param(None, "'adaptive' (Ziegler et al. 2019) or 'fixed'.", type=str,
                                      choices=("adaptive", "fixed"))
    kl_horizon: float | None = param(None, "Adaptive controller horizon H (episodes).", type=float, gt=0)
    kl_batch_size: float | None = param(None, "Episodes per controller update n_t.", type=float, gt=0)
    kl_coef_init: float | None = param(None, "Initial KL coefficient beta_0.", type=float, ge=0)
    max_grad_norm: float | None = param(None, "Gradient clipping threshold.", type=float, gt=0)
    learning_rate: float | None = param(None, "Learning rate of the policy optimizer, as configured.",
                                        type=float, gt=0)
    clip_range: float | None = param(None, "PPO clip range epsilon of the policy ratio.", type=float, gt=0)
    kl_penalty: str | None = param(None, "Where the KL regularisation sits: 'reward' (PPO style), "
                                   "'loss' (GRPO style) or 'none' (KL to the reference is not "
                                   "penalised: KL rules report, they do not warn).", type=str,
                                   choices=("reward", "loss", "none"))
    group_size: float | None = param(None, "Responses sampled per prompt (GRPO, RLOO).", type=float, gt=0)
    beta: float | None = param(None, "Preference-loss beta (DPO, IPO, ORPO, KTO, SimPO); not a KL "
                               "coefficient.", type=float, gt=0)
    max_length: float | None = param(None, "Maximum response length in tokens.", type=float, gt=0)
    advantage_normalization: bool | None = param(None, "Whether advantages are whitened.", type=bool)
    param_count: float | None = param(None, "Trainable parameters (for MFU).", type=float, gt=0)
    language_model: bool | None = param(None, "Whether the policy is a language model, so the priors "
                                        "of LM fine-tuning apply (levels of KL, entropy and learning "
                                        "rate no healthy run reaches). Default: yes, unless "
                                        "param_count is below 1e6 (a toy policy).", type=bool)
    model_params: float | None = param(None, "Parameters of the policy model (the whole model: LoRA "
                                       "trains fewer), for the usual learning rates at its size; read "
                                       "from the model's config.json or a model name (Qwen2.5-7B) when "
                                       "the run shows one.", type=float, gt=0)
    lora: bool | None = param(None, "Whether the run trains LoRA adapters (about 10x the full "
                              "fine-tuning learning rate); read from the trainer's config "
                              "(lora_rank, lora_dim) or an adapter_config.json.", type=bool)
    peak_flops: float | None = param(None, "Peak FLOP/s of the hardware (for MFU).", type=float, gt=0)
    gpus: float | None = param(None, "GPUs the run used: the wall clock times this is its GPU-hours "
                               "(the cost of waste; --gpus).", type=float, gt=0)
    gpu_hours: float | None = param(None, "GPU-hours the whole run used, when the log has no clock or "
                                    "you know better (--gpu-hours).", type=float, gt=0)
    gpu_price: float | None = param(None, "Price of one GPU-hour, any currency: the cost of waste in "
                                    "money (--gpu-price).", type=float, ge=0)
    config: dict[str, Any] = field(default_factory=dict, metadata={
        "doc": "Trainer config (any keys; read for the recommendations' config patch).",
        "allowed": Allowed(dict)})
    assumed: list[str] = field(default_factory=list, metadata={
        "doc": "Fields filled with the trainer framework's default, not read from the run.",
        "allowed": Allowed(list)})

    def __post_init__(self) -> None:
        # a RunMeta is valid however it was made (a config, run.json, the CLI, a library call)
        self._check("run metadata")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "run metadata",
                  unknown: str = "error") -> RunMeta:
        """Run metadata from a mapping (run.json, a config's ``[run]``); every field is checked
        (:class:`ConfigError` naming ``source``, the key and the value).

        An unknown key (``kl_targt``) is a :class:`ConfigError` naming the closest field names:
        a typo is never stored and ignored. Trainer settings go under ``config``. With
        ``unknown="config"`` (a trainer's own dict given to the run writer) unknown keys are
        kept under ``config`` instead, never dropped.
        """
        names = {f.name: f for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - set(names))
        if extra and unknown == "error":
            key = extra[0]
            raise ConfigError(f"{source} {key}: not a run metadata field{did_you_mean(key, names)}; "
                              "trainer settings go under config = {...}; `forensics rules` lists the fields")
        meta = cls(**{k: _field_value(names[k], v, f"{source} {k}") for k, v in data.items() if k in names})
        if extra:
            # keep what we do not know as trainer config, never drop it
            meta.config = {**{k: data[k] for k in extra}, **meta.config}
        return meta

    def _check(self, source: str) -> None:
        """Check every field (a ConfigError naming ``source``); normalise the algorithm's name."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, _field_value(f, getattr(self, f.name), f"{source} {f.name}"))
        if self.algorithm is not None:
            self.family = ALGORITHMS[self.algorithm]

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


def _field_value(f: dataclasses.Field[Any], value: Any, where: str) -> Any:
    """A run metadata field's value once checked (the algorithm's name normalised)."""
    if f.name != "algorithm" or value is None:
        return allowed_of(f).check(value, where)
    known = normalise_algorithm(value) if isinstance(value, str) else None
    if known is None:
        raise ConfigError(f"{where} = {show_value(value)} is not known{did_you_mean(value, ALGORITHMS)}; valid: "
                          + ", ".join(sorted(ALGORITHMS)))
    return known


@record
class Config:
    """Everything a scan is configured by: run metadata, per-tracker parameters, scan options."""

    run: RunMeta = field(default_factory=RunMeta)
    trackers: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_rows: int = param(65536, "Rows per batch ([scan] batch_rows, --batch-rows); memory is "
                                   "bounded by the batch.", le=1 << 24)
    strict: bool = param(False, "A malformed row is fatal ([scan] strict, --strict).")
    source: str | None = None
    #: the user's own key names (``[columns]``, ``--map``): source key -> UserColumn
    columns: dict[str, Any] = field(default_factory=dict)
    #: the user's own rules: the ``[[rules]]`` tables (see forensics.analysis.trackers.custom),
    #: the config's own then those of its ``rules_files``
    rules: tuple[dict[str, Any], ...] = ()
    #: the file each of ``rules`` was read from (errors name it); empty: all from ``source``
    rule_sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in SCAN_OPTIONS:
            scan_option(name).check(getattr(self, name), f"scan option {name}")


#: What ``forensics diff --tolerance`` accepts: the largest drop of a health score (scores lie in
#: [0, 1]) that is not a regression.
DIFF_TOLERANCE = Allowed(float, ge=0, le=1)

#: The ``[scan]`` options of a config file: the :class:`Config` fields of the same name.
SCAN_OPTIONS = ("batch_rows", "strict")


def scan_option(name: str) -> Allowed:
    """What the ``[scan]`` option ``name`` (and its command-line twin) accepts."""
    return allowed_of(next(f for f in dataclasses.fields(Config) if f.name == name))


def run_field(name: str) -> Allowed:
    """What the run metadata field ``name`` (and its command-line twin) accepts."""
    return allowed_of(next(f for f in dataclasses.fields(RunMeta) if f.name == name))


#: Bytes a config, policy, rules or run-metadata file may hold (each is a few kB; a bigger one is
#: a wrong path, never read to its end).
SMALL_FILE_LIMIT = 8 * 2**20


def read_text(path: Path, what: str, error: type[ForensicsError], limit: int = SMALL_FILE_LIMIT) -> str:
    """A UTF-8 text file of at most ``limit`` bytes, or ``error`` naming the file and what was
    wrong in it (never a traceback); a file that is absent or cannot be read, or a device
    (``/dev/zero`` would be read without end), is an :class:`InputError` (exit 3, as for every
    input)."""
    try:
        if stat.S_ISCHR(mode := path.stat().st_mode) or stat.S_ISBLK(mode):
            raise InputError(f"{path}: {what} is a device, not a file")
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: {what} is a folder; give a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise error(f"{path}: {what} is over {limit / 2**20:g} MB, more than any {what} holds; "
                    "is this the right file?")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{path}:{line}: {what} is not UTF-8 text (byte {exc.start}: "
                    f"{raw[exc.start:exc.start + 1]!r})") from None


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file as a dict; a :class:`ConfigError` (exit 2) when it cannot be read or parsed."""
    import tomllib  # here: a scan without a config file has no use for the parser

    text = read_text(path, what, ConfigError)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML in {what}: {exc}") from None
    except (RecursionError, ValueError, MemoryError) as exc:  # nesting too deep, a 5,000-digit number
        raise ConfigError(f"{path}: {what} cannot be parsed: {type(exc).__name__}: "
                          f"{show_value(str(exc), 120)}") from None


def read_json(path: Path, what: str, limit: int = SMALL_FILE_LIMIT) -> Any:
    """A JSON file's value; an :class:`InputError` (exit 3) naming the file (and the line) when it
    cannot be read or parsed (also for nesting too deep to parse or a number too long to convert).
    ``NaN`` and ``Infinity`` parse as floats; the caller checks where they make sense."""
    text = read_text(path, what, InputError, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc.msg}", path=str(path),
                         line=exc.lineno) from None
    except RecursionError:
        raise InputError(f"{what} cannot be parsed: nested too deep (JSON objects or lists inside "
                         "each other more than about a thousand levels)", path=str(path)) from None
    except (ValueError, MemoryError) as exc:
        raise InputError(f"{what} cannot be parsed: {type(exc).__name__}: "
                         f"{show_value(str(exc), 120)}", path=str(path)) from None


def load_run_meta(path: Path) -> RunMeta:
    """Read a ``run.json`` file: unreadable or not JSON is an :class:`InputError` (exit 3); a
    field of the wrong type or out of range is a :class:`ConfigError` (exit 2) naming the file,
    the key, the value and what is allowed."""
    data = read_json(path, "run metadata")
    if not isinstance(data, dict):
        raise InputError(f"run metadata must be a JSON object, not {type(data).__name__}",
                         path=str(path))
    return RunMeta.from_dict(data, source=f"{path}:")


def load_config(path: Path | None) -> Config:
    """Read a TOML config; ``None`` gives the defaults. Every value is checked (a
    :class:`ConfigError` naming the file, the key, the value and what is allowed); tracker tables
    are checked against the tracker registry when a scan is built
    (:func:`forensics.analysis.trackers.build_params`: this module does not know the trackers)."""
    if path is None:
        return Config()
    data = read_toml(path, "config")
    cfg = Config(source=str(path))
    run = data.pop("run", {})
    if not isinstance(run, dict):
        raise ConfigError(f"{path}: run = {show_value(run)}: [run] must be a table")
    cfg.run = RunMeta.from_dict(run, source=f"{path}: [run]")
    scan = data.pop("scan", {})
    if not isinstance(scan, dict):
        raise ConfigError(f"{path}: scan = {show_value(scan)}: [scan] must be a table")
    for key, value in scan.items():
        if key not in SCAN_OPTIONS:
            raise ConfigError(f"{path}: [scan] has no option {key!r}{did_you_mean(key, SCAN_OPTIONS)}; known: "
                              + ", ".join(SCAN_OPTIONS))
        setattr(cfg, key, scan_option(key).check(value, f"{path}: [scan] {key}"))
    from .schema import user_columns

    cfg.columns = user_columns(data.pop("columns", {}), f"{path}: [columns]")
    # the rules are checked when a scan is built (forensics.analysis.trackers.custom), as trackers' tables
    rules = _rule_tables(data.pop("rules"), str(path)) if "rules" in data else []
    sources = [str(path)] * len(rules)
    for extra in _rules_files(data.pop("rules_files", None), path):
        tables = _read_rules_file(extra)
        rules += tables
        sources += [str(extra)] * len(tables)
    cfg.rules, cfg.rule_sources = tuple(rules), tuple(sources)
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section} = {show_value(values)}: [{section}] must be a table "
                              "(a tracker's parameters)")
        cfg.trackers[section] = dict(values)
    return cfg


#: How a config names files of rules kept apart from it (``forensics rules --format markdown``
#: prints this).
RULES_FILES_DOC = (
    "The rules can also live in files of their own, shared between configs or kept by another "
    "team: `rules_files = \"team.rules.toml\"` (or a list of paths) at the top of the config, "
    "before its first `[table]`, names them, each path relative to the config's own folder (so a "
    "file beside the config is named by its file name alone). A rules file holds `[[rules]]` "
    "tables and nothing else; its rules run after the config's own, are checked the same way (an "
    "error names the rules file, the rule and the key), and a rule id may be declared once across "
    "the config and all its rules files.")


def _rule_tables(value: Any, where: str) -> list[dict[str, Any]]:
    """``rules`` of a config or a rules file: a list of tables (each checked when a scan is built)."""
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{where}: rules = {show_value(value)}: expected [[rules]] tables")
    return list(value)


def _rules_files(value: Any, config: Path) -> list[Path]:
    """The files ``rules_files`` names (a path or a list of paths, relative to the config's folder),
    each checked to exist."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{config}: rules_files = {show_value(value)}: expected a path or a list of "
                          "paths of rules files (relative to the config's folder)")
    out = []
    for name in names:
        full = Path(name).expanduser()
        full = full if full.is_absolute() else config.parent / full
        if not full.is_file():
            raise ConfigError(f"{config}: rules_files: {name!r} is not a file ({full})")
        out.append(full)
    return out


def _read_rules_file(path: Path) -> list[dict[str, Any]]:
    """The ``[[rules]]`` tables of a rules file (nothing else is allowed in it, nor no rule)."""
    data = read_toml(path, "rules file")
    for key in data:
        if key != "rules":
            raise ConfigError(f"{path}: a rules file holds [[rules]] tables only, not {key!r}"
                              f"{did_you_mean(key, ['rules'])} (other settings go in the config)")
    if "rules" not in data:
        raise ConfigError(f"{path}: this rules file declares no [[rules]] table")
    return _rule_tables(data["rules"], str(path))


def params_doc(params_cls: type) -> list[tuple[str, Any, str]]:
    """``(name, default, meaning)`` for every parameter of a tracker."""
    return [(f.name, f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(params_cls)]


def make_config(config: Config | None = None, *, config_path: Path | str | None = None,
                kl_target: float | None = None, kl_unit: str | None = None, strict: bool | None = None,
                batch_rows: int | None = None, columns: dict[str, str] | dict[str, UserColumn] | None = None,
                maps: Iterable[str] = (), gpus: float | None = None, gpu_hours: float | None = None,
                gpu_price: float | None = None) -> Config:
    """A scan's configuration from the options the command line takes.

    ``config`` (or the TOML file ``config_path``) is the base; ``kl_target``/``kl_unit`` and
    ``gpus``/``gpu_hours``/``gpu_price`` (the cost of waste) override its ``[run]``, ``strict``
    and ``batch_rows`` its ``[scan]``; ``columns`` (source key ->
    canonical name, or :class:`~forensics.schema.UserColumn`) and ``maps`` (``"SRC=CANONICAL[:UNIT]"``,
    as ``--map`` takes them) add to its ``[columns]``, winning over it.

    >>> cfg = make_config(kl_target=6.0, kl_unit="sequence", columns={"gnorm": "grad_norm"})
    >>> cfg.run.kl_target, cfg.run.kl_target_unit, cfg.columns["gnorm"].canonical
    (6.0, 'sequence', 'grad_norm')
    """
    from .errors import UsageError
    from .schema import UserColumn, merge_user_columns, parse_map_option, user_column

    if config is not None and config_path is not None:
        raise UsageError("give a config or a config path, not both")
    cfg = dataclasses.replace(config) if config is not None else load_config(
        Path(config_path) if config_path is not None else None)
    overrides: dict[str, Any] = {}
    if kl_target is not None:
        if isinstance(kl_target, bool) or not isinstance(kl_target, (int, float)) \
                or not math.isfinite(kl_target) or kl_target <= 0:
            raise UsageError(f"kl_target must be a positive number, not {kl_target!r}")
        overrides["kl_target"] = float(kl_target)
    if kl_unit is not None:
        if kl_unit not in ("token", "sequence"):
            raise UsageError(f"kl_unit must be 'token' or 'sequence', not {kl_unit!r}")
        overrides["kl_target_unit"] = kl_unit
    overrides.update({k: v for k, v in (("gpus", gpus), ("gpu_hours", gpu_hours), ("gpu_price", gpu_price))
                      if v is not None})
    if overrides:
        cfg.run = cfg.run.merged(RunMeta(**overrides))  # checked there, as [run] values are
    if strict is not None:
        cfg.strict = bool(strict) or cfg.strict
    if batch_rows is not None:
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise UsageError(f"batch_rows must be a positive integer, not {batch_rows!r}")
        cfg.batch_rows = batch_rows
    given: dict[str, UserColumn] = {}
    for src, target in (columns or {}).items():
        given[src] = target if isinstance(target, UserColumn) else user_column(src, target, None, "columns=")
    for text in maps:
        col = parse_map_option(text)
        given[col.source] = col
    if given:
        cfg.columns = merge_user_columns(cfg.columns, given)
    return cfg

"""The trainer's configuration as a log prints it, for the run context.

veRL prints its resolved config at start-up, a ``pprint`` of a Python dict over many lines
(``{'actor_rollout_ref': {'actor': {...`` with Ray prefixes; veRL 0.1's ``main_task`` and forks
that ``print(config)`` on one line, ``{'data': {...}, 'actor_rollout_ref': {...}}``), and the
shell trace before it often holds the command line with its Hydra overrides
(``algorithm.adv_estimator=grpo``, ``+key=value``), on one line (``set -x``) or as the script
wrote it, over many lines joined by backslash continuations (veRL 0.2's example scripts). Both are
read here into one flat dict of dotted keys (``actor_rollout_ref.actor.optim.lr``), the printed
dump winning over the command line (it is the config after the overrides). Launchers with
argparse options (DeepSpeed-Chat's ``deepspeed.launcher`` ``cmd = ... --actor_learning_rate
9.65e-6``, OpenRLHF's ``--generate_max_len 1024``) give bare keys (``actor_learning_rate``).

Nothing here executes code: the dump is read with :func:`ast.literal_eval`, the command line with
:func:`shlex.split`, and both are bounded in size.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

from ..readers.base import ReadReport

__all__ = ["ConfigCapture", "flatten", "parse_override_value"]

#: A printed config larger than this is not read (a real veRL dump is about 30 kB).
MAX_DUMP_CHARS = 2_000_000
_DUMP_START = re.compile(r"^\{'(?:actor_rollout_ref|algorithm|data|critic|trainer|reward_model)'")
_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w]*(?:\.[\w]+)+)=(?P<value>.*)$")
_OPTION = re.compile(r"^--(?P<key>[A-Za-z_][\w\-]*)(?:=(?P<value>.*))?$")
_COMMAND = re.compile(r"\b(?:verl\.trainer\.main_\w+|openrlhf\.cli\.\w+|deepspeed\.launcher\.launch)\b")
#: Lines of one command joined by backslash continuations that are read at most.
MAX_COMMAND_LINES = 2_000


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists and scalars are leaves.

    >>> flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None})
    {'a.b': 1, 'a.c.d': [1, 2], 'e': None}
    """
    out: dict[str, Any] = {}
    stack: list[tuple[str, dict[str, Any]]] = [(prefix, tree)]
    while stack:
        base, node = stack.pop()
        for key, value in node.items():
            name = f"{base}.{key}" if base else str(key)
            if isinstance(value, dict) and value:
                stack.append((name, value))
            else:
                out[name] = value
    return dict(sorted(out.items()))


def parse_override_value(text: str) -> Any:
    """A Hydra override's value as Python: numbers, booleans, null, lists of those, else text.

    >>> parse_override_value("1e-6"), parse_override_value("True"), parse_override_value("grpo")
    (1e-06, True, 'grpo')
    >>> parse_override_value("[console,wandb]")
    ['console', 'wandb']
    """
    text = text.strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [parse_override_value(t) for t in inner.split(",")] if inner else []
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text.strip("'\"")


class ConfigCapture:
    """Collects a printed config dump and the command line's overrides from non-metric lines.

    ``feed`` takes each line that is not a metric row (prefixes already stripped) and returns
    whether it belonged to the config; ``config`` and ``origin`` give what was found.
    """

    def __init__(self) -> None:
        self._dump: list[str] = []
        self._dump_line = 0
        self._depth = 0
        self._dump_done = False
        self._dump_chars = 0
        self.dump: dict[str, Any] = {}
        self.overrides: dict[str, Any] = {}
        self._override_line = 0
        self._command: list[str] = []
        self._command_line = 0

    def feed(self, lineno: int, text: str) -> bool:
        stripped = text.strip()
        if self._dump and not self._dump_done:
            self._add(stripped)
            return True
        if not self._dump_done and _DUMP_START.match(stripped):
            self._dump_line = lineno
            self._add(stripped)
            return True
        if self._command:
            return self._continue_command(stripped)
        if not self.overrides and _COMMAND.search(stripped):
            self._command_line = lineno
            return self._continue_command(stripped)
        return False

    def _continue_command(self, text: str) -> bool:
        """Collect a command over its ``\\`` continuation lines; read it at its last line."""
        more = text.endswith("\\") and len(self._command) < MAX_COMMAND_LINES
        self._command.append(text[:-1] if more else text)
        if more:
            return True
        self._read_command(" ".join(self._command))
        self._command = []
        return bool(self.overrides)

    def _add(self, text: str) -> None:
        self._dump.append(text)
        self._dump_chars += len(text)
        self._depth += _bracket_balance(text)
        if self._depth <= 0 or self._dump_chars > MAX_DUMP_CHARS:
            self._dump_done = True
            if self._depth <= 0:
                self.dump = _literal_dict(" ".join(self._dump))
            self._dump = []

    def _read_command(self, text: str) -> None:
        try:
            words = shlex.split(text[:MAX_DUMP_CHARS])
        except ValueError:
            words = text.split()
        found = _overrides(words)
        if found:
            self.overrides = found
            self._override_line = self._command_line

    def publish(self, report: ReadReport) -> None:
        """Give ``report`` the config found (nothing when none was)."""
        if self.config:
            report.run_config = self.config
            report.run_config_origin = self.origin

    @property
    def config(self) -> dict[str, Any]:
        return {**self.overrides, **flatten(self.dump)}

    @property
    def origin(self) -> str:
        parts = []
        if self.dump:
            parts.append(f"config printed at line {self._dump_line}")
        if self.overrides:
            parts.append(f"command line at line {self._override_line}")
        return "; ".join(parts)


def _overrides(words: list[str]) -> dict[str, Any]:
    """Hydra overrides (``a.b=1``, ``+a.b=1``) and argparse options (``--lr 1e-6``,
    ``--lr=1e-6``; a bare ``--flag`` is ``True``) of a command's words."""
    found: dict[str, Any] = {}
    for i, word in enumerate(words):
        m = _OVERRIDE.match(word.lstrip("+"))
        if m:
            found[m.group("key")] = parse_override_value(m.group("value"))
            continue
        o = _OPTION.match(word)
        if o is None:
            continue
        key = o.group("key").replace("-", "_")
        if o.group("value") is not None:
            found[key] = parse_override_value(o.group("value"))
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            found[key] = parse_override_value(words[i + 1])
        else:
            found[key] = True
    return found


def _bracket_balance(text: str) -> int:
    """Opening minus closing brackets outside quoted strings."""
    depth = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
    return depth


def _literal_dict(text: str) -> dict[str, Any]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}

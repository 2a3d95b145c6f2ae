"""The trainer's configuration as a log prints it, for the run context.

veRL prints its resolved config at start-up, a ``pprint`` of a Python dict over many lines
(``{'actor_rollout_ref': {'actor': {...`` with Ray prefixes), and the shell trace before it
often holds the command line with its Hydra overrides (``algorithm.adv_estimator=grpo``). Both
are read here into one flat dict of dotted keys (``actor_rollout_ref.actor.optim.lr``), the
printed dump winning over the command line (it is the config after the overrides).

Nothing here executes code: the dump is read with :func:`ast.literal_eval`, the command line with
:func:`shlex.split`, and both are bounded in size.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

__all__ = ["ConfigCapture", "flatten", "parse_override_value"]

#: A printed config larger than this is not read (a real veRL dump is about 30 kB).
MAX_DUMP_CHARS = 2_000_000
_DUMP_START = re.compile(r"^\{'(?:actor_rollout_ref|algorithm|data|critic|trainer|reward_model)'")
_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w]*(?:\.[\w]+)+)=(?P<value>.*)$")
_COMMAND = re.compile(r"\b(?:verl\.trainer\.main_\w+|openrlhf\.cli\.\w+)\b")


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

    def feed(self, lineno: int, text: str) -> bool:
        stripped = text.strip()
        if self._dump and not self._dump_done:
            self._add(stripped)
            return True
        if not self._dump_done and _DUMP_START.match(stripped):
            self._dump_line = lineno
            self._add(stripped)
            return True
        if not self.overrides and _COMMAND.search(stripped) and "=" in stripped:
            self._read_command(lineno, stripped)
            return bool(self.overrides)
        return False

    def _add(self, text: str) -> None:
        self._dump.append(text)
        self._dump_chars += len(text)
        self._depth += _bracket_balance(text)
        if self._depth <= 0 or self._dump_chars > MAX_DUMP_CHARS:
            self._dump_done = True
            if self._depth <= 0:
                self.dump = _literal_dict(" ".join(self._dump))
            self._dump = []

    def _read_command(self, lineno: int, text: str) -> None:
        try:
            words = shlex.split(text[:MAX_DUMP_CHARS])
        except ValueError:
            words = text.split()
        found = {}
        for word in words:
            m = _OVERRIDE.match(word.lstrip("+"))
            if m:
                found[m.group("key")] = parse_override_value(m.group("value"))
        if found:
            self.overrides = found
            self._override_line = lineno

    @property
    def config(self) -> dict[str, Any]:
        return {**self.overrides, **flatten(self.dump)}

    @property
    def origin(self) -> str:
        parts = []
        if self.dump:
            parts.append(f"config printed at line {self._dump_line}")
        if self.overrides:
            parts.append(f"command-line overrides at line {self._override_line}")
        return "; ".join(parts)


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

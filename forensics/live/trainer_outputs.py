"""What the callback learns from the trainer's own outputs, on transformers 4.40 through 5.x and TRL.

* :func:`algorithm_of`: the algorithm a training-arguments object configures, from its class
  hierarchy (a user's ``class MyGRPOConfig(GRPOConfig)`` is GRPO), never from its class name alone.
* :func:`tensorboard_dir`: the folder the Trainer's own ``TensorBoardCallback`` writes to. In
  transformers 4.x that is ``TrainingArguments.logging_dir``; transformers 5 has no such argument:
  its callback writes to ``$TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs/<time>_<host>``
  (created when training begins, before a user's callback runs). The callback writes into its
  ``forensics/`` sub-folder: a run of its own beside the Trainer's, since TensorBoard follows only
  the newest event file of a run folder while it is written (``--reload_multifile`` is off by
  default), and a second file there would stop the Trainer's curves updating.
* :class:`CompletionTables`: the completions TRL's GRPO/RLOO trainers write with
  ``log_completions=True``: one table per logging step, ``<output_dir>/completions/completions_<step>.parquet``
  (columns ``step``, ``prompt``, ``completion``, one per reward function, ``advantage``), read as
  sample rows once each (a public output of TRL, not its private ``_logs``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_ALGORITHMS", "CompletionTables", "algorithm_of", "tensorboard_dir", "text_of"]

#: TRL's training-argument classes by name, and the algorithm each configures. A subclass the user
#: writes (``MyGRPOConfig(GRPOConfig)``) or TRL derives (``GMPOConfig(GRPOConfig)``,
#: ``XPOConfig(OnlineDPOConfig)``) is found through its bases.
CONFIG_ALGORITHMS = {
    "GRPOConfig": "grpo", "AsyncGRPOConfig": "grpo", "RLOOConfig": "rloo", "PPOConfig": "ppo",
    "PPOv2Config": "ppo", "DPOConfig": "dpo", "KTOConfig": "kto", "ORPOConfig": "orpo", "CPOConfig": "cpo",
    "OnlineDPOConfig": "online_dpo",
}


def algorithm_of(args: Any) -> str | None:
    """The algorithm of the nearest class in ``type(args).__mro__`` that TRL names (see
    :data:`CONFIG_ALGORITHMS`); ``None`` for plain ``TrainingArguments`` and unknown classes.

    >>> class GRPOConfig: ...
    >>> class MyGRPOConfig(GRPOConfig): ...
    >>> class GRPOLikeArgs: ...
    >>> algorithm_of(MyGRPOConfig()), algorithm_of(GRPOLikeArgs())
    ('grpo', None)
    """
    for cls in type(args).__mro__:
        if cls.__name__ in CONFIG_ALGORITHMS:
            return CONFIG_ALGORITHMS[cls.__name__]
    return None


def _trainer_tb_callback_dir(trainer: Any) -> str | None:
    """The folder of the trainer's own ``TensorBoardCallback``: its ``logging_dir`` (transformers 5)
    or its writer's ``log_dir`` (transformers 4, once training began)."""
    handler = getattr(trainer, "callback_handler", None)
    for cb in getattr(handler, "callbacks", None) or []:
        if any(c.__name__ == "TensorBoardCallback" for c in type(cb).__mro__):
            found = getattr(cb, "logging_dir", None) or getattr(getattr(cb, "tb_writer", None), "log_dir", None)
            if isinstance(found, (str, os.PathLike)):
                return os.fspath(found)
    return None


def _newest_runs_folder(output_dir: Path) -> Path | None:
    """The newest ``<output_dir>/runs/*`` folder holding an event file (transformers 5's default
    ``runs/<time>_<host>``; its callback creates it when training begins)."""
    runs = output_dir / "runs"
    if not runs.is_dir():
        return None
    found = [p for p in runs.iterdir() if p.is_dir() and any(p.glob("events.out.tfevents.*"))]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def tensorboard_dir(args: Any, trainer: Any = None) -> Path:
    """Where the Trainer's TensorBoard scalars are, so forensics' go beside them: the trainer's
    ``TensorBoardCallback`` when the trainer is known, else ``args.logging_dir`` (transformers 4),
    ``$TENSORBOARD_LOGGING_DIR`` or the newest ``<output_dir>/runs/*`` (transformers 5); when none
    exists yet, ``<output_dir>/runs``."""
    found = _trainer_tb_callback_dir(trainer) if trainer is not None else None
    found = found or getattr(args, "logging_dir", None) or os.environ.get("TENSORBOARD_LOGGING_DIR")
    if found:
        return Path(os.path.expanduser(os.fspath(found)))
    output_dir = Path(getattr(args, "output_dir", None) or ".")
    return _newest_runs_folder(output_dir) or output_dir / "runs"


def text_of(value: Any) -> str:
    """A prompt or completion as text (TRL keeps conversational ones as lists of messages).

    >>> text_of([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}])
    '2+2?\\n4'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n".join(str(m.get("content", "")) for m in value)
    return str(value)


def _reward_columns(columns: list[str], reward_names: set[str]) -> list[str]:
    """The reward functions' columns of a completions table: those the trainer logs as
    ``rewards/<name>/mean``, else every column that is not one of TRL's fixed ones."""
    fixed = {"step", "prompt", "completion", "advantage", "image"}
    named = [c for c in columns if c in reward_names]
    return named or [c for c in columns if c not in fixed]


class CompletionTables:
    """TRL's completions tables under ``folder`` (``completions_<step>.parquet``), each read once,
    in step order, as sample rows: ``prompt``, ``completion``, ``reward/<name>`` per reward
    function, ``reward`` (their sum, weighted by ``reward_weights`` when given) and ``advantage``."""

    def __init__(self, folder: Path, reward_weights: list[float] | None = None) -> None:
        self.folder = folder
        self.reward_weights = reward_weights
        self.reward_names: set[str] = set()
        self._read: set[str] = set()
        self.errors: list[str] = []

    def note_logs(self, keys: list[str]) -> None:
        """Learn the reward functions' names from a logged row (``rewards/<name>/mean``)."""
        for k in keys:
            if k.startswith("rewards/") and k.endswith("/mean"):
                self.reward_names.add(k[len("rewards/"):-len("/mean")])

    def new_tables(self) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """``(step, rows)`` of every table not read before."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("completions_*.parquet")):
            if path.name in self._read:
                continue
            self._read.add(path.name)
            try:
                import pyarrow.parquet as pq

                table = pq.read_table(path).to_pylist()
            except (OSError, ValueError) as exc:  # pyarrow's errors are both; a bad table is skipped, said once
                self.errors.append(f"{path}: {exc}")
                continue
            if table:
                yield self._step(path, table), [self._row(r) for r in table]

    @staticmethod
    def _step(path: Path, table: list[dict[str, Any]]) -> int:
        step = table[0].get("step")
        if isinstance(step, int):
            return step
        return int(path.stem.rsplit("_", 1)[-1])

    def _row(self, r: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"completion": text_of(r.get("completion", ""))}
        if r.get("prompt") is not None:
            row["prompt"] = text_of(r["prompt"])
        names = _reward_columns([c for c in r if c not in row], self.reward_names)
        weights = self.reward_weights if self.reward_weights and len(self.reward_weights) == len(names) else None
        total, finite = 0.0, False
        for i, name in enumerate(names):
            v = r.get(name)
            row[f"reward/{name}"] = v
            if isinstance(v, (int, float)) and math.isfinite(v):
                total += v * (weights[i] if weights else 1.0)
                finite = True
        if finite:
            row["reward"] = total
        if r.get("advantage") is not None:
            row["advantage"] = r["advantage"]
        return row

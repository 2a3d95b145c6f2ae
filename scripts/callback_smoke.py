"""Train a real tiny model with the forensics callback and print what it did, as JSON.

Run with a Python that has transformers (4.40 through 5.x; TRL for ``--trainer grpo``), torch and
tensorboard (``import forensics`` is this checkout); it writes what it saw to ``OUT/smoke.json``::

    .venv-tf440/bin/python scripts/callback_smoke.py --trainer plain --out /tmp/smoke
    .venv-trl/bin/python scripts/callback_smoke.py --trainer grpo --out /tmp/smoke-grpo

(``make test`` builds both environments.) The model is a randomly initialised two-layer Llama
built here (no model hub); ``plain`` trains it with ``transformers.Trainer`` on random tokens
(``TrainingArguments`` subclassed as a user would), ``best`` the same keeping only its best
checkpoints (``save_strategy="best"``, transformers 4.47 and later, an evaluation at every step),
``grpo`` with TRL's ``GRPOTrainer`` under a user's ``MyGRPOConfig(GRPOConfig)`` and
``log_completions=True``. From step ``--nan-from`` on, a callback placed before forensics' writes
NaN as the logged gradient norm (a divergence, on cue), so ``stop_on_critical`` must save a
checkpoint and stop the run. tests/test_callback.py runs this in the environments it finds.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

try:
    from trl import GRPOConfig
except ImportError:  # the plain Trainer needs no TRL
    GRPOConfig = None

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's forensics


class MyArgs(TrainingArguments):  # a user's own arguments class (module level: the Trainer pickles it)
    pass


if GRPOConfig is not None:
    class MyGRPOConfig(GRPOConfig):  # a user's own config class: GRPO by its base
        pass

VOCAB = ["<pad>", "<eos>", "<unk>", *[f"w{i}" for i in range(29)]]


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   padding_side="left")


def model() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                        max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
                                        bos_token_id=None))


def nan_from(step: int) -> Any:
    """A callback that logs a NaN gradient norm from ``step`` on (runs before forensics')."""
    from transformers import TrainerCallback

    class NaNFrom(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs is not None and "loss" in logs and state.global_step >= step:
                logs["grad_norm"] = math.nan

    return NaNFrom()


def token_rows(n: int) -> list[dict[str, Any]]:
    """``n`` rows of 12 random tokens, each its own label (seed 0)."""
    import torch

    ids = torch.randint(3, len(VOCAB), (n, 12), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in ids]


def common(out: Path, steps: int) -> dict[str, Any]:
    return dict(output_dir=str(out), max_steps=steps, logging_steps=1, save_strategy="no", report_to=["tensorboard"],
                use_cpu=True, disable_tqdm=True, learning_rate=1e-3, per_device_train_batch_size=4, seed=0,
                dataloader_num_workers=0)


def train_plain(out: Path, steps: int, bad_step: int) -> tuple[Any, Any]:
    """The plain Trainer, the callback given to its constructor (it does not know the trainer)."""
    from transformers import Trainer

    from forensics.live.transformers import ForensicsCallback

    cb = ForensicsCallback(stop_on_critical=True)
    data = token_rows(4 * steps)
    trainer = Trainer(model=model(), args=MyArgs(**common(out, steps)), train_dataset=data,
                      callbacks=[nan_from(bad_step), cb])
    trainer.train()
    return trainer, cb


def train_best(out: Path, steps: int, bad_step: int) -> tuple[Any, Any]:
    """The plain Trainer keeping only its best checkpoints (``save_strategy="best"``), evaluated at
    every step on a score that is best at the first evaluation only: after each evaluation the
    Trainer sets ``should_save`` to whether the score is a new best, over the stop's request, and
    the stop must still save the step it stops at."""
    from transformers import Trainer

    from forensics.live.transformers import ForensicsCallback

    evaluations: list[int] = []

    def score(_: Any) -> dict[str, float]:  # higher is better: 0, -1, -2, ... (the first is the best)
        evaluations.append(1)
        return {"score": 1.0 - len(evaluations)}

    cb = ForensicsCallback(stop_on_critical=True)
    data = token_rows(4 * steps)
    conf = MyArgs(**{**common(out, steps), "save_strategy": "best"}, eval_strategy="steps", eval_steps=1,
                  metric_for_best_model="score", greater_is_better=True, per_device_eval_batch_size=4)
    trainer = Trainer(model=model(), args=conf, train_dataset=data, eval_dataset=data[:4], compute_metrics=score,
                      callbacks=[nan_from(bad_step), cb])
    trainer.train()
    trainer.evaluations = len(evaluations)  # type: ignore[attr-defined]
    return trainer, cb


def train_grpo(out: Path, steps: int, bad_step: int) -> tuple[Any, Any]:
    """TRL's GRPOTrainer, the callback attached (it knows the trainer and its callbacks)."""
    import datasets
    from trl import GRPOTrainer

    from forensics.live.transformers import ForensicsCallback

    def reward_w1(completions: list[Any], **_: Any) -> list[float]:
        return [float(str(c).count("w1")) for c in completions]

    datasets.disable_progress_bars()
    prompts = [" ".join(f"w{(i * 7 + j) % 29}" for j in range(4)) for i in range(steps * 2)]
    conf = MyGRPOConfig(**common(out, steps), num_generations=4, max_completion_length=6, beta=0.04,
                        log_completions=True, temperature=1.0)
    base = out / "base"  # saved locally: TRL builds the reference model from the policy's path
    model().save_pretrained(base)
    tokenizer().save_pretrained(base)
    trainer = GRPOTrainer(model=str(base), processing_class=tokenizer(), reward_funcs=[reward_w1], args=conf,
                          train_dataset=datasets.Dataset.from_dict({"prompt": prompts}),
                          callbacks=[nan_from(bad_step)])
    cb = ForensicsCallback.attach(trainer, stop_on_critical=True)
    trainer.train()
    return trainer, cb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainer", choices=["plain", "best", "grpo"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--nan-from", type=int, default=12)
    args = p.parse_args()
    import torch
    import transformers

    torch.set_num_threads(1)
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("forensics").addHandler(handler)
    logging.getLogger("forensics").setLevel(logging.INFO)
    train = {"plain": train_plain, "best": train_best, "grpo": train_grpo}[args.trainer]
    trainer, cb = train(args.out, args.steps, args.nan_from)
    runs = sorted(str(p.parent) for p in (args.out / "runs").rglob("events.out.tfevents.*"))
    samples = args.out / "forensics" / "samples.jsonl"
    (args.out / "smoke.json").write_text(json.dumps({
        "transformers": transformers.__version__, "trainer": type(trainer).__name__,
        "args": type(trainer.args).__name__,
        "algorithm": cb.meta.algorithm, "global_step": trainer.state.global_step, "rows": cb.rows,
        "stop_reason": cb.stop_reason, "stop_checkpoint": str(cb.stop_checkpoint) if cb.stop_checkpoint else None,
        "checkpoint_files": sorted(p.name for p in cb.stop_checkpoint.iterdir()) if cb.stop_checkpoint
        and cb.stop_checkpoint.is_dir() else [],
        "has_logging_dir_arg": hasattr(trainer.args, "logging_dir"),
        "event_files": sorted(str(p) for p in (args.out / "runs").rglob("events.out.tfevents.*")),
        "event_dirs": sorted(set(runs)), "forensics_tb": str(cb._tb.path) if cb._tb is not None else None,
        "samples": len(samples.read_text().splitlines()) if samples.is_file() else 0,
        "completion_tables": len(list((args.out / "completions").glob("*.parquet"))),
        "checkpoints": sorted((p.name for p in args.out.glob("checkpoint-*")), key=lambda n: int(n.split("-")[1])),
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "evaluations": getattr(trainer, "evaluations", None),
        "log": messages,
    }, indent=1))


if __name__ == "__main__":
    main()

"""The policy model's size as a run folder shows it: Hugging Face ``config.json`` and PEFT's
``adapter_config.json``.

``trainer.save_model`` (transformers, TRL) writes the model's ``config.json`` beside the weights,
in the output folder and in every ``checkpoint-N/``; with LoRA (PEFT) it writes
``adapter_config.json`` instead, which names the base model. A few of their keys are read, never
the weights, and given to the run context as ``model.<key>`` and ``adapter.<key>`` (the run
context turns them into ``model_params`` and ``lora``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MODEL_KEYS", "read_model_config"]

#: The keys of a model config that give its size (the names of the common architectures).
MODEL_KEYS = ("architectures", "model_type", "_name_or_path", "num_parameters", "vocab_size",
              "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers",
              "intermediate_size", "n_inner", "ffn_dim", "num_attention_heads", "num_key_value_heads",
              "head_dim", "tie_word_embeddings", "hidden_act", "num_experts", "num_local_experts",
              "max_position_embeddings")
_ADAPTER_KEYS = ("peft_type", "r", "base_model_name_or_path")
#: A config file larger than this is not a model config (a real one is a few kB).
_MAX_BYTES = 1 << 20


def _load(path: Path) -> dict[str, Any]:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def read_model_config(folder: Path) -> tuple[dict[str, Any], str]:
    """``model.*`` and ``adapter.*`` keys from the model files in ``folder`` or, for a
    ``checkpoint-N/`` folder, in the output folder above it; ``({}, "")`` when there are none."""
    for where in (folder, folder.parent) if folder.name.startswith("checkpoint-") else (folder,):
        model = _load(where / "config.json")
        adapter = _load(where / "adapter_config.json")
        if not isinstance(model.get("architectures", model.get("model_type")), (list, str)):
            model = {}  # a config.json that is not a transformers model config
        if "peft_type" not in adapter:
            adapter = {}
        out = {f"model.{k}": model[k] for k in MODEL_KEYS if k in model}
        out.update({f"adapter.{k}": adapter[k] for k in _ADAPTER_KEYS if k in adapter})
        if out:
            names = [n for n, d in (("config.json", model), ("adapter_config.json", adapter)) if d]
            return out, " and ".join(str(where / n) for n in names)
    return {}, ""

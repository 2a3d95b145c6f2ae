"""Integrations with training frameworks; each imports its framework only when it is used.

* :mod:`forensics.integrations.transformers`: a ``TrainerCallback`` for transformers/TRL
  (``pip install rl-forensics[hf]``).
"""

__all__: list[str] = []

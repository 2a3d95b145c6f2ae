"""Reference PPO/GRPO trainer on a toy task, with fault injection, that records labelled runs.

Run it with ``python -m forensics.trainer.reference --algo ppo --seed 0 --out runs/ppo0``; see
:mod:`forensics.trainer.reference.faults` for ``--fault`` names. Requires torch.
"""

from __future__ import annotations

from .faults import FAULTS, FaultSpec
from .kl_control import AdaptiveKLController, FixedKLController
from .trainer import TrainConfig, train

__all__ = ["FAULTS", "AdaptiveKLController", "FaultSpec", "FixedKLController", "TrainConfig",
           "train"]

"""KL coefficient controllers: the adaptive one of Ziegler et al. (2019) and a fixed one.

References
----------
Ziegler, D. M. et al. (2019). Fine-Tuning Language Models from Human Preferences.
arXiv:1909.08593; code ``openai/lm-human-preferences``, ``train_policy.py``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["AdaptiveKLController", "FixedKLController"]


class AdaptiveKLController:
    """Proportional controller of the KL coefficient beta in log space.

    After the PPO epochs of step t, with the step's KL ``KL_t`` (same unit as ``target``) and
    ``n_t`` episodes in the update::

        e_t     = clip(KL_t / target - 1, -0.2, 0.2)
        beta_t1 = beta_t * (1 + e_t * n_t / horizon)

    ``sign=-1`` flips the correction: the controller then *lowers* beta when KL is above target
    (the ``kl_wrong_sign`` fault; the law above holds with ``-e_t``).

    >>> ctl = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    >>> ctl.update(12.0, 512)  # KL at twice the target: e is clipped to +0.2
    >>> round(ctl.value, 8)
    0.101024
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float,
                 sign: float = 1.0) -> None:
        self.value: Any = init_kl_coef
        self.target = target
        self.horizon = horizon
        self.sign = sign

    def update(self, current: Any, n_steps: int) -> None:
        """Apply one step of the law with the measured KL ``current``.

        ``current`` may be a device tensor: beta then becomes a 0-d tensor on that device and
        the update never waits for the host.
        """
        if isinstance(current, torch.Tensor):
            error = (current.double() / self.target - 1.0).clamp(-0.2, 0.2)
        else:
            error = min(max(current / self.target - 1.0, -0.2), 0.2)
        self.value = self.value * (1.0 + self.sign * error * n_steps / self.horizon)


class FixedKLController:
    """A constant beta (``update`` is a no-op), as TRL's ``FixedKLController`` and GRPO."""

    def __init__(self, kl_coef: float) -> None:
        self.value: Any = kl_coef

    def update(self, current: Any, n_steps: int) -> None:
        """Do nothing: the coefficient is fixed."""

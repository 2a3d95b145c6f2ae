"""A tiny GRU language model with an optional value head (the policy of the reference trainer)."""

from __future__ import annotations

import torch
from torch import nn

from .task import EOS, PAD, VOCAB

__all__ = ["Policy"]


class Policy(nn.Module):
    """Embedding -> GRU -> token logits (and, for PPO, a scalar value per position).

    The value head shares the GRU trunk with the policy head, as in most RLHF PPO setups
    (one model with two heads), which is what lets an unscaled value loss swamp the policy's
    gradient (the ``value_loss_unscaled`` fault).

    Parameters
    ----------
    hidden
        GRU width.
    embed
        token embedding width.
    value_head
        add the value head (PPO); GRPO has no critic.
    """

    def __init__(self, hidden: int = 64, embed: int = 32, value_head: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, VOCAB)
        self.value = nn.Linear(hidden, 1) if value_head else None

    def policy_parameters(self) -> list[nn.Parameter]:
        """Trunk and token head: the "policy" gradient group."""
        return [*self.embed.parameters(), *self.gru.parameters(), *self.head.parameters()]

    def value_parameters(self) -> list[nn.Parameter]:
        """The value head: the "value" gradient group (empty without one)."""
        return [] if self.value is None else list(self.value.parameters())

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``(B, T, V)`` and values ``(B, T)`` (or ``None``) for every position."""
        out, _ = self.gru(self.embed(tokens))
        values = None if self.value is None else self.value(out).squeeze(-1)
        return self.head(out), values

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, max_length: int, generator: torch.Generator,
                 temperature: float = 1.0) -> torch.Tensor:
        """Sample ``max_length`` tokens per prompt; positions after the first EOS become PAD.

        Always runs ``max_length`` steps (no early exit): stopping when every row has ended
        would need a host sync per token on a GPU.
        """
        out, h = self.gru(self.embed(prompts))
        logits = self.head(out[:, -1])
        tokens = []
        done = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
        # inverse-CDF sampling from uniforms drawn once on a CPU generator: the same seed gives
        # the same samples on every device, and there is one host-to-device copy per rollout
        uniforms = torch.rand(prompts.shape[0], max_length, generator=generator)
        uniforms = uniforms.to(prompts.device)
        for i in range(max_length):
            probs = torch.softmax(logits / temperature, dim=-1)
            u = uniforms[:, i : i + 1]
            nxt = (probs.cumsum(-1) < u).sum(-1).clamp(max=VOCAB - 1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            tokens.append(nxt)
            done = done | (nxt == EOS)
            out, h = self.gru(self.embed(nxt[:, None]), h)
            logits = self.head(out[:, -1])
        return torch.stack(tokens, 1)

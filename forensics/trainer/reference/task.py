"""The toy task: reverse a short digit string, scored by a programmatic reward.

A prompt is ``BOS d1 .. dk SEP`` (k in 2..4, left-padded); the correct response is the digits in
reverse order followed by ``EOS``. Everything is computed on the device with tensor ops, so a
rollout never needs the host until the writer flushes.

Reward components (per response):

* ``correctness`` - matched positions of the reversed digits, divided by the longer of the
  target and the response (so padding an answer with extra tokens costs);
* ``format`` - 1 when the response ends with ``EOS`` within the length limit and holds only
  digits before it, else 0.

The total reward is ``correctness + FORMAT_WEIGHT * format``. The length-reward fault adds a
``length`` component that pays per token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...records import record

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SEP",
    "VOCAB",
    "Batch",
    "Rewards",
    "detokenize",
    "sample_prompts",
    "score",
]

PAD, BOS, SEP, EOS = 0, 1, 2, 3
DIGIT0 = 4
#: digits occupy 4..13; 14 and 15 are tokens the task never needs (the policy may still emit them)
VOCAB = 16
MIN_DIGITS, MAX_DIGITS = 2, 4
PROMPT_LEN = MAX_DIGITS + 2
FORMAT_WEIGHT = 0.2
_CHARS = {PAD: "", BOS: "^", SEP: ">", EOS: "$"} | {DIGIT0 + d: str(d) for d in range(10)}


@record
class Batch:
    """Prompts of one rollout: tokens ``(B, PROMPT_LEN)``, digit counts and reversed targets."""

    prompts: torch.Tensor
    n_digits: torch.Tensor
    targets: torch.Tensor  # (B, MAX_DIGITS) reversed digit tokens, PAD beyond n_digits


@record
class Rewards:
    """Scores of a batch of responses."""

    total: torch.Tensor
    components: dict[str, torch.Tensor]
    lengths: torch.Tensor  # tokens up to and including EOS (max_length when truncated)
    truncated: torch.Tensor
    mask: torch.Tensor  # (B, L) 1 for response tokens that count (up to and including EOS)


def sample_prompts(n: int, generator: torch.Generator, device: torch.device) -> Batch:
    """Draw ``n`` prompts (on the CPU generator, for determinism, then moved)."""
    k = torch.randint(MIN_DIGITS, MAX_DIGITS + 1, (n,), generator=generator)
    digits = torch.randint(0, 10, (n, MAX_DIGITS), generator=generator) + DIGIT0
    pos = torch.arange(MAX_DIGITS)
    valid = pos[None, :] < k[:, None]
    digits = torch.where(valid, digits, torch.full_like(digits, PAD))
    # prompt: left padding, then BOS, the k digits, SEP
    prompts = torch.full((n, PROMPT_LEN), PAD, dtype=torch.long)
    # reversed target: digit i of the answer is digit k-1-i of the prompt
    rev_idx = (k[:, None] - 1 - pos[None, :]).clamp(min=0)
    targets = torch.where(valid, digits.gather(1, rev_idx), torch.full_like(digits, PAD))
    start = PROMPT_LEN - (k + 2)
    cols = torch.arange(PROMPT_LEN)[None, :]
    rel = cols - start[:, None]
    prompts = torch.where(rel == 0, torch.full_like(prompts, BOS), prompts)
    digit_at = digits.gather(1, (rel - 1).clamp(0, MAX_DIGITS - 1))
    in_digits = (rel >= 1) & (rel <= k[:, None])
    prompts = torch.where(in_digits, digit_at, prompts)
    prompts = torch.where(rel == k[:, None] + 1, torch.full_like(prompts, SEP), prompts)
    return Batch(prompts.to(device), k.to(device), targets.to(device))


def score(batch: Batch, responses: torch.Tensor, *, length_bonus: float = 0.0) -> Rewards:
    """Score responses ``(B, L)`` (tokens after the first EOS are ignored)."""
    length = responses.shape[1]
    is_eos = responses == EOS
    pos = torch.arange(length, device=responses.device)
    # first EOS position, or L when there is none
    first_eos = torch.where(is_eos, pos[None, :], torch.full_like(responses, length)).min(1).values
    truncated = first_eos >= length
    lengths = torch.where(truncated, torch.full_like(first_eos, length), first_eos + 1)
    mask = (pos[None, :] < lengths[:, None]).float()
    content_len = torch.where(truncated, lengths, first_eos)  # tokens before EOS
    width = min(length, MAX_DIGITS)
    target = batch.targets[:, :width]
    k = batch.n_digits
    in_answer = (pos[None, :width] < k[:, None]) & (pos[None, :width] < content_len[:, None])
    matches = ((responses[:, :width] == target) & in_answer).sum(1).float()
    correctness = matches / torch.maximum(k, content_len).clamp(min=1).float()
    before_eos = pos[None, :] < content_len[:, None]
    is_digit = (responses >= DIGIT0) & (responses < DIGIT0 + 10)
    clean = (is_digit | ~before_eos).all(1)
    fmt = (clean & ~truncated).float()
    components = {"correctness": correctness, "format": fmt}
    total = correctness + FORMAT_WEIGHT * fmt
    if length_bonus:
        components["length"] = length_bonus * lengths.float()
        total = total + components["length"]
    return Rewards(total, components, lengths, truncated, mask)


def detokenize(tokens: Sequence[int]) -> str:
    """Readable text of a token sequence (``^`` BOS, ``>`` SEP, ``$`` EOS, ``#`` others).

    >>> detokenize([1, 5, 6, 2, 0])
    '^12>'
    """
    out = []
    for t in tokens:
        out.append(_CHARS.get(t, "#"))
        if t == EOS:
            break
    return "".join(out)

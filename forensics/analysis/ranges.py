"""Usual learning rates and KL coefficients, by algorithm family and model size, with sources.

**Learning rates.** The ranges below are quoted for a model of 7B parameters (the size the
recipes and trainer defaults are written for) trained in full (every weight). Two things move
them:

* **Model size.** The rate a model trains at falls as it grows: GPT-3's rates fall 10x from 125M
  to 175B parameters (Brown et al. 2020, table 2.1: about N^-1/3), muP's Adam rate for the hidden
  matrices scales as 1/width (Yang et al. 2022, "Tensor Programs V"), and width grows as about
  N^1/3; Tulu 3 uses 2.5x lower rates at 70B than at 8B for SFT and DPO (Lambert et al. 2024).
  So where the run shows the model's size, both ends scale by ``(7e9 / N) ** (1/3)``: a 0.5B
  model trains at 2.4x a 7B model's rate, a 100k-parameter toy language model at about 40x (an
  extrapolation below the smallest fine-tuned models of the sources, about 1e8, by the same rule).
  Where the size is unknown the 7B range is used, and the advice says so.
* **LoRA.** Adapters train at about 10x the full fine-tuning rate (Schulman et al. 2025, "LoRA
  Without Regret"; TRL's LoRA examples use 2e-4 where its SFT default is 2e-5). Where the run
  does not show whether it trained adapters or the whole model, the top of the usual range
  allows LoRA.

KL coefficients weigh nats of KL against units of reward (or of the preference loss), so they do
not scale with the model; they depend on where the penalty sits.
"""

from __future__ import annotations

import math

from ..records import record

__all__ = ["KL_RANGES", "LORA_FACTOR", "LR_RANGES", "REFERENCE_PARAMS", "KlRange", "LrRange", "SizedRange",
           "geometric_centre", "kl_range", "lr_family", "lr_range", "ranges_tables", "size_factor"]

#: The model size the learning-rate ranges are quoted for (7B).
REFERENCE_PARAMS = 7e9
#: How the learning rate scales with the number of parameters N: N ** -SIZE_EXPONENT.
SIZE_EXPONENT = 1.0 / 3.0
#: LoRA adapters train at about this many times the full fine-tuning rate.
LORA_FACTOR = 10.0


@record(frozen=True)
class LrRange:
    """The usual learning rates of full fine-tuning of a 7B model for one family of algorithms."""

    family: str
    algorithms: str
    low: float
    high: float
    sources: str


LR_RANGES: dict[str, LrRange] = {
    "rl": LrRange("rl", "PPO, GRPO, RLOO, REINFORCE++, DAPO (the policy; a critic trains ~10x higher)",
                  1e-6, 1e-5,
                  "TRL's GRPOConfig and RLOOConfig default 1e-6 (TRL 1.16), PPOConfig 3e-6 (TRL 1.12); "
                  "DeepSeekMath GRPO 1e-6 (Shao et al. 2024); DAPO 1e-6 at 32B (Yu et al. 2025); veRL's "
                  "PPO and GRPO examples 1e-6 (actor), 1e-5 (critic); Ziegler et al. 2019 1.41e-5 at 774M"),
    "preference": LrRange("preference", "DPO, IPO, KTO, ORPO, CPO, SimPO, online DPO", 5e-7, 5e-6,
                          "TRL's DPOConfig, KTOConfig, ORPOConfig and CPOConfig default 1e-6, "
                          "OnlineDPOConfig 5e-7 (TRL 1.16); Zephyr 5e-7 (Tunstall et al. 2023); "
                          "Tulu 2 and 3 DPO 5e-7 at 7-8B, 2e-7 at 70B (Ivison et al. 2023, "
                          "Lambert et al. 2024); SimPO 3e-7 to 1e-6 (Meng et al. 2024)"),
    "sft": LrRange("sft", "supervised fine-tuning", 5e-6, 5e-5,
                   "TRL's SFTConfig default 2e-5 (TRL 1.16); Alpaca 2e-5 at 7B (Taori et al. 2023); "
                   "Tulu 3 SFT 5e-6 at 8B, 2e-6 at 70B (Lambert et al. 2024)"),
}


def lr_family(family: str | None) -> str:
    """The learning-rate family of an algorithm family (``critic`` and ``group`` are RL)."""
    return {"preference": "preference", "sft": "sft"}.get(family or "", "rl")


def size_factor(params: float | None) -> float:
    """How many times a 7B model's rate a model of ``params`` parameters trains at (1 when the
    size is unknown).

    >>> round(size_factor(7e9), 3), round(size_factor(5e8), 2), round(size_factor(7e10), 2)
    (1.0, 2.41, 0.46)
    """
    if params is None or not params > 0:
        return 1.0
    return float((REFERENCE_PARAMS / params) ** SIZE_EXPONENT)


def geometric_centre(low: float, high: float) -> float:
    """The middle of a range spanning orders of magnitude, rounded to two significant digits."""
    return float(f"{math.sqrt(low * high):.2g}")


@record(frozen=True)
class SizedRange:
    """A learning-rate range for this run: full fine-tuning ``low``-``high`` at its size, the
    top of what is usual (``usual_high``: LoRA's unless full fine-tuning is known), and words."""

    low: float
    high: float
    usual_high: float
    factor: float
    words: str


def lr_range(family: str | None, params: float | None, lora: bool | None) -> SizedRange:
    """The usual learning rates of ``family`` for a model of ``params`` parameters.

    >>> r = lr_range("group", 1e5, False)
    >>> f"{r.low:.2g} {r.high:.2g} {r.usual_high:.2g}"
    '4.1e-05 0.00041 0.00041'
    >>> words = lr_range("preference", None, None).words
    >>> words.startswith("preference optimisation of a language model of unknown size (the range for 7B)")
    True
    >>> words.endswith(": 5e-07 to 5e-06 in full fine-tuning, up to 5e-05 with LoRA")
    True
    """
    r = LR_RANGES[lr_family(family)]
    factor = size_factor(params)
    low, high = r.low * factor, r.high * factor
    usual_high = high if lora is False else high * LORA_FACTOR
    what = {"rl": "RL fine-tuning", "preference": "preference optimisation", "sft": "supervised fine-tuning"}[r.family]
    size = (f"a model of {_params_text(params)} parameters" if params else
            "a language model of unknown size (the range for 7B)")
    words = f"{what} of {size}: {low:.2g} to {high:.2g} in full fine-tuning"
    if lora is None:
        words += f", up to {high * LORA_FACTOR:.2g} with LoRA"
    elif lora:
        words = f"{what} of {size} with LoRA: {low:.2g} to {high * LORA_FACTOR:.2g}"
    return SizedRange(low, high, usual_high, factor, words)


def _params_text(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


@record(frozen=True)
class KlRange:
    """The usual KL coefficients where the penalty sits in one place."""

    placement: str
    key_words: str
    low: float
    high: float
    typical: float
    sources: str


KL_RANGES: dict[str, KlRange] = {
    "reward": KlRange("reward", "KL penalty in the reward (PPO, TRL's RLOO, veRL use_kl_in_reward)",
                      0.001, 0.2, 0.05,
                      "TRL's PPOConfig kl_coef 0.05 (TRL 1.12), RLOOConfig beta 0.05 (TRL 1.16); "
                      "veRL algorithm.kl_ctrl.kl_coef 0.001; InstructGPT 0.02 (Ouyang et al. 2022); "
                      "Ziegler et al. 2019 start an adaptive controller at 0.1-0.2"),
    "loss": KlRange("loss", "KL term in the loss (GRPO, veRL use_kl_loss)", 0.001, 0.1, 0.04,
                    "DeepSeekMath GRPO 0.04 (Shao et al. 2024; TRL's GRPOConfig default before it "
                    "became 0); veRL actor_rollout_ref.actor.kl_loss_coef 0.001"),
    "preference": KlRange("preference", "beta of a preference loss with a reference model (DPO, IPO, KTO)",
                          0.01, 0.5, 0.1,
                          "TRL's DPOConfig and KTOConfig beta 0.1 (TRL 1.16); DPO 0.1 to 0.5 (Rafailov "
                          "et al. 2023); Zephyr 0.01 (Tunstall et al. 2023); KTO 0.1 (Ethayarajh et al. "
                          "2024); SimPO's beta (2 to 2.5) is on another scale and not judged"),
}


def kl_range(placement: str | None, family: str | None) -> KlRange | None:
    """The KL range of a run: by family for preference optimisation, else by where the penalty
    sits (``reward`` or ``loss``); None when that is not known or there is none."""
    if family == "preference":
        return KL_RANGES["preference"]
    return KL_RANGES.get(placement or "")


def ranges_tables() -> list[str]:
    """The ranges as Markdown tables (the rules catalogue shows them after this module's text)."""
    out = ["| family | algorithms | full fine-tuning at 7B | sources |", "| --- | --- | --- | --- |"]
    out += [f"| {r.family} | {r.algorithms} | {r.low:g} to {r.high:g} | {r.sources} |" for r in LR_RANGES.values()]
    out += ["", "| KL penalty | where | usual | typical | sources |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {k.placement} | {k.key_words} | {k.low:g} to {k.high:g} | {k.typical:g} | {k.sources} |"
            for k in KL_RANGES.values()]
    return [*out, ""]

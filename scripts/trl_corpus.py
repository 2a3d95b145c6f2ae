"""Write the labelled TRL corpus (fixtures/trl/): runs that Hugging Face TRL itself trains on the CPU.

``make fixtures-trl`` runs this with the separate environment ``.venv-trl`` (TRL is never a runtime
dependency of the analyzer). Everything is local: no model hub, no data set download.

* **Language.** A tiny synthetic review language: a prompt ``review of the film :`` and a
  completion ``the film was really great but slow . <eos>``. A word-level tokenizer (the
  ``tokenizers`` library) over its fixed vocabulary, wrapped as ``PreTrainedTokenizerFast``.
* **Base model.** A Llama-architecture causal LM (hidden 64, 2 layers, random weights, seed 0) given
  a short next-token warm-up on the language (400 AdamW steps, seconds on a CPU), so that, like a
  real SFT checkpoint, it writes sentences that end with EOS and has a realistic entropy. Every run
  starts from this one checkpoint; the run's seed drives sampling and training.
* **Task.** Sentiment, as in TRL's own PPO examples: the reward is the share of positive minus the
  share of negative adjectives in the completion, in [-1, 1] (a few adjectives per sentence, so the
  policy can move it from about -0.1 to near 1). PPO gets the same reward as a reward *model*: a
  module whose backbone accumulates per-token features and whose score head turns them into the
  reward at the last token, which is how TRL's PPO reads a reward model.
* **Runs.** ``RUNS`` below: healthy runs (two seeds per algorithm) and one fault each, with the
  rules that should fire. After each run the script checks that the fault really shows in what TRL
  logged (``checks``: it fails loudly otherwise), then writes ``trainer_state.json`` and the
  policy's ``config.json`` (what ``trainer.save_model`` writes beside the weights; checkpoints,
  weights, ``training_args.bin`` and optimizer state are deleted), the console log (the metric
  dicts the trainer printed) and ``manifest.json`` with the observed numbers.

TRL 1.16 has no PPO trainer (it was removed after 1.12), so PPO runs use TRL 1.12.0's
``trl.experimental.ppo``, installed beside 1.16 in ``.venv-trl/trl-ppo`` and put first on the path
of those runs only; each manifest records the version that wrote the run.

Usage: ``python scripts/trl_corpus.py [--out fixtures/trl] [--only NAME ...] [--list]``. Each run is
a subprocess (``--run NAME``) with one torch thread, so a run is deterministic in its seed; metrics
can differ in the last digits across machines or thread counts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "trl-corpus"
PPO_TRL = ROOT / ".venv-trl" / "trl-ppo"

# ------------------------------------------------------------------------------------------------
# The language
# ------------------------------------------------------------------------------------------------

NOUNS = ("film book song meal hotel phone game show car trip park cafe movie album room laptop "
         "camera bike class story").split()
POSITIVE = "great good lovely superb excellent wonderful nice fun brilliant perfect".split()
NEGATIVE = "bad awful boring poor terrible dull weak ugly slow broken".split()
NEUTRAL = "long short new old big small red blue plain usual".split()
ADVERBS = "very really quite so rather".split()
VERBS = "was is felt looked seemed".split()
FUNCTION = "the a it my our this and but .".split()
PROMPT_WORDS = "review opinion of on :".split()
SPECIALS = ["<pad>", "<eos>", "<unk>"]
VOCAB = SPECIALS + sorted(set(NOUNS + POSITIVE + NEGATIVE + NEUTRAL + ADVERBS + VERBS + FUNCTION
                              + PROMPT_WORDS))
POS_SET, NEG_SET = set(POSITIVE), set(NEGATIVE)


def make_prompt(rng: random.Random) -> str:
    head = rng.choice(["review of", "opinion on"])
    return f"{head} {rng.choice(['the', 'my', 'this', 'our'])} {rng.choice(NOUNS)} :"


def _adjective(rng: random.Random) -> str:
    u = rng.random()
    pool = POSITIVE if u < 0.25 else NEGATIVE if u < 0.6 else NEUTRAL
    return rng.choice(pool)


def _phrase(rng: random.Random) -> list[str]:
    out = [rng.choice(ADVERBS)] if rng.random() < 0.4 else []
    return out + [_adjective(rng)]


def make_completion(rng: random.Random, noun: str, sentiment: str | None = None) -> str:
    """One to three clauses about ``noun``.

    ``sentiment`` ("pos" or "neg") makes 80% of the adjectives that polarity and the rest neutral.
    """
    def adj() -> str:
        if sentiment in ("pos", "neg") and rng.random() < 0.8:
            return rng.choice(POSITIVE if sentiment == "pos" else NEGATIVE)
        if sentiment in ("pos", "neg"):
            return rng.choice(NEUTRAL)
        return _adjective(rng)

    words = ["the", noun, rng.choice(VERBS)]
    words += ([rng.choice(ADVERBS)] if rng.random() < 0.4 else []) + [adj()]
    if rng.random() < 0.6:
        words += [rng.choice(["and", "but"])] + ([rng.choice(ADVERBS)] if rng.random() < 0.3 else [])
        words += [adj()]
    words.append(".")
    if rng.random() < 0.35:
        words += ["it", rng.choice(VERBS), adj(), "."]
    return " ".join(words)


def sentiment_score(text: str) -> float:
    """Share of positive minus share of negative adjectives, in [-1, 1]; 0 without adjectives."""
    words = text.split()
    pos = sum(w in POS_SET for w in words)
    neg = sum(w in NEG_SET for w in words)
    adjs = pos + neg + sum(w in NEUTRAL for w in words)
    return (pos - neg) / adjs if adjs else 0.0


def build_tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")
    # For trainers that format conversations; the runs here use plain-text prompts.
    fast.chat_template = ("{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}"
                          "{% endfor %}")
    return fast


# ------------------------------------------------------------------------------------------------
# Base model (random init + warm-up on the language), built once and cached under build/
# ------------------------------------------------------------------------------------------------

def llama_config(tok: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(VOCAB), hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                       max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, bos_token_id=None, tie_word_embeddings=False)


def build_base(path: Path) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    rng = random.Random(0)
    tok = build_tokenizer()
    model = LlamaForCausalLM(llama_config(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for step in range(400):
        texts = []
        for _ in range(32):
            p = make_prompt(rng)
            texts.append(f"{p} {make_completion(rng, p.split()[-2])}")
        enc = tok(texts, return_tensors="pt", padding=True, padding_side="right")
        ids = torch.cat([enc.input_ids, torch.full((len(texts), 1), tok.pad_token_id)], 1)
        mask = torch.cat([enc.attention_mask, torch.zeros(len(texts), 1, dtype=torch.long)], 1)
        lengths = enc.attention_mask.sum(1)
        ids[torch.arange(len(texts)), lengths] = tok.eos_token_id  # the completion ends with EOS
        mask[torch.arange(len(texts)), lengths] = 1
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 100 == 0 or step == 399:
            print(f"base warm-up step {step}: loss {loss.item():.3f}", flush=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)


def load_base() -> tuple[Any, Any]:
    from transformers import AutoTokenizer, LlamaForCausalLM

    path = BUILD / "base"
    model = LlamaForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    return model, tok


# ------------------------------------------------------------------------------------------------
# Rewards
# ------------------------------------------------------------------------------------------------

def _texts(completions: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c[-1]["content"] for c in completions]


def sentiment(completions: list[Any], **_: Any) -> list[float]:
    """The task's reward: positive minus negative adjective share, in [-1, 1]."""
    return [sentiment_score(t) for t in _texts(completions)]


def sentiment_plus_length(completions: list[Any], **_: Any) -> list[float]:
    """Fault: a reward that also pays 0.15 per word (a verbosity bias in the reward)."""
    return [sentiment_score(t) + 0.15 * len(t.split()) for t in _texts(completions)]


def keyword_great(completions: list[Any], **_: Any) -> list[float]:
    """Fault: a weak, hackable reward: the share of words that are 'great'."""
    out = []
    for t in _texts(completions):
        words = t.split()
        out.append(sum(w == "great" for w in words) / max(len(words), 1))
    return out


def positive_words(completions: list[Any], **_: Any) -> list[float]:
    """Fault: a weak, hackable reward: the share of words that are positive adjectives (a string
    of positive adjectives scores 1, whatever it says)."""
    out = []
    for t in _texts(completions):
        words = t.split()
        out.append(sum(w in POS_SET for w in words) / max(len(words), 1))
    return out


REWARD_FUNCS: dict[str, Callable[..., list[float]]] = {
    "sentiment": sentiment, "sentiment_plus_length": sentiment_plus_length,
    "keyword_great": keyword_great, "positive_words": positive_words}


def rule_reward_model(tok: Any, kind: str, scale: float = 1.0) -> Any:
    """A reward *model* for TRL's PPO that computes a rule reward from the tokens.

    TRL's PPO calls ``model.<base_model_prefix>(input_ids, attention_mask, ...)`` and reads
    ``model.score(hidden_states[-1])`` at the last token. The backbone here returns, per position,
    running counts over the completion (the tokens after the prompt's ':'): words, positive,
    negative and neutral adjectives, 'great'. The score head turns the counts into the reward.
    """
    import torch
    from torch import nn

    ids = {w: i for i, w in enumerate(VOCAB)}
    feats = torch.zeros(len(VOCAB), 5)
    for w, i in ids.items():
        if w in SPECIALS or w in PROMPT_WORDS:
            continue
        feats[i, 0] = 1.0
        feats[i, 1] = float(w in POS_SET)
        feats[i, 2] = float(w in NEG_SET)
        feats[i, 3] = float(w in NEUTRAL)
        feats[i, 4] = float(w == "great")
    sep = ids[":"]

    class Out:
        def __init__(self, h: torch.Tensor) -> None:
            self.hidden_states = (h,)

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("feats", feats)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> Out:
            after = (torch.cumsum((input_ids == sep).long(), 1) >= 1) & (input_ids != sep)
            f = self.feats[input_ids] * (after & attention_mask.bool()).unsqueeze(-1).float()
            return Out(torch.cumsum(f, 1))

    class Score(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            words, pos, neg, neu, great = h.unbind(-1)
            adjs = pos + neg + neu
            senti = torch.where(adjs > 0, (pos - neg) / adjs.clamp(min=1), torch.zeros_like(adjs))
            if kind == "sentiment":
                r = senti
            elif kind == "sentiment_plus_length":
                r = senti + 0.15 * words
            elif kind == "keyword_great":
                r = great / words.clamp(min=1)
            else:
                raise ValueError(kind)
            return (scale * r).unsqueeze(-1)

    class RuleRewardModel(nn.Module):
        base_model_prefix = "backbone"

        def __init__(self) -> None:
            super().__init__()
            self.backbone = Backbone()
            self.score = Score()

    return RuleRewardModel()


# ------------------------------------------------------------------------------------------------
# Run specifications
# ------------------------------------------------------------------------------------------------

#: A check on what TRL logged: (metric key, statistic, comparison, value). Statistics: first, last,
#: max, min, mean_first5, mean_last5, rise (last 10 minus first 10), max_after_onset. The generator
#: fails if a check does not hold.
Check = tuple[str, str, str, float]


@dataclass
class Run:
    name: str
    algorithm: str
    seed: int
    fault: str | None = None
    onset_step: int | None = None
    expected_rules: list[str] = field(default_factory=list)
    horizon_steps: int = 20
    description: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    reward: str = "sentiment"
    reward_weights: list[float] | None = None
    reward_scale: float = 1.0
    steps: int = 60
    checks: list[Check] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)


# Sane settings for a tiny model (hidden 64). Learning rates sit at the top of the usual ranges for
# language models (RL: 1e-6 to 1e-4, the top for LoRA; DPO/KTO: 5e-7 to 5e-5), where a 64-wide model
# moves within a hundred updates; a wider model moves faster at the same rate.
GRPO = dict(learning_rate=1e-4, beta=0.1, num_generations=8, max_completion_length=24,
            per_device_train_batch_size=64, temperature=1.0, max_grad_norm=1.0, epsilon=0.2,
            loss_type="dapo", scale_rewards="group")
RLOO = dict(learning_rate=1e-4, beta=0.05, num_generations=8, max_completion_length=24,
            per_device_train_batch_size=64, temperature=1.0, max_grad_norm=1.0, epsilon=0.2)
PPO = dict(learning_rate=5e-5, kl_coef=0.1, response_length=24, per_device_train_batch_size=32,
           num_mini_batches=2, num_ppo_epochs=4, cliprange=0.2, cliprange_value=0.2, vf_coef=0.1,
           temperature=1.0, kl_estimator="k1", stop_token="eos", gamma=1.0, lam=0.95,
           whiten_rewards=False, missing_eos_penalty=None)
DPO = dict(learning_rate=5e-5, beta=0.1, per_device_train_batch_size=16, max_length=48,
           max_grad_norm=1.0, loss_type=["sigmoid"])
KTO = dict(learning_rate=5e-5, beta=0.1, per_device_train_batch_size=16, max_length=48,
           max_grad_norm=1.0, desirable_weight=1.0, undesirable_weight=1.0)


def _with(base: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {**base, **kw}


GROUP_EVIDENCE = ["reward", "kl", "entropy", "completions/mean_length", "completions/clipped_ratio",
                  "grad_norm", "frac_reward_zero_std"]
PPO_EVIDENCE = ["objective/scores", "objective/kl", "objective/entropy", "policy/approxkl_avg",
                "policy/clipfrac_avg", "loss/value_avg"]
PREF_EVIDENCE = ["loss", "rewards/margins", "rewards/accuracies", "logps/chosen", "logps/rejected",
                 "grad_norm"]
KTO_EVIDENCE = ["loss", "rewards/margins", "kl", "logps/chosen", "logps/rejected", "grad_norm"]

RUNS: list[Run] = [
    # ---------------------------------------------------------------- healthy
    *[Run(f"grpo_healthy_s{s}", "grpo", s, config=dict(GRPO), steps=150,
          description="Healthy GRPO: sentiment reward, beta 0.1, lr 1e-4, 8 prompts x 8 generations.",
          checks=[("reward", "rise", ">", 0.2), ("kl", "max", "<", 0.2),
                  ("completions/clipped_ratio", "max", "<", 0.2)],
          evidence=GROUP_EVIDENCE) for s in (0, 1)],
    *[Run(f"rloo_healthy_s{s}", "rloo", s, config=dict(RLOO), steps=150,
          description="Healthy RLOO: sentiment reward, beta 0.05 (KL in the reward), lr 1e-4. The "
          "pre-clip grad_norm sits at 1.3-2.5 with max_grad_norm 1.0 (RLOO's unnormalised "
          "advantages), so most steps are clipped, as is usual with this trainer's defaults; a "
          "few single-step grad_norm spikes (to ~30) are clipped away and leave no trace in KL, "
          "entropy or reward.",
          checks=[("reward", "rise", ">", 0.2), ("kl", "max", "<", 0.2)],
          evidence=GROUP_EVIDENCE) for s in (0, 1)],
    *[Run(f"ppo_healthy_s{s}", "ppo", s, config=dict(PPO), steps=80,
          description="Healthy PPO: sentiment reward model, kl_coef 0.1, lr 5e-5, 4 PPO epochs x 2 "
          "mini-batches. objective/kl and objective/entropy are per-sequence sums (TRL PPO); its "
          "training loop clips no gradient and logs no grad_norm (max_grad_norm is unused).",
          checks=[("objective/scores", "rise", ">", 0.3), ("objective/kl", "max", "<", 3.0),
                  ("policy/approxkl_avg", "max", "<", 0.1)],
          evidence=PPO_EVIDENCE) for s in (0, 1)],
    *[Run(f"dpo_healthy_s{s}", "dpo", s, config=dict(DPO), steps=150,
          description="Healthy DPO: preference pairs (chosen leans positive, rejected negative, 15% "
          "of pairs swapped as label noise), beta 0.1, lr 5e-5, one pass over 2,400 pairs: the early "
          "phase of a DPO run, loss slowly below ln 2 while accuracy climbs to ~0.8.",
          checks=[("loss", "rise", "<", -0.015), ("loss", "min", ">", 0.4),
                  ("rewards/accuracies", "mean_last5", ">", 0.6), ("rewards/margins", "rise", ">", 0.02)],
          evidence=PREF_EVIDENCE) for s in (0, 1)],
    *[Run(f"kto_healthy_s{s}", "kto", s, config=_with(KTO, learning_rate=3e-5), steps=150,
          description="Healthy KTO: the DPO pairs unpaired (chosen desirable, rejected undesirable), "
          "beta 0.1, lr 3e-5: the loss creeps below 0.5 as the margin opens. KTO's `kl` is a "
          "batch-level, per-sequence estimate clamped at 0 (often exactly 0 early on).",
          checks=[("loss", "rise", "<", -0.003), ("rewards/margins", "rise", ">", 0.015)],
          evidence=KTO_EVIDENCE) for s in (0, 2)],
    # generated with the healthy KTO settings, but seed 1 turns unstable at the end: labelled so
    Run("kto_unstable_s1", "kto", 1, "emergent_instability", 125, ["grad.explode", "grad.spike"],
        horizon_steps=20, config=dict(KTO), steps=150,
        description="KTO at lr 5e-5 (1.7x the healthy runs', the top of the usual range for this tiny "
        "model; beta 0.1, seed 1) that turns unstable in "
        "its last steps: the gradient norm, 0.10-0.2 for most of the run, climbs from step 125 (0.48; "
        "0.7-1.2 at 129-139) and jumps to 1.6-2.8 from step 140 (15x the trailing median at step "
        "142) while the entropy rises 1.35 -> 1.7. Made as "
        "a healthy run, relabelled as an emergent fault: the jump is real and a reader of the log "
        "would want to know. The healthy KTO runs (seeds 0 and 2) use lr 3e-5.",
        checks=[("grad_norm", "max", ">", 1.5)], evidence=KTO_EVIDENCE),
    # ---------------------------------------------------------------- learning rate far too high
    Run("grpo_lr_high", "grpo", 0, "lr_high", 1, ["kl.excessive", "hyperparams.lr_out_of_range", "signal.dead_groups"],
        config=_with(GRPO, learning_rate=2e-2), steps=60,
        description="GRPO with the learning rate 200x too high (2e-2 instead of 1e-4): the per-token "
        "KL leaves the healthy range at once and stays at several nats, the entropy rises, "
        "completions run to the 24-token cap, and once every completion scores 1 the groups carry "
        "no signal (frac_reward_zero_std 1).",
        checks=[("kl", "max", ">", 1.0), ("frac_reward_zero_std", "mean_last5", ">", 0.9)],
        evidence=GROUP_EVIDENCE),
    Run("rloo_lr_high", "rloo", 0, "lr_high", 1,
        ["kl.excessive", "length.collapse", "entropy.collapse", "hyperparams.lr_out_of_range", "grad.vanish"],
        config=_with(RLOO, learning_rate=2e-2), steps=60,
        description="RLOO with the learning rate 200x too high (2e-2 instead of 1e-4): the policy "
        "collapses within a few updates to answering with EOS alone (mean length 9.2 -> 1 token), "
        "the per-token KL jumps to ~9 nats, the entropy falls to ~0, the reward to 0 and the "
        "gradient norm to exactly 0.",
        checks=[("kl", "max", ">", 1.0), ("completions/mean_length", "mean_last5", "<", 2.0)],
        evidence=GROUP_EVIDENCE),
    Run("ppo_lr_high", "ppo", 0, "lr_high", 1,
        ["trust_region.exceeded", "kl.excessive", "hyperparams.lr_out_of_range", "entropy.collapse"],
        config=_with(PPO, learning_rate=1e-2), steps=40,
        description="PPO with the learning rate 200x too high (1e-2 instead of 5e-5): approx_kl "
        "~6 and clip fraction ~0.45 on the very first update, a per-sequence KL of ~33 nats at "
        "update 2, then the policy collapses (sequence entropy 13.6 -> ~0, score -> 0).",
        checks=[("policy/approxkl_avg", "max", ">", 0.1), ("objective/kl", "max", ">", 5.0)],
        evidence=PPO_EVIDENCE),
    Run("dpo_lr_high", "dpo", 0, "lr_high", 1,
        ["pref.likelihood_displacement", "hyperparams.lr_out_of_range", "entropy.blowup"],
        config=_with(DPO, learning_rate=5e-3), steps=60,
        description="DPO with the learning rate 100x too high (5e-3 instead of 5e-5): the policy is "
        "thrown about rather than fitted; the chosen and rejected log-probabilities both fall by "
        "tens of nats (likelihood displacement) while the margin opens, the loss swings between "
        "0.1 and 0.8 and the per-token entropy rises from 1.4 to 2-3.",
        checks=[("logps/chosen", "min", "<", -40.0), ("rewards/margins", "max", ">", 1.0),
                ("entropy", "max", ">", 2.0)],
        evidence=PREF_EVIDENCE + ["entropy"]),
    Run("dpo_overfit", "dpo", 0, "overfit", 1,
        ["pref.overfit", "pref.margin_blowup", "pref.likelihood_displacement", "hyperparams.lr_out_of_range"],
        horizon_steps=40, config=_with(DPO, learning_rate=1e-3, n_pairs=64), steps=100,
        description="DPO over-trained: 25 epochs over 64 pairs at a learning rate 20x too high "
        "(1e-3): the pairs are memorised, the loss collapses towards 0 and the accuracy is pinned "
        "at 1 while the margins keep growing and the log-probabilities fall.",
        checks=[("loss", "mean_last5", "<", 0.1), ("rewards/accuracies", "mean_last5", ">", 0.9)],
        evidence=PREF_EVIDENCE),
    Run("kto_lr_high", "kto", 0, "lr_high", 1,
        ["pref.likelihood_displacement", "hyperparams.lr_out_of_range", "grad.vanish"],
        config=_with(KTO, learning_rate=5e-3), steps=60,
        description="KTO with the learning rate 100x too high (5e-3 instead of 5e-5): within 10 "
        "steps the log-probabilities of desirable and undesirable completions both collapse "
        "(-13 -> -90 to -115 nats), the margin turns negative, and the saturated sigmoids leave "
        "gradient norms ~100x below their first value.",
        checks=[("logps/chosen", "min", "<", -50.0), ("grad_norm", "mean_last5", "<", 0.02)],
        evidence=KTO_EVIDENCE),
    # ---------------------------------------------------------------- a learning-rate jump mid-run
    Run("grpo_lr_jump", "grpo", 0, "lr_jump", 61, ["hyperparams.lr_change", "kl.excessive", "kl.spike"],
        config=_with(GRPO, lr_jump_step=60, lr_jump_factor=100.0), steps=120,
        description="GRPO whose learning rate jumps 100x (1e-4 -> 1e-2) after step 60, as a "
        "broken schedule or a resume with the wrong config would do (a callback rescales the "
        "scheduler's base rate). The update of step 61 already uses 1e-2; the logged "
        "learning_rate shows it from step 62, where the per-token KL also leaves its 0.01 level.",
        checks=[("kl", "max_after_onset", ">", 0.5)], evidence=GROUP_EVIDENCE),
    # ---------------------------------------------------------------- learning rate far too low
    Run("grpo_lr_low", "grpo", 0, "lr_low", 1, ["hyperparams.lr_out_of_range", "reward.stagnation"],
        horizon_steps=50, config=_with(GRPO, learning_rate=1e-8), steps=80,
        description="GRPO with the learning rate 10,000x too low (1e-8): nothing moves; the "
        "per-token KL is exactly 0 at every step (the updates are below float32 resolution) "
        "and the reward wanders around its starting level.",
        checks=[("kl", "max", "<", 1e-5), ("reward", "rise", "<", 0.1)], evidence=GROUP_EVIDENCE),
    Run("ppo_lr_low", "ppo", 0, "lr_low", 1, ["hyperparams.lr_out_of_range", "reward.stagnation"],
        horizon_steps=50, config=_with(PPO, learning_rate=5e-9), steps=60,
        description="PPO with the learning rate 10,000x too low (5e-9): nothing moves. approx_kl "
        "is ~6e-12 from the first update (a healthy run: 1e-5 to 3e-2), so a rule that compares it "
        "with its own earlier level (kl.update_stalled) has nothing to compare; an absolute floor would.",
        checks=[("policy/approxkl_avg", "max", "<", 1e-8), ("objective/scores", "rise", "<", 0.15)],
        evidence=PPO_EVIDENCE),
    # ---------------------------------------------------------------- reward that pays for length
    Run("grpo_length_reward", "grpo", 0, "length_reward", 1,
        ["length.reward_correlation", "length.growth", "length.truncation"],
        horizon_steps=80, config=dict(GRPO), reward="sentiment_plus_length", steps=120,
        description="GRPO whose reward pays 0.15 per word on top of the sentiment score (a verbosity "
        "bias): completions grow to the 24-token cap.",
        checks=[("completions/mean_length", "mean_last5", ">", 16.0),
                ("completions/clipped_ratio", "mean_last5", ">", 0.3)],
        evidence=GROUP_EVIDENCE + ["rewards/sentiment_plus_length/mean"]),
    Run("ppo_length_reward", "ppo", 0, "length_reward", 1, ["length.growth", "length.reward_correlation"],
        horizon_steps=50, config=dict(PPO), reward="sentiment_plus_length", steps=60,
        description="PPO whose reward model pays 0.15 per word on top of the sentiment score: the "
        "responses grow (every one still ends with EOS before the 24-token cap). TRL's PPO logs no "
        "response length, so the growth shows only in the per-sequence sums: objective/entropy "
        "(a sequence NLL) and objective/kl rise with it; a detector needs samples or a length "
        "inferred from these sums to see it.",
        checks=[("objective/entropy", "rise", ">", 3.0), ("objective/scores", "rise", ">", 0.8)],
        evidence=PPO_EVIDENCE + ["val/num_eos_tokens"]),
    # the fault is there from the first step, but it shows only as the KL leaves what the healthy
    # runs reach (1.6 nats/sequence over 80 updates): step 31 (1.9), the onset labelled
    Run("ppo_kl_off_hack", "ppo", 0, "kl_off_hackable_reward", 31,
        ["kl.runaway", "kl.excessive", "kl.spike"],
        horizon_steps=40, config=_with(PPO, kl_coef=0.0), reward="keyword_great", steps=80,
        description="PPO with kl_coef 0 and a weak, hackable reward (the share of words that are "
        "'great'): nothing holds the policy near the reference. The per-sequence KL climbs "
        "without bound (0 -> ~2 by step 24, ~8 at 64, ~23 at 80) while the score moves only "
        "from 0.008 to 0.13; the responses lengthen until most no longer end (EOS in 32 -> 14 of 32). "
        "Onset: step 31, where the KL (1.9) first leaves the healthy runs' range; it jumps 3.6 -> "
        "7.8 over steps 61-66.",
        checks=[("objective/kl", "max", ">", 10.0), ("objective/scores", "rise", ">", 0.05)],
        evidence=PPO_EVIDENCE + ["val/num_eos_tokens"]),
    Run("grpo_kl_off_hack", "grpo", 0, "kl_off_hackable_reward", 1,
        ["entropy.blowup", "length.truncation", "length.growth"],
        horizon_steps=100, config=_with(GRPO, beta=0.0), reward="positive_words", steps=150,
        description="GRPO with beta 0 (TRL's default: no reference model, so no KL is logged) and "
        "a weak, hackable reward (the share of words that are positive adjectives): from about "
        "step 50 the policy drifts into strings of adjectives; by step 90 the per-token entropy "
        "has doubled (1.4 -> 3.0), completions run to the 24-token cap (clipped_ratio 0 -> 0.84 "
        "-> 0.98) and the reward climbs (0.06 -> 0.6). The drift from the reference itself cannot "
        "show: TRL logs kl only when beta != 0.",
        checks=[("reward", "rise", ">", 0.3), ("entropy", "mean_last5", ">", 2.5),
                ("completions/clipped_ratio", "mean_last5", ">", 0.8)],
        evidence=GROUP_EVIDENCE),
    Run("grpo_max_len_small", "grpo", 0, "max_length_small", 1, ["length.truncation"],
        horizon_steps=10, config=_with(GRPO, max_completion_length=4), steps=60,
        description="GRPO with max_completion_length 4 while answers need 6-16 tokens: every "
        "completion is cut.",
        checks=[("completions/clipped_ratio", "min", ">", 0.9)], evidence=GROUP_EVIDENCE),
    Run("rloo_max_len_small", "rloo", 0, "max_length_small", 1, ["length.truncation"],
        horizon_steps=10, config=_with(RLOO, max_completion_length=5), steps=60,
        description="RLOO with max_completion_length 5 while answers need 6-16 tokens.",
        checks=[("completions/clipped_ratio", "min", ">", 0.8)], evidence=GROUP_EVIDENCE),
    # ---------------------------------------------------------------- reward scale / sign errors
    Run("grpo_reward_sign", "grpo", 0, "reward_sign", 1, ["reward.sign_flip"],
        horizon_steps=60, config=dict(GRPO), reward_weights=[-1.0], steps=100,
        description="GRPO with reward_weights [-1.0] (a sign error): the trainer maximises the "
        "negated sentiment. The logged `reward` (weighted) rises while the reward function's own "
        "rewards/sentiment/mean falls (-0.05 -> about -0.45) towards its floor of -1.",
        checks=[("rewards/sentiment/mean", "mean_last5", "<", -0.3)],
        evidence=GROUP_EVIDENCE + ["rewards/sentiment/mean"]),
    Run("ppo_reward_scale", "ppo", 0, "reward_scale", 1, ["kl.runaway"],
        horizon_steps=60, config=dict(PPO), reward_scale=100.0, steps=60,
        description="PPO whose reward model returns percent instead of a fraction (x100). The "
        "direct signature is the scale itself: loss/value_avg ~900-1,400 from the first update "
        "(a healthy run: ~0.1, i.e. 10^4 x smaller) and scores in the tens (-24 -> 49). No rule "
        "judges those levels yet. Downstream, the KL penalty (kl_coef 0.1) is negligible beside "
        "the reward, so the per-sequence KL climbs faster than in the healthy runs (0.2 at step "
        "30 -> 3.2 at step 60, against a healthy 0.8-1.6 after 80 steps).",
        checks=[("loss/value_avg", "min", ">", 100.0), ("objective/kl", "max", ">", 2.0)],
        evidence=PPO_EVIDENCE),
    Run("dpo_beta_tiny", "dpo", 0, "beta_tiny", 1, ["pref.not_learning"],
        horizon_steps=50, config=_with(DPO, beta=0.001), steps=150,
        description="DPO with beta 0.001 (100x below the usual 0.1): the implicit rewards are "
        "beta x log-ratios, so the margins stay ~1e-3, the loss sits at ln 2 = 0.6931 for the "
        "whole run and the gradient norm is ~100x below a healthy run's (0.004 vs 0.4).",
        checks=[("loss", "min", ">", 0.69), ("rewards/margins", "max", "<", 0.01)],
        evidence=PREF_EVIDENCE),
]


# ------------------------------------------------------------------------------------------------
# Training (inside the subprocess)
# ------------------------------------------------------------------------------------------------

def _prompts(seed: int, n: int) -> list[str]:
    rng = random.Random(1000 + seed)
    return [make_prompt(rng) for _ in range(n)]


def _pairs(seed: int, n: int) -> dict[str, list[str]]:
    rng = random.Random(2000 + seed)
    out: dict[str, list[str]] = {"prompt": [], "chosen": [], "rejected": []}
    for _ in range(n):
        p = make_prompt(rng)
        noun = p.split()[-2]
        out["prompt"].append(p)
        good, bad = make_completion(rng, noun, "pos"), make_completion(rng, noun, "neg")
        if rng.random() < 0.15:  # label noise, as in real preference data
            good, bad = bad, good
        out["chosen"].append(" " + good)
        out["rejected"].append(" " + bad)
    return out


def _common_args(run: Run, out: Path) -> dict[str, Any]:
    return dict(output_dir=str(out), seed=run.seed, data_seed=run.seed, logging_steps=1,
                report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
                bf16=False, fp16=False, lr_scheduler_type="constant", warmup_steps=0,
                dataloader_num_workers=0)


def lr_jump_callback(step: int, factor: float) -> Any:
    """Multiply the learning rate by ``factor`` from update ``step + 1`` on (a schedule bug)."""
    from transformers import TrainerCallback

    class LRJump(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == step:
                sched, opt = kw["lr_scheduler"], kw["optimizer"]
                sched.base_lrs = [b * factor for b in sched.base_lrs]
                for g in opt.param_groups:  # the next update already uses the new rate
                    g["lr"] *= factor

    return LRJump()


def train(run: Run, out: Path) -> str:
    """Train ``run`` into ``out``; returns the TRL version that trained it."""
    import torch
    from transformers import set_seed

    torch.set_num_threads(1)
    set_seed(run.seed)
    import datasets
    import trl

    datasets.disable_progress_bars()
    model, tok = load_base()
    cfg = dict(run.config)
    args = _common_args(run, out)
    callbacks = []
    if "lr_jump_step" in cfg:
        callbacks.append(lr_jump_callback(cfg.pop("lr_jump_step"), cfg.pop("lr_jump_factor")))
    if run.algorithm in ("grpo", "rloo"):
        from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

        Config, Trainer = (GRPOConfig, GRPOTrainer) if run.algorithm == "grpo" else (RLOOConfig, RLOOTrainer)
        n_prompts = run.steps * cfg["per_device_train_batch_size"] // cfg["num_generations"]
        ds = datasets.Dataset.from_dict({"prompt": _prompts(run.seed, n_prompts)})
        conf = Config(**args, max_steps=run.steps, reward_weights=run.reward_weights,
                      log_completions=False, **cfg)
        trainer = Trainer(model=model, processing_class=tok, reward_funcs=[REWARD_FUNCS[run.reward]],
                          args=conf, train_dataset=ds, callbacks=callbacks)
        trainer.train()
    elif run.algorithm == "ppo":
        from transformers import LlamaForSequenceClassification
        from trl.experimental.ppo import PPOConfig, PPOTrainer

        value = LlamaForSequenceClassification.from_pretrained(BUILD / "base", num_labels=1)
        reward = rule_reward_model(tok, run.reward, run.reward_scale)
        ref = load_base()[0]
        bs = cfg["per_device_train_batch_size"]
        prompts = _prompts(run.seed, run.steps * bs)
        ds = datasets.Dataset.from_dict({"input_ids": [tok(p).input_ids for p in prompts]})
        conf = PPOConfig(**args, total_episodes=run.steps * bs, num_sample_generations=0,
                         local_rollout_forward_batch_size=bs, **cfg)
        trainer = PPOTrainer(args=conf, processing_class=tok, model=model, ref_model=ref,
                             reward_model=reward, train_dataset=ds, value_model=value)
        trainer.train()
    elif run.algorithm in ("dpo", "kto"):
        bs = cfg["per_device_train_batch_size"]
        pairs = _pairs(run.seed, cfg.pop("n_pairs", run.steps * bs))
        if run.algorithm == "dpo":
            from trl import DPOConfig, DPOTrainer

            ds = datasets.Dataset.from_dict(pairs)
            conf = DPOConfig(**args, max_steps=run.steps, **cfg)
            trainer = DPOTrainer(model=model, args=conf, processing_class=tok, train_dataset=ds)
        else:
            from trl import KTOConfig, KTOTrainer

            half = len(pairs["prompt"]) // 2
            ds = datasets.Dataset.from_dict({
                "prompt": pairs["prompt"][:half] * 2,
                "completion": pairs["chosen"][:half] + pairs["rejected"][:half],
                "label": [True] * half + [False] * half}).shuffle(seed=run.seed)
            conf = KTOConfig(**args, max_steps=run.steps, **cfg)
            trainer = KTOTrainer(model=model, args=conf, processing_class=tok, train_dataset=ds)
        trainer.train()
    else:
        raise ValueError(run.algorithm)
    trainer.save_state()
    model.config.save_pretrained(out)  # config.json, as trainer.save_model writes it (the weights are not kept)
    return str(trl.__version__)


# ------------------------------------------------------------------------------------------------
# Labelling: checks, observed numbers, manifest
# ------------------------------------------------------------------------------------------------

def _series(history: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in history
            if key in r and isinstance(r[key], (int, float)) and not isinstance(r[key], bool)]


def _stat(series: list[tuple[int, float]], stat: str, onset: int | None) -> float:
    vals = [v for _, v in series]
    finite = [v for v in vals if math.isfinite(v)]
    if stat == "first":
        return vals[0]
    if stat == "last":
        return vals[-1]
    if stat == "max":
        return max(finite)
    if stat == "min":
        return min(finite)
    if stat == "mean_first5":
        return sum(vals[:5]) / len(vals[:5])
    if stat == "mean_last5":
        return sum(vals[-5:]) / len(vals[-5:])
    if stat == "rise":  # mean of the last 10 logged values minus mean of the first 10
        return sum(vals[-10:]) / len(vals[-10:]) - sum(vals[:10]) / len(vals[:10])
    if stat == "max_after_onset":
        return max(v for s, v in series if s >= (onset or 1))
    raise ValueError(stat)


OBSERVED_KEYS = ("kl", "objective/kl", "reward", "objective/scores", "rewards/sentiment/mean",
                 "loss", "loss/policy_avg", "loss/value_avg", "grad_norm", "entropy",
                 "objective/entropy", "policy/entropy_avg", "completions/clipped_ratio",
                 "completions/mean_length", "frac_reward_zero_std", "policy/approxkl_avg",
                 "policy/clipfrac_avg", "val/num_eos_tokens", "rewards/margins",
                 "rewards/accuracies", "rewards/chosen", "logps/chosen", "logps/rejected")


def _g(v: float) -> float:
    return float(f"{v:.4g}")


def observed(history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key in OBSERVED_KEYS:
        s = _series(history, key)
        if not s:
            continue
        finite = [(st, v) for st, v in s if math.isfinite(v)]
        hi = max(finite, key=lambda t: t[1]) if finite else (s[0][0], float("nan"))
        lo = min(finite, key=lambda t: t[1]) if finite else (s[0][0], float("nan"))
        out[key] = {"first": _g(s[0][1]), "last": _g(s[-1][1]), "max": _g(hi[1]), "max_step": hi[0],
                    "min": _g(lo[1]), "min_step": lo[0]}
    return out


def evidence_text(history: list[dict[str, Any]], keys: list[str]) -> str:
    parts = []
    for key in keys:
        s = _series(history, key)
        if not s:
            continue
        vals = [v for _, v in s]
        head = sum(vals[:5]) / len(vals[:5])
        tail = sum(vals[-5:]) / len(vals[-5:])
        hi = max(s, key=lambda t: t[1])
        lo = min(s, key=lambda t: t[1])
        parts.append(f"{key} {head:.3g} (mean of steps 1-5) -> {tail:.3g} (last 5), range "
                     f"{lo[1]:.3g} (step {lo[0]}) to {hi[1]:.3g} (step {hi[0]})")
    return "; ".join(parts)


def check_run(run: Run, history: list[dict[str, Any]]) -> list[str]:
    failures = []
    ops = {">": lambda a, b: a > b, "<": lambda a, b: a < b}
    for key, stat, op, bound in run.checks:
        s = _series(history, key)
        if not s:
            failures.append(f"{key}: not logged")
            continue
        v = _stat(s, stat, run.onset_step)
        if not ops[op](v, bound):
            failures.append(f"{key} {stat} = {v:.4g}, expected {op} {bound}")
    return failures


def finish(run: Run, out: Path, version: str, seconds: float) -> dict[str, Any]:
    """Keep what a user keeps (trainer_state.json, config.json, console.log); write manifest.json."""
    for p in list(out.iterdir()):
        if p.name not in ("trainer_state.json", "console.log", "config.json"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    state = json.loads((out / "trainer_state.json").read_text())
    history = [r for r in state["log_history"] if "train_runtime" not in r]
    failures = check_run(run, history)
    notes = run.description
    ev = evidence_text(history, run.evidence)
    if ev:
        notes += " Logged: " + ev + "."
    manifest = {
        "name": run.name, "algorithm": run.algorithm, "seed": run.seed, "fault": run.fault,
        "onset_step": run.onset_step, "expected_rules": run.expected_rules,
        "horizon_steps": run.horizon_steps, "notes": notes, "trainer": "trl", "trl_version": version,
        "config": {**run.config, "reward": run.reward, "reward_weights": run.reward_weights,
                   "reward_scale": run.reward_scale, "max_steps": run.steps, "logging_steps": 1},
        "observed": observed(history),
        "checks": [{"metric": k, "stat": s, "op": o, "bound": b} for k, s, o, b in run.checks],
        "generated_in_seconds": round(seconds, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if failures:
        raise SystemExit(f"{run.name}: the run does not show what its label says: " + "; ".join(failures))
    return manifest


#: The numbers the index shows per algorithm (first -> last, and the extreme that matters).
INDEX_KEYS = {
    "grpo": ["reward", "kl", "entropy", "completions/mean_length", "completions/clipped_ratio"],
    "rloo": ["reward", "kl", "entropy", "completions/mean_length", "completions/clipped_ratio"],
    "ppo": ["objective/scores", "objective/kl", "objective/entropy", "policy/approxkl_avg",
            "policy/clipfrac_avg", "loss/value_avg"],
    "dpo": ["loss", "rewards/margins", "rewards/accuracies", "logps/chosen"],
    "kto": ["loss", "rewards/margins", "logps/chosen", "grad_norm"],
}

INDEX_HEAD = """# The TRL corpus

Runs that Hugging Face TRL trained on the CPU, written by `make fixtures-trl`
(`scripts/trl_corpus.py`, whose docstring describes the language, the base model and the
rewards). Each folder: `trainer_state.json` and `console.log` as TRL wrote them, the policy's
`config.json` as `save_model` writes it beside the weights (its architecture gives the model's size;
checkpoints, weights, `training_args.bin` and optimizer state deleted; paths in the console log
made relative to the repository) and `manifest.json` (the label: fault, onset step, expected rules with the
primary one first, horizon; the training arguments; the observed numbers; the checks the generator
ran on the log). This index is written by the generator from the manifests.

Units, from TRL's source: GRPO `kl` is the per-token k3 estimate (policy vs reference, only logged
when beta != 0); RLOO `kl` is the per-token k1 log-ratio (old policy vs reference; it can be
negative); PPO (TRL 1.12, `trl.experimental.ppo`) `objective/kl` and `objective/entropy` are
per-sequence sums and `policy/entropy_avg` a per-position mean that includes the padding after EOS;
KTO `kl` is a batch-level, per-sequence estimate clamped at 0; DPO/KTO `logps/*` are summed over
the completion's tokens and `rewards/*` are beta times those log-ratios.

In the table, `a -> b` is the first and last logged value; `max`/`min` the extreme with its step.

"""


def _fmt_num(v: float) -> str:
    return f"{v:.3g}"


def write_index(root: Path) -> None:
    """``root/README.md``: one row per run, from the manifests."""
    rows = ["| run | algorithm | fault | steps | onset | expected rules | key numbers |",
            "|---|---|---|---|---|---|---|"]
    for path in sorted(root.glob("*/manifest.json")):
        m = json.loads(path.read_text())
        state = json.loads((path.parent / "trainer_state.json").read_text())
        steps = max(int(r["step"]) for r in state["log_history"])
        obs = m["observed"]
        nums = []
        for key in INDEX_KEYS.get(m["algorithm"], []):
            if key in obs:
                o = obs[key]
                nums.append(f"{key} {_fmt_num(o['first'])} -> {_fmt_num(o['last'])} "
                            f"(max {_fmt_num(o['max'])} @{o['max_step']}, min {_fmt_num(o['min'])} @{o['min_step']})")
        rules = ", ".join(f"`{r}`" for r in m["expected_rules"]) or "-"
        rows.append(f"| {m['name']} | {m['algorithm']} (TRL {m['trl_version']}) | {m['fault'] or 'healthy'} "
                    f"| {steps} | {m['onset_step'] or '-'} | {rules} | {'; '.join(nums)} |")
    (root / "README.md").write_text(INDEX_HEAD + "\n".join(rows) + "\n")


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------

def _env(run: Run) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               WANDB_DISABLED="true", WANDB_MODE="disabled", TRL_EXPERIMENTAL_SILENCE="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONHASHSEED=str(run.seed), HF_HOME=str(BUILD / "hf-home"))
    if run.algorithm == "ppo":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PPO_TRL), env.get("PYTHONPATH", "")]))
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "trl")
    ap.add_argument("--only", nargs="*", help="run names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the runs and exit")
    ap.add_argument("--jobs", type=int, default=2, help="runs trained at once (one thread each)")
    ap.add_argument("--relabel", action="store_true",
                    help="rewrite the manifests of runs already trained (labels, notes, checks) "
                    "from their trainer_state.json, without training")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--rebuild-base", action="store_true", help="retrain the cached base model")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=JSON",
                    help="override a training argument of the selected runs (for experiments; "
                    "the manifest records it); 'steps' sets the number of updates")
    a = ap.parse_args()
    by_name = {r.name: r for r in RUNS}
    for item in a.set:
        key, _, value = item.partition("=")
        for r in by_name.values():
            if key == "steps":
                r.steps = int(value)
            elif key in ("reward", "reward_weights", "reward_scale"):  # the run's, not the config's
                setattr(r, key, json.loads(value))
            else:
                r.config[key] = json.loads(value)
    if a.list:
        for r in RUNS:
            print(f"{r.name:<28} {r.algorithm:<5} {r.fault or 'healthy':<22} {r.expected_rules}")
        return
    if a.run:  # inside the subprocess
        run = by_name[a.run]
        version = train(run, a.out / run.name)
        print(f"TRL_VERSION={version}", flush=True)
        return
    names = a.only or [r.name for r in RUNS]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown run(s): {unknown}; --list shows them")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.relabel:
        errors = []
        for n in names:
            old = json.loads((a.out / n / "manifest.json").read_text())
            try:
                finish(by_name[n], a.out / n, old["trl_version"], old["generated_in_seconds"])
            except SystemExit as exc:
                errors.append(str(exc))
        write_index(a.out)
        if errors:
            raise SystemExit("\n".join(errors))
        return
    if a.rebuild_base or not (BUILD / "base" / "config.json").exists():
        env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'scripts'); import torch; "
                        "torch.set_num_threads(1); import trl_corpus as t; "
                        "t.build_base(t.BUILD / 'base')"], cwd=ROOT, env=env, check=True)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(a.jobs, 1)) as pool:
        results = list(pool.map(lambda n: generate(by_name[n], a.out, a.set), names))
    write_index(a.out)
    failed = [r for r in results if r]
    if failed:
        raise SystemExit("\n".join(failed))


def generate(run: Run, root: Path, overrides: list[str]) -> str | None:
    """Train one run in a subprocess and label it; returns an error message or None."""
    out = root / run.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run", run.name,
                           "--out", str(root), "--set", *overrides], cwd=ROOT, env=_env(run),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln.replace(str(ROOT), ".") for ln in proc.stdout.splitlines() if not ln.startswith("TRL_VERSION=")]
    (out / "console.log").write_text("\n".join(lines) + "\n")  # paths relative to the repo root
    if proc.returncode != 0:
        print(proc.stdout[-3000:], flush=True)
        return f"{run.name}: training failed (exit {proc.returncode})"
    version = next(ln.split("=", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("TRL_VERSION="))
    try:
        m = finish(run, out, version, time.time() - t0)
    except SystemExit as exc:
        print(f"FAILED {exc}", flush=True)
        return str(exc)
    print(f"{run.name:<24} {time.time() - t0:6.1f}s  {m['notes'][:150]}", flush=True)
    return None


if __name__ == "__main__":
    main()

"""PPO and GRPO on the toy reversal task, recording their event streams with :class:`RunWriter`.

Both start from the same supervised warm start (SFT on noisy demonstrations), which is also the
frozen reference policy, as in RLHF. Every metric is computed on the device and handed to the
writer as a tensor; the writer moves them to the host once per flush.

PPO (Ziegler et al. 2019; Ouyang et al. 2022): a value head on the shared trunk, per-token reward
``-beta * (logp - ref_logp)`` plus the task score on the last token, GAE, advantage whitening,
the clipped surrogate, value clipping, an entropy bonus, and the adaptive KL controller fed with
the per-sequence KL sum (``kl_target_unit = "sequence"``).

GRPO (Shao et al. 2024): ``G`` responses per prompt, advantages ``(r - mean_g) / (std_g + 1e-4)``,
the clipped surrogate with a k3 KL penalty to the reference at a fixed beta, no critic.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

import torch

from ...records import record
from ..torch_helpers import PhaseTimer, advantage_stats, grad_norms, memory_stats, mfu
from ..writer import RunWriter
from .faults import FAULTS
from .kl_control import AdaptiveKLController, FixedKLController
from .policy import Policy
from .task import DIGIT0, EOS, MAX_DIGITS, PROMPT_LEN, detokenize, sample_prompts, score

__all__ = ["TrainConfig", "train"]

#: Nominal peak FLOP/s used for MFU when none is given: 2 CPU cores x ~50 GFLOP/s (fp32 FMA).
CPU_PEAK_FLOPS = 1e11
#: fp32 (non-tensor-core) peaks of common accelerators, dense, by device-name substring.
CUDA_PEAK_FLOPS = {"H200": 67e12, "H100": 67e12, "A100": 19.5e12, "L4": 30e12, "A10": 31e12}


@record
class TrainConfig:
    """Everything a reference run is configured by (recorded in ``run.json`` under config)."""

    algo: str = "ppo"
    seed: int = 0
    steps: int = 240
    device: str = "cpu"
    fault: str | None = None
    onset: int | None = None
    # shared
    lr: float = 1e-3
    max_length: int = 8
    max_grad_norm: float = 2.0
    clip_eps: float = 0.2
    sft_steps: int = 200
    sft_noise: float = 0.5
    hidden: int = 64
    # PPO
    batch_size: int = 32
    ppo_epochs: int = 4
    minibatches: int = 2
    gamma: float = 1.0
    lam: float = 0.95
    vf_coef: float = 0.1
    vf_clip: float = 0.2
    ent_coef: float = 0.01
    kl_coef_init: float = 0.3
    kl_target: float = 0.5
    kl_horizon: float = 250.0
    # GRPO
    prompts_per_step: int = 8
    group_size: int = 8
    grpo_epochs: int = 2
    beta: float = 0.04
    resume_span: int = 30  # resume_repeat: steps logged twice (the job dies in step onset)
    # recording
    samples_per_step: int = 16
    flush_every: int = 20
    format: str = "jsonl"
    peak_flops: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def fault_on(self, name: str, step: int) -> bool:
        """Whether fault ``name`` is active at ``step``."""
        return self.fault == name and self.onset is not None and step >= self.onset


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def _token_logp_entropy(logits: torch.Tensor, tokens: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def _response_forward(model: Policy, prompts: torch.Tensor, responses: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Log-probs, entropies and values of the response tokens under ``model``."""
    full = torch.cat([prompts, responses], 1)
    logits, values = model(full[:, :-1])
    start = prompts.shape[1] - 1
    logp, ent = _token_logp_entropy(logits[:, start:], responses)
    return logp, ent, None if values is None else values[:, start:]


def _sft_warm_start(model: Policy, cfg: TrainConfig, gen: torch.Generator,
                    device: torch.device) -> None:
    """Supervised warm start on noisy demonstrations (the 'SFT model' RL starts from).

    Demonstrations are correct reversals with each digit replaced by a random one with
    probability ``sft_noise``: the model learns the format (digits then EOS) and part of the
    task, leaving room for RL to improve correctness.
    """
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(cfg.sft_steps):
        batch = sample_prompts(64, gen, device)
        noise = torch.rand(batch.targets.shape, generator=gen).to(device) < cfg.sft_noise
        rand_digits = (torch.randint(0, 10, batch.targets.shape, generator=gen) + DIGIT0)
        demo = torch.where(noise, rand_digits.to(device), batch.targets)
        pos = torch.arange(MAX_DIGITS, device=device)
        k = batch.n_digits[:, None]
        demo = torch.where(pos[None, :] < k, demo, torch.zeros_like(demo))
        demo = torch.cat([demo, torch.zeros_like(demo[:, :1])], 1)
        demo = demo.scatter(1, batch.n_digits[:, None], EOS)
        full = torch.cat([batch.prompts, demo], 1)
        logits, _ = model(full[:, :-1])
        logits = logits[:, PROMPT_LEN - 1:]
        mask = (torch.arange(demo.shape[1], device=device)[None, :] <= k).float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), demo, reduction="none")
        loss = _masked_mean(nll, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _peak_flops(cfg: TrainConfig, device: torch.device) -> float | None:
    if cfg.peak_flops is not None:
        return cfg.peak_flops
    if device.type == "cpu":
        return CPU_PEAK_FLOPS
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, flops in CUDA_PEAK_FLOPS.items():
            if key in name:
                return flops
    return None


def run_meta(cfg: TrainConfig, param_count: int, peak_flops: float | None) -> dict[str, Any]:
    """The truthful ``run.json`` of a run: what the trainer was configured with."""
    config = {k: v for k, v in asdict(cfg).items() if k != "extra"} | cfg.extra
    meta: dict[str, Any] = {
        "name": f"{cfg.algo}-seed{cfg.seed}" + (f"-{cfg.fault}" if cfg.fault else ""),
        "algorithm": cfg.algo,
        "max_grad_norm": cfg.max_grad_norm,
        "max_length": cfg.max_length,
        "advantage_normalization": True,
        "param_count": param_count,
        "peak_flops": peak_flops,
        "config": config,
    }
    if cfg.algo == "ppo":
        meta |= {"kl_controller": "adaptive", "kl_target": cfg.kl_target,
                 "kl_target_unit": "sequence", "kl_horizon": cfg.kl_horizon,
                 "kl_batch_size": cfg.batch_size, "kl_coef_init": cfg.kl_coef_init}
        config["kl_estimator"] = "k1"
    else:
        meta |= {"kl_controller": "fixed", "kl_coef_init": cfg.beta, "kl_target_unit": "token"}
        config["kl_estimator"] = "k3"
        config["advantage_normalization_kind"] = "group"
    return {k: v for k, v in meta.items() if v is not None}


class _Run:
    """State of one training run (model, reference, optimizer, controller, RNG, writer)."""

    def __init__(self, cfg: TrainConfig, out: Path) -> None:
        if cfg.algo not in ("ppo", "grpo"):
            raise ValueError(f"algo must be 'ppo' or 'grpo', not {cfg.algo!r}")
        if cfg.fault is not None:
            if cfg.fault not in FAULTS:
                raise ValueError(f"unknown fault {cfg.fault!r}; known: {', '.join(FAULTS)}")
            if cfg.onset is None:
                # fill in the fault's default onset, so that run.json records the real one
                cfg.onset = FAULTS[cfg.fault].onset
        self.cfg = cfg
        self.out = out
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.model = Policy(cfg.hidden, value_head=cfg.algo == "ppo").to(self.device)
        _sft_warm_start(self.model, cfg, self.gen, self.device)
        if self.model.value is not None:
            # the critic starts untrained, as when it is initialised from the SFT model
            torch.nn.init.zeros_(self.model.value.weight)
            torch.nn.init.zeros_(self.model.value.bias)
        self.ref = copy.deepcopy(self.model).eval()
        # a deep copy gives the GRU's weights tensors of their own, no longer views of one
        # contiguous buffer: on CUDA every forward then warns ("RNN module weights are not part
        # of single contiguous chunk of memory") and compacts them anew; compact them once
        self.ref.gru.flatten_parameters()
        for p in self.ref.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=1e-5)
        self.kl_ctl: AdaptiveKLController | FixedKLController = (
            AdaptiveKLController(cfg.kl_coef_init, cfg.kl_target, cfg.kl_horizon)
            if cfg.algo == "ppo" else FixedKLController(cfg.beta))
        self.param_count = sum(p.numel() for p in self.model.parameters())
        self.peak = _peak_flops(cfg, self.device)
        self.tokens_total: Any = 0
        self.timer = PhaseTimer(self.device)
        self.writer = self._open_writer(resume=False)

    def _open_writer(self, resume: bool) -> RunWriter:
        return RunWriter(self.out, format=self.cfg.format, flush_every=self.cfg.flush_every,
                         meta=None if resume else run_meta(self.cfg, self.param_count, self.peak),
                         resume=resume, detokenize=detokenize)

    # ----------------------------------------------------------------- checkpointing
    def checkpoint(self) -> dict[str, Any]:
        """In-memory copy of everything a resumed job restores (model, optimizer, beta)."""
        return {
            "model": copy.deepcopy(self.model.state_dict()),
            "opt": copy.deepcopy(self.opt.state_dict()),
            "kl": copy.deepcopy(self.kl_ctl.value),
            "tokens": copy.deepcopy(self.tokens_total),
        }

    def restore(self, ckpt: dict[str, Any], reseed: int) -> None:
        """Load a :meth:`checkpoint` as a restarted job would, with fresh sampler seeds."""
        self.model.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["opt"])
        self.kl_ctl.value = ckpt["kl"]
        self.tokens_total = ckpt["tokens"]
        # a restarted process seeds its samplers afresh; the data order is not replayed
        self.gen = torch.Generator().manual_seed(reseed)

    # ----------------------------------------------------------------- one step
    def lr_at(self, step: int) -> float:
        """Learning rate in force at ``step`` (constant unless an LR fault is active)."""
        cfg = self.cfg
        lr = cfg.lr
        if cfg.fault_on("lr_high", step):
            lr *= 30.0
        if cfg.fault_on("lr_tiny", step):
            lr *= 1e-4
        if cfg.fault_on("grad_explosion", step) and cfg.onset is not None \
                and step < cfg.onset + 3:
            lr *= 1000.0
        return lr

    def step(self, t: int) -> None:
        """One RL step: rollout, reward, update, then one step row and the sampled responses."""
        cfg = self.cfg
        t0 = time.perf_counter()
        self.timer.reset()
        lr = self.lr_at(t)
        for group in self.opt.param_groups:
            group["lr"] = lr
        max_length = 3 if cfg.fault_on("max_length_small", t) else cfg.max_length
        n_prompts = cfg.batch_size if cfg.algo == "ppo" else cfg.prompts_per_step
        repeat = 1 if cfg.algo == "ppo" else cfg.group_size
        with self.timer.phase("generation"):
            batch = sample_prompts(n_prompts, self.gen, self.device)
            if repeat > 1:
                batch.prompts = batch.prompts.repeat_interleave(repeat, 0)
                batch.n_digits = batch.n_digits.repeat_interleave(repeat, 0)
                batch.targets = batch.targets.repeat_interleave(repeat, 0)
            responses = self.model.generate(batch.prompts, max_length, self.gen)
        bonus = 0.25 if cfg.fault_on("length_reward", t) else 0.0
        rw = score(batch, responses, length_bonus=bonus)
        scores = rw.total
        if cfg.fault_on("nan_overflow", t):
            # a half-precision reward head: scores above 65504/1e5 overflow to inf
            scores = (scores * 1e5).half().float() / 1e5
        with self.timer.phase("training"):
            if cfg.algo == "ppo":
                metrics = self._ppo_update(t, batch.prompts, responses, rw, scores)
            else:
                metrics = self._grpo_update(t, batch.prompts, responses, rw, scores)
        mask = rw.mask
        gen_tokens = mask.sum()
        self.tokens_total = self.tokens_total + gen_tokens
        seconds = self.timer.seconds()
        train_tokens = responses.shape[0] * (PROMPT_LEN + max_length - 1) * (
            cfg.ppo_epochs if cfg.algo == "ppo" else cfg.grpo_epochs)
        lengths = rw.lengths.float()
        metrics |= {
            "learning_rate": lr,
            "reward_mean": rw.total.mean() if not cfg.fault_on("nan_overflow", t)
            else scores.mean(),
            "reward_std": rw.total.std(),
            "reward_min": rw.total.min(),
            "reward_max": rw.total.max(),
            "response_length_mean": lengths.mean(),
            "response_length_max": lengths.max(),
            "truncation_rate": rw.truncated.float().mean(),
        }
        for name, values in rw.components.items():
            metrics[f"reward/{name}"] = values.mean()
        train_tps = train_tokens / max(seconds["training"], 1e-9)
        metrics |= {
            "gen_tokens_per_s": gen_tokens / max(seconds["generation"], 1e-9),
            "train_tokens_per_s": train_tps,
            "samples_per_s": responses.shape[0] / max(seconds["generation"]
                                                      + seconds["training"], 1e-9),
            "num_tokens": self.tokens_total,
        }
        if self.peak is not None:
            metrics["mfu"] = mfu(train_tps, self.param_count, self.peak)
        metrics |= memory_stats(self.device)
        seq_adv = metrics.pop("_seq_adv")
        metrics["step_time"] = time.perf_counter() - t0
        self.writer.log_step(t, metrics)
        k = min(cfg.samples_per_step, responses.shape[0])
        idx = torch.arange(k, device=self.device)
        cols: dict[str, Any] = {
            "length": rw.lengths.index_select(0, idx),
            "reward": rw.total.index_select(0, idx),
            "truncated": rw.truncated.index_select(0, idx),
            "group": (idx // repeat),
            "advantage": seq_adv.index_select(0, idx),
            "prompt": batch.prompts.index_select(0, idx),
            "completion": responses.index_select(0, idx),
        }
        for name, values in rw.components.items():
            cols[f"reward/{name}"] = values.index_select(0, idx)
        self.writer.log_samples(t, cols)

    def _optimize(self, loss: torch.Tensor, max_norm: float | None) -> dict[str, torch.Tensor]:
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        groups: dict[str, list[torch.nn.Parameter]] = {"policy": self.model.policy_parameters()}
        if self.model.value is not None:
            groups["value"] = self.model.value_parameters()
        norms = grad_norms(groups, max_norm)
        # skip a step whose gradient is not finite, as an fp16 loss scaler does; this is the
        # trainer's one host sync per update (GradScaler does the same)
        if math.isfinite(float(norms["grad_norm"])):
            self.opt.step()
        return norms

    def _ppo_update(self, t: int, prompts: torch.Tensor, responses: torch.Tensor, rw: Any,
                    scores: torch.Tensor) -> dict[str, Any]:
        cfg = self.cfg
        mask = rw.mask
        with torch.no_grad():
            logp_old, ent_old, values_old = _response_forward(self.model, prompts, responses)
            ref_logp, _, _ = _response_forward(self.ref, prompts, responses)
        assert values_old is not None
        values_old = values_old * mask
        k1 = (logp_old - ref_logp) * mask
        kl_tok = k1.sum() / mask.sum()
        kl_seq = k1.sum(1).mean()
        kl_off = cfg.fault_on("kl_off", t)
        beta = 0.0 if kl_off else self.kl_ctl.value
        token_rewards = -beta * k1
        last = (rw.lengths - 1).clamp(min=0)[:, None]
        token_rewards = token_rewards.scatter_add(1, last, scores[:, None].to(k1.dtype))
        # GAE over the response tokens (gamma = 1 by default: the episode is the response)
        length = responses.shape[1]
        adv = torch.zeros_like(token_rewards)
        last_gae = torch.zeros_like(token_rewards[:, 0])
        for i in reversed(range(length)):
            nxt = values_old[:, i + 1] if i + 1 < length else torch.zeros_like(last_gae)
            delta = token_rewards[:, i] + cfg.gamma * nxt - values_old[:, i]
            last_gae = (delta + cfg.gamma * cfg.lam * last_gae) * mask[:, i]
            adv[:, i] = last_gae
        returns = adv + values_old
        if not cfg.fault_on("adv_norm_off", t):
            mean = _masked_mean(adv, mask)
            var = _masked_mean((adv - mean).square(), mask)
            adv = (adv - mean) * torch.rsqrt(var + 1e-8) * mask
        adv_stats = advantage_stats(adv, mask)
        ent_coef = -1.0 if cfg.fault_on("entropy_collapse", t) else cfg.ent_coef
        max_norm = None if cfg.fault_on("grad_explosion", t) else cfg.max_grad_norm
        unscaled = cfg.fault_on("value_loss_unscaled", t)
        b = responses.shape[0]
        mb_size = b // cfg.minibatches
        stats: dict[str, list[torch.Tensor]] = {}
        for _ in range(cfg.ppo_epochs):
            perm = torch.randperm(b, generator=self.gen).to(self.device)
            for m in range(cfg.minibatches):
                ix = perm[m * mb_size:(m + 1) * mb_size]
                mk = mask[ix]
                logp, ent, values = _response_forward(self.model, prompts[ix], responses[ix])
                assert values is not None
                log_ratio = logp - logp_old[ix]
                ratio = log_ratio.exp()
                a = adv[ix]
                pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - cfg.clip_eps,
                                                                1 + cfg.clip_eps))
                pg_loss = _masked_mean(pg, mk)
                v_clip = values_old[ix] + (values - values_old[ix]).clamp(-cfg.vf_clip,
                                                                          cfg.vf_clip)
                vf = 0.5 * torch.maximum((values - returns[ix]).square(),
                                         (v_clip - returns[ix]).square())
                # the fault: a sum over tokens where a mean was meant (x batch tokens)
                vf_loss = (vf * mk).sum() if unscaled else _masked_mean(vf, mk)
                entropy = _masked_mean(ent, mk)
                loss = pg_loss + cfg.vf_coef * vf_loss - ent_coef * entropy
                norms = self._optimize(loss, max_norm)
                with torch.no_grad():
                    approx_kl = _masked_mean(ratio - 1 - log_ratio, mk)  # k3
                    clip_frac = _masked_mean(((ratio - 1).abs() > cfg.clip_eps).float(), mk)
                for key, value in (("loss", loss), ("policy_loss", pg_loss),
                                   ("value_loss", vf_loss), ("entropy_loss", -ent_coef * entropy),
                                   ("approx_kl", approx_kl), ("clip_frac", clip_frac),
                                   *norms.items()):
                    stats.setdefault(key, []).append(value.detach().float())
        if not kl_off:
            if isinstance(self.kl_ctl, AdaptiveKLController):
                self.kl_ctl.sign = -1.0 if cfg.fault_on("kl_wrong_sign", t) else 1.0
            self.kl_ctl.update(kl_seq, b)
        # explained variance over response tokens, by masked moments (no boolean indexing)
        resid = returns - values_old
        var_ret = _masked_mean((returns - _masked_mean(returns, mask)).square(), mask)
        var_res = _masked_mean((resid - _masked_mean(resid, mask)).square(), mask)
        ev = 1 - var_res / var_ret
        out: dict[str, Any] = {key: torch.stack(v).mean() for key, v in stats.items()}
        out.pop("grad_norm_value_clipped", None)
        out |= {
            "kl": kl_tok, "kl_seq": kl_seq, "kl_coef": beta,
            "entropy": _masked_mean(ent_old, mask),
            "explained_variance": ev,
            "reward_penalized": (scores - beta * k1.sum(1)).mean(),
            **adv_stats,
            # per-response advantage for the sample stream: the first token's (whitened) one
            "_seq_adv": adv[:, 0],
        }
        return out

    def _grpo_update(self, t: int, prompts: torch.Tensor, responses: torch.Tensor, rw: Any,
                     scores: torch.Tensor) -> dict[str, Any]:
        cfg = self.cfg
        mask = rw.mask
        g = cfg.group_size
        grouped = scores.reshape(-1, g)
        if cfg.fault_on("biased_baseline", t):
            # each group is padded with a zero-reward slot (a dropped generation replaced by a
            # dummy) that enters the group statistics: the baseline is too low by mean/(G+1)
            padded = torch.cat([grouped, torch.zeros_like(grouped[:, :1])], 1)
            baseline = padded.mean(1, keepdim=True)
            std = padded.std(1, keepdim=True)
        else:
            baseline = grouped.mean(1, keepdim=True)
            std = grouped.std(1, keepdim=True)
        seq_adv = ((grouped - baseline) / (std + 1e-4)).reshape(-1)
        with torch.no_grad():
            logp_old, ent_old, _ = _response_forward(self.model, prompts, responses)
            ref_logp, _, _ = _response_forward(self.ref, prompts, responses)
        d = ref_logp - logp_old
        k3_old = d.exp() - d - 1
        kl_tok = _masked_mean(k3_old, mask)
        adv_tok = seq_adv[:, None].expand_as(logp_old)
        adv_stats = advantage_stats(seq_adv)
        stats: dict[str, list[torch.Tensor]] = {}
        for _ in range(cfg.grpo_epochs):
            logp, _, _ = _response_forward(self.model, prompts, responses)
            log_ratio = logp - logp_old
            ratio = log_ratio.exp()
            pg = torch.maximum(-adv_tok * ratio,
                               -adv_tok * ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps))
            dr = ref_logp - logp
            k3 = dr.exp() - dr - 1
            per_tok = pg + cfg.beta * k3
            # sequence-level mean, then batch mean (the GRPO paper's normalisation)
            per_seq = (per_tok * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            loss = per_seq.mean()
            norms = self._optimize(loss, cfg.max_grad_norm)
            with torch.no_grad():
                approx_kl = _masked_mean(ratio - 1 - log_ratio, mask)
                clip_frac = _masked_mean(((ratio - 1).abs() > cfg.clip_eps).float(), mask)
                pg_loss = ((pg * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()
            for key, value in (("loss", loss), ("policy_loss", pg_loss),
                               ("approx_kl", approx_kl), ("clip_frac", clip_frac),
                               *norms.items()):
                stats.setdefault(key, []).append(value.detach().float())
        out: dict[str, Any] = {key: torch.stack(v).mean() for key, v in stats.items()}
        zero_std = (grouped.std(1) < 1e-6).float().mean()
        out |= {
            "kl": kl_tok, "kl_coef": cfg.beta,
            "entropy": _masked_mean(ent_old, mask),
            "frac_reward_zero_std": zero_std,
            "group_size": g,
            **adv_stats,
            "_seq_adv": seq_adv,
        }
        return out


def train(cfg: TrainConfig, out: str | Path) -> Path:
    """Run PPO or GRPO for ``cfg.steps`` steps and write the run folder ``out``.

    With ``cfg.fault == "resume_repeat"`` the job dies in step ``onset`` (after logging
    ``onset - 1``), restarts from the checkpoint taken after step ``onset - resume_span - 1``
    (reopening the streams in resume mode, with fresh sampler seeds) and logs the steps from
    ``onset - resume_span`` on a second time.
    """
    out = Path(out)
    torch.use_deterministic_algorithms(True, warn_only=True)
    run = _Run(cfg, out)
    try:
        ckpt: dict[str, Any] | None = None
        resumed = False
        t = 0
        while t < cfg.steps:
            run.step(t)
            if cfg.fault == "resume_repeat" and cfg.onset is not None:
                first_replayed = cfg.onset - cfg.resume_span
                if t == first_replayed - 1:
                    ckpt = run.checkpoint()
                elif t == cfg.onset - 1 and not resumed and ckpt is not None:
                    # the job dies in step `onset` and is restarted from the last checkpoint
                    run.writer.close()
                    run.restore(ckpt, reseed=cfg.seed + 1000)
                    run.writer = run._open_writer(resume=True)
                    resumed = True
                    t = first_replayed
                    continue
            t += 1
    finally:
        run.writer.close()
    return out

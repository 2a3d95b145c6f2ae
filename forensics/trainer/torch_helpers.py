"""Torch helpers that compute the step-stream metrics on the device, without host syncs.

Every function here returns tensors on the input's device (or plain floats where the inputs are
host numbers), ready for :meth:`forensics.trainer.writer.RunWriter.log_step`, which moves them to the
host once per flush. Nothing here calls ``.item()``, ``.cpu()`` or ``.tolist()``.

* :func:`grad_norms` - gradient norms per parameter group (policy, value) from one fused
  ``torch._foreach_norm`` call, before and after clipping, and the clipping itself;
* :func:`advantage_stats` - mean, std, skewness, excess kurtosis, p01/p99, min/max, with an
  optional mask, all without boolean indexing (which would sync to learn the output size);
* :func:`response_rows` - per-response sample-stream columns (length, reward, components, text);
* :class:`PhaseTimer`, :func:`throughput` and :func:`mfu` - tokens/s and model FLOP utilisation.

This module requires torch; :mod:`forensics.trainer.writer` does not.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

import torch

__all__ = [
    "PhaseTimer",
    "advantage_stats",
    "grad_norms",
    "memory_stats",
    "mfu",
    "response_rows",
    "throughput",
]

#: Added to the norm before dividing, as ``torch.nn.utils.clip_grad_norm_`` does.
_CLIP_EPS = 1e-6


def grad_norms(
    groups: Mapping[str, Iterable[torch.nn.Parameter]],
    max_norm: float | Mapping[str, float | None] | None = None,
    *,
    names: Mapping[str, str] | None = None,
) -> dict[str, torch.Tensor]:
    """L2 norm of the gradients of each parameter group, before and after (optional) clipping.

    All per-tensor norms of all groups come from one fused ``torch._foreach_norm`` call; the
    group totals are summed on the device (``index_add_`` of squared norms). Clipping scales each
    group's gradients in place by ``min(1, max_norm / (norm + 1e-6))`` exactly as
    :func:`torch.nn.utils.clip_grad_norm_` does per call, with one ``_foreach_mul_`` per group.

    Parameters
    ----------
    groups
        name -> parameters, e.g.
        ``{"policy": policy.parameters(), "value": head.parameters()}``. Parameters without a
        gradient are skipped.
    max_norm
        clip threshold for every group, a per-group mapping, or ``None`` (no clipping).
    names
        column name per group; by default ``policy`` -> ``grad_norm`` and
        ``grad_norm_clipped``, any other group ``g`` -> ``grad_norm_g`` and
        ``grad_norm_g_clipped`` (``grad_norm_value`` is canonical).

    Returns
    -------
    dict of 0-d float32 tensors on the gradients' device.

    Examples
    --------
    >>> w = torch.nn.Parameter(torch.zeros(2)); w.grad = torch.tensor([3.0, 4.0])
    >>> out = grad_norms({"policy": [w]}, max_norm=1.0)
    >>> round(float(out["grad_norm"]), 4), round(float(out["grad_norm_clipped"]), 4)
    (5.0, 1.0)
    >>> [round(x, 4) for x in w.grad.tolist()]
    [0.6, 0.8]
    """
    group_names = list(groups)
    grads: list[torch.Tensor] = []
    owner: list[int] = []
    per_group: list[list[torch.Tensor]] = [[] for _ in group_names]
    for gi, name in enumerate(group_names):
        for p in groups[name]:
            if p.grad is None:
                continue
            grad = p.grad.detach()
            grads.append(grad)
            owner.append(gi)
            per_group[gi].append(p.grad)
    if not grads:
        raise ValueError("grad_norms: no parameter has a gradient")
    device = grads[0].device
    # one fused kernel launch for every tensor of every group
    norms = torch._foreach_norm(grads, 2.0)
    squared = torch.stack([n.to(device=device, dtype=torch.float32) for n in norms]).square()
    index = torch.tensor(owner, device=device)
    totals = torch.zeros(len(group_names), device=device, dtype=torch.float32)
    totals = totals.index_add_(0, index, squared).sqrt()
    out: dict[str, torch.Tensor] = {}
    for gi, name in enumerate(group_names):
        pre = totals[gi]
        limit = max_norm.get(name) if isinstance(max_norm, Mapping) else max_norm
        if limit is not None and per_group[gi]:
            coef = torch.clamp(limit / (pre + _CLIP_EPS), max=1.0)
            torch._foreach_mul_(per_group[gi], coef.to(per_group[gi][0].dtype))
            post = pre * coef
        else:
            post = pre
        base = (names or {}).get(name) or ("grad_norm" if name == "policy" else f"grad_norm_{name}")
        out[base] = pre
        out[f"{base}_clipped"] = post
    return out


def advantage_stats(
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    prefix: str = "advantage_",
) -> dict[str, torch.Tensor]:
    """Distribution statistics of advantages, computed on their device.

    Moments use float64 sums over the (masked) elements: ``std`` has Bessel's correction
    (``ddof=1``, as ``torch.std`` and advantage whitening use); ``skew`` and ``kurtosis`` are the
    biased sample skewness and Fisher excess kurtosis (``scipy.stats.skew``/``kurtosis``
    defaults). Percentiles interpolate linearly between order statistics (numpy's default).
    A mask is applied by weighting and by sorting masked-out values last, never by boolean
    indexing, which would need a host sync to size its output.

    Parameters
    ----------
    advantages
        any shape, e.g. ``(batch, tokens)``.
    mask
        same shape, true (or 1) where an advantage is valid (response tokens, not padding).
    prefix
        prefix of the returned keys.

    Returns
    -------
    ``mean, std, skew, kurtosis, min, max, p01, p99`` under ``prefix`` (0-d float64 tensors; NaN
    when there are fewer than two valid elements).

    Examples
    --------
    >>> s = advantage_stats(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    >>> [round(float(s[k]), 4) for k in ("advantage_mean", "advantage_std", "advantage_p99")]
    [2.5, 1.291, 3.97]
    """
    x = advantages.detach().reshape(-1).to(torch.float64)
    if mask is None:
        w = torch.ones_like(x)
    else:
        w = mask.detach().reshape(-1).to(device=x.device, dtype=torch.float64)
    valid = w > 0
    n = w.sum()
    # zero out invalid entries so that a NaN in padding cannot poison the sums
    xv = torch.where(valid, x, torch.zeros_like(x))
    mean = (xv * w).sum() / n
    d = torch.where(valid, x - mean, torch.zeros_like(x))
    m2 = (w * d.square()).sum() / n
    m3 = (w * d.pow(3)).sum() / n
    m4 = (w * d.pow(4)).sum() / n
    std = torch.sqrt(m2 * n / (n - 1))
    skew = m3 / m2.pow(1.5)
    kurt = m4 / m2.square() - 3.0
    inf = torch.full_like(x, math.inf)
    lo = torch.where(valid, x, inf).min()
    hi = torch.where(valid, x, -inf).max()
    p01, p99 = _masked_quantiles(x, valid, n, (0.01, 0.99))
    return {
        f"{prefix}mean": mean,
        f"{prefix}std": std,
        f"{prefix}skew": skew,
        f"{prefix}kurtosis": kurt,
        f"{prefix}min": lo,
        f"{prefix}max": hi,
        f"{prefix}p01": p01,
        f"{prefix}p99": p99,
    }


def _masked_quantiles(x: torch.Tensor, valid: torch.Tensor, n: torch.Tensor,
                      qs: Sequence[float]) -> list[torch.Tensor]:
    """Linear-interpolation quantiles of ``x[valid]`` with the count ``n`` kept on the device.

    Invalid entries are sorted to the end (+inf), so the valid ones occupy ``[0, n)`` of the
    sorted vector and quantile positions can be gathered without knowing ``n`` on the host.
    ``torch.quantile`` is avoided because it cannot mask and refuses inputs above 16M elements.
    """
    sorted_x = torch.sort(torch.where(valid, x, torch.full_like(x, math.inf))).values
    last = (n - 1).clamp(min=0)
    out = []
    for q in qs:
        pos = q * last
        lo = pos.floor()
        frac = pos - lo
        lo_i = lo.long().clamp(0, x.numel() - 1).reshape(1)
        hi_i = (lo_i + 1).clamp(max=(last.long().reshape(1)))
        a = sorted_x.gather(0, lo_i)[0]
        b = sorted_x.gather(0, hi_i)[0]
        out.append(a + (b - a) * frac)
    return out


def response_rows(
    lengths: torch.Tensor,
    rewards: torch.Tensor,
    components: Mapping[str, torch.Tensor] | None = None,
    *,
    advantages: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    max_length: int | None = None,
    prompts: Sequence[str] | torch.Tensor | None = None,
    completions: Sequence[str] | torch.Tensor | None = None,
    index: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Sample-stream columns for :meth:`RunWriter.log_samples`, one row per response.

    Parameters
    ----------
    lengths, rewards
        ``(batch,)`` response lengths (tokens) and total rewards.
    components
        reward component name -> ``(batch,)`` values (columns ``reward/<name>``).
    advantages
        ``(batch,)`` per-response advantage (e.g. the GRPO group-normalised one).
    groups
        ``(batch,)`` prompt/group id of each response.
    truncated
        ``(batch,)`` bool; derived as ``lengths >= max_length`` when omitted and
        ``max_length`` is given.
    prompts, completions
        text per response, or 2-D integer token tensors that the writer
        decodes at flush (its ``detokenize`` argument), keeping text off the per-step path.
    index
        optional ``(k,)`` long tensor of the responses to keep (subsampling); applied on the
        device with ``index_select``, so it does not sync either.

    Examples
    --------
    >>> cols = response_rows(torch.tensor([3, 5]), torch.tensor([0.5, 1.0]),
    ...                      {"format": torch.tensor([1.0, 0.0])}, max_length=5)
    >>> sorted(cols), cols["truncated"].tolist()
    (['length', 'reward', 'reward/format', 'truncated'], [False, True])
    """
    cols: dict[str, Any] = {"length": lengths, "reward": rewards}
    for name, values in (components or {}).items():
        cols[f"reward/{name}"] = values
    if advantages is not None:
        cols["advantage"] = advantages
    if groups is not None:
        cols["group"] = groups
    if truncated is None and max_length is not None:
        truncated = lengths >= max_length
    if truncated is not None:
        cols["truncated"] = truncated
    if prompts is not None:
        cols["prompt"] = prompts
    if completions is not None:
        cols["completion"] = completions
    if index is not None:
        for key, value in cols.items():
            if isinstance(value, torch.Tensor):
                cols[key] = value.index_select(0, index.to(value.device))
            else:
                # text on the host: the index has to come to the host for this column
                picked = index.tolist()
                cols[key] = [value[i] for i in picked]
    return cols


def throughput(tokens: float | torch.Tensor, seconds: float) -> float | torch.Tensor:
    """Tokens (or samples) per second; a device tensor count stays on the device.

    >>> throughput(1000, 0.5)
    2000.0
    """
    if seconds <= 0:
        return math.nan
    return tokens / seconds


def mfu(
    tokens_per_s: float | torch.Tensor,
    param_count: float,
    peak_flops: float,
    *,
    training: bool = True,
) -> float | torch.Tensor:
    """Model FLOP utilisation: achieved model FLOP/s over the hardware's peak.

    A dense model does about ``2·N`` FLOPs per token forward and ``4·N`` backward, so training
    costs ``6·N`` and generation ``2·N`` FLOPs per token (Kaplan et al. 2020; PaLM appendix B,
    which also adds an attention term this approximation leaves out).

    Parameters
    ----------
    tokens_per_s
        training (forward + backward) or generation throughput.
    param_count
        trainable parameters N.
    peak_flops
        peak FLOP/s of the hardware in the precision used.
    training
        6·N FLOPs per token when true, 2·N (forward only) when false.

    Examples
    --------
    >>> mfu(1000.0, 1e9, 312e12)  # 1,000 tokens/s on a 1B model on an A100 (bf16 peak)
    0.019230769230769232
    """
    flops_per_token = (6.0 if training else 2.0) * param_count
    return tokens_per_s * flops_per_token / peak_flops


class PhaseTimer:
    """Wall time of named phases of a step (generation, training), without a sync per phase.

    On CUDA it records CUDA events at phase boundaries and reads the elapsed times only in
    :meth:`seconds` (one ``synchronize`` on the last event); on the CPU it uses
    ``time.perf_counter``.

    >>> timer = PhaseTimer()
    >>> with timer.phase("generation"):
    ...     _ = sum(range(1000))
    >>> timer.seconds()["generation"] >= 0.0
    True
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._cuda = self.device.type == "cuda"
        self._events: dict[str, tuple[Any, Any]] = {}

    def phase(self, name: str) -> _Phase:
        """Context manager timing one phase; a repeated name overwrites the previous timing."""
        return _Phase(self, name)

    def _start(self) -> Any:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self) -> dict[str, float]:
        """Seconds per phase (on CUDA: one wait for the last recorded event)."""
        out: dict[str, float] = {}
        if self._cuda and self._events:
            last = list(self._events.values())[-1][1]
            last.synchronize()
        for name, (start, stop) in self._events.items():
            if self._cuda:
                out[name] = start.elapsed_time(stop) / 1000.0
            else:
                out[name] = stop - start
        return out

    def reset(self) -> None:
        """Forget all phases (call at the start of a step)."""
        self._events = {}


class _Phase:
    def __init__(self, timer: PhaseTimer, name: str) -> None:
        self.timer = timer
        self.name = name
        self.start: Any = None

    def __enter__(self) -> Self:
        self.start = self.timer._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer._events[self.name] = (self.start, self.timer._start())


def memory_stats(device: torch.device | str | None = None) -> dict[str, float]:
    """Host RAM (peak RSS) and, on CUDA, peak allocated / reserved GPU memory in GB.

    These are host-side allocator counters: reading them does not synchronise the device.
    """
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in kilobytes on Linux and bytes on macOS
    ram_gb = rss / 1e9 if sys.platform == "darwin" else rss * 1024 / 1e9
    out = {"ram_gb": ram_gb}
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda" and torch.cuda.is_available():
        out["gpu_mem_allocated_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
        out["gpu_mem_reserved_gb"] = torch.cuda.memory_reserved(dev) / 1e9
    return out

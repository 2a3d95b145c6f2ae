"""Injected training faults: each a realistic cause, switched on at an onset step.

The trainer is healthy before ``onset``; from ``onset`` on (or, for ``resume_repeat``, at the
restart) the fault changes one thing in the training code. :data:`FAULTS` documents each one:
what it changes, which algorithm the fixtures record it with, the rule ids a practitioner
expects an analyzer to raise within ``horizon_steps`` of the onset (primary first) and what the
recorded fixture shows (figures from ``fixtures/runs``, seed 0, 240 steps). Consequences that
appear later than the horizon (e.g. the controller saturating after a KL blow-up) are described
but not listed: the scorer counts such alarms as neither hits nor false alarms.
"""

from __future__ import annotations

from ...records import record

__all__ = ["FAULTS", "FaultSpec"]


@record(frozen=True)
class FaultSpec:
    """One injectable fault.

    Parameters
    ----------
    name
        flag value (``--fault NAME``).
    algorithm
        algorithm the fixture records it with (``ppo`` or ``grpo``).
    onset
        default onset step.
    expected_rules
        rule ids that should fire, primary first.
    horizon_steps
        acceptable detection delay after onset.
    description
        what changes in the trainer, in one or two sentences.
    """

    name: str
    algorithm: str
    onset: int
    expected_rules: tuple[str, ...]
    horizon_steps: int
    description: str


FAULTS: dict[str, FaultSpec] = {
    f.name: f
    for f in [
        FaultSpec(
            "lr_high", "ppo", 100,
            ("kl.spike", "kl.runaway", "reward.decline"), 30,
            "The learning rate is multiplied by 30 (a schedule or config error). Within ten "
            "steps KL to the reference jumps ~10x (0.55 -> 5 nats/sequence, target 0.5) and "
            "stays there although the controller raises beta at its maximum rate; the reward "
            "falls (0.63 -> 0.33); approx_kl jumps 0.007 -> ~3 and clip_frac 0.04 -> 0.45."),
        FaultSpec(
            "kl_off", "ppo", 100, ("kl.runaway", "kl_ctl.law_mismatch"), 40,
            "The KL penalty is no longer applied to the reward (a refactor that drops the "
            "non-score reward): the logged kl_coef is 0 from onset and the controller is frozen. "
            "KL drifts from ~0.55 (target 0.5) to ~0.9 within 10 steps and ~2.7 nats/sequence "
            "from step 120, with no controller reaction; the jump of beta to 0 breaks the "
            "adaptive law once."),
        FaultSpec(
            "kl_wrong_sign", "ppo", 100,
            ("kl_ctl.wrong_direction", "kl_ctl.law_mismatch"), 30,
            "The adaptive controller's correction has the wrong sign (beta *= 1 - e*n/H): from "
            "onset every beta update has the opposite sign of the law's. KL sits above target, "
            "so beta falls (0.17 -> 0.01 by the end) and KL drifts up (0.55 -> 1.3 around step "
            "180, 2.0 at the end)."),
        FaultSpec(
            "adv_norm_off", "ppo", 100, ("adv.not_normalized",), 10,
            "Advantage whitening is silently skipped although run.json says it is on (e.g. a "
            "mask bug that turns the whitening into a no-op): advantage_std drops from 1.00 to "
            "~0.25 at onset (the raw GAE scale) and the mean is no longer exactly 0; training "
            "itself stays stable."),
        FaultSpec(
            "biased_baseline", "grpo", 100, ("adv.bias",), 10,
            "Each group is padded with a zero-reward dummy slot (a dropped generation) that "
            "enters the group mean and std: the baseline is too low, so advantage_mean jumps "
            "from 0 to ~0.24 and advantage_std from 0.93 to ~0.69 at onset."),
        FaultSpec(
            "length_reward", "grpo", 60,
            ("length.reward_correlation", "length.growth"), 60,
            "A reward component reward/length pays 0.25 per response token (a length-biased "
            "reward model). Mean length grows 3.9 -> 5.2 (step 95) -> 7.7 of max 8, reward "
            "correlates with length within steps, reward/correctness falls 0.37 -> 0.18 while "
            "the total reward rises, and the token KL grows 0.18 -> 2.8 (fixed beta)."),
        FaultSpec(
            "grad_explosion", "ppo", 100,
            ("grad.explode", "grad.spike", "loss.spike", "kl.spike", "reward.decline"), 10,
            "Gradient clipping is switched off (grad_norm_clipped equals grad_norm although "
            "run.json says max_grad_norm 2) and the learning rate spikes x1000 for 3 steps (a "
            "schedule set in the wrong unit): grad_norm jumps 0.6 -> 48 at onset, the loss "
            "0 -> 50-90, and the policy collapses (KL 0.5 -> 40, reward 0.6 -> 0.03, entropy "
            "1.2 -> 0.07) and never recovers."),
        FaultSpec(
            "lr_tiny", "ppo", 40, ("kl.update_stalled", "reward.stagnation"), 80,
            "The learning rate drops 1e4x (a scheduler stepped per micro-batch): the policy "
            "stops moving (approx_kl < 1e-7, clip_frac 0 from onset) and the reward stays "
            "at ~0.57 while healthy runs climb to ~0.67. The gradient norm keeps its scale "
            "(~0.9); what vanishes is the update, learning_rate x grad_norm (1e-3 -> 1e-7)."),
        FaultSpec(
            "entropy_collapse", "ppo", 100,
            ("entropy.collapse", "kl.runaway"), 30,
            "The entropy bonus changes sign and scale (coefficient -1.0 instead of +0.01): "
            "entropy falls 1.23 -> 0.3 within 15 steps and to ~0.04 after; KL to the "
            "reference jumps to ~7 nats/sequence (peak 8.3, target 0.5) while the controller "
            "raises beta at its maximum rate."),
        FaultSpec(
            "value_loss_unscaled", "ppo", 100, ("grad.imbalance",), 10,
            "The value loss is summed over tokens instead of averaged (x ~130 response "
            "tokens): grad_norm_value jumps from ~0.03 to ~2.0 while the policy grad_norm stays "
            "~0.8, so the value/policy gradient ratio goes from 0.05 to ~2.5; value_loss and "
            "loss jump with it."),
        FaultSpec(
            "max_length_small", "grpo", 100, ("length.truncation",), 10,
            "The generation length limit drops from 8 to 3 tokens (a resumed job picked up a "
            "wrong generation config; run.json still says 8): truncation_rate jumps from 0 to "
            "~0.5 and response_length_max pins at 3; the policy adapts over ~50 steps and "
            "truncation falls back to ~0.03."),
        FaultSpec(
            "nan_overflow", "ppo", 100, ("grad.nonfinite",), 5,
            "The reward passes through a float16 cast at a 1e5 scale (a half-precision reward "
            "head) and overflows: from onset reward_mean is inf and loss, policy_loss, "
            "value_loss, grad_norm and the advantage statistics are NaN on every step; the "
            "optimizer step is skipped on a non-finite gradient (as an fp16 loss scaler does), "
            "so the policy is frozen."),
        FaultSpec(
            "resume_repeat", "ppo", 150, ("stream.step_replay",), 5,
            "The job dies in step 150 (after logging 149) and restarts from the checkpoint "
            "taken after step 119: it reopens the streams in append mode and logs steps "
            "120-149 a second time (fresh sampler seeds, so the values differ), then continues "
            "to 239. The step column goes 148, 149, 120, 121, ...; onset_step is the step the "
            "job died in, where the replay starts."),
    ]
}

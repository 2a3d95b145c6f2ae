"""Verdicts on logs shaped like real trainers' runs (the scenarios of issue 13).

Each scenario is a log in the trainer's own format and keys, with the numbers real runs showed:
runs broken from their first update must be caught at once, healthy runs with small early
baselines must stay clean.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from forensics import scan_path

from .trainer_logs import grpo_columns, series, trl_state, verl_console


def alarms(a) -> list[tuple[str, str, int]]:  # type: ignore[no-untyped-def]
    return [(f.rule, f.severity.value, f.onset_step) for f in a.findings
            if f.severity.value in ("warning", "critical")]


def rules(a) -> set[str]:  # type: ignore[no-untyped-def]
    return {r for r, _, _ in alarms(a)}


def test_trl_grpo_learning_rate_200x_is_caught_from_step_2(tmp_path: Path) -> None:
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        kl = np.where(steps == 1, 0.0, rng.uniform(1.4, 3.6, len(steps)))
        return grpo_columns(kl, rng, lr=2e-4)
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(60, 1, cols)))
    assert a.meta.algorithm == "grpo"
    kl = [f for f in a.findings if f.rule == "kl.excessive"]
    assert kl and kl[0].severity.value == "critical" and kl[0].onset_step == 2, alarms(a)
    assert "loss.divergence" not in rules(a) and "loss.spike" not in rules(a)


def test_trl_ppo_broken_from_its_first_update(tmp_path: Path) -> None:
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        n = len(steps)
        return {"objective/kl": np.linspace(5, 97, n) * np.exp(rng.normal(0, 0.1, n)),
                "objective/entropy": 40 - np.linspace(0, 30, n),
                "objective/non_score_reward": -0.05 * np.linspace(5, 97, n),
                "objective/rlhf_reward": rng.normal(0.2, 0.1, n),
                "objective/scores": rng.normal(0.5, 0.1, n),
                "policy/approxkl_avg": np.clip(4.0 + rng.normal(0, 0.5, n), 0.5, None),
                "policy/clipfrac_avg": np.clip(0.32 + rng.normal(0, 0.03, n), 0, 1),
                "loss/policy_avg": rng.normal(0, 0.05, n), "loss/value_avg": 0.5 + rng.normal(0, 0.05, n),
                "val/clipfrac_avg": np.full(n, 0.1), "lr": np.full(n, 3e-4), "eps": np.full(n, 5.0),
                "episode": steps * 64.0}
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(40, 2, cols)))
    assert a.meta.algorithm == "ppo" and a.meta.kl_penalty == "reward"
    # the trust region is the cause (its tracker's alarm is critical); the damage is the KL far
    # out of its band to the end, which fails the run
    tr = [f for f in a.findings if f.rule == "trust_region.exceeded"]
    assert tr and tr[0].evidence["tracker_severity"] == "critical" and tr[0].onset_step == 1, alarms(a)
    kl = next(f for f in a.findings if f.rule == "kl.excessive")
    assert kl.severity.value == "critical" and kl.evidence["consequence"].startswith("the KL left its band")


def test_healthy_grpo_with_a_tiny_early_kl_stays_clean(tmp_path: Path) -> None:
    # Llama 8B LoRA, healthy: KL climbs smoothly from 0.0005 to 0.06 over the run
    for seed, top in ((3, 0.06), (4, 0.09)):
        def cols(steps: np.ndarray, rng: np.random.Generator, top: float = top) -> dict[str, np.ndarray]:
            n = len(steps)
            kl = np.geomspace(0.0005, top, n) * np.exp(rng.normal(0, 0.15, n))
            return grpo_columns(kl, rng)
        a = scan_path(trl_state(tmp_path / f"s{seed}.json", series(500, seed, cols)))
        assert alarms(a) == [], alarms(a)


def test_verl_catastrophic_grpo_run(tmp_path: Path) -> None:
    config = {"algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False,
                            "kl_ctrl": {"kl_coef": 0.001, "type": "fixed"}},
              "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.001,
                                              "clip_ratio": 0.2, "grad_clip": 1.0,
                                              "optim": {"lr": 1e-6}},
                                    "rollout": {"n": 5}},
              "data": {"max_response_length": 2048}}
    rng = np.random.default_rng(5)
    rows = []
    for step in range(1, 261):
        t = min((step - 1) / 11, 1.0)  # broken by step 12
        length = 1759 * (1 - t) + 1 * t
        score = -1.0 if step >= 12 else float(np.clip(rng.normal(-0.2, 0.1), -1, 1))
        rows.append({"step": step,
                     "actor/kl_loss": 0.8 + 15.7 * min((step - 1) / 9, 1.0) * (1 + 0.05 * rng.normal()),
                     "actor/kl_coef": 0.001,
                     "actor/grad_norm": 0.4 if step < 10 else float(17 * np.exp(rng.normal(0, 0.3))),
                     "actor/entropy": float(0.21 * (1 - t) + 0.007 * t),
                     "actor/pg_loss": float(rng.normal(0, 0.01)),
                     "actor/pg_clipfrac": 0.01, "actor/ppo_kl": 0.001, "actor/lr": 1e-6,
                     "critic/score/mean": score, "critic/score/max": score if step >= 12 else 1.0,
                     "critic/score/min": -1.0,
                     "response_length/mean": float(length), "response_length/max": float(max(length, 1)),
                     "response_length/clip_ratio": 0.0})
    a = scan_path(verl_console(tmp_path / "verl.log", rows, config))
    assert (a.meta.algorithm, a.meta.kl_penalty, a.meta.max_grad_norm) == ("grpo", "loss", 1.0)
    found = {}
    for f in sorted(a.findings, key=lambda f: f.severity.rank):  # the most severe per rule
        if f.severity.value != "info":
            found[f.rule] = f
    for rule in ("kl.excessive", "length.collapse", "signal.reward_floor", "signal.dead_groups",
                 "grad.clip_saturation", "entropy.collapse"):
        assert rule in found, (rule, alarms(a))
    for rule in ("kl.excessive", "length.collapse", "signal.reward_floor"):
        assert found[rule].severity.value == "critical", (rule, alarms(a))
        assert found[rule].evidence["consequence"] in found[rule].message
    # clipping far past the clip is a cause: its tracker's critical, the damage named elsewhere
    assert found["grad.clip_saturation"].evidence["tracker_severity"] == "critical"
    assert found["kl.excessive"].onset_step <= 3
    assert found["length.collapse"].onset_step <= 12
    # the reward pinned at its floor after a better start: the policy broke (not "too easy")
    assert "the policy broke" in found["signal.dead_groups"].message
    # the first domino is the KL far out from the first update, and what to do first is to cut
    # the learning rate (not to raise the temperature for the entropy collapse it caused)
    d = a.to_dict()
    assert d["timeline"]["first_domino"]["rule"] == "kl.excessive"
    first = d["recommendations"]["adjustments"][0]
    assert (first["parameter"], first["direction"], first["source"]) == ("learning_rate", "lower", "kl.excessive")
    assert first["new"] == pytest.approx(1e-7)


def dpo_columns(steps: np.ndarray, rng: np.random.Generator, *, loss: np.ndarray, margin: np.ndarray,
                acc: np.ndarray, logp_chosen: np.ndarray, chosen: np.ndarray | None = None) -> dict[str, np.ndarray]:
    n = len(steps)
    chosen = margin * 0.3 if chosen is None else chosen
    return {"loss": loss, "rewards/margins": margin, "rewards/accuracies": acc,
            "rewards/chosen": chosen, "rewards/rejected": chosen - margin,
            "logps/chosen": logp_chosen, "logps/rejected": logp_chosen - 40 * margin / np.fmax(margin.max(), 1),
            "logits/chosen": rng.normal(-1, 0.1, n), "logits/rejected": rng.normal(-1, 0.1, n),
            "grad_norm": 20 * np.exp(rng.normal(0, 0.3, n)), "learning_rate": np.full(n, 5e-7),
            "entropy": 1.2 + rng.normal(0, 0.02, n)}


def test_dpo_over_optimisation_margins_and_displacement(tmp_path: Path) -> None:
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        t = np.minimum((steps - 1) / 5, 1.0)  # loss to ~0 within 6 steps
        n = len(steps)
        margin = 11 * np.minimum((steps - 1) / 30, 1.0) + 0.2 * rng.normal(size=n)
        # the chosen responses lose likelihood (logps/chosen falls 200 nats), so their implicit
        # reward beta x log(pi / pi_ref) goes below 0 as the margin opens
        return dpo_columns(steps, rng, loss=0.693 * np.exp(-8 * t) + np.abs(rng.normal(0, 1e-4, n)),
                           margin=margin, acc=np.where(steps > 3, 1.0, 0.5 + 0.2 * (steps - 1)),
                           logp_chosen=-250 - 200 * np.minimum((steps - 1) / 40, 1.0), chosen=-0.2 * margin)
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(60, 7, cols)))
    assert a.meta.algorithm == "dpo" and a.meta.family == "preference"
    assert {"pref.overfit", "pref.margin_blowup", "pref.likelihood_displacement"} <= rules(a), alarms(a)
    assert min(f.onset_step for f in a.findings if f.rule == "pref.overfit") <= 8
    # no RL advice on a DPO run: no sampling-KL, entropy or group findings
    assert not any(r.startswith(("kl.", "entropy.", "signal.dead_groups")) for r in rules(a)), alarms(a)
    # DPO's beta weighs the distance to the reference: raise it, under its own name
    adj = {x["parameter"]: x for x in a.to_dict()["recommendations"]["adjustments"]}
    assert adj["kl_coef"]["direction"] == "raise" and adj["kl_coef"]["text"].startswith("beta: ")
    # ORPO (the same log with its odds-ratio terms) has no reference: its beta scales the
    # preference term itself, and raising it would push the pairs further apart
    def orpo(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c = cols(steps, rng)
        return {**c, "log_odds_ratio": c["rewards/margins"], "nll_loss": np.full(len(steps), 1.0)}
    (tmp_path / "orpo").mkdir()
    o = scan_path(trl_state(tmp_path / "orpo" / "trainer_state.json", series(60, 7, orpo)))
    assert o.meta.algorithm == "orpo"
    assert "kl_coef" not in {x["parameter"] for x in o.to_dict()["recommendations"]["adjustments"]}


def test_healthy_dpo_is_clean(tmp_path: Path) -> None:
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        n = len(steps)
        t = (steps - 1) / (n - 1)
        return dpo_columns(steps, rng, loss=0.693 - 0.2 * t + rng.normal(0, 0.03, n),
                           margin=0.9 * t + rng.normal(0, 0.1, n),
                           acc=np.clip(0.5 + 0.25 * t + rng.normal(0, 0.08, n), 0, 1),
                           logp_chosen=-250 - 8 * t + rng.normal(0, 3, n))
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(300, 8, cols)))
    assert alarms(a) == [], alarms(a)


def test_dpo_that_does_not_learn(tmp_path: Path) -> None:
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        n = len(steps)
        return dpo_columns(steps, rng, loss=0.6931 + rng.normal(0, 3e-4, n),
                           margin=rng.normal(0, 1e-3, n), acc=rng.choice([0.0, 0.5, 1.0], n),
                           logp_chosen=-250 + rng.normal(0, 0.01, n))
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(100, 9, cols)))
    assert "pref.not_learning" in rules(a), alarms(a)


def test_repeated_spikes_are_one_finding_and_severity_follows_magnitude(tmp_path: Path) -> None:
    # veRL-like grad norm with 11 spikes of 5x to 100x, every 30 rows: one grad.spike finding
    # listing them; a warning because they recur (eight of them past 10x within 100 rows of one
    # another), the tracker's critical kept for the largest (100x the median)
    def cols(steps: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        g = 0.5 * np.exp(rng.normal(0, 0.1, len(steps)))
        for i, factor in enumerate(np.geomspace(5, 100, 11)):
            g[40 + 30 * i] *= factor
        return {"grad_norm": g, "loss": rng.normal(0, 0.01, len(steps)),
                "reward": 0.5 + rng.normal(0, 0.05, len(steps)),
                "frac_reward_zero_std": np.full(len(steps), 0.1)}
    a = scan_path(trl_state(tmp_path / "trainer_state.json", series(400, 10, cols)))
    spikes = [f for f in a.findings if f.rule == "grad.spike"]
    assert len(spikes) == 1, [(f.rule, f.first_step) for f in a.findings]
    assert len(spikes[0].episodes) == 11 and spikes[0].severity.value == "warning"
    assert spikes[0].evidence["tracker_severity"] == "critical"
    assert spikes[0].message.startswith("11 episodes; the largest:") and "at step 341" in spikes[0].message
    # one-step spikes: information below 10x (clipped), warnings above while they recur
    sev = {e["onset_step"]: e["severity"] for e in spikes[0].episodes}
    assert sev[41] == "info" and sev[341] == "warning"
    assert {s for step, s in sev.items() if step < 221} == {"info"}
    csv = (tmp_path / "out")
    from forensics.report import write_reports
    write_reports(a, csv)
    assert "41-41;71-71" in (csv / "findings.csv").read_text()


def test_deepspeed_chat_critic_loss_growing_with_the_reward_scale_is_healthy(tmp_path: Path) -> None:
    # the reward model's scores grow as the policy learns; the critic's squared error grows with
    # them. Losses are printed from fp16, so many consecutive values repeat (zero step noise).
    rng = np.random.default_rng(11)
    rows = []
    for s in range(400):
        reward = 0.2 + 2.8 * s / 399 + rng.normal(0, 0.1)
        cri = float(np.float16(0.05 * (0.2 + 2.8 * s / 399) ** 2 * np.exp(rng.normal(0, 0.05))))
        act = float(np.float16(rng.normal(0.1, 0.02)))
        rows.append({"step": s, "act_loss": act, "cri_loss": cri, "reward": round(reward, 5)})
    from .trainer_logs import deepspeed_chat
    a = scan_path(deepspeed_chat(tmp_path / "ds.log", rows))
    assert a.meta.algorithm == "ppo"
    assert "loss.divergence" not in rules(a), [(f.rule, f.message) for f in a.findings]


def test_deepspeed_chat_critic_through_a_reward_crossing_zero_is_healthy(tmp_path: Path) -> None:
    # the reward model's score climbs from -0.6 through zero to 2; the critic's error grows
    # slowly with the returns. Judged against a scale that followed |mean reward| down to zero,
    # the value loss was a critical 20x "divergence" near the crossing.
    rng = np.random.default_rng(12)
    rows = []
    for s in range(400):
        reward = -0.6 + 2.6 * s / 399 + rng.normal(0, 0.1)
        cri = float(np.float16(0.06 * (1.0 + 9.0 * s / 399) * np.exp(rng.normal(0, 0.15))))
        act = float(np.float16(rng.normal(0.0, 0.06)))
        rows.append({"step": s, "act_loss": act, "cri_loss": cri, "reward": round(reward, 5)})
    from .trainer_logs import deepspeed_chat
    a = scan_path(deepspeed_chat(tmp_path / "ds.log", rows))
    assert [f.rule for f in a.findings if f.severity.value != "info"] == [], \
        [(f.rule, f.message) for f in a.findings]


def test_verl_patch_uses_the_key_the_printed_config_holds(tmp_path: Path) -> None:
    """A Megatron actor clips gradients with ``actor.optim.clip_grad`` (FSDP: ``actor.grad_clip``):
    the patch uses the key the run context read from the log, which Hydra accepts."""
    config = {"algorithm": {"adv_estimator": "grpo"},
              "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.001,
                                              "optim": {"lr": 1e-6, "clip_grad": 1.0}}}}
    rng = np.random.default_rng(8)
    rows = []
    for step in range(1, 201):
        spike = step in (60, 90, 120, 150)
        rows.append({"step": step, "actor/kl_loss": float(0.01 * np.exp(rng.normal(0, 0.1))),
                     "actor/grad_norm": 60.0 if spike else float(0.4 * np.exp(rng.normal(0, 0.1))),
                     "actor/entropy": 0.5, "actor/pg_loss": float(rng.normal(0, 0.01)),
                     "critic/score/mean": float(rng.normal(0.3, 0.05)), "critic/score/max": 1.0,
                     "critic/score/min": -1.0, "response_length/mean": 500.0})
    a = scan_path(verl_console(tmp_path / "verl.log", rows, config))
    assert a.context["max_grad_norm"]["value"] == 1.0
    patch = a.to_dict()["recommendations"]["config_patch"]
    assert patch["actor_rollout_ref"]["actor"]["optim"]["clip_grad"] == pytest.approx(0.8), patch
    assert "grad_clip" not in json.dumps(patch)

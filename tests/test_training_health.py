"""Training-health trackers (rewards, losses, entropy, throughput, generation, windows) and the
health check: known values on synthetic runs, injected pathologies, healthy runs, batch invariance."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd
import pytest

from forensics.analysis.engine import Scan
from forensics.analysis.result import Analysis
from forensics.analysis.trackers.generation import DEFAULT_FORMAT
from forensics.config import Config, RunMeta
from forensics.io.readers import ReadReport
from forensics.io.readers.arrow import rows_to_raw

from .conftest import RLDK, healthy_rows

NEW_TRACKERS = ("rewards", "losses", "entropy", "throughput", "generation", "windows")


# -- builders ------------------------------------------------------------------------------------
def run_rows(n: int = 400, seed: int = 0, epochs: int | None = None) -> list[dict[str, Any]]:
    """A healthy run with every metric the new trackers read."""
    rng = np.random.default_rng(seed + 100)
    rows = healthy_rows(n, seed)
    for i, r in enumerate(rows):
        r.update({
            "loss": float(1.0 - 0.3 * i / n + rng.normal(0, 0.03)),
            "policy_loss": float(rng.normal(0, 0.01) + 0.02 * i / n),
            "value_loss": float(0.5 * np.exp(rng.normal(0, 0.1))),
            "entropy_loss": float(-0.01 * (1.5 - 0.3 * i / n) + rng.normal(0, 1e-4)),
            "reward_std": float(0.3 + rng.normal(0, 0.01)),
            "reward_max": float(r["reward_mean"] + 0.4 + rng.normal(0, 0.02)),
            "reward/format": float(min(1.0, 0.5 + i / n + rng.normal(0, 0.03))),
            "reward/accuracy": float(0.1 + 0.3 * i / n + rng.normal(0, 0.03)),
            "rewards/accuracy/std": float(0.4 + rng.normal(0, 0.01)),
            "step_time": float(10 * np.exp(rng.normal(0, 0.05))),
            "gen_tokens_per_s": float(2000 * np.exp(rng.normal(0, 0.05))),
            "train_tokens_per_s": float(5000 * np.exp(rng.normal(0, 0.05))),
            "samples_per_s": float(6.4 * np.exp(rng.normal(0, 0.05))),
            "gpu_mem_allocated_gb": float(30 + rng.normal(0, 0.2)),
            "gpu_mem_reserved_gb": float(40 + rng.normal(0, 0.1)),
            "ram_gb": float(60 + rng.normal(0, 0.5)),
            "cpu_percent": float(50 + rng.normal(0, 5)),
            "api_tokens_sent": float(rng.integers(1000, 2000)),
            "api_tokens_received": float(rng.integers(100, 200)),
            "timestamp": 1.7e9 + 10.0 * i,
        })
        if epochs:
            r["epoch"] = float(i * epochs / n)
    return rows


def sample_rows(steps: int = 60, per_step: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        for k in range(per_step):
            good = rng.random() < 0.9
            text = (f"<think>First, add {k} because it helps. Therefore step {s}.</think><answer>{k}</answer>"
                    if good else f"answer is {k} <b>bold</b>")
            out.append({"step": s, "completion": text, "reward": float(rng.normal(0.5, 0.2)),
                        "reward/format": float(good), "length": float(len(text.split()))})
    return out


def scan(rows: list[dict[str, Any]], sizes: Any = None, samples: list[dict[str, Any]] | None = None,
         sample_sizes: Any = None, meta: RunMeta | None = None, config: Config | None = None,
         trackers: tuple[str, ...] | None = NEW_TRACKERS) -> Analysis:
    """Feed rows through Scan in batches of the given sizes (an int, a list, or None: one batch)."""
    sc = Scan(config, meta, trackers)

    def chunks(items: list[dict[str, Any]], sz: Any) -> list[list[dict[str, Any]]]:
        if sz is None:
            return [items]
        if isinstance(sz, int):
            return [items[i:i + sz] for i in range(0, len(items), sz)]
        out, i = [], 0
        for k in sz:
            if i >= len(items):
                break
            out.append(items[i:i + k])
            i += k
        if i < len(items):
            out.append(items[i:])
        return out

    rep = ReadReport("steps.jsonl")
    line = 1
    for ch in chunks(rows, sizes):
        sc.feed(rows_to_raw(ch, np.arange(line, line + len(ch))), rep)
        line += len(ch)
    if samples:
        srep = ReadReport("samples.jsonl")
        line = 1
        for ch in chunks(samples, sample_sizes):
            sc.feed_samples(rows_to_raw(ch, np.arange(line, line + len(ch))), srep)
            line += len(ch)
    return sc.finish()


def findings(a: Analysis, rule: str | None = None, tracker: str | None = None) -> list:
    return [f for f in a.findings if (rule is None or f.rule == rule)
            and (tracker is None or f.tracker == tracker)]


def serious(a: Analysis) -> list[str]:
    return [f"{f.rule}@{f.onset_step}: {f.message}" for f in a.findings if f.severity.value != "info"]


def sections(a: Analysis) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in a.results:
        out.update(r.sections)
    return out


# -- healthy runs --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_noisy_run_has_no_warnings(seed: int) -> None:
    a = scan(run_rows(600, seed), samples=sample_rows(60, 4, seed))
    assert serious(a) == []
    assert {r.name for r in a.results if r.active} == set(NEW_TRACKERS)


def test_rldk_fixture_still_only_kl_spike() -> None:
    from forensics.analysis.engine import scan_path

    a = scan_path(RLDK)
    assert [f.rule for f in a.findings if f.severity.value != "info"] == []
    assert "kl.spike" in {f.rule for f in a.findings}  # an event: information
    # the reward is constant there (normalised): no reward issues in the window table either
    assert all(not (set(w["issues"]) - {"reward_plateau"}) for w in sections(a)["windows"])


# -- losses --------------------------------------------------------------------------------------
#: a loss that measures progress (a preference loss): the loss rules judge it; a policy-gradient
#: loss, or that of a run whose algorithm is unknown, is judged for non-finite values only
DPO = RunMeta(algorithm="dpo")


def test_injected_loss_spike_gives_one_finding_at_onset() -> None:
    rows = run_rows(400)
    rows[200]["loss"] = rows[199]["loss"] * 3.0
    assert not findings(scan(rows, trackers=("losses",)), "loss.spike")  # algorithm unknown
    a = scan(rows, meta=DPO, trackers=("losses",))
    spikes = findings(a, "loss.spike")
    assert len(spikes) == 1
    assert spikes[0].onset_step == 200 and spikes[0].first_step == 200
    assert spikes[0].evidence["series"] == "loss"
    # one bad batch that came back with nothing else moving is information (severity from consequence)
    assert serious(a) == [] and spikes[0].severity.value == "info" and "recovered" in spikes[0].message


def test_loss_near_zero_spike_and_no_false_alarm() -> None:
    rng = np.random.default_rng(5)
    rows = [{"step": i, "loss": float(rng.normal(0, 0.01) + 0.03 * i / 500)} for i in range(500)]
    assert serious(scan(rows, meta=DPO, trackers=("losses",))) == []
    rows[300]["loss"] = 0.3
    spikes = findings(scan(rows, meta=DPO, trackers=("losses",)), "loss.spike")
    assert [f.onset_step for f in spikes] == [300]
    # GRPO's loss (beta x KL plus a zero-mean surrogate) is not a progress signal: not judged
    assert not findings(scan(rows, meta=RunMeta(algorithm="grpo"), trackers=("losses",)), "loss.spike")


def test_loss_divergence_nonfinite_and_oscillation() -> None:
    rng = np.random.default_rng(1)
    n = 400
    loss = 1.0 + rng.normal(0, 0.03, n)
    loss[250:] += np.linspace(0, 5, n - 250)  # sustained rise away from the run's level
    rows = [{"step": i, "loss": float(v)} for i, v in enumerate(loss)]
    rows[380]["loss"] = float("nan")
    a = scan(rows, meta=DPO, trackers=("losses",))
    div = findings(a, "loss.divergence")
    assert len(div) == 1 and 250 <= div[0].onset_step <= 300
    assert div[0].severity.value == "critical"  # 6x the lowest level
    nf = findings(a, "loss.nonfinite")
    assert [(f.onset_step, f.severity.value) for f in nf] == [(380, "critical")]
    # oscillation: the swing grows 10x from step 200 on
    x = 0.5 + rng.normal(0, 0.01, n)
    x[200:] += np.where(np.arange(n - 200) % 2 == 0, 0.1, -0.1)
    osc = findings(scan([{"step": i, "value_loss": float(v)} for i, v in enumerate(x)],
                        trackers=("losses",)), "loss.oscillation")
    assert len(osc) == 1 and 200 <= osc[0].onset_step <= 230


# -- rewards -------------------------------------------------------------------------------------
def test_reward_breakdown_trend_and_summary_values() -> None:
    rows = run_rows(400)
    a = scan(rows, trackers=("rewards",))
    s = next(r for r in a.results if r.name == "rewards").summary
    df = pd.DataFrame(rows)
    for comp in ("format", "accuracy"):
        st = s["components"][comp]
        col = df[f"reward/{comp}"]
        assert st["mean"] == pytest.approx(col.mean(), rel=1e-12)
        assert st["std"] == pytest.approx(col.std(), rel=1e-9)
        assert st["min"] == col.min() and st["max"] == col.max()
        assert st["direction"] == "up"
    assert s["components"]["accuracy"]["batch_std_median"] == pytest.approx(df["rewards/accuracy/std"].median())
    from scipy.stats import spearmanr

    assert s["reward_step_spearman"] == pytest.approx(spearmanr(df.step, df.reward_mean)[0], rel=1e-9)
    assert s["best_of_n_gap"]["median"] == pytest.approx((df.reward_max - df.reward_mean).median())
    assert s["variance"]["median"] == pytest.approx((df.reward_std ** 2).median())
    trends = findings(a, "reward.trend")
    assert trends and all(f.severity.value == "info" for f in trends)
    assert {f.evidence["component"] for f in trends} >= {"reward/format"}
    assert all(f.evidence["direction"] == "up" for f in trends)
    assert a.health["convergence"] is not None


def test_reward_decline_and_stagnation_and_target() -> None:
    rng = np.random.default_rng(3)
    n = 600
    level = np.minimum(np.arange(n) / 200, 1.0) * 0.6 + 0.2  # rises to 0.8 by step 200
    level[400:] -= np.linspace(0, 0.4, n - 400)  # then falls
    rows = [{"step": i, "reward_mean": float(v + rng.normal(0, 0.03))} for i, v in enumerate(level)]
    cfg = Config(trackers={"rewards": {"target": 0.7}})
    a = scan(rows, trackers=("rewards",), config=cfg)
    dec = findings(a, "reward.decline")
    assert len(dec) == 1 and 400 <= dec[0].onset_step <= 470
    s = next(r for r in a.results if r.name == "rewards").summary
    assert s["target"]["reached_step"] is not None and 150 <= s["target"]["reached_step"] <= 200
    assert s["target"]["distance"] > 0.2
    # a long plateau after the rise: stagnation, no decline
    flat = np.minimum(np.arange(900) / 100, 1.0) * 0.5
    rows = [{"step": i, "reward_mean": float(v + rng.normal(0, 0.03))} for i, v in enumerate(flat)]
    a = scan(rows, trackers=("rewards",))
    st = findings(a, "reward.stagnation")
    assert len(st) == 1 and 350 <= st[0].onset_step <= 500
    assert not findings(a, "reward.decline")


def test_stagnation_window_halves_match_brute_force() -> None:
    """The prefix sums behind reward.stagnation give each row the mean and count of the finite
    rewards in both halves of its window, whatever the batching, with old sums dropped."""
    from forensics.analysis.trackers.rewards import Rewards, RewardsParams

    rng = np.random.default_rng(11)
    n = 6000
    r = rng.normal(size=n)
    r[rng.random(n) < 0.1] = np.nan
    p = RewardsParams(stagnation_window=300, stagnation_share=0.25)
    t = Rewards(p)
    rows = np.arange(n)
    span = np.maximum(300, (0.25 * rows).astype(np.int64))
    got = []
    for a, b in pairwise([0, 1, 7, 300, 301, 2000, 2001, 4500, n]):
        got.append(t._halves(rows[a:b], r[a:b], span[a:b]))
    m1 = np.concatenate([g[0][0] for g in got])
    n2 = np.concatenate([g[1][1] for g in got])
    for i in (0, 5, 299, 300, 1201, 2999, 4500, 5999):
        h = span[i] // 2
        first, second = r[max(i - 2 * h + 1, 0): max(i - h + 1, 0)], r[max(i - h + 1, 0): i + 1]
        assert n2[i] == np.isfinite(second).sum()
        if np.isfinite(first).any():
            assert m1[i] == pytest.approx(np.nanmean(first), rel=1e-9)
    assert len(t.prefix) < 0.3 * n  # only the reach of later windows is kept


def test_slow_steady_rise_is_not_stagnation() -> None:
    """A long run whose reward rises slowly against its per-step noise (0.4 over a million steps,
    noise 0.03: the benchmark's run) improves visibly over a window that grows with it; only the
    first stretch, where a window's rise is within the noise, can read as stagnation."""
    rng = np.random.default_rng(2)
    n = 200_000
    reward = 0.2 + 0.4 * np.arange(n) / 1e6 + rng.normal(0, 0.03, n)
    rows = [{"step": i, "reward_mean": float(v)} for i, v in enumerate(reward)]
    st = findings(scan(rows, trackers=("rewards",)), "reward.stagnation")
    assert len(st) <= 1 and all(f.last_step < 50_000 for f in st)


# -- entropy -------------------------------------------------------------------------------------
def test_entropy_collapse_blowup_and_normal_decline() -> None:
    rng = np.random.default_rng(2)
    n = 500
    h = 2.0 * np.exp(-np.maximum(np.arange(n) - 200, 0) / 40.0) + 0.05
    rows = [{"step": i, "entropy": float(v * np.exp(rng.normal(0, 0.02))),
             "reward_mean": float(0.5 + rng.normal(0, 0.03))} for i, v in enumerate(h)]
    col = findings(scan(rows, trackers=("entropy",)), "entropy.collapse")
    assert len(col) == 1 and 240 <= col[0].onset_step <= 270  # H/H0 < 0.3 near step 250
    # the same fall while the reward keeps rising: informational only
    for i, r in enumerate(rows):
        r["reward_mean"] = float(0.1 + 0.002 * i + rng.normal(0, 0.03))
    a = scan(rows, trackers=("entropy",))
    assert not findings(a, "entropy.collapse") and findings(a, "entropy.low")
    # a normal learning decline (-30%) gives nothing
    assert scan(run_rows(400), trackers=("entropy",)).findings == []
    hb = 1.0 + np.maximum(np.arange(n) - 300, 0) / 50.0
    rows = [{"step": i, "entropy": float(v * np.exp(rng.normal(0, 0.02)))} for i, v in enumerate(hb)]
    bl = findings(scan(rows, trackers=("entropy",)), "entropy.blowup")
    assert len(bl) == 1 and 300 <= bl[0].onset_step <= 340


# -- generation ----------------------------------------------------------------------------------
def test_generation_metrics_on_hand_written_completions() -> None:
    texts = [
        "<think>First, 2+2. Because addition. Therefore 4.</think><answer>4</answer>",
        "<think>1. add\n2. check</think>\n<answer>yes</answer>",
        "the the the the the the",
        "<script>alert(1)</script> no format",
    ]
    samples = [{"step": 0, "completion": t, "reward": r, "reward/format": f}
               for t, r, f in zip(texts, [1.0, 0.5, 0.0, -1.0], [1.0, 1.0, 0.0, 0.0])]
    samples += [{"step": 1, "completion": texts[0], "reward": 0.2, "reward/format": 1.0}]
    a = scan([{"step": 0}, {"step": 1}], samples=samples, trackers=("generation",))
    gen = sections(a)["generation"]
    s = gen["summary"]
    assert s["responses"] == 5
    assert s["format_rate"] == pytest.approx(3 / 5)
    assert s["mean_chars"] == pytest.approx(sum(len(t) for t in [*texts, texts[0]]) / 5)
    think0 = len("First, 2+2. Because addition. Therefore 4.")
    assert s["mean_think_chars"] == pytest.approx((2 * think0 + len("1. add\n2. check")) / 5)
    assert s["mean_answer_chars"] == pytest.approx((1 + 3 + 0 + 0 + 1) / 5)
    # indicators: first/because/therefore (3) x2, numbered steps (2) in the second
    assert s["reasoning_indicators_per_response"] == pytest.approx((3 + 2 + 0 + 0 + 3) / 5)
    # repetition: "the" x6 has 4 trigrams, 1 distinct -> 3 repeated
    words = [t.split() for t in [*texts, texts[0]]]
    total = sum(max(len(w) - 2, 0) for w in words)
    assert s["repetition"] == pytest.approx(3 / total)
    w0 = gen["windows"][0]
    assert w0["best"]["reward"] == 1.0 and w0["best"]["reward_components"] == {"format": 1.0}
    assert w0["worst"]["text"] == texts[3]  # untrusted text kept verbatim, not escaped
    assert gen["format_pattern"] == DEFAULT_FORMAT


def test_generation_regression_repetition_and_example_truncation() -> None:
    samples = []
    for s in range(80):
        for k in range(6):
            if s < 40:
                t = f"<think>because {k}</think><answer>{k}</answer>"
            else:
                t = "loop " * 50 if k < 5 else f"<think>x</think><answer>{k}</answer>"
            samples.append({"step": s, "completion": t, "reward": float(k + s / 100)})
    cfg = Config(trackers={"generation": {"example_chars": 10, "window_steps": 40}})
    a = scan([{"step": s} for s in range(80)], samples=samples, trackers=("generation",), config=cfg)
    reg = findings(a, "generation.format_regression")
    rep = findings(a, "generation.repetition")
    assert len(reg) == 1 and 40 <= reg[0].onset_step <= 50
    assert len(rep) == 1 and 40 <= rep[0].onset_step <= 50
    win = sections(a)["generation"]["windows"]
    assert len(win) == 2 and len(win[0]["best"]["text"]) == 10 and win[0]["best"]["truncated_text"]


# -- throughput ----------------------------------------------------------------------------------
def test_throughput_summary_equals_numpy() -> None:
    rows = run_rows(300, epochs=3)
    meta = RunMeta(param_count=7e9, peak_flops=989e12, config={"trainer": {"total_training_steps": 1000}})
    a = scan(rows, meta=meta, trackers=("throughput",))
    s = next(r for r in a.results if r.name == "throughput").summary
    df = pd.DataFrame(rows)
    for name in ("step_time", "gen_tokens_per_s", "train_tokens_per_s", "samples_per_s"):
        assert s[name]["p50"] == np.percentile(df[name], 50)
        assert s[name]["p99"] == np.percentile(df[name], 99)
        assert s[name]["mean"] == pytest.approx(df[name].mean(), rel=1e-12)
    assert s["duration"] == {"seconds": 2990.0, "source": "timestamps"}
    assert s["steps_per_s"] == pytest.approx(299 / 2990.0)
    mfu = 6 * 7e9 * df.train_tokens_per_s / 989e12
    assert s["mfu"]["p50"] == pytest.approx(np.percentile(mfu, 50))
    assert s["eta"]["remaining_steps"] == 701
    assert s["eta"]["eta_seconds"] == pytest.approx(701 * df.step_time.iloc[-30:].median())
    api = s["api"]["api_tokens_sent"]
    assert api["total"] == df.api_tokens_sent.sum() and api["per_epoch_mean"] == df.api_tokens_sent.sum() / 3
    assert s["api"]["api_input_tokens_per_s"]["p50"] == pytest.approx(
        np.percentile(df.api_tokens_sent / df.step_time, 50))
    assert s["resources"]["gpu_mem_allocated_gb"]["max"] == df.gpu_mem_allocated_gb.max()
    assert a.findings == []


def test_throughput_streamed_summaries_without_step_time() -> None:
    """Duration, ETA (from timestamps), num_tokens and epochs are summarised as rows stream by:
    the same values as numpy over the whole run, whatever the batching."""
    rows = run_rows(300, epochs=3)
    rng = np.random.default_rng(5)
    for i, r in enumerate(rows):
        r.pop("step_time")
        r["timestamp"] += float(rng.uniform(0, 3))
        r["num_tokens"] = float(1000 * (i + 1))
    for i in (0, 17, 290, 299):  # missing timestamps, at the ends too
        rows[i]["timestamp"] = None
    rows[299]["num_tokens"] = None
    meta = RunMeta(config={"max_steps": 1000})
    df = pd.DataFrame(rows)
    ok = df.timestamp.notna()
    ts, steps = df.timestamp[ok].to_numpy(), df.step[ok].to_numpy()
    for sizes in (None, [7, 1, 50, 3] * 30):
        s = next(r for r in scan(rows, sizes=sizes, meta=meta, trackers=("throughput",)).results
                 if r.name == "throughput").summary
        assert s["duration"] == {"seconds": ts[-1] - ts[0], "source": "timestamps"}
        assert s["steps_per_s"] == (300 - 1) / (ts[-1] - ts[0])
        assert s["totals"]["num_tokens"] == 299000.0
        per_step = float(np.median(np.diff(ts[-31:]) / np.diff(steps[-31:])))
        assert s["eta"]["seconds_per_step"] == per_step
        assert s["eta"]["remaining_steps"] == 1000 - rows[-1]["step"]
        assert s["api"]["api_tokens_sent"]["per_epoch_mean"] == pytest.approx(df.api_tokens_sent.sum() / 3)


def test_throughput_degradation_and_memory_growth() -> None:
    rows = run_rows(600)
    for i, r in enumerate(rows):
        if i >= 400:
            r["step_time"] *= 1.6
        if i >= 300:
            r["gpu_mem_allocated_gb"] += 0.02 * (i - 300)  # +6 GB by the end: a leak
    a = scan(rows, trackers=("throughput",))
    deg = findings(a, "throughput.degradation")
    assert len(deg) == 1 and 400 <= deg[0].onset_step <= 420 and deg[0].evidence["series"] == "step_time"
    mem = findings(a, "throughput.memory_growth")
    assert len(mem) == 1 and mem[0].evidence["series"] == "gpu_mem_allocated_gb"
    assert 300 <= mem[0].onset_step <= 500
    # a tokens/s collapse
    rows = run_rows(300)
    for r in rows[200:]:
        r["gen_tokens_per_s"] *= 0.5
    deg = findings(scan(rows, trackers=("throughput",)), "throughput.degradation")
    assert [f.evidence["series"] for f in deg] == ["gen_tokens_per_s"] and 200 <= deg[0].onset_step <= 220


# -- batch invariance ----------------------------------------------------------------------------
def _pathological_rows() -> list[dict[str, Any]]:
    rows = run_rows(700, seed=4, epochs=7)
    rng = np.random.default_rng(9)
    for i, r in enumerate(rows):
        if i == 150:
            r["loss"] *= 4
        if i >= 450:
            r["reward_mean"] -= 0.002 * (i - 450)
            r["step_time"] *= 1.5
            r["gpu_mem_reserved_gb"] += 0.03 * (i - 450)
            r["entropy"] *= 0.2
        if i >= 500:
            r["policy_loss"] += float(rng.normal(0, 0.2))
        if i % 97 == 0:
            r.pop("reward/accuracy")  # gaps in a component
    rows[600]["value_loss"] = float("inf")
    for r in rows[:30]:  # a component that appears late
        r.pop("reward/format")
    return rows


def _result_dump(a: Analysis) -> tuple[list[dict[str, Any]], str]:
    secs = json.dumps(sections(a), sort_keys=True, default=str)
    return [f.to_dict() for f in a.findings], secs


@pytest.mark.parametrize("tracker", NEW_TRACKERS)
def test_batch_invariance(tracker: str) -> None:
    rows = _pathological_rows()
    samples = sample_rows(120, 5, seed=3)
    samples[7]["completion"] = None  # responses without text are left out, whatever the batching
    for r in samples[40:44]:
        r.pop("completion")
    base = _result_dump(scan(rows, samples=samples, trackers=(tracker,)))
    rng = np.random.default_rng(hash(tracker) % 1000)
    sizes = rng.integers(1, 40, 200).tolist()
    ssizes = rng.integers(1, 17, 200).tolist()
    other = _result_dump(scan(rows, sizes=sizes, samples=samples, sample_sizes=ssizes,
                              trackers=(tracker,)))
    assert other[0] == base[0]
    assert other[1] == base[1]
    if tracker not in ("generation", "windows"):
        assert base[0], f"{tracker}: the pathological run should give findings"


def test_batch_invariance_rows_of_one() -> None:
    rows = _pathological_rows()[:260]
    samples = sample_rows(30, 3, seed=1)
    base = _result_dump(scan(rows, samples=samples))
    assert _result_dump(scan(rows, sizes=1, samples=samples, sample_sizes=1)) == base


def test_rewards_from_the_sample_stream_when_steps_log_none() -> None:
    rng = np.random.default_rng(4)
    samples = [{"step": s, "reward": float(rng.normal(0.2 + s / 200, 0.1)),
                "reward/format": float(rng.random() < 0.5 + s / 400)}
               for s in range(200) for _ in range(8)]
    rows = [{"step": s, "kl": 0.05} for s in range(200)]
    a = scan(rows, samples=samples, trackers=("rewards",))
    s = next(r for r in a.results if r.name == "rewards").summary
    df = pd.DataFrame(samples)
    per_step = df.groupby("step").reward.mean()
    assert s["source"] == "sample" and s["rows"] == 200
    assert s["total"]["mean"] == pytest.approx(per_step.mean(), rel=1e-12)
    assert s["best_of_n_gap"]["median"] == pytest.approx(
        (df.groupby("step").reward.max() - per_step).median(), rel=1e-12)
    assert s["components"]["format"]["direction"] == "up"
    other = scan(rows, samples=samples, sample_sizes=[7, 1, 30] * 100, trackers=("rewards",))
    assert [f.to_dict() for f in other.findings] == [f.to_dict() for f in a.findings]
    assert next(r for r in other.results if r.name == "rewards").summary == s

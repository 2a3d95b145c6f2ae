"""The window check: tens of windows at any run length, mergeable moments equal to pandas, each
window judged against a bounded summary of the earlier ones (constant work per window), sound on
autocorrelated noise, and windows that agree with the findings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.signal import lfilter

from forensics.analysis.engine import Scan, scan_path
from forensics.analysis.stats.moments import Moments, accumulate, segment_moments
from forensics.analysis.trackers.health_check import HealthCheck, HealthCheckParams, config_patch, window_stats
from forensics.config import Config
from forensics.io.readers import ReadReport
from forensics.io.readers.base import RawBatch

from .conftest import FIXTURES
from .test_training_health import run_rows, scan, sections


def ar1(n: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) noise with unit variance."""
    return lfilter([1.0], [1.0, -phi], rng.normal(0.0, np.sqrt(1.0 - phi * phi), n))


def scan_columns(cols: dict[str, np.ndarray], trackers: tuple[str, ...] | None = ("windows",),
                 batch: int = 65536, config: Config | None = None) -> dict[str, Any]:
    """Scan numeric columns fed as raw batches (fast for long runs) and return the analysis dict."""
    sc = Scan(config, None, trackers)
    rep = ReadReport("steps.jsonl")
    n = len(cols["step"])
    for i in range(0, n, batch):
        j = min(i + batch, n)
        sc.feed(RawBatch({k: np.asarray(v[i:j], dtype=np.float64) for k, v in cols.items()}, {}, {},
                         np.arange(i, j) + 1), rep)
    return sc.finish().to_dict()


# -- moments ---------------------------------------------------------------------------------------
def test_moments_merge_and_segments_equal_the_whole() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, 1000)
    x[rng.random(1000) < 0.1] = np.nan
    whole = Moments.of(x, 3.0)
    ok = x[np.isfinite(x)]
    assert whole.mean == pytest.approx(ok.mean(), rel=1e-12)
    assert whole.var == pytest.approx(ok.var(ddof=1), rel=1e-10)
    s = pd.Series(x)
    both = s.notna() & s.shift(1).notna()
    xm = s - ok.mean()
    assert whole.lag_cov == pytest.approx(float((xm * xm.shift(1))[both].sum()), rel=1e-9)
    starts = np.unique(np.r_[0, rng.choice(np.arange(1, 1000), 40, replace=False)])
    assert accumulate(Moments(3.0), segment_moments(x, starts, 3.0)) == whole
    left, right = Moments.of(x[:437], 1.0), Moments.of(x[437:], 5.0)
    assert left.merge(right) == whole.shifted(1.0)
    spike = np.r_[np.ones(40) + rng.normal(0, 0.01, 40), [2.0]]
    assert Moments.of(spike).max_z() > 50  # the spike does not hide in the spread it creates


# -- the table ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("window_rows", [0, 37])
def test_window_table_matches_pandas_groupby(window_rows: int) -> None:
    rows = run_rows(430)
    cfg = Config(trackers={"windows": {"window_rows": window_rows}})
    table = sections(scan(rows, trackers=("windows",), config=cfg))["windows"]
    df = pd.DataFrame(rows)
    size = window_rows or 10  # 430 rows: 43 blocks of 10 pass 40, so they merge once into 20s
    size = 20 if not window_rows else size
    g = df.groupby(np.arange(len(df)) // size)
    assert [w["window"] for w in table] == list(range(len(g)))
    np.testing.assert_allclose([w["reward_mean"] for w in table], g.reward_mean.mean(), rtol=1e-12)
    np.testing.assert_allclose([w["loss_mean"] for w in table], g.loss.mean(), rtol=1e-12)
    np.testing.assert_allclose([w["reward_var"] for w in table], g.reward_mean.var(), rtol=1e-9)
    np.testing.assert_allclose([w["reward_trend"] for w in table[1:]],
                               np.diff(g.reward_mean.mean().to_numpy()), rtol=1e-9)
    assert [w["first_step"] for w in table] == g.step.min().tolist()
    assert [w["last_step"] for w in table] == g.step.max().tolist()
    assert [w["rows"] for w in table] == g.size().tolist()


def test_epochs_are_windows_when_there_are_enough() -> None:
    rows = run_rows(500, epochs=10)
    table = sections(scan(rows, trackers=("windows",)))["windows"]
    df = pd.DataFrame(rows)
    g = df.groupby(np.floor(df.epoch).astype(int))
    assert [w["window"] for w in table] == list(g.groups)
    np.testing.assert_allclose([w["reward_mean"] for w in table], g.reward_mean.mean(), rtol=1e-12)
    few = scan(run_rows(500, epochs=3), trackers=("windows",))  # 3 epochs are too few windows
    assert next(r for r in few.results if r.name == "windows").summary["mode"] == "rows"


@pytest.mark.parametrize("n", [240, 5_000, 100_000, 1_000_000])
def test_tens_of_windows_at_any_length(n: int) -> None:
    rng = np.random.default_rng(n)
    d = scan_columns({"step": np.arange(n), "reward_mean": rng.normal(0.5, 0.1, n)})
    windows = d["windows"]
    assert 20 <= len(windows) <= 41
    size = d["trackers"]["windows"]["summary"]["window_rows"]
    assert size % 10 == 0 and (size // 10) & (size // 10 - 1) == 0  # 10 x a power of two
    assert sum(w["rows"] for w in windows) == n
    assert [w["first_step"] for w in windows[1:]] == [w["last_step"] + 1 for w in windows[:-1]]


def test_the_table_does_not_depend_on_the_batches() -> None:
    rng = np.random.default_rng(7)
    n = 30_000
    cols = {"step": np.arange(n), "reward_mean": rng.normal(0.5, 0.1, n), "loss": rng.normal(1, 0.1, n),
            "kl": np.exp(rng.normal(-3, 0.3, n))}
    cols["reward_mean"][rng.random(n) < 0.05] = np.nan
    base = scan_columns(cols)["windows"]
    for batch in (1000, 4093, 65536):
        assert scan_columns(cols, batch=batch)["windows"] == base


# -- the judge -------------------------------------------------------------------------------------
def _history(hc: HealthCheck, k: int = 6, seed: int = 0, r: float = 0.5, lo: float = 1.0) -> None:
    rng = np.random.default_rng(seed)
    for i in range(k):
        hc.add_window(i, window_stats(r + rng.normal(0, 0.01, 50), lo + rng.normal(0, 0.01, 50),
                                      0.05 + rng.normal(0, 0.001, 50)))


def _window(r: float, lo: float, kl: float = 0.05, r_sd: float = 0.01, seed: int = 99) -> dict[str, Moments]:
    rng = np.random.default_rng(seed)
    return window_stats(r + rng.normal(0, r_sd, 50), lo + rng.normal(0, 0.01, 50), kl + rng.normal(0, 0.001, 50))


@pytest.mark.parametrize(("window", "issue"), [
    (dict(r=0.3, lo=1.0), "reward_declining"),
    (dict(r=0.5, lo=1.0, kl=0.2), "kl_rising"),
    (dict(r=0.5, lo=1.3), "loss_high"),
    (dict(r=0.7, lo=1.3), "overfitting"),
    (dict(r=0.5, lo=0.7), "exploration_needed"),
    (dict(r=0.5, lo=1.0, r_sd=0.2), "variance_high"),
])
def test_each_issue_against_the_earlier_windows(window: dict[str, float], issue: str) -> None:
    hc = HealthCheck()
    _history(hc)
    rep = hc.add_window(6, _window(**window))
    assert issue in rep.issues, rep
    quiet = HealthCheck()
    _history(quiet)
    assert quiet.add_window(6, _window(0.5, 1.0)).issues in ([], ["reward_plateau"])


def test_spike_plateau_and_the_first_windows() -> None:
    loss = 1.0 + np.random.default_rng(0).normal(0, 0.01, 50)
    loss[20] = 2.0
    rep = HealthCheck().after_epoch({"reward": [0.5] * 50, "loss": loss})
    assert rep.issues == ["loss_spiking"] and rep.status == "alert"
    hc = HealthCheck()
    # the first min_windows windows have no direction: there is nothing to compare their moves with
    reps = [hc.add_window(i, _window(0.5 - 0.1 * i, 1.0, seed=i)) for i in range(4)]
    assert [r.reward_direction for r in reps] == [None, None, None, None]
    hc = HealthCheck()
    reps = [hc.add_window(i, _window(0.5, 1.0, seed=i)) for i in range(12)]
    assert "reward_plateau" in reps[-1].issues and reps[-1].status == "watch"
    assert reps[-1].adjustments == []  # a plateau asks for no change
    hc = HealthCheck()
    reps = [hc.add_window(i, _window(0.5 + 0.05 * i, 1.0, seed=i)) for i in range(12)]
    assert all("reward_plateau" not in r.issues for r in reps)  # a rising reward is no plateau


def test_group_methods_loss_is_not_a_progress_signal() -> None:
    for algorithm, expected in (("ppo", True), ("grpo", False)):
        hc = HealthCheck(algorithm=algorithm)
        _history(hc, lo=0.05)
        rep = hc.add_window(6, _window(0.7, 0.4))
        assert ("overfitting" in rep.issues) is expected, algorithm


def test_work_per_window_is_constant() -> None:
    """Each window is compared with a bounded summary: 10x the windows, 10x the work."""
    def work(n: int) -> int:
        rng = np.random.default_rng(1)
        hc = HealthCheck()
        for i in range(n):
            hc.add_window(i, window_stats(rng.normal(0.5, 0.1, 20), rng.normal(1, 0.1, 20),
                                          np.exp(rng.normal(-3, 0.2, 20))))
        return hc.work

    small, large = work(200), work(2000)
    assert 9.0 <= large / small <= 10.5, (small, large)
    p = HealthCheckParams()
    assert large / 2000 <= 10 * p.memory  # a few passes over the bounded summary per window


@pytest.mark.parametrize("n", [1_000, 20_000, 400_000])
@pytest.mark.parametrize("phi", [0.5, 0.9, 0.99])
def test_autocorrelated_stationary_noise_gives_no_warning(n: int, phi: float) -> None:
    """Nothing is wrong: no window is warned about, nothing is urgent; a plateau may be named."""
    rng = np.random.default_rng(int(phi * 100) + n)
    cols = {"step": np.arange(n), "reward_mean": 0.5 + 0.05 * ar1(n, phi, rng),
            "loss": 1.0 + 0.05 * ar1(n, phi, rng), "kl": 0.05 * np.exp(0.2 * ar1(n, phi, rng)),
            "learning_rate": np.full(n, 1e-6)}
    d = scan_columns(cols, ("hyperparams", "windows"))
    assert 20 <= len(d["windows"]) <= 41
    assert all(w["status"] in ("ok", "watch") for w in d["windows"]), \
        [(w["window"], w["issues"]) for w in d["windows"] if w["status"] not in ("ok", "watch")]
    assert {i for w in d["windows"] for i in w["issues"]} <= {"reward_plateau"}
    rec = d["recommendations"]
    assert rec["priorities"]["immediate"] == [] and rec["adjustments"] == []


def test_a_real_decline_is_found_in_its_window() -> None:
    d = scan_path(FIXTURES / "runs" / "ppo_lr_high", trackers=["windows"]).to_dict()
    hit = [w for w in d["windows"] if "reward_declining" in w["issues"]]
    assert [(w["first_step"], w["last_step"]) for w in hit] == [(100, 109)]


def test_windows_and_findings_agree() -> None:
    """A window inside a warning's episode shows it, with a status to match; a window between a
    grouped finding's episodes does not."""
    runs = [FIXTURES / "runs" / r for r in ("ppo_lr_high", "ppo_entropy_collapse", "grpo_length_reward")]
    for run in [*runs, FIXTURES / "trl" / "grpo_lr_jump"]:
        d = scan_path(run).to_dict()
        for f in d["findings"]:
            if f["severity"] == "info":
                continue
            for e in f.get("episodes") or [f]:
                sev = e.get("severity", f["severity"])
                inside = [w for w in d["windows"] if w["first_step"] <= e["last_step"] and
                          w["last_step"] >= e["first_step"]]
                assert inside, (run, f["rule"])
                for w in inside:
                    if sev != "info":
                        assert f["rule"] in w["findings"], (run, f["rule"], w["window"])
                        assert w["status"] in (("alert",) if sev == "critical" else ("warn", "alert"))
        spans: dict[str, list[tuple[int, int]]] = {}  # a rule's serious episodes (all series)
        for f in d["findings"]:
            if f["severity"] != "info":
                spans.setdefault(f["rule"], []).extend(
                    (e["first_step"], e["last_step"]) for e in f.get("episodes") or [f]
                    if e.get("severity", f["severity"]) != "info")
        for w in d["windows"]:
            for rule in w["findings"]:
                assert any(a <= w["last_step"] and b >= w["first_step"] for a, b in spans[rule]), \
                    (run, rule, w["window"])


def test_online_health_check_and_its_config_patch() -> None:
    hc = HealthCheck(config={"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}, "grad_clip": 1.0}}})
    _history(hc)
    rep = hc.add_window(6, _window(0.3, 1.0))
    assert rep.issues == ["reward_declining"]
    assert [(a["parameter"], a["config_key"], a["new"]) for a in rep.adjustments] == \
        [("learning_rate", "actor_rollout_ref.actor.optim.lr", 8e-7)]
    rec = hc.recommendations()
    assert rec["config_patch"] == {"actor_rollout_ref": {"actor": {"optim": {"lr": 8e-7}}}}
    assert rec["issues"] == {"reward_declining": [[6, 6]]}
    # a parameter the config does not hold is given in words, never under a made-up key
    patch, words = config_patch(HealthCheck(config={}).adjustments_for(["exploration_needed"]))
    assert patch == {} and words == ["temperature +10%"]
    # an issue that moves a parameter the other way is held back
    both = {a["parameter"]: a for a in HealthCheck().adjustments_for(["loss_spiking", "variance_high"])}
    assert both["max_grad_norm"]["also_raised_by"] == ["variance_high"]


# -- the rewards tracker on autocorrelated noise ------------------------------------------------
@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9, 0.95])
def test_autocorrelated_reward_noise_is_no_decline_at_any_length(phi: float) -> None:
    """The running best of a long stationary reward sits far above its mean by chance alone: the
    decline's selection margin keeps 400,000 rows of AR(1) noise from warning (1,384 episodes at
    phi 0.9 before it)."""
    n = 400_000
    rng = np.random.default_rng(int(phi * 100))
    d = scan_columns({"step": np.arange(n), "reward_mean": 0.5 + 0.05 * ar1(n, phi, rng)}, ("rewards",))
    assert [f for f in d["findings"] if f["severity"] != "info"] == []


@pytest.mark.parametrize("phi", [0.0, 0.9])
def test_a_decline_in_autocorrelated_noise_is_still_found(phi: float) -> None:
    """A rise, a plateau, then a fall of ten noise sigmas (0.5) from step 2,000: one decline, near
    its onset, whatever the noise's autocorrelation."""
    n = 3000
    rng = np.random.default_rng(7)
    level = np.minimum(np.arange(n) / 1000, 1.0) - np.clip((np.arange(n) - 2000) / 200, 0.0, 1.0) * 0.5
    d = scan_columns({"step": np.arange(n), "reward_mean": level + 0.05 * ar1(n, phi, rng)}, ("rewards",),
                     batch=700)
    dec = [f for f in d["findings"] if f["rule"] == "reward.decline"]
    assert len(dec) == 1 and 2000 <= dec[0]["onset_step"] <= 2200, dec


def test_the_selection_margin_does_not_depend_on_the_batches() -> None:
    n = 5000
    rng = np.random.default_rng(11)
    level = np.minimum(np.arange(n) / 1000, 1.0) - np.clip((np.arange(n) - 3000) / 300, 0.0, 1.0) * 0.4
    cols = {"step": np.arange(n), "reward_mean": level + 0.05 * ar1(n, 0.9, rng)}
    runs = [scan_columns(cols, ("rewards",), batch=b)["findings"] for b in (65536, 1000, 137, 99)]
    assert "reward.decline" in [f["rule"] for f in runs[0]] and all(r == runs[0] for r in runs[1:])


# -- the KL tracker on autocorrelated noise ---------------------------------------------------------
def _ar1_kl(n: int, phi: float, seed: int) -> np.ndarray:
    return 0.05 * np.exp(0.2 * ar1(n, phi, np.random.default_rng(seed)))


@pytest.mark.parametrize("phi", [0.0, 0.9, 0.95])
def test_a_wandering_kl_is_no_spike(phi: float) -> None:
    """A stationary KL whose log wanders slowly (AR(1)) looks calm within one window, so each
    excursion stood out against the window's own spread: 14-17 spike warnings in 400,000 rows at
    phi 0.9 before the run-long spread floored it."""
    n = 400_000
    d = scan_columns({"step": np.arange(n), "kl": _ar1_kl(n, phi, 5)}, ("kl_schedule",))
    assert [f for f in d["findings"] if f["severity"] != "info"] == []


@pytest.mark.parametrize("batch", [65536, 777])
def test_a_kl_spike_in_wandering_noise_is_still_found(batch: int) -> None:
    """KL x8 for five steps from step 3,000 (about ten of the noise's sigmas in log space)."""
    n = 6000
    kl = _ar1_kl(n, 0.9, 6)
    kl[3000:3005] *= 8.0
    d = scan_columns({"step": np.arange(n), "kl": kl}, ("kl_schedule",), batch=batch)
    spikes = [f for f in d["findings"] if f["rule"] == "kl.spike"]
    assert len(spikes) == 1 and 3000 <= spikes[0]["onset_step"] <= 3002, spikes


def test_the_rewards_trackers_memory_is_bounded_and_batch_invariant() -> None:
    """400,000 rows: the stagnation halves keep a bounded number of prefix sums (a quarter of the
    run, 100,000, before), the run-long values are on disk, and the findings (stagnation
    included) do not depend on the batches."""
    n = 400_000
    rng = np.random.default_rng(12)
    cols = {"step": np.arange(n), "reward_mean": 0.5 + 0.05 * ar1(n, 0.9, rng),
            "reward_std": 0.2 + 0.01 * rng.random(n), "reward_max": 0.9 + 0.01 * rng.random(n)}
    found = []
    for batch in (65536, 9999):
        sc = Scan(None, None, ("rewards",))
        rep = ReadReport("steps.jsonl")
        for i in range(0, n, batch):
            j = min(i + batch, n)
            sc.feed(RawBatch({k: np.asarray(v[i:j], dtype=np.float64) for k, v in cols.items()},
                             {}, {}, np.arange(i, j) + 1), rep)
        tracker = sc.trackers[0]
        assert len(tracker.prefix) < 16_000
        assert tracker.var.spilled and tracker.var.held <= tracker.var.memory + batch
        found.append(sc.finish().to_dict()["findings"])
    assert found[0] == found[1] and any(f["rule"] == "reward.stagnation" for f in found[0])


@pytest.mark.parametrize("n", [20_000, 400_000])
@pytest.mark.parametrize("phi", [0.0, 0.9])
def test_stationary_noise_in_every_metric_is_no_warning_from_any_tracker(n: int, phi: float) -> None:
    """Every tracker on AR(1) noise in reward, loss (20% of its level), KL, gradient norm,
    entropy and length: nothing warned about, nothing urgent. (At phi 0.9 the loss's level wander
    gave 16 to 325 divergence warnings and an immediate learning-rate cut before the divergence
    test took it as its noise floor.)"""
    rng = np.random.default_rng(int(phi * 10) + n)
    cols = {"step": np.arange(n), "reward_mean": 0.5 + 0.05 * ar1(n, phi, rng),
            "loss": 0.1 * np.exp(0.2 * ar1(n, phi, rng)), "kl": 0.05 * np.exp(0.2 * ar1(n, phi, rng)),
            "grad_norm": 0.5 * np.exp(0.2 * ar1(n, phi, rng)), "entropy": 1.0 + 0.05 * ar1(n, phi, rng),
            "response_length_mean": 200 + 10 * ar1(n, phi, rng), "learning_rate": np.full(n, 1e-6)}
    d = scan_columns(cols, None)  # every tracker
    assert [(f["rule"], f["severity"]) for f in d["findings"] if f["severity"] != "info"] == []
    assert d["recommendations"]["priorities"]["immediate"] == []


def test_the_judges_median_is_numpys_with_nan_and_infinities() -> None:
    """The health check's median of a few values (in Python) answers as ``np.median``: NaN when
    one is NaN, the middle of infinities otherwise (``inf - inf`` sums to NaN without one), and
    prints no numpy warning (numpy's sum of huge values or of infinities does)."""
    import math
    import random
    import warnings

    from forensics.analysis.trackers.health_check import _median

    rng = random.Random(3)
    pool = [0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 3, 7, 1e308, -1e308, 5e-324]
    for _ in range(3000):
        values = [rng.choice(pool) if rng.random() < 0.5 else rng.gauss(0, 1) for _ in range(rng.randint(1, 9))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's sum of inf and -inf
            want = float(np.median(np.asarray(values, dtype=np.float64)))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = _median(values)
        assert got == want or (math.isnan(got) and math.isnan(want)), values

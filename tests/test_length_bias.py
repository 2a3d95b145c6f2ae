"""The length-bias tracker on the per-response stream: every response counts, the within-step
reward-length relation is judged step by step, and the finding starts where the coupling does."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from bench.shapes import sample_chunks, step_chunks, write_parquet
from forensics.analysis.engine import scan_path
from forensics.analysis.stats.segments import StepRuns, segment_mean, segment_moments, segment_spearman
from forensics.analysis.stats.trailing import spearman

from .conftest import write_jsonl

STEPS, PER_STEP, ONSET = 600, 200, 480


def _run(tmp_path: Path, samples: list[dict[str, np.ndarray]] | None = None, *,
         steps: int = STEPS, bias_from: int | None = ONSET) -> dict:
    write_parquet(tmp_path / "steps.parquet", step_chunks(steps, 20, False))
    chunks = samples if samples is not None else sample_chunks(steps, PER_STEP, seed=3,
                                                               bias_from=bias_from)
    write_parquet(tmp_path / "samples.parquet", iter(chunks))
    return scan_path(tmp_path).to_dict()


def _coupling(d: dict) -> list[dict]:
    return [f for f in d["findings"] if f["rule"] == "length.reward_correlation"]


def test_coupling_found_where_it_appears(tmp_path: Path) -> None:
    """The issue's seed, smaller: reward += 0.004 x (length - 200) from step 480 of 600, 200
    responses a step; lengths do not grow, so only the within-step relation shows it."""
    d = _run(tmp_path)
    found = _coupling(d)
    assert len(found) == 1
    f = found[0]
    assert ONSET <= f["onset_step"] <= ONSET + 3
    assert f["last_step"] == STEPS - 1
    assert f["evidence"]["spearman"] > 0.8
    assert f["evidence"]["length_grew"] is False
    s = d["trackers"]["length_bias"]["summary"]
    assert s["responses_used"] == STEPS * PER_STEP == s["sample_rows"]  # every response counts
    assert s["within_step_steps"] == STEPS
    assert s["spearman_sample"] == STEPS * PER_STEP and s["spearman_sample_share"] == 1.0


def test_no_coupling_no_finding(tmp_path: Path) -> None:
    d = _run(tmp_path, bias_from=None)
    assert _coupling(d) == []
    assert abs(d["trackers"]["length_bias"]["summary"]["overall_pearson"]) < 0.05


def test_drift_across_steps_is_not_coupling(tmp_path: Path) -> None:
    """Length and reward both rise over training, independently within each step: pooled across
    steps they correlate strongly, within a step not at all, so nothing is reported."""
    rng = np.random.default_rng(5)
    steps = np.repeat(np.arange(STEPS), PER_STEP)
    length = np.round(100 + 0.5 * steps + rng.normal(0, 20, len(steps)))
    reward = 0.2 + 0.001 * steps + rng.normal(0, 0.05, len(steps))
    d = _run(tmp_path, [{"step": steps, "length": length, "reward": reward}])
    assert d["trackers"]["length_bias"]["summary"]["overall_pearson"] > 0.8
    assert _coupling(d) == []


def test_overall_spearman_sample_is_stated(tmp_path: Path) -> None:
    write_parquet(tmp_path / "steps.parquet", step_chunks(100, 20, False))
    write_parquet(tmp_path / "samples.parquet", sample_chunks(100, 50, seed=1))
    (tmp_path / "forensics.toml").write_text("[length_bias]\nmax_overall_samples = 1000\n")
    from forensics.config import load_config

    d = scan_path(tmp_path, config=load_config(tmp_path / "forensics.toml")).to_dict()
    s = d["trackers"]["length_bias"]["summary"]
    assert s["responses_used"] == 5000 and s["spearman_sample"] == 1000
    assert s["spearman_sample_share"] == pytest.approx(0.2)


def test_jsonl_samples_give_the_same_per_step_series(tmp_path: Path) -> None:
    chunks = list(sample_chunks(60, 30, seed=2, bias_from=30))
    rows = [{k: (int(v[i]) if k in ("step", "truncated") else float(v[i])) for k, v in c.items()}
            for c in chunks for i in range(len(c["step"]))]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    pq = _run(a, chunks, steps=60)
    write_parquet(b / "steps.parquet", step_chunks(60, 20, False))
    write_jsonl(b / "samples.jsonl", rows)
    js = scan_path(b).to_dict()
    assert pq["trackers"]["length_bias"]["summary"] == js["trackers"]["length_bias"]["summary"]
    assert [f["onset_step"] for f in _coupling(pq)] == [f["onset_step"] for f in _coupling(js)]


def test_within_step_statistics_match_the_per_step_definition() -> None:
    """The vectorised per-step ranks and sums give each step's own Spearman and Pearson,
    whatever the batch cuts (ties, unequal steps, a step split across batches)."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, 50)
    steps = np.repeat(np.arange(50), sizes)
    x = np.round(rng.normal(100, 10, len(steps)))  # integer lengths with ties
    y = np.round(rng.normal(0, 1, len(steps)), 1) + 0.02 * x
    runs = StepRuns()
    got_s, got_p, got_steps = [], [], []
    cuts = [0, *sorted(rng.choice(len(steps), 12, replace=False)), len(steps)]
    blocks = [runs.push(steps[a:b], {"x": x[a:b], "y": y[a:b]}) for a, b in itertools.pairwise(cuts)]
    for blk in [*blocks, runs.flush()]:
        if blk is None:
            continue
        got_s.append(segment_spearman(blk.cols["x"], blk.cols["y"], blk.codes, blk.k).pearson())
        got_p.append(segment_moments(blk.cols["x"], blk.cols["y"], blk.codes, blk.k).pearson())
        got_steps.append(blk.steps)
    assert np.concatenate(got_steps).tolist() == list(range(50))
    want_s = [spearman(x[steps == s], y[steps == s]) for s in range(50)]
    want_p = [np.corrcoef(x[steps == s], y[steps == s])[0, 1] if (steps == s).sum() >= 3 else np.nan
              for s in range(50)]
    np.testing.assert_allclose(np.concatenate(got_s), want_s, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(got_p), want_p, rtol=1e-9, atol=1e-12)


def test_segment_sums_of_codes_in_any_order() -> None:
    """A block's codes ascend (summed segment by segment); codes in any other order are summed
    by bincount, to the same moments and means."""
    rng = np.random.default_rng(3)
    codes = np.sort(rng.integers(0, 6, 200))
    codes[codes == 4] = 5  # an empty segment among them
    x, y = rng.normal(size=200), rng.normal(size=200)
    shuffled = rng.permutation(200)
    ordered = segment_moments(x, y, codes, 7)
    mixed = segment_moments(x[shuffled], y[shuffled], codes[shuffled], 7)
    for name in ("n", "mx", "my", "sxx", "syy", "sxy"):
        np.testing.assert_allclose(getattr(mixed, name), getattr(ordered, name), rtol=1e-12, atol=1e-12)
    assert ordered.n[4] == 0 and ordered.sxx[4] == 0 and ordered.n[6] == 0
    assert np.isnan(segment_mean(x, codes, 7)[4]) and np.isnan(segment_mean(x[shuffled], codes[shuffled], 7)[4])


def test_the_sketch_is_the_bottom_k_and_holds_few_batches_aside() -> None:
    """Rows offered in batches of 1 to 40 (a live scan's) keep the same sample as one batch would:
    the rows of the smallest hashes; no batch is held aside once nothing of it can enter, and
    never more than _SKETCH_PARTS batches at once."""
    from forensics.analysis.trackers.length_bias import _HASH, _SKETCH_PARTS, LengthBias, LengthBiasParams

    rng = np.random.default_rng(4)
    n, cap = 20_000, 500
    length, reward = rng.integers(10, 500, n).astype(float), rng.normal(size=n)
    tracker = LengthBias(LengthBiasParams(max_overall_samples=cap))
    at, held = 0, 0
    while at < n:
        k = int(rng.integers(1, 41))
        rows = np.arange(at, min(at + k, n), dtype=np.uint64)
        tracker._sketch(rows, length[at:at + k], reward[at:at + k])
        held = max(held, len(tracker.sketch_new))
        at += k
    tracker._trim_sketch()
    with np.errstate(over="ignore"):
        hashes = (np.arange(n, dtype=np.uint64) + np.uint64(1)) * _HASH
    row_of = {int(h): i for i, h in enumerate(hashes)}
    kept = [row_of[int(h)] for h in tracker.sketch_h]
    assert sorted(kept) == sorted(np.argsort(hashes)[:cap].tolist())
    assert tracker.sketch_l.tolist() == length[kept].tolist() and tracker.sketch_r.tolist() == reward[kept].tolist()
    assert 0 < held < _SKETCH_PARTS

"""hyperparams: jumps of the learning rate, KL coefficient, clip range and batch size; a
learning rate out of the usual range; a warm-up that never ended."""

from __future__ import annotations

import numpy as np

from forensics.config import RunMeta

from .common import Stream, TrackerSuite, analyse, golden


def settings() -> Stream:
    """The learning rate x30 at 100, the KL penalty off at 150, the clip range x4 at 200, the
    batch size /8 at 250."""
    i = np.arange(300)
    cols = {"learning_rate": np.where(i < 100, 1e-6, 3e-5), "kl_coef": np.where(i < 150, 0.05, 0.0),
            "clip_range": np.where(i < 200, 0.2, 0.8), "batch_size": np.where(i < 250, 512, 64)}
    return Stream([{"step": int(s), "loss": 1.0, **{k: float(v[s]) for k, v in cols.items()}} for s in i])


def endless_warmup() -> Stream:
    """A learning rate that rises over three whole epochs and never falls."""
    n = 200
    lr, epoch = np.linspace(1e-9, 3e-7, n), np.linspace(0.01, 3.0, n)
    rows = [{"step": s, "learning_rate": float(lr[s]), "epoch": float(epoch[s]),
             "rewards/margins": s / n} for s in range(n)]
    return Stream(rows, meta=RunMeta(algorithm="dpo"))


def noisy_learning_rate() -> Stream:
    """A learning rate logged with gaussian noise on every row (the gauss bench's shape)."""
    lr = np.round(np.random.default_rng(0).normal(0, 1, 300), 6)
    return Stream([{"step": s, "loss": 1.0, "learning_rate": float(lr[s])} for s in range(300)])


class TestHyperparams(TrackerSuite):
    NAME = "hyperparams"
    stream = staticmethod(settings)
    GOLDEN = (
        ("hyperparams.lr_change", "warning", 100, 100, 100),
        ("hyperparams.kl_coef_change", "warning", 150, 150, 150),
        ("hyperparams.clip_change", "warning", 200, 200, 200),
        ("hyperparams.batch_size_change", "warning", 250, 250, 250),
    )
    FIRES = (("hyperparams.lr_change", settings), ("hyperparams.lr_out_of_range", "trl/dpo_lr_high"),
             ("hyperparams.lr_warmup_unfinished", endless_warmup), ("hyperparams.kl_coef_change", settings),
             ("hyperparams.clip_change", settings), ("hyperparams.batch_size_change", settings),
             ("hyperparams.schedule_noisy", noisy_learning_rate))


def test_a_trainers_clip_and_batch_keys_are_canonical() -> None:
    """``cliprange`` and ``train_batch_size`` map to ``clip_range`` and ``batch_size``: mapped (not
    "unmapped"), read by hyperparams (``-v`` says so), and their changes found."""
    from forensics.report.terminal import render_plan

    spelled = {"clip_range": "cliprange", "batch_size": "train_batch_size"}
    rows = [{spelled.get(k, k): v for k, v in r.items()} for r in settings().rows]
    a = analyse("hyperparams", Stream(rows))
    (mapping,) = a.mappings.values()
    assert mapping.mapping["cliprange"] == "clip_range" and mapping.mapping["train_batch_size"] == "batch_size"
    assert not {"cliprange", "train_batch_size"} & set(mapping.unmapped)
    assert golden(a) == list(TestHyperparams.GOLDEN)
    assert "hyperparams  runs on learning_rate, kl_coef, clip_range, batch_size" in render_plan(a)


def test_a_change_on_the_last_row_is_decided_once() -> None:
    """The last logged move has no next move: finish decides it without storing the decision, so
    a second finish (or a peek, then more rows) does not count it twice."""
    from .common import fed

    rows = settings().rows[:120]
    rows[-1]["learning_rate"] *= 30
    sc = fed("hyperparams", Stream(rows))
    (tracker,) = sc.trackers
    first, second = tracker.finish(), tracker.finish()
    assert first.summary["learning_rate"]["changes"] == second.summary["learning_rate"]["changes"] == 2
    (change,) = [f for f in second.findings if f.rule == "hyperparams.lr_change"]  # two episodes, one finding
    assert [e[2] for e in change.episode_ranges()] == [100, 119]


def _jumps_by_definition(v: list[float], change_ratio: float = 1.5, ramp_factor: float = 2.0) -> list[int]:
    """Positions of the jumps as the module's text defines them, one move at a time."""
    out = []
    for i in range(1, len(v)):
        a, b = v[i - 1], v[i]
        big = a == 0 or b == 0 or abs(np.log(b / a)) > np.log(change_ratio) if a > 0 and b > 0 else a != b
        if not big or a == b:
            continue
        d = b - a
        ramp = any(1 <= j < len(v) and (n := v[j] - v[j - 1]) != 0 and np.sign(n) == np.sign(d)
                   and abs(d) <= ramp_factor * abs(n) for j in (i - 1, i + 1))
        if not ramp:
            out.append(i)
    return out


def test_a_setting_that_jumps_often_counts_its_jumps_and_keeps_the_first_few() -> None:
    """A learning rate that jumps on many rows, but not most: every jump is counted (the
    summary), only the first ``max_changes`` are kept as findings, whatever the batches; the
    jumps are those of the rule's definition (a move beyond change_ratio, not a ramp), decided a
    batch at a time. Where it jumps on most rows, the same count stands beside one finding
    (hyperparams.schedule_noisy) in place of the changes."""
    rng = np.random.default_rng(3)
    noise = np.round(np.exp(rng.normal(-12, 1.0, 2000)), 12)
    noise[rng.random(2000) < 0.1] = 0.0
    sparse = np.where(rng.random(2000) < 0.15, noise, 1e-5)  # a jump out and back on 15% of rows
    for lr, noisy in ((sparse, False), (noise, True)):
        s = Stream([{"step": i, "loss": 1.0, "learning_rate": float(x)} for i, x in enumerate(lr)])
        expected = _jumps_by_definition(lr.tolist())
        for sizes in (None, [1, 7, 64, 500]):
            a = analyse("hyperparams", s, sizes=sizes)
            summary = next(r.summary for r in a.results if r.name == "hyperparams")["learning_rate"]
            assert summary["changes"] == len(expected) > 100
            assert summary.get("noisy", False) is noisy
            rules = {f.rule: f for f in a.findings}
            if noisy:
                assert set(rules) == {"hyperparams.schedule_noisy"}
                assert rules["hyperparams.schedule_noisy"].evidence["changes"] == len(expected)
            else:
                found = rules["hyperparams.lr_change"]
                assert [int(e["first_step"]) for e in found.episodes] == expected[:20]

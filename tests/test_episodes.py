"""Episodes: the runs after a batch's first are made episodes all at once (a noisy series opens
thousands a batch); they must be, to the bit, what the one-run-at-a-time loop made of them."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.analysis.stats.episodes import Episode, Episodes


class _OneAtATime(Episodes):
    """The loop the batch path replaced: every run through ``_absorb``, in order."""

    def update(self, rows, steps, cond, value=None, extras=None):  # type: ignore[no-untyped-def]
        cond = np.asarray(cond, dtype=bool)
        cond_full, n_prior = self._cond.extend(cond)
        steps_full, _ = self._steps.extend(np.asarray(steps, dtype=np.int64))
        from forensics.analysis.stats.trailing import persist

        idx = np.flatnonzero(persist(cond_full, self.k, self.m)[n_prior:])
        vals = np.full(len(rows), np.nan) if value is None else np.asarray(value, dtype=float)
        for run in np.split(idx, np.flatnonzero(np.diff(rows[idx]) > self.gap + 1) + 1) if len(idx) else []:
            head = int(run[0])
            joins = self._open is not None and rows[head] - self._open.last_row <= self.gap + 1
            if self._open is not None and not joins:
                self._done.append(self._open)
            if not joins:  # the onset: the window's first raw-condition row
                lo = max(head + n_prior - (self.m - 1), 0)
                at = int(steps_full[lo + int(np.argmax(cond_full[lo : head + n_prior + 1]))])
                self._open = Episode(at, at, int(steps[head]), int(rows[head]))
            assert self._open is not None
            self._absorb(self._open, run, rows, steps, vals, extras)


@pytest.mark.parametrize("seed", range(40))
def test_many_runs_a_batch_make_the_episodes_the_loop_made(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 8))
    k, gap = int(rng.integers(1, (m + 1) // 2 + 1)), int(rng.integers(0, 4))
    mode = str(rng.choice(["max", "min", "absmax"]))
    n = int(rng.integers(50, 3000))
    cond = rng.random(n) < rng.uniform(0.1, 0.5)
    value = rng.normal(0, 1, n) * 10 ** rng.uniform(-3, 3, n)
    value[rng.random(n) < 0.2] = np.nan
    value[rng.random(n) < 0.02] = np.inf
    extras = {"a": rng.normal(size=n), "b": np.arange(n, dtype=np.float64)}
    steps = np.cumsum(rng.integers(1, 4, n)) + 1000
    new, old = Episodes(k, m, gap, mode), _OneAtATime(k, m, gap, mode)
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(0, 12)), replace=False))
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True):
        args = (np.arange(lo, hi), steps[lo:hi], cond[lo:hi])
        with_value = seed % 5 != 0  # some detectors report no value
        for det in (new, old):
            det.update(*args, value[lo:hi] if with_value else None,
                       {key: a[lo:hi] for key, a in extras.items()} if seed % 3 else None)
    assert [repr(e) for e in new.finish()] == [repr(e) for e in old.finish()]
    assert new.finish()  # (a batch opens tens of them at these rates)



def test_finish_copies_every_field_of_every_episode() -> None:
    """``finish`` builds its copies field by field (``dataclasses.replace`` cost half a second on
    a noisy run): a field it left out would come back as its default, which no field here has."""
    import dataclasses

    fields = dataclasses.fields(Episode)
    blank = Episode(0, 0, 0, 0)

    def distinct(i: int) -> Episode:
        return Episode(**{f.name: ({"x": float(i)} if f.name == "extras" else
                                   float(i) + 0.5 if f.type in ("float", float) else 1000 * i + k + 1)
                          for k, f in enumerate(fields)})

    det = Episodes()
    det._done = [distinct(1), distinct(2)]
    det._open = distinct(3)
    originals = [*det._done, det._open]
    copies = det.finish()
    for c, o in zip(copies, originals, strict=True):
        assert c is not o and c.extras is not o.extras
        for f in fields:
            assert getattr(c, f.name) == getattr(o, f.name) != getattr(blank, f.name), f.name

"""Plot series: per-step metrics downsampled so that spikes survive, for the HTML report.

A long run has far more steps than a chart has pixels. Each series is cut into equal buckets of
consecutive finite values and every bucket keeps its minimum and its maximum (in step order), the
min/max envelope: a one-step spike is the maximum of its bucket, so it is always drawn. A series
with at most ``max_points`` finite values is kept whole.

The result is the ``plots`` section of the analysis JSON, so ``forensics report`` renders the
HTML from a saved analysis without re-reading the logs. Values are rounded to 6 significant
digits to keep the file small (a 100,000-step run carries a few hundred kB of series).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..stats.digits import significant
from ..stats.order import distinct
from .timeline import glob_match

if TYPE_CHECKING:
    from ..result import Analysis
    from ..store import MetricsStore

__all__ = ["MAX_POINTS", "PLOTTED", "envelope", "paired_sample", "plots_from_frame",
           "plots_section", "store_plots"]

#: Most points kept per series (the envelope keeps ``MAX_POINTS // 2`` buckets: about one per
#: pixel of a report's plot 600 px wide, which is all a plot can show).
MAX_POINTS = 1000

#: Per-step columns carried into the plots section (glob patterns), when logged.
PLOTTED = (
    "kl", "kl_seq", "kl_coef", "approx_kl", "learning_rate",
    "grad_norm", "grad_norm_value", "grad_norm_clipped",
    "advantage_mean", "advantage_std", "advantage_min", "advantage_max",
    "reward_mean", "reward_std", "reward_penalized", "reward/*",
    "response_length_mean", "response_length_max", "truncation_rate",
    "loss", "policy_loss", "value_loss", "entropy_loss", "entropy", "clip_frac",
    "step_time", "gen_tokens_per_s", "train_tokens_per_s", "samples_per_s", "mfu",
)


def _round(values: np.ndarray) -> list[float]:
    return significant(values, 6)


def _ints(steps: np.ndarray) -> list[int]:
    """Steps as Python ints (``tolist``: no Python call per value)."""
    return np.asarray(steps).astype(np.int64, copy=False).tolist()


def envelope(steps: np.ndarray, values: np.ndarray,
             max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Min/max envelope of the finite values: at most ``max_points`` points, spikes kept.

    >>> s = np.arange(10_000)
    >>> v = np.zeros(10_000); v[4321] = 50.0
    >>> x, y = envelope(s, v, max_points=100)
    >>> len(x) <= 100, float(y.max()), int(x[y.argmax()])
    (True, 50.0, 4321)
    """
    values = np.asarray(values)
    if values.dtype.kind != "f":
        values = values.astype(np.float64)
    steps = np.asarray(steps)
    ok = np.isfinite(values)
    s, v = (steps, values) if ok.all() else (steps[ok], values[ok])
    n = len(v)
    if n <= max_points:
        return s, v
    size = -(-n // max(1, max_points // 2))  # values per bucket (ceil): at most max_points // 2 buckets
    full = n // size  # whole buckets, as a (full, size) view; the remainder is one more bucket
    body = v[: full * size].reshape(full, size)
    offsets = np.arange(full) * size
    parts = [body.argmin(axis=1) + offsets, body.argmax(axis=1) + offsets]
    if full * size < n:
        tail = v[full * size :]
        parts.append(np.array([tail.argmin(), tail.argmax()]) + full * size)
    idx = distinct(np.concatenate(parts))
    return s[idx], v[idx]


def paired_sample(steps: np.ndarray, x: np.ndarray, y: np.ndarray,
                  max_points: int = MAX_POINTS // 2) -> dict[str, list[Any]]:
    """Rows where both ``x`` and ``y`` are finite, thinned evenly to ``max_points`` (scatter)."""
    ok = np.isfinite(x) & np.isfinite(y)
    idx = np.flatnonzero(ok)
    if len(idx) > max_points:
        idx = idx[np.linspace(0, len(idx) - 1, max_points).astype(np.int64)]
    return {"step": _ints(steps[idx]), "x": _round(x[idx]), "y": _round(y[idx])}


def _plotted(names: list[str]) -> list[str]:
    """The names :data:`PLOTTED` matches (as ``fnmatchcase`` would, without compiling its patterns)."""
    return sorted(k for k in names if k != "step" and any(glob_match(k, p) for p in PLOTTED))


def _section(rows: int, series: dict[str, Any], pairs: dict[str, Any],
             duration: dict[str, Any] | None, max_points: int) -> dict[str, Any]:
    return {
        "method": "min/max envelope per bucket of consecutive finite values",
        "max_points": max_points,
        "rows": rows,
        "series": series,
        "pairs": pairs,
        "duration": duration,
    }


Parts = Callable[[], Iterable[dict[str, np.ndarray]]]


class _Envelope:
    """:func:`envelope` of one column, fed a part of the table at a time (memory: the buckets).

    Pass 1 counts the finite values (:meth:`count`); pass 2 (:meth:`feed`) keeps, for each
    bucket of ``size`` consecutive finite values, its first minimum and first maximum: the
    points :func:`envelope` picks from the whole column.
    """

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self.n = 0
        self.seen = 0
        self.keep: list[tuple[np.ndarray, np.ndarray]] = []  # short series: every point

    def count(self, values: np.ndarray) -> None:
        self.n += int(np.isfinite(values).sum())

    def start(self) -> None:
        if self.n > self.max_points:
            self.size = -(-self.n // max(1, self.max_points // 2))
            k = -(-self.n // self.size)
            self.lo = np.full(k, np.inf)
            self.hi = np.full(k, -np.inf)
            self.lo_at = np.full(k, -1, dtype=np.int64)
            self.hi_at = np.full(k, -1, dtype=np.int64)
            self.lo_step = np.zeros(k, dtype=np.int64)
            self.hi_step = np.zeros(k, dtype=np.int64)
            self.lo_v = np.zeros(k, dtype=np.float64)
            self.hi_v = np.zeros(k, dtype=np.float64)

    def feed(self, steps: np.ndarray, values: np.ndarray) -> None:
        ok = np.isfinite(values)
        v, st = (values, steps) if ok.all() else (values[ok], steps[ok])
        if not len(v):
            return
        seen, self.seen = self.seen, self.seen + len(v)
        if self.n <= self.max_points:
            self.keep.append((st, v))
            return
        # the buckets this part touches, as the rows of a table padded at both ends with a value
        # that never wins (+inf for the minimum, -inf for the maximum): argmin and argmax take
        # each bucket's first extreme, as envelope() does
        first, lead = divmod(seen, self.size)
        ub = np.arange(first, (seen + len(v) - 1) // self.size + 1)
        rows = np.arange(len(ub))
        for pad, arg, best, at, step, val, better in (
                (np.inf, np.argmin, self.lo, self.lo_at, self.lo_step, self.lo_v, np.less),
                (-np.inf, np.argmax, self.hi, self.hi_at, self.hi_step, self.hi_v, np.greater)):
            table = np.full(len(ub) * self.size, pad, dtype=v.dtype)
            table[lead : lead + len(v)] = v
            table = table.reshape(len(ub), self.size)
            j = arg(table, axis=1)
            ext = table[rows, j]
            j += rows * self.size - lead  # the extreme's place in the part
            upd = better(ext, best[ub])  # strictly: an earlier part's tie stays, as argmin keeps it
            best[ub[upd]] = ext[upd]
            at[ub[upd]], step[ub[upd]], val[ub[upd]] = seen + j[upd], st[j[upd]], v[j[upd]]

    def points(self, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """The plotted steps and values (not yet rounded: :func:`_rounded_series` rounds every
        series' values in one call); None without a finite value."""
        if self.n == 0:
            return None
        if self.n <= self.max_points:
            return np.concatenate([k[0] for k in self.keep]), np.concatenate([k[1] for k in self.keep])
        at = np.concatenate([self.lo_at, self.hi_at])
        _, idx = np.unique(at, return_index=True)
        return (np.concatenate([self.lo_step, self.hi_step])[idx],
                np.concatenate([self.lo_v, self.hi_v])[idx].astype(dtype))


def _rounded_series(env: dict[str, _Envelope], dtypes: dict[str, np.dtype[Any]]) -> dict[str, Any]:
    """Each envelope's plotted series, its values rounded (:func:`_round`) in one call for all
    the series (the same floats as one call each: the rounding is per value, and float32
    widens to float64 exactly either way), not two dozen calls of numpy's fixed cost."""
    points = {n: p for n, e in env.items() if (p := e.points(dtypes[n])) is not None}
    values = _round(np.concatenate([y for _, y in points.values()])) if points else []
    series: dict[str, Any] = {}
    at = 0
    for name, (x, y) in points.items():
        n = env[name].n
        series[name] = {"x": _ints(x), "y": values[at : at + len(y)], "n": n, "downsampled": n > len(x)}
        at += len(y)
    return series


def _stream_plots(parts: Parts, names: list[str], max_points: int) -> dict[str, Any]:
    """The ``plots`` section from a table read a part at a time (``parts()`` gives the parts
    again for each of the two passes); memory: one part and the buckets."""
    plotted = _plotted(names)
    env = {n: _Envelope(max_points) for n in plotted}
    want_pairs = "response_length_mean" in names and "reward_mean" in names
    rows = paired = ts_n = 0
    ts_lo, ts_hi, st_sum, st_any = np.inf, -np.inf, np.zeros(1), False
    dtypes: dict[str, np.dtype[Any]] = {}
    for part in parts():  # pass 1: counts, the duration
        rows += len(part["step"])
        for n in plotted:
            env[n].count(part[n])
            dtypes.setdefault(n, part[n].dtype if part[n].dtype.kind == "f" else np.dtype(np.float64))
        if want_pairs:
            paired += int((np.isfinite(part["response_length_mean"]) & np.isfinite(part["reward_mean"])).sum())
        ts = part.get("timestamp")
        if ts is not None and np.isfinite(ts).any():
            t = ts[np.isfinite(ts)].astype(np.float64)
            ts_lo, ts_hi, ts_n = min(ts_lo, float(t.min())), max(ts_hi, float(t.max())), ts_n + len(t)
        st = part.get("step_time")
        if st is not None and np.isfinite(st).any():
            st_any = True
            fin = st[np.isfinite(st)].astype(np.float64)
            st_sum = np.cumsum(np.concatenate([st_sum, fin]))[-1:]  # one order, however cut
    for e in env.values():
        e.start()
    half = max_points // 2
    wanted = (np.linspace(0, paired - 1, half).astype(np.int64) if paired > half
              else np.arange(paired))
    pair_cols: dict[str, list[Any]] = {"step": [], "x": [], "y": []}
    seen_pairs = 0
    for part in parts():  # pass 2: the envelopes, the paired sample
        for n in plotted:
            env[n].feed(part["step"], part[n])
        if want_pairs and paired:
            lx, ry = part["response_length_mean"], part["reward_mean"]
            idx = np.flatnonzero(np.isfinite(lx) & np.isfinite(ry))
            pos = seen_pairs + np.arange(len(idx))
            seen_pairs += len(idx)
            pick = idx[np.isin(pos, wanted, assume_unique=True)]
            pair_cols["step"] += _ints(part["step"][pick])
            pair_cols["x"] += _round(lx[pick])
            pair_cols["y"] += _round(ry[pick])
    series = _rounded_series(env, dtypes)
    duration: dict[str, Any] | None = None
    if ts_n >= 2:
        # the store keeps timestamps in float64 (epoch seconds in float32 stand still for minutes)
        duration = {"seconds": float(f"{ts_hi - ts_lo:.6g}"), "source": "timestamp"}
    elif st_any:
        duration = {"seconds": float(f"{float(st_sum[0]):.6g}"), "source": "sum of step_time"}
    pairs = {"length_reward": pair_cols} if want_pairs else {}
    return _section(rows, series, pairs, duration, max_points)


def plots_from_frame(frame: dict[str, np.ndarray], max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``plots`` section for per-step columns ``frame`` (``step`` plus metric arrays)."""
    return _stream_plots(lambda: [frame], list(frame), max_points)


def plots_section(analysis: Analysis, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``plots`` section of the analysis JSON: the downsampled series the HTML report draws
    (:func:`store_plots` of its per-step store)."""
    return store_plots(analysis.metrics, max_points)


def store_plots(store: MetricsStore, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``plots`` section from the per-step store alone (a large scan draws it while its
    trackers finish).

    The store is read twice, a part at a time: memory does not grow with the run (a
    10,000,000-step run's columns would be 40 MB each).
    """
    names = list(store.names)
    cols = sorted(set(_plotted(names)) | {c for c in ("timestamp", "step_time",
                                                      "response_length_mean", "reward_mean")
                                          if c in names})
    return _stream_plots(lambda: store.parts(cols), ["step", *cols], max_points)

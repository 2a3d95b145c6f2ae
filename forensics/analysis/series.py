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

import fnmatch
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .result import Analysis

__all__ = ["MAX_POINTS", "PLOTTED", "envelope", "paired_sample", "plots_from_frame",
           "plots_section"]

#: Most points kept per series (the envelope keeps ``MAX_POINTS // 2`` buckets).
MAX_POINTS = 2000

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
    return [float(f"{v:.6g}") for v in values.tolist()]


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
    idx = np.unique(np.concatenate(parts))
    return s[idx], v[idx]


def paired_sample(steps: np.ndarray, x: np.ndarray, y: np.ndarray,
                  max_points: int = MAX_POINTS // 2) -> dict[str, list[Any]]:
    """Rows where both ``x`` and ``y`` are finite, thinned evenly to ``max_points`` (scatter)."""
    ok = np.isfinite(x) & np.isfinite(y)
    idx = np.flatnonzero(ok)
    if len(idx) > max_points:
        idx = idx[np.linspace(0, len(idx) - 1, max_points).astype(np.int64)]
    return {"step": [int(s) for s in steps[idx]], "x": _round(x[idx]), "y": _round(y[idx])}


def _duration(frame: dict[str, np.ndarray]) -> dict[str, Any] | None:
    ts = frame.get("timestamp")
    if ts is not None and np.isfinite(ts).sum() >= 2:
        # float32 storage loses sub-minute precision on epoch seconds; good enough for a header
        t = ts[np.isfinite(ts)].astype(np.float64)
        return {"seconds": float(f"{t.max() - t.min():.6g}"), "source": "timestamp"}
    st = frame.get("step_time")
    if st is not None and np.isfinite(st).any():
        return {"seconds": float(f"{float(np.nansum(st.astype(np.float64))):.6g}"),
                "source": "sum of step_time"}
    return None


def _plotted(names: list[str]) -> list[str]:
    return sorted(k for k in names if k != "step" and any(fnmatch.fnmatchcase(k, p) for p in PLOTTED))


def _series(steps: np.ndarray, values: np.ndarray, max_points: int) -> dict[str, Any] | None:
    finite = int(np.isfinite(values).sum())
    if finite == 0:
        return None
    x, y = envelope(steps, values, max_points)
    return {"x": [int(s) for s in x], "y": _round(y), "n": finite, "downsampled": finite > len(x)}


def _section(steps: np.ndarray, series: dict[str, Any], pairs: dict[str, Any],
             duration: dict[str, Any] | None, max_points: int) -> dict[str, Any]:
    return {
        "method": "min/max envelope per bucket of consecutive finite values",
        "max_points": max_points,
        "rows": len(steps),
        "series": series,
        "pairs": pairs,
        "duration": duration,
    }


def _pairs(frame: dict[str, np.ndarray], max_points: int) -> dict[str, Any]:
    if "response_length_mean" in frame and "reward_mean" in frame:
        return {"length_reward": paired_sample(frame["step"], frame["response_length_mean"],
                                               frame["reward_mean"], max_points // 2)}
    return {}


def plots_from_frame(frame: dict[str, np.ndarray], max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``plots`` section for per-step columns ``frame`` (``step`` plus metric arrays)."""
    steps = frame["step"]
    series = {name: s for name in _plotted(list(frame))
              if (s := _series(steps, frame[name], max_points)) is not None}
    return _section(steps, series, _pairs(frame, max_points), _duration(frame), max_points)


#: Plotted columns read back from the per-step store together: a million rows of 4 float32
#: columns are 16 MB (all ~25 at once would be ~100 MB); each read of the store opens its parts.
COLUMNS_PER_READ = 4


def plots_section(analysis: Analysis, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``plots`` section of the analysis JSON: the downsampled series the HTML report draws."""
    names = analysis.metrics.names
    # the columns used together, and the sample-derived series (small), come with the first read
    base = analysis.metrics_frame([c for c in ("timestamp", "step_time", "response_length_mean",
                                               "reward_mean") if c in names])
    steps = base["step"]
    rest = [n for n in _plotted(list(names)) if n not in base]
    frames = itertools.chain([base], (analysis.metrics.frame(rest[i : i + COLUMNS_PER_READ])
                                      for i in range(0, len(rest), COLUMNS_PER_READ)))
    series: dict[str, Any] = {}
    for frame in frames:  # one group in memory at a time
        for name in _plotted(list(frame)):
            if (s := _series(steps, frame[name], max_points)) is not None:
                series[name] = s
    return _section(steps, dict(sorted(series.items())), _pairs(base, max_points), _duration(base),
                    max_points)


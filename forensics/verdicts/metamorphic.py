"""Metamorphic checks: verdicts that must not change when a log is changed in ways that change
nothing about the training it records. No labels are needed, so every log of every corpus is a
test case (``make eval`` prints the table; ``tests/test_metamorphic.py`` holds it).

A log's **verdict** is what a user acts on: whether it is healthy (no warning or critical finding
about the training), the families of its warning and critical rules (``kl``, ``grad``,
``length`` ...) and the default gate's decision. Findings about the log itself (``stream.*``: a
replayed step) and the machine (``throughput.*``) are not part of it. Each log is read once into
its canonical step table (``forensics convert``); the verdict of that table is compared with the
verdict of each transformation of it, scanned with the same run metadata:

* ``drop_2nd``, ``drop_5th``: every 2nd (5th) row dropped, as a trainer logging half (four
  fifths) as often would write it;
* ``cut_50``, ``cut_75``: a healthy run cut at 50% (75%) of its rows, as a run still going looks
  (healthy runs only: a fault may start later);
* ``reward_x3``, ``reward_plus1``: the reward (and its components) multiplied by 3, or the reward
  shifted by +1 (a reward's scale and offset are the task's, not the training's);
* ``renamed``: every key renamed and mapped back with ``--map`` (``columns``);
* ``tie_row``: one tied-group row (gradient norm at a thousandth of its level, loss 0, reward
  spread 0, every group tied) inserted mid-run into a healthy group-method run;
* ``restart``: a healthy run logged twice, the step counter restarting between the two.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["TRANSFORMS", "Verdict", "check_log", "check_logs", "render_table", "shares", "verdict_of"]

#: Rule prefixes that judge the log or the machine, not the training.
_NOT_TRAINING = ("stream.", "throughput.")
_REWARD_SCALED = ("reward_mean", "reward_min", "reward_max", "reward_std", "reward_penalized")
_REWARD_SHIFTED = ("reward_mean", "reward_min", "reward_max", "reward_penalized")

Verdict = tuple[bool, tuple[str, ...], str]


def verdict_of(analysis: Any) -> Verdict:
    """``(healthy, warning-or-critical rule families, default gate)`` of an analysis."""
    from .gate import default_gate

    findings = [f.to_dict() for f in analysis.findings]
    families = sorted({f["rule"].split(".")[0] for f in findings
                       if f["severity"] in ("warning", "critical") and not f["rule"].startswith(_NOT_TRAINING)})
    return not families, tuple(families), default_gate(findings, analysis.coverage)


def _drop(every: int) -> Callable[[Any, dict[str, Any]], Any]:
    def t(df: Any, info: dict[str, Any]) -> Any:
        keep = [i for i in range(len(df)) if i % every != every - 1]
        return df.iloc[keep].reset_index(drop=True)
    return t


def _cut(share: float) -> Callable[[Any, dict[str, Any]], Any]:
    def t(df: Any, info: dict[str, Any]) -> Any:
        return df.iloc[: max(int(len(df) * share), 1)].reset_index(drop=True) if info["healthy"] else None
    return t


def _reward(scale: float, shift: float) -> Callable[[Any, dict[str, Any]], Any]:
    def t(df: Any, info: dict[str, Any]) -> Any:
        if "reward_mean" not in df:
            return None
        df = df.copy()
        cols = [c for c in df if c in (_REWARD_SCALED if scale != 1 else _REWARD_SHIFTED)
                or (scale != 1 and c.startswith("reward/") and not c.endswith("/std"))]
        for c in cols:
            df[c] = df[c] * scale + (shift if c in _REWARD_SHIFTED else 0.0)
        return df
    return t


def _renamed(df: Any, info: dict[str, Any]) -> Any:
    """Every canonical metric (and the step) under a name no alias knows, mapped back by the
    user's column table; other keys (a trainer's own, carried through) stay as they are."""
    from ..schema import METRICS

    names = {c: f"my {c}" for c in df if c == "step" or c in METRICS}
    info["columns"] = {new: old for old, new in names.items()}
    return df.rename(columns=names)


def _tie_row(df: Any, info: dict[str, Any]) -> Any:
    import numpy as np
    import pandas as pd

    if not info["healthy"] or info["family"] != "group" or len(df) < 20:
        return None
    k = len(df) // 2
    steps = df["step"].to_numpy()
    gap = int(np.median(np.diff(steps))) if len(steps) > 1 else 1
    row = df.iloc[[k - 1]].copy()
    row["step"] = steps[k - 1] + gap
    tied = {"grad_norm": lambda v: v * 1e-3, "loss": lambda v: 0.0 * v, "reward_std": lambda v: 0.0 * v,
            "frac_reward_zero_std": lambda v: 0.0 * v + 1.0}
    for c, f in tied.items():
        if c in row:
            row[c] = f(row[c])
    after = df.iloc[k:].copy()
    after["step"] = after["step"] + gap
    return pd.concat([df.iloc[:k], row, after], ignore_index=True)


def _restart(df: Any, info: dict[str, Any]) -> Any:
    import pandas as pd

    return pd.concat([df, df], ignore_index=True) if info["healthy"] else None


#: name -> transformation of a canonical step table (None: not applicable to this log).
TRANSFORMS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "drop_2nd": _drop(2), "drop_5th": _drop(5), "cut_50": _cut(0.5), "cut_75": _cut(0.75),
    "reward_x3": _reward(3.0, 0.0), "reward_plus1": _reward(1.0, 1.0), "renamed": _renamed,
    "tie_row": _tie_row, "restart": _restart,
}


def _frame_and_meta(path: Path) -> tuple[Any, dict[str, Any]]:
    """The log's canonical step table and the run metadata its scan inferred."""
    import pandas as pd

    from ..analysis.engine import scan_path
    from ..config import RunMeta
    from ..io.convert import convert
    from ..io.locate import locate

    analysis = scan_path(path)
    fields = set(RunMeta.__dataclass_fields__)
    meta: dict[str, Any] = {k: e["value"] for k, e in analysis.context.items()
                            if k in fields and e.get("value") is not None}
    meta["assumed"] = [k for k in meta if str(analysis.context[k].get("from", "")).startswith("assumed")]
    files = locate(path)
    if files.meta is not None:  # run.json as the scan read it (units the context does not name)
        meta.update(json.loads(files.meta.read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory(prefix="forensics-metamorphic-") as tmp:
        out = Path(tmp) / "steps.parquet"
        convert(files.steps, out)
        df = pd.read_parquet(out, dtype_backend="pyarrow")  # a NaN stays a NaN, not a missing value
    numeric = [c for c in df if c == "step" or pd.api.types.is_numeric_dtype(df[c])]
    return df[numeric], meta


def check_log(path: Path, healthy: bool | None = None,
              transforms: Iterable[str] = tuple(TRANSFORMS)) -> dict[str, Any]:
    """The verdict of ``path``'s step table and whether each transformation keeps it:
    ``{"name", "verdict", "results": {transform: True/False/None}, "changed": {transform: verdict}}``
    (None: not applicable). ``healthy`` says whether the run is labelled healthy (None: judged by
    its own verdict)."""
    from ..analysis.engine import scan_frame

    df, meta = _frame_and_meta(path)
    base = verdict_of(scan_frame(df, meta=meta))
    info = {"healthy": base[0] if healthy is None else healthy, "family": meta.get("family")}
    results: dict[str, bool | None] = {}
    changed: dict[str, Verdict] = {}
    for name in transforms:
        opts: dict[str, Any] = {}
        t_info = dict(info)
        out = TRANSFORMS[name](df, t_info)
        if out is None:
            results[name] = None
            continue
        if "columns" in t_info:
            opts["columns"] = t_info["columns"]
        v = verdict_of(scan_frame(out, meta=meta, **opts))
        results[name] = v == base
        if v != base:
            changed[name] = v
    return {"name": path.name, "verdict": base, "results": results, "changed": changed}


def check_logs(paths: Iterable[tuple[Path, bool | None]]) -> list[dict[str, Any]]:
    """:func:`check_log` of each ``(path, healthy label)``; a log that cannot be read is skipped."""
    from ..errors import ForensicsError

    out = []
    for path, healthy in paths:
        try:
            out.append(check_log(path, healthy))
        except ForensicsError:
            continue
    return out


def shares(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per transformation: the logs it applied to and the share whose verdict it kept."""
    out = {}
    for name in TRANSFORMS:
        applied = [c["results"][name] for c in checks if c["results"].get(name) is not None]
        out[name] = {"logs": len(applied), "invariant": sum(applied) / len(applied) if applied else None,
                     "changed": sorted(c["name"] for c in checks if name in c["changed"])}
    return out


def render_table(checks: list[dict[str, Any]]) -> str:
    """The share of invariant verdicts per transformation, and each log whose verdict changed."""
    lines = [f"{'transformation':<14} {'invariant':>9} {'logs':>5}"]
    for name, row in shares(checks).items():
        share = "-" if row["invariant"] is None else f"{row['invariant']:.0%}"
        lines.append(f"{name:<14} {share:>9} {row['logs']:>5}")
    changed = [(c["name"], t, c["verdict"], v) for c in checks for t, v in c["changed"].items()]
    for name, t, before, after in changed:
        lines.append(f"  changed: {name} under {t}: {_say(before)} -> {_say(after)}")
    return "\n".join(lines)


def _say(v: Verdict) -> str:
    healthy, families, gate = v
    return ("healthy" if healthy else "+".join(families)) + f", gate {gate}"

"""One spelling of a non-finite number in every output: null (an empty cell in a CSV table), with
the reason (``nan``, ``inf``, ``-inf``) beside it in a finding's evidence; never a "NaN" string."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from forensics.analysis.findings import Finding, Severity, non_finite_reason
from forensics.cli import main

#: steps whose grad_norm is logged NaN (100-102) or inf (103); the loss is inf at 150
NAN_STEPS, INF_STEP, LOSS_INF_STEP = (100, 101, 102), 103, 150


def nonfinite_log(path: Path) -> Path:
    """A per-sequence KL with a spike (no response length: its per-token level is NaN in the
    evidence), grad_norm NaN and inf, an infinite loss."""
    rng = np.random.default_rng(3)
    rows = []
    for s in range(300):
        r = {"step": s, "kl_seq": float(20 * np.exp(rng.normal(0, 0.05))), "grad_norm": 1 + 0.05 * rng.normal(),
             "loss": 1 + 0.02 * rng.normal(), "reward_mean": 0.5 + 0.01 * rng.normal()}
        r["kl_seq"] = 400.0 if 200 <= s <= 202 else r["kl_seq"]
        r["grad_norm"] = math.nan if s in NAN_STEPS else (math.inf if s == INF_STEP else r["grad_norm"])
        r["loss"] = math.inf if s == LOSS_INF_STEP else r["loss"]
        rows.append(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN / Infinity tokens
    return path


def _strict(text: str) -> object:
    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in the JSON")
    return json.loads(text, parse_constant=refuse)


def test_evidence_has_null_with_the_reason_beside_it() -> None:
    f = Finding("kl.spike", Severity.WARNING, 1, 2, 1, "m", "r", "kl_schedule",
                {"peak": math.inf, "per_token": float("nan"), "band": [0.5, -math.inf], "ok": 2.0,
                 "nested": {"x": np.float32("nan")}})
    assert f.evidence == {"peak": None, "per_token": None, "band": [0.5, None], "ok": 2.0,
                          "nested": {"x": None, "non_finite": {"x": "nan"}},
                          "non_finite": {"peak": "inf", "per_token": "nan", "band[1]": "-inf"}}
    assert Finding.from_dict(f.to_dict()).evidence == f.evidence  # a saved analysis reads back the same
    assert [non_finite_reason(x) for x in (math.nan, math.inf, -math.inf)] == [f"{x}" for x in
                                                                              (math.nan, math.inf, -math.inf)]


def test_json_csv_and_terminal_agree_on_a_log_with_nan_and_inf(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["scan", str(nonfinite_log(tmp_path / "log.jsonl")), "-o", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    texts = {name: (out / name).read_text() for name in ("analysis.json", "summary.json", "findings.csv")}
    for name, text in texts.items():
        for spelled in ('"NaN"', '"Infinity"', '"-Infinity"', '""NaN""'):
            assert spelled not in text, (name, spelled)
    analysis = _strict(texts["analysis.json"])
    _strict(texts["summary.json"])
    findings = {f["rule"]: f for f in analysis["findings"]}  # type: ignore[index]
    # the evidence: null, and why, beside it
    spike = findings["kl.spike"]["evidence"]
    assert spike["peak_per_token"] is None and spike["non_finite"] == {"peak_per_token": "nan"}
    nonfinite = findings["grad.nonfinite"]
    assert (nonfinite["first_step"], nonfinite["last_step"], nonfinite["evidence"]["rows"]) == (100, 103, 4)
    # findings.csv says the same: messages and evidence, null and reason included
    with open(out / "findings.csv", newline="") as fh:
        rows = {r["rule"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(findings)
    for rule, row in rows.items():
        assert row["message"] == findings[rule]["message"]
        assert _strict(row["evidence"]) == findings[rule]["evidence"]
    # metrics.csv: an empty cell for NaN and for inf alike, where the findings put them
    with open(out / "metrics.csv", newline="") as fh:
        table = {int(r["step"]): r for r in csv.DictReader(fh)}
    assert [s for s, r in table.items() if r["grad_norm"] == ""] == [*NAN_STEPS, INF_STEP]
    assert [s for s, r in table.items() if r["loss"] == ""] == [LOSS_INF_STEP]
    assert (findings["loss.nonfinite"]["first_step"], findings["loss.nonfinite"]["last_step"]) == (150, 150)
    # the plots leave the non-finite rows out (no point), as the table leaves them empty
    grad = analysis["plots"]["series"]["grad_norm"]  # type: ignore[index]
    assert not set(grad["x"]) & {*NAN_STEPS, INF_STEP}
    assert all(y is not None and math.isfinite(y) for y in grad["y"])
    # the terminal prints the findings' own messages
    for f in findings.values():
        assert f["message"] in res.output

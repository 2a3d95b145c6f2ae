"""Every command's exit codes and outputs, through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main

from .conftest import RLDK, healthy_rows, write_jsonl


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_scan_writes_reports_and_exits_0(tmp_path: Path) -> None:
    res = run("scan", str(RLDK), "-o", str(tmp_path))
    assert res.exit_code == 0, res.output
    for name in ("analysis.json", "summary.json", "metrics.csv", "findings.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "1000 rows read" in res.output
    assert "kl.spike" in res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows"] == 1000
    assert summary["top_findings"][0]["rule"] == "kl.spike"


def test_missing_file_exits_3(tmp_path: Path) -> None:
    res = run("scan", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path))
    assert res.exit_code == 3
    assert "no such file" in res.output
    assert "Traceback" not in res.output


def test_unknown_content_exits_3(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("hello world\n")
    res = run("scan", str(p), "-o", str(tmp_path / "o"))
    assert res.exit_code == 3
    assert "unrecognised content" in res.output


def test_strict_malformed_exits_3_with_line(tmp_path: Path) -> None:
    rows = healthy_rows(30)
    p = write_jsonl(tmp_path / "s.jsonl", rows)
    text = p.read_text().splitlines()
    text[4] = '{"step": 4, "kl": '
    p.write_text("\n".join(text) + "\n")
    res = run("scan", str(p), "--strict", "-o", str(tmp_path / "o"))
    assert res.exit_code == 3
    assert ":5:" in res.output and "invalid JSON" in res.output
    res = run("scan", str(p), "-o", str(tmp_path / "o"))
    assert res.exit_code == 0
    assert "1 skipped" in res.output and ":5: invalid JSON" in res.output


@pytest.mark.parametrize(("line", "reason"), [('{"step": 4, "kl": nan}', "invalid JSON"),
                                              ('{"step": 4, "kl": "\\ud800"}', "a lone surrogate \\ud800")])
def test_strict_reads_json_only(tmp_path: Path, line: str, reason: str) -> None:
    """A bare nan (Python's print) and a lone surrogate passed --strict; read leniently without."""
    p = write_jsonl(tmp_path / "s.jsonl", healthy_rows(30))
    text = p.read_text().splitlines()
    text[4] = line
    p.write_text("\n".join(text) + "\n")
    res = run("scan", str(p), "--strict", "-o", str(tmp_path / "o"))
    assert res.exit_code == 3 and ":5:" in res.output and reason in res.output, res.output
    assert run("scan", str(p), "-o", str(tmp_path / "o"), "-q").exit_code in (0, 1)


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run("scan").exit_code == 2
    assert run("scan", str(RLDK), "--batch-rows", "0").exit_code == 2
    assert run("scan", str(RLDK), "--format", "nonsense", "-o", str(tmp_path)).exit_code == 2
    cfg = tmp_path / "c.toml"
    cfg.write_text("[kl_schedule]\nno_such_param = 1\n")
    res = run("scan", str(RLDK), "--config", str(cfg), "-o", str(tmp_path))
    assert res.exit_code == 2
    assert "no_such_param" in res.output
    cfg.write_text("[kl_schedule\n")
    assert run("scan", str(RLDK), "--config", str(cfg), "-o", str(tmp_path)).exit_code == 2


def test_config_overrides_threshold(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[kl_schedule]\nspike_min_ratio = 5.0\n")
    res = run("scan", str(RLDK), "--config", str(cfg), "-o", str(tmp_path))
    assert res.exit_code == 0
    assert "kl.spike" not in res.output  # the 4x spike is below a 5x ratio


def test_rules_lists_every_rule_and_param() -> None:
    res = run("rules")
    assert res.exit_code == 0
    from forensics.analysis.trackers import TRACKERS, all_rules

    for _tracker, rule in all_rules():
        assert rule.id in res.output  # type: ignore[attr-defined]
    for cls in TRACKERS.values():
        assert f"== {cls.name} ==" in res.output
    data = json.loads(run("rules", "--json").output)
    assert {r["id"] for r in data["rules"]} == {r.id for _, r in all_rules()}  # type: ignore[attr-defined]
    assert data["params"]["kl_schedule"][0]["name"] == "window"


def test_scan_is_deterministic(tmp_path: Path) -> None:
    run("scan", str(RLDK), "-o", str(tmp_path / "a"))
    run("scan", str(RLDK), "-o", str(tmp_path / "b"))
    for name in ("analysis.json", "summary.json", "metrics.csv", "findings.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_version() -> None:
    res = run("--version")
    assert res.exit_code == 0 and "forensics" in res.output


def test_rules_catalogue_doc_is_current() -> None:
    from .conftest import ROOT

    doc = ROOT / "docs" / "rules.md"
    assert doc.read_text(encoding="utf-8") == run("rules", "--markdown").output, (
        "docs/rules.md is stale: regenerate with `forensics rules --format markdown > docs/rules.md`")


def test_metrics_doc_is_current() -> None:
    """docs/metrics.md: the canonical names and, per trainer, every key read as one (the alias
    table), as `rules --metrics --format markdown` writes them."""
    from forensics.schema import ALIASES

    from .conftest import ROOT

    page = run("rules", "--metrics", "--format", "markdown").output
    assert (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8") == page, (
        "docs/metrics.md is stale: regenerate with `forensics rules --metrics --format markdown > docs/metrics.md`")
    assert all(f"| `{a.source}` | `{a.canonical}` |" in page for a in ALIASES)


def test_rules_metrics_lists_canonical_names() -> None:
    res = run("rules", "--metrics")
    assert res.exit_code == 0
    assert res.output.startswith("step ") and "kl_seq" in res.output and "nats/sequence" in res.output


def test_metrics_csv_is_the_per_step_table_part_by_part(tmp_path: Path) -> None:
    """metrics.csv is written a part of the per-step store at a time: one header, every step,
    the same values as the analysis' table (NaN as an empty cell)."""
    import numpy as np
    import pandas as pd

    from forensics.analysis.engine import Scan
    from forensics.analysis.store import MetricsStore
    from forensics.io.readers import ReadReport
    from forensics.io.readers.arrow import rows_to_raw
    from forensics.report.files import write_metrics_csv

    rows = healthy_rows(500)
    for r in rows[300:]:
        r["late_metric"] = 1.5  # a column that appears after the first parts were spilled
    sc = Scan()
    sc.store = MetricsStore(spill_rows=64)
    rep = ReadReport("steps.jsonl")
    for a in range(0, 500, 70):
        sc.feed(rows_to_raw(rows[a:a + 70], np.arange(a + 1, min(a + 70, 500) + 1)), rep)
    analysis = sc.finish()
    assert len(sc.store._files) > 3
    path = tmp_path / "metrics.csv"
    write_metrics_csv(analysis, path)
    df = pd.read_csv(path)
    frame = analysis.metrics_frame()
    assert list(df.columns) == ["step"] + sorted(k for k in frame if k != "step")
    assert df["step"].tolist() == list(range(500))
    for name in df.columns:
        np.testing.assert_allclose(df[name].to_numpy(dtype=float), frame[name].astype(float), rtol=1e-6)

"""Nothing accepted silently: a column map whose key the log does not have is a warning (an error
under --strict) naming the closest keys, and never shadows the log's own key; an internal error
has its own exit code and asks for a bug report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import EXIT_INTERNAL, main

from .conftest import healthy_rows, write_jsonl
from .synth import grad_explosion


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("silent") / "steps.jsonl", grad_explosion())


def test_a_map_of_an_absent_key_never_shadows_the_logs_own_key(log: Path) -> None:
    plain = scan_path(log)
    mapped = scan_path(log, maps=["nosuchcol=grad_norm"])
    m = mapped.mappings[str(log)]
    assert m.mapping["grad_norm"] == "grad_norm" and "grad_norm" not in m.shadowed
    rules = sorted({f.rule for f in mapped.findings})
    assert rules == sorted({f.rule for f in plain.findings}) and any(r.startswith("grad") for r in rules)
    missing = mapped.coverage["columns"]["maps_not_found"]
    assert missing == [{"source": "nosuchcol", "canonical": "grad_norm", "origin": "--map", "closest": []}]


def test_a_map_of_an_absent_key_is_a_warning_in_the_summary_and_analysis_json(log: Path, tmp_path: Path) -> None:
    res = run("scan", str(log), "--map", "grad_nrom=grad_norm", "-o", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert ("warning: --map grad_nrom=grad_norm: the log has no key 'grad_nrom' (closest: 'grad_norm'"
            in res.output)
    data = json.loads((tmp_path / "analysis.json").read_text())
    assert data["coverage"]["columns"]["maps_not_found"][0]["closest"][0] == "grad_norm"


def test_a_config_columns_key_absent_is_an_error_under_strict(log: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[columns]\ngnorm = "grad_norm"\n')
    res = run("scan", str(log), "--config", str(cfg), "--strict", "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 2, res.output
    assert f"{cfg}: [columns] gnorm=grad_norm: the log has no key 'gnorm'" in res.output


def test_a_map_of_a_present_key_still_wins_over_the_logs_own(tmp_path: Path) -> None:
    rows = healthy_rows(80)
    for r in rows:
        r["gnorm"] = r["grad_norm"] * 2
    log = write_jsonl(tmp_path / "steps.jsonl", rows)
    a = scan_path(log, maps=["gnorm=grad_norm"])
    m = a.mappings[str(log)]
    assert m.mapping["gnorm"] == "grad_norm" and "grad_norm" in m.shadowed
    assert "maps_not_found" not in a.coverage["columns"]


def test_an_internal_error_exits_4_and_asks_for_a_bug_report(log: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.analysis.engine as engine

    def boom(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(engine, "scan_path", boom)
    res = run("scan", str(log), "-o", str(tmp_path), "-q")
    assert res.exit_code == EXIT_INTERNAL == 4
    assert "internal error (a bug in forensics" in res.output and "bug report with the version" in res.output
    assert "Traceback" not in res.output

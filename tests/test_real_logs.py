"""The real logs in fixtures/real-logs (copied from shared/real-logs, MIT, sources beside them)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics import scan_path
from forensics.cli import main

from .conftest import RLDK, VERL


def test_rldk_kl_spike_found_as_an_event_and_nothing_alarms() -> None:
    """The generator's five-row KL spike recovers with nothing else moving: an event (info) at
    its rows, and no alarm (LABELS.md #30-#31: healthy, gate pass)."""
    a = scan_path(RLDK)
    assert a.steps["rows"] == 1000 and a.inputs[0].rows_skipped == 0
    assert [f for f in a.findings if f.severity.value != "info"] == []
    spike = next(f for f in a.findings if f.rule == "kl.spike")
    assert (spike.first_step, spike.last_step, spike.onset_step) == (800, 804, 800)
    assert spike.evidence["consequence"].startswith("isolated")
    # the wide RLDK row maps onto canonical names
    mapping = a.mappings[str(RLDK)].mapping
    assert mapping["grad_norm_policy"] == "grad_norm"
    assert mapping["grad_norm_value"] == "grad_norm_value"


def test_verl_log_does_not_crash(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["scan", str(VERL), "-o", str(tmp_path)])
    assert res.exit_code in (0, 3), res.output
    assert "Traceback" not in res.output

"""A report is titled by the run's name (its folder or run id), never by a file name every run has."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

from .conftest import FIXTURES


def test_a_trl_report_is_titled_by_its_output_dir(tmp_path: Path) -> None:
    run = tmp_path / "my-grpo-run"
    shutil.copytree(FIXTURES / "trl" / "grpo_healthy_s0", run)
    res = CliRunner().invoke(main, ["scan", str(run), "-o", str(tmp_path / "out"), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert re.search(r"<h1>\s*my-grpo-run\s*</h1>", html) and "<title>forensics: my-grpo-run" in html
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.splitlines()[0].startswith("## forensics: my-grpo-run")
    assert "trainer_state.json" not in md.splitlines()[0]

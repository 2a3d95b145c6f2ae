"""``make advice-eval`` stays working: its loop (scan, apply the patch in TRL's keys, re-train with
the same seed, re-scan, classify) on one fault and one healthy run of the TRL corpus, at a few
steps. It trains with TRL in its own environment (.venv-trl, ``make .venv-trl/.installed``) and is
skipped with a reason without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"


@pytest.mark.skipif(not TRL_PYTHON.exists(), reason=".venv-trl is absent (make .venv-trl/.installed builds it)")
def test_the_patch_is_applied_retrained_and_judged(tmp_path: Path) -> None:
    """grpo_max_len_small (max_completion_length 4: every completion cut) and a healthy GRPO run,
    6 updates each. The fault's patch raises the cap in GRPOConfig's key (every completion cut
    from the first step: the trainer's default, bounded by the model's context, 64 in the
    config.json the run keeps); re-trained with it, the truncation is gone. The healthy run gets
    an empty patch, and trained twice with nothing applied it logs the same numbers."""
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "advice_eval.py"), "--only",
                           "grpo_max_len_small", "grpo_healthy_s0", "--steps", "6", "--check-healthy",
                           "--work", str(tmp_path / "work"), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["run"]: r for r in json.loads(out.read_text())}
    fault = rows["grpo_max_len_small"]
    assert "length.truncation" in fault["before"]["rules"]
    assert fault["patch"] == {"max_completion_length": 64}
    trained = fault["first_trial"]
    assert trained["patch"] == {"max_completion_length": 64} and "length.truncation" not in trained["rules"]
    assert fault["first_outcome"] == "fixed" and fault["outcome"] == "fixed"
    healthy = rows["grpo_healthy_s0"]
    assert healthy["patch"] == {} and healthy["repeat_identical"] is True
    # the run was trained outside the repository, with the patched config
    args = json.loads((tmp_path / "work" / "steps6" / "grpo_max_len_small" / "max_completion_length=64"
                       / "done.json").read_text())
    assert args["patch"] == {"max_completion_length": 64}

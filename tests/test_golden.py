"""Golden tests: each fixture run in fixtures/golden/ next to its expected findings.

The fixtures are seeded synthetic runs (tests/synth.py). To regenerate after an intended change:
``FORENSICS_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forensics import scan_path

from . import synth
from .conftest import FIXTURES, write_jsonl

GOLDEN = FIXTURES / "golden"
CASES = {
    "kl_spike": lambda: synth.kl_spike(),
    "grad_explosion": lambda: synth.grad_explosion(),
    "nan_grads": lambda: synth.nan_grads(),
    "adv_bias": lambda: synth.adv_bias(),
    "truncation": lambda: synth.truncation(),
}


def _summary(path: Path) -> list[dict]:
    a = scan_path(path)
    return [{k: f[k] for k in ("rule", "severity", "first_step", "last_step", "onset_step")}
            for f in a.to_dict()["findings"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    data = GOLDEN / f"{name}.jsonl"
    expected = GOLDEN / f"{name}.expected.json"
    if os.environ.get("FORENSICS_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        write_jsonl(data, CASES[name]())
        expected.write_text(json.dumps(_summary(data), indent=1) + "\n")
    assert _summary(data) == json.loads(expected.read_text())

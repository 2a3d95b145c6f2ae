"""recommendations.yaml's writer (forensics.report.yaml_text): what any value is written as, PyYAML
reads back as the same value (the writer replaced PyYAML's safe_dump, issue 25)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis.engine import scan_path
from forensics.report import write_reports
from forensics.report.yaml_text import dump

from .conftest import FIXTURES

#: Strings a YAML reader could take for something else, or that need escapes.
TRICKY = ["", "yes", "No", "ON", "off", "y", "n", "true", "False", "null", "Null", "~", "1", "-1", "1e3",
          "0x1F", "0o17", "1:20", "1_000", ".inf", "-.Inf", ".nan", "nan", "inf", "<<", "- a", "a: b", "a #b",
          "#c", "'q'", '"dq"', "back\\slash", " lead", "trail ", "tab\tin", "line\nbreak", "cr\rx", "\x00nul",
          "del\x7f", "nel\x85x", "ls\u2028x", "ps\u2029x", "bom\ufeff", "é ü 中文", "emoji 🙂", "%tag", "!tag",
          "&anchor", "*alias", "@at", "`bt", "{a: 1}", "[1, 2]", "?q", "|", ">", "a\\nb"]
FLOATS = [0.0, -0.0, 1e-06, 8e-07, 1e16, 1.5e300, 5e-324, -2.5, 0.1, 1.0, 123456789.0, math.inf, -math.inf]

keys = st.one_of(st.sampled_from(TRICKY), st.text(max_size=12),
                 st.from_regex(r"[A-Za-z_][A-Za-z0-9_./-]{0,10}", fullmatch=True))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.sampled_from(FLOATS), st.floats(allow_nan=False), st.sampled_from(TRICKY),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)),
                      max_leaves=20)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and -0.0 a float of sign -."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=6))
def test_any_json_shaped_value_reads_back_as_written(data: dict[str, Any]) -> None:
    assert _same(yaml.safe_load(dump(data)), data or {})


def test_the_kinds_that_yaml_reads_otherwise_keep_their_type() -> None:
    data = {"lr": 8e-07, "nan": math.nan, "yes": "no", "n": 1, "list": [[1, [2, {}]], []], "t": True}
    text = dump(data)
    assert "lr: 8.0e-07" in text and '"yes": "no"' in text and "nan: .nan" not in text
    back = yaml.safe_load(text)
    assert back["lr"] == 8e-07 and math.isnan(back["nan"]) and back["yes"] == "no"
    assert back["list"] == [[1, [2, {}]], []] and back["t"] is True and back["n"] == 1


def test_a_runs_recommendations_yaml_holds_its_json(tmp_path: Path) -> None:
    paths = write_reports(scan_path(FIXTURES / "runs" / "ppo_lr_high"), tmp_path)
    text = paths["recommendations_yaml"].read_text(encoding="utf-8")
    assert yaml.safe_load(text) == json.loads(paths["recommendations"].read_text())
    assert "  config:\n    lr: 0.001\n" in text  # a config patch a person reads and copies

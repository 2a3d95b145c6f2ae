"""The algorithm named in a config or run.json is one forensics knows, or a usage error."""

from __future__ import annotations

import pytest

from forensics.config import ALGORITHMS, RunMeta, algorithm_family
from forensics.errors import ConfigError


def test_known_algorithms_normalise() -> None:
    assert RunMeta.from_dict({"algorithm": "GRPO"}).algorithm == "grpo"
    assert RunMeta.from_dict({"algorithm": "reinforce++"}).algorithm == "reinforce_pp"
    assert algorithm_family("ppo") == "critic"
    assert algorithm_family("rloo") == "group"
    assert algorithm_family("DPO") == "preference"
    assert algorithm_family(None) is None
    assert set(ALGORITHMS.values()) == {"critic", "group", "preference"}


@pytest.mark.parametrize("name", ["grpoo", "", 5])
def test_unknown_algorithm_is_an_error_that_lists_the_valid_ones(name: object) -> None:
    with pytest.raises(ConfigError, match=r"valid: .*grpo.*ppo"):
        RunMeta.from_dict({"algorithm": name}, source="forensics.toml [run]")

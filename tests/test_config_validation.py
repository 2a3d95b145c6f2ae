"""One schema for every value a user gives: config TOML, run.json, --meta, CLI numbers.

Every nonsense value is a usage error (exit 2) that names the file, the key, the value and what
is allowed; every sensible value at the edge of its range is accepted and scans.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.analysis.trackers import PARAM_RELATIONS, REGEX_GROUPS, TRACKERS, build_params, param_allowed
from forensics.cli import main
from forensics.config import Allowed, Config, RunMeta, allowed_of, load_config, load_run_meta
from forensics.errors import ConfigError, InputError

from .conftest import RLDK, healthy_rows, write_jsonl


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("cfg") / "steps.jsonl", healthy_rows(150))


def scan_with(log: Path, tmp_path: Path, toml: str | bytes, *extra: str):
    cfg = tmp_path / "c.toml"
    if isinstance(toml, str):
        cfg.write_text(toml, encoding="utf-8")
    else:
        cfg.write_bytes(toml)
    return run("scan", str(log), "--config", str(cfg), "-o", str(tmp_path / "out"), "-q", *extra)


def test_every_default_is_allowed_and_every_parameter_declares_its_range() -> None:
    params = build_params({})  # the defaults pass every range and relation
    for name, cls in TRACKERS.items():
        for f in dataclasses.fields(cls.Params):
            allowed = allowed_of(f)
            allowed.check(getattr(params[name], f.name), f"[{name}] {f.name}")
            if allowed.type in (int, float):  # a number has a range, or NaN means "not set"
                assert allowed.nan or any(b is not None for b in (allowed.ge, allowed.gt, allowed.le, allowed.lt))
    for f in dataclasses.fields(RunMeta):
        allowed_of(f).check(getattr(RunMeta(), f.name), f.name)
    for tracker, a, _op, _times, b in PARAM_RELATIONS:
        fields = {f.name for f in dataclasses.fields(TRACKERS[tracker].Params)}
        assert {a, b} <= fields, (tracker, a, b)
    for tracker, name in REGEX_GROUPS:
        assert allowed_of({f.name: f for f in dataclasses.fields(TRACKERS[tracker].Params)}[name]).regex


def test_relations_live_with_the_params_they_constrain() -> None:
    """Each relation is declared on its tracker's Params class (``relations``); the registry only
    collects them (no central table to drift from the parameters)."""
    import inspect

    import forensics.analysis.trackers as trackers

    for name, cls in TRACKERS.items():
        assert [r[1:] for r in PARAM_RELATIONS if r[0] == name] == list(getattr(cls.Params, "relations", ()))
    assert not re.search(r'"(<=|<|>=)", \d+, "', inspect.getsource(trackers))
    assert TRACKERS["generation"].Params.regex_groups == ("think_pattern", "answer_pattern")  # type: ignore[attr-defined]


#: (config text, what the message must contain): the issue's examples and their relatives.
BAD_CONFIGS = [
    ("[kl_schedule]\nwindow = 0\n", "[kl_schedule] window = 0: expected an integer from 1 to"),
    ("[kl_schedule]\nwindow = -5\n", "window = -5"),
    ("[kl_schedule]\nwindow = 2.5\n", "window = 2.5: expected an integer"),
    ("[kl_schedule]\nwindow = 1e18\n", "window = 1e+18"),
    ("[kl_schedule]\nwindow = 1000000000000000000\n",
     "window = 1000000000000000000: expected an integer from 1 to 100000"),
    ("[grad_norms]\nexplode_k = 0\n", "[grad_norms] explode_k = 0"),
    ("[advantages]\npersist_k = 9\n", "persist_k = 9 and persist_m = 8: expected persist_k <= persist_m"),
    ("[kl_schedule]\nband_low = 2.0\n", "expected band_low < band_high"),
    ("[kl_schedule]\nblock = 60\n", "expected window >= 2 x block"),
    ("[grad_norms]\nmin_history = 500\n", "expected min_history <= window"),
    ('[generation]\nformat_pattern = "("\n', "format_pattern = '(': not a valid regular expression"),
    ("[generation]\nformat_pattern = 5\n", "format_pattern = 5: expected a regular expression"),
    ('[generation]\nthink_pattern = "<think>.*</think>"\n', "with at least one group"),
    ("scan = 5\n", "scan = 5: [scan] must be a table"),
    ("run = 5\n", "run = 5: [run] must be a table"),
    ("kl_schedule = 5\n", "[kl_schedule] must be a table"),
    ("[scan]\nbatch_rows = 0\n", "[scan] batch_rows = 0"),
    ('[scan]\nstrict = "yes"\n', "[scan] strict = 'yes': expected true or false"),
    ("[scan]\nbatch = 5\n", "[scan] has no option 'batch'"),
    ("[run]\nalgorithm = 5\n", "algorithm = 5 is not known; valid:"),
    ('[run]\nconfig = "x"\n', "[run] config = 'x': expected a table"),
    ("[run]\nkl_target = true\n", "[run] kl_target = true: expected a finite number > 0"),
    ("[run]\nkl_target = nan\n", "kl_target = nan"),
    ("[run]\nkl_target = inf\n", "kl_target = inf"),
    ("[run]\nmax_length = true\n", "max_length = true"),
    ('[run]\nkl_target_unit = "tokens"\n', "expected one of 'token', 'sequence'"),
    ('[run]\nkl_controller = "pid"\n', "expected one of 'adaptive', 'fixed'"),
    ("[run]\nadvantage_normalization = 1\n", "advantage_normalization = 1: expected true or false"),
    ("[grad_norms]\nspike_z = -1\n", "[grad_norms] spike_z = -1: expected a finite number > 0"),
    ("[grad_norms]\nspike_z = nan\n", "spike_z = nan"),
    ("[grad_norms]\nclip_share = 1.5\n", "clip_share = 1.5: expected a finite number in (0, 1]"),
    ("[kl_schedule]\nnegative_token = 0.5\n", "expected a finite number < 0"),
    ("[rewards]\ntarget = inf\n", "target = inf: expected a finite number (or nan: not set)"),
    ("[windows]\nwindow_rows = -10\n", "[windows] window_rows = -10"),
    ("[kl_schedul]\nwindow = 10\n", "unknown section [kl_schedul]"),
    ("[kl_schedule]\nwindoww = 10\n", "has no parameter 'windoww'"),
    ("[kl_schedule\n", "invalid TOML"),
    ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "cannot be parsed"),
    ("[run]\nkl_target = " + "9" * 5000 + "\n", "c.toml"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS, ids=[t[:40] for t, _ in BAD_CONFIGS])
def test_nonsense_config_is_a_usage_error_naming_key_value_and_range(log: Path, tmp_path: Path, text: str,
                                                                      expected: str) -> None:
    res = scan_with(log, tmp_path, text)
    assert res.exit_code == 2, res.output
    assert expected in res.output and "c.toml" in res.output, res.output
    assert "internal error" not in res.output and not (tmp_path / "out").exists()


def test_non_utf8_config_names_the_line_and_byte(log: Path, tmp_path: Path) -> None:
    res = scan_with(log, tmp_path, b'[run]\nname = "run \xff"\n')
    assert res.exit_code == 2
    assert "c.toml:2: config is not UTF-8 text (byte 18" in res.output


@pytest.mark.parametrize("text", [
    "[kl_schedule]\nprobation = 0\nwindow = 20\nblock = 10\nmin_history = 20\n",
    "[grad_norms]\nclip_share = 1.0\n[length_bias]\ntruncation_rate = 1\n",
    "[rewards]\ntarget = nan\n[kl_schedule]\nnegative_token = -0.5\n",
    "[advantages]\npersist_k = 8\npersist_m = 8\n[throughput]\nrun_window = 100\nrun_block = 50\n",
    '[generation]\nthink_pattern = "<t>(.*)</t>"\n[windows]\nwindow_rows = 100000\n',
    '[run]\nalgorithm = "Reinforce++"\nkl_coef_init = 0\nconfig = {lr = 1e-5}\n[scan]\nbatch_rows = 1\n',
    # an int beyond int64 where a float is asked for: a float (numpy cannot take it as an int)
    "[rewards]\ntarget = 1000000000000000000000000000000\n[run]\nmax_length = 1000000000000000000000\n",
])
def test_values_at_the_edge_of_their_range_are_accepted(log: Path, tmp_path: Path, text: str) -> None:
    res = scan_with(log, tmp_path, text)
    assert res.exit_code == 0, res.output


def test_allowed_ranges_are_listed_in_rules() -> None:
    assert param_allowed("kl_schedule", "window") == "an integer from 1 to 100000; >= 2 x block; >= min_history"
    assert param_allowed("kl_schedule", "block") == "an integer from 1 to 100000; window >= 2 x block"
    assert param_allowed("kl_schedule", "probation") == "an integer from 0 to 100000"
    res = run("rules")
    assert "spike_z = 6.0  - Robust z of log KL" in res.output and "(allowed: a finite number > 0)" in res.output
    data = json.loads(run("rules", "--json").output)
    assert data["params"]["grad_norms"][0]["allowed"].startswith("an integer from 1 to")
    assert {r["name"]: r["allowed"] for r in data["run"]}["kl_target"] == "a finite number > 0 (or unset)"


def test_allowed_describes_and_checks() -> None:
    assert Allowed(float, ge=0, le=1).describe() == "a finite number from 0 to 1"
    assert Allowed(float, gt=0, lt=1).describe() == "a finite number in (0, 1)"
    assert Allowed(int, ge=0).check(0, "k") == 0
    for bad in (True, 1.0, "1", None, -1):
        with pytest.raises(ConfigError):
            Allowed(int, ge=0).check(bad, "k")
    with pytest.raises(ConfigError, match="k = an integer of about 401 digits: expected"):
        Allowed(int, ge=0, le=5).check(10**400, "k")  # shown without its 401-digit repr
    assert math.isnan(Allowed(float, nan=True).check(float("nan"), "k"))


# -- run.json and --meta ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ('{"kl_target": NaN}', "run.json: kl_target = nan: expected a finite number > 0"),
    ('{"kl_target": 1e400}', "kl_target = inf"),
    ('{"kl_target": -1}', "kl_target = -1"),
    ('{"max_length": true}', "max_length = true"),
    ('{"algorithm": "grpoo"}', "algorithm = 'grpoo' is not known"),
    ('{"config": [1, 2]}', "config = [1, 2]: expected a table"),
    ('{"kl_target_unit": 5}', "kl_target_unit = 5"),
    ('{"name": 5}', "name = 5: expected a string"),
])
def test_nonsense_run_metadata_is_a_usage_error(log: Path, tmp_path: Path, text: str, expected: str) -> None:
    meta = tmp_path / "run.json"
    meta.write_text(text)
    res = run("scan", str(log), "--meta", str(meta), "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 2, res.output
    assert expected in res.output


@pytest.mark.parametrize(("content", "expected"), [
    (b"[1, 2]", "run metadata must be a JSON object, not list"),
    (b'{"kl_target": ', "run metadata is not valid JSON"),
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "run metadata cannot be parsed: nested too deep"),
    (b'{"kl_target": ' + b"9" * 5000 + b"}", "run metadata cannot be parsed: ValueError"),
    (b'{"name": "\xff"}', "run metadata is not UTF-8 text"),
])
def test_unreadable_run_metadata_is_an_input_error(log: Path, tmp_path: Path, content: bytes, expected: str) -> None:
    meta = tmp_path / "run.json"
    meta.write_bytes(content)
    res = run("scan", str(log), "--meta", str(meta), "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 3, res.output
    assert expected in res.output and str(meta) in res.output
    with pytest.raises(InputError):
        load_run_meta(meta)


def test_run_json_beside_the_log_is_checked_too(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "steps.jsonl", healthy_rows(60))
    (tmp_path / "run.json").write_text('{"kl_target": NaN}')
    res = run("scan", str(tmp_path), "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 2 and "run.json: kl_target = nan" in res.output


def test_a_config_merges_and_keeps_trainer_settings_under_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[run]\nkl_target = 6\nconfig = {lr = 1e-5}\n[scan]\nstrict = true\nbatch_rows = 100\n')
    c = load_config(cfg)
    assert (c.run.kl_target, c.run.config, c.strict, c.batch_rows) == (6, {"lr": 1e-5}, True, 100)
    assert load_config(None) == Config()



# -- command-line numbers -----------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("scan", "{log}", "--kl-target", "nan"), ("scan", "{log}", "--kl-target", "inf"),
    ("scan", "{log}", "--kl-target", "-1"), ("scan", "{log}", "--kl-target", "0"),
    ("scan", "{log}", "--kl-target", "x"), ("scan", "{log}", "--batch-rows", "0"),
    ("scan", "{log}", "--batch-rows", "1e3"), ("scan", "{log}", "--batch-rows", "9" * 5000),
    ("diff", "{log}", "{log}", "--tolerance", "nan"), ("diff", "{log}", "{log}", "--tolerance", "-0.1"),
    ("diff", "{log}", "{log}", "--tolerance", "inf"),
    ("watch", "{log}", "--once", "--interval", "nan"), ("watch", "{log}", "--once", "--interval", "1e300"),
    ("watch", "{log}", "--once", "--timeout", "nan"), ("watch", "{log}", "--once", "--timeout", "-1"),
    ("gate", "{log}", "--policy", "p.toml", "--kl-target", "nan"),
])
def test_nonsense_command_line_numbers_are_usage_errors(log: Path, args: tuple[str, ...]) -> None:
    res = run(*(a.replace("{log}", str(log)) for a in args))
    assert res.exit_code == 2, res.output
    assert "Invalid value for" in res.output and "is not" in res.output


def test_a_kl_target_on_the_command_line_is_used(log: Path, tmp_path: Path) -> None:
    res = run("scan", str(log), "--kl-target", "0.05", "-o", str(tmp_path), "-q")
    assert res.exit_code == 0
    assert json.loads((tmp_path / "analysis.json").read_text())["run"]["kl_target"] == 0.05


# -- unreadable inputs are exit 3 ---------------------------------------------------------------

UNREADABLE = Path("/proc/self/mem")  # opens, then every read fails (EIO), for root too


@pytest.mark.skipif(not UNREADABLE.exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("where", ["input", "--samples", "--meta"])
def test_an_unreadable_input_is_exit_3(log: Path, tmp_path: Path, where: str) -> None:
    args = [str(UNREADABLE)] if where == "input" else [str(log), where, str(UNREADABLE)]
    res = run("scan", *args, "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 3, res.output
    assert str(UNREADABLE) in res.output and "internal error" not in res.output


@pytest.mark.parametrize("where", ["--samples", "--meta"])
def test_a_missing_samples_or_meta_file_is_exit_3(log: Path, tmp_path: Path, where: str) -> None:
    res = run("scan", str(log), where, str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 3, res.output
    assert "nope.jsonl" in res.output


def test_a_missing_config_or_policy_is_an_absent_input_exit_3(tmp_path: Path) -> None:
    res = run("scan", str(RLDK), "--config", "/nonexistent/c.toml")
    assert res.exit_code == 3 and "config not found" in res.output
    res = run("gate", str(RLDK), "--policy", str(tmp_path))  # a folder: unreadable as a file
    assert res.exit_code == 3 and "is a folder" in res.output
    (tmp_path / "bad.toml").write_text("fail_on = [")
    assert run("gate", str(RLDK), "--policy", str(tmp_path / "bad.toml")).exit_code == 2  # invalid: usage


# -- nothing accepted silently: unknown names are usage errors with the closest known names -----

def test_a_typo_in_run_is_a_usage_error_with_did_you_mean(log: Path, tmp_path: Path) -> None:
    res = scan_with(log, tmp_path, "[run]\nkl_targt = 6.0\n")
    assert res.exit_code == 2, res.output
    assert "[run] kl_targt: not a run metadata field (did you mean 'kl_target'" in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["meta", "beside"])
def test_a_typo_in_run_json_or_meta_is_a_usage_error(tmp_path: Path, where: str) -> None:
    write_jsonl(tmp_path / "steps.jsonl", healthy_rows(60))
    meta = tmp_path / ("run.json" if where == "beside" else "m.json")
    meta.write_text(json.dumps({"algorithm": "ppo", "kl_targt": 6.0}))
    extra = ("--meta", str(meta)) if where == "meta" else ()
    res = run("scan", str(tmp_path), "-o", str(tmp_path / "out"), "-q", *extra)
    assert res.exit_code == 2, res.output
    assert f"{meta}: kl_targt: not a run metadata field (did you mean 'kl_target'" in res.output


def test_the_run_writer_keeps_a_trainers_own_settings_under_config() -> None:
    meta = RunMeta.from_dict({"algorithm": "ppo", "lr": 1e-5}, unknown="config")
    assert meta.config == {"lr": 1e-5}
    with pytest.raises(ConfigError, match="did you mean"):
        RunMeta.from_dict({"algoritm": "ppo"})


@pytest.mark.parametrize(("toml", "hint"), [
    ("[scan]\nbatch_row = 5\n", "did you mean 'batch_rows'"),
    ("[kl_schedul]\nspike_z = 8.0\n", "did you mean 'kl_schedule'"),
    ("[kl_schedule]\nspike_zz = 8.0\n", "did you mean 'spike_z'"),
    ('[run]\nalgorithm = "gpro"\n', "'grpo'?)"),
    ('[columns]\ngnorm = "grad_nrom"\n', "did you mean 'grad_norm'"),
])
def test_every_unknown_name_suggests_the_closest(log: Path, tmp_path: Path, toml: str, hint: str) -> None:
    res = scan_with(log, tmp_path, toml)
    assert res.exit_code == 2 and hint in res.output, res.output


def test_an_unknown_gate_rule_suggests_the_closest(log: Path, tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text('fail_rules = ["kl.spikes"]\n')
    res = run("gate", str(log), "--policy", str(pol), "-q")
    assert res.exit_code == 2 and "did you mean 'kl.spike'" in res.output, res.output


@pytest.mark.parametrize("option", ["--config", "--meta"])
def test_a_device_or_a_huge_file_is_refused_not_read_to_its_end(log: Path, tmp_path: Path, option: str) -> None:
    """``/dev/zero`` as a config was read without end (6 GB in seconds); a small file's size is
    bounded (a config over 8 MB is a wrong path)."""
    res = run("scan", str(log), option, "/dev/zero", "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code == 3 and "/dev/zero" in res.output and "is a device, not a file" in res.output
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(9 * 2**20)  # a sparse 9 MB file: nothing written, all of it would be read
    res = run("scan", str(log), option, str(big), "-o", str(tmp_path / "out"), "-q")
    assert res.exit_code in (2, 3) and "is over 8 MB" in res.output and "right file" in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_a_policy_or_an_analysis_that_is_a_device_is_refused() -> None:
    for args in (("gate", str(RLDK), "--policy", "/dev/zero"), ("report", "/dev/urandom")):
        res = run(*args)
        assert res.exit_code == 3 and "is a device, not a file" in res.output, (args, res.output)

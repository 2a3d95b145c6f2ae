"""Timeline: ordering by onset, documented cause-and-effect links, the first domino."""

from __future__ import annotations

from pathlib import Path

from forensics.analysis.diagnosis.timeline import CAUSAL_RULES, build_timeline
from forensics.analysis.engine import scan_path
from forensics.report import files  # noqa: F401 - registers the timeline section

from .conftest import healthy_rows, write_jsonl


def _f(rule: str, onset: int, last: int | None = None, severity: str = "warning") -> dict:
    return {"rule": rule, "severity": severity, "first_step": onset, "last_step": last or onset + 5,
            "onset_step": onset, "message": f"{rule} at {onset}"}


def cascade_rows(n: int = 600, seed: int = 11) -> list[dict]:
    """Learning rate x10 at 300, gradient explosion at 305, KL spike at 320, reward decline from 340."""
    rows = healthy_rows(n, seed)
    for i, r in enumerate(rows):
        r["learning_rate"] = 1e-6 if i < 300 else 1e-5
    for r in rows[305:309]:
        r["grad_norm"] *= 25
    for r in rows[320:326]:
        r["kl"] *= 6
    for i, r in enumerate(rows[340:]):
        r["reward_mean"] -= 0.004 * i
    return rows


def test_chain_grad_kl_reward_and_first_domino() -> None:
    findings = [_f("reward.decline", 150, 300, "critical"), _f("kl.spike", 110), _f("grad.spike", 100),
                _f("length.truncation", 20, 40)]
    tl = build_timeline(findings, step_span=1000)
    assert [e["onset_step"] for e in tl["events"]] == [20, 100, 110, 150]
    pairs = {(lk["cause_rule"], lk["effect_rule"]) for lk in tl["links"]}
    assert pairs == {("grad.spike", "kl.spike"), ("kl.spike", "reward.decline")}
    dom = tl["first_domino"]
    assert dom["rule"] == "grad.spike" and dom["onset_step"] == 100 and dom["linked"]
    assert dom["chain_rules"] == ["grad.spike", "kl.spike", "reward.decline"]
    # events point back at their findings
    assert {e["finding_index"] for e in tl["events"]} == {0, 1, 2, 3}


def test_no_link_when_effect_precedes_cause_or_lag_too_long() -> None:
    tl = build_timeline([_f("kl.spike", 90), _f("grad.spike", 100)], step_span=100)
    assert tl["links"] == []
    assert tl["first_domino"]["rule"] == "kl.spike" and not tl["first_domino"]["linked"]
    lag = next(r.max_lag for r in CAUSAL_RULES if r.matches("grad.spike", "kl.spike"))
    tl = build_timeline([_f("grad.spike", 0), _f("kl.spike", lag + 1)], step_span=100)
    assert tl["links"] == []
    tl = build_timeline([_f("grad.spike", 0), _f("kl.spike", lag)], step_span=100)
    assert len(tl["links"]) == 1 and tl["links"][0]["lag"] == lag


def test_length_growth_then_truncation_and_controller_then_runaway() -> None:
    tl = build_timeline([_f("length.truncation", 180), _f("length.growth", 100),
                         _f("kl_ctl.wrong_direction", 10, severity="critical"), _f("kl.runaway", 60)],
                        step_span=1000)
    pairs = {(lk["cause_rule"], lk["effect_rule"]) for lk in tl["links"]}
    assert ("length.growth", "length.truncation") in pairs
    assert ("kl_ctl.wrong_direction", "kl.runaway") in pairs
    assert tl["first_domino"]["rule"] == "kl_ctl.wrong_direction"


def test_info_only_runs_have_no_domino() -> None:
    assert build_timeline([_f("kl.drift", 5, severity="info")])["first_domino"] is None
    assert build_timeline([])["first_domino"] is None


def test_scan_carries_timeline_with_links(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "steps.jsonl", cascade_rows())
    d = scan_path(path).to_dict()
    tl = d["timeline"]
    rules = [e["rule"] for e in tl["events"]]
    assert "hyperparams.lr_change" in rules
    onsets = [e["onset_step"] for e in tl["events"]]
    assert onsets == sorted(onsets)
    pairs = {(lk["cause_rule"], lk["effect_rule"]) for lk in tl["links"]}
    grad = next(r for r in rules if r.startswith("grad."))
    assert ("hyperparams.lr_change", grad) in pairs
    assert (grad, "kl.spike") in pairs
    dom = tl["first_domino"]
    # x10 is the tracker's critical; a cause with no damage of its own is a warning
    assert dom["rule"] == "hyperparams.lr_change" and dom["severity"] == "warning"
    assert d["findings"][dom["finding_index"]]["evidence"]["tracker_severity"] == "critical"
    assert dom["message"] == "learning rate x10 at step 300: 1e-06 -> 1e-05"
    assert d["findings"][dom["finding_index"]]["rule"] == "hyperparams.lr_change"
    assert tl["first_domino"]["chain_rules"][:3] == ["hyperparams.lr_change", grad, "kl.spike"]
    if "reward.decline" in rules:  # when the rewards tracker is registered
        assert ("kl.spike", "reward.decline") in pairs
        assert tl["first_domino"]["chain_rules"] == ["hyperparams.lr_change", grad, "kl.spike", "reward.decline"]
    # info findings are never effects
    info = {e["id"] for e in tl["events"] if e["severity"] == "info"}
    assert not any(lk["effect"] in info for lk in tl["links"])


def test_repeated_causes_link_once_to_the_nearest() -> None:
    findings = [_f("grad.spike", s) for s in (100, 120, 140)] + [_f("kl.spike", 150)]
    tl = build_timeline(findings, step_span=1000)
    assert len(tl["links"]) == 1 and tl["links"][0]["lag"] == 10


def test_a_configuration_change_is_a_cause() -> None:
    """A change of the KL coefficient, clip range or batch size links to what it explains."""
    tl = build_timeline([_f("hyperparams.kl_coef_change", 100), _f("kl.runaway", 180),
                         _f("hyperparams.clip_change", 400), _f("grad.spike", 420)], step_span=1000)
    pairs = {(lk["cause_rule"], lk["effect_rule"]) for lk in tl["links"]}
    assert pairs == {("hyperparams.kl_coef_change", "kl.runaway"), ("hyperparams.clip_change", "grad.spike")}
    assert tl["first_domino"]["rule"] == "hyperparams.kl_coef_change"


def test_timeline_work_is_bounded_by_the_reach_of_its_rules() -> None:
    """Effects only look back as far as the longest lag: many findings spread over a long run
    do not make every pair of events a candidate."""
    findings = [_f("grad.spike", 1000 * i) for i in range(200)] + [_f("kl.spike", 1000 * i + 10)
                                                                   for i in range(200)]
    tl = build_timeline(findings, step_span=200_000)
    assert len(tl["links"]) == 200 and all(lk["lag"] == 10 for lk in tl["links"])


def test_in_a_damaged_run_the_first_domino_explains_the_damage() -> None:
    """An early warning that leads to none of the damage (noise in a long run: 'advantages no
    longer whitened' at step 35,541 before a gradient explosion at 600,000) is not the first
    domino; the cause of the critical finding is, or the critical finding itself."""
    noise = _f("adv.not_normalized", 35_541)
    explode = _f("grad.explode", 600_000, severity="critical")
    tl = build_timeline([noise, explode], step_span=1_000_000)
    assert tl["first_domino"]["rule"] == "grad.explode"
    # a cause linked to the damage still comes first
    tl = build_timeline([noise, _f("hyperparams.lr_change", 599_990), explode], step_span=1_000_000)
    assert tl["first_domino"]["rule"] == "hyperparams.lr_change"
    # no damage: the earliest warning, as before
    assert build_timeline([noise, _f("grad.spike", 600_000)], step_span=1_000_000)["first_domino"]["rule"] \
        == "adv.not_normalized"

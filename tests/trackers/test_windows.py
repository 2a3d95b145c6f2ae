"""windows: the per-epoch (or per-block) health check. It fires no rule of its own (its issues
are in the windows section), so its golden output is the section's statuses."""

from __future__ import annotations

from .common import TrackerSuite, analyse, health_run


class TestWindows(TrackerSuite):
    NAME = "windows"
    stream = staticmethod(health_run)
    GOLDEN = ()
    FIRES = ()

    def test_golden_window_statuses(self) -> None:
        result = next(r for r in analyse(self.NAME, health_run()).results if r.name == self.NAME)
        table = result.sections["windows"]
        assert len(table) == 35 and result.summary["mode"] == "rows"
        assert [(w["window"], w["first_step"], w["last_step"], w["status"]) for w in table
                if w["status"] != "ok"] == NOT_OK


#: the windows judged other than ok: the decline from 450. The loss spike at 150 is no window alert:
#: the run's algorithm is unknown, so the losses tracker judges its total loss for non-finite values
#: only, and a window follows the trackers' priors (forensics.analysis.context.loss_is_progress)
NOT_OK = [(24, 480, 499, "watch"), (25, 500, 519, "watch")]


def test_a_window_alerts_on_the_loss_only_where_the_trackers_judge_it() -> None:
    """The same spike in a DPO run's loss (a progress signal) is a window alert."""
    from forensics.config import RunMeta

    from .common import Stream

    s = health_run()
    result = next(r for r in analyse("windows", Stream(s.rows, s.samples, RunMeta(algorithm="dpo"))).results
                  if r.name == "windows")
    assert (7, 140, 159, "alert") in [(w["window"], w["first_step"], w["last_step"], w["status"])
                                      for w in result.sections["windows"]]

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


#: the windows judged other than ok: the loss spike at 150, the decline from 450
NOT_OK = [(7, 140, 159, "alert"), (24, 480, 499, "watch"), (25, 500, 519, "watch")]

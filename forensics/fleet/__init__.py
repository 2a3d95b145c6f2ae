"""Many runs at once (``forensics fleet``): find the runs under some paths, scan each on a local
process pool or on Ray, write each run's reports and one table of them all. The runs' pages share
one copy of plotly.js, written once into the fleet's folder (``plotly_js="shared"``).

>>> from forensics.fleet import find_runs
>>> [r.name for r in find_runs(["fixtures/runs"])][:2]
['grpo_biased_baseline', 'grpo_healthy_s0']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import InputError, UsageError
from ..io.output import Outputs
from ..records import record
from ..report.html import PLOTLY_FILE, write_plotly_asset
from ..verdicts.gate import Policy
from .discover import Run, find_runs, is_run_folder
from .engines import ENGINES, OnResult, Workers, run_local, run_ray
from .scan import PLOTLY_JS, REPORTS, RunTask, row_from_analysis, scan_run
from .table import FLEET_CSV, FLEET_HTML, FLEET_JSON, fleet_dict, sort_rows, write_fleet

__all__ = ["ENGINES", "PLOTLY_JS", "REPORTS", "FleetResult", "Run", "RunTask", "find_runs", "fleet_dict",
           "row_from_analysis", "run_fleet", "scan_run", "sort_rows", "write_fleet"]


@record
class FleetResult:
    """The rows (in discovery order), the files written, the fleet's gate verdict, and the
    worker processes that scanned the runs (process id: peak resident memory in bytes)."""

    rows: list[dict[str, Any]]
    paths: dict[str, Path]
    policy: str | None = None
    workers: Workers = field(default_factory=dict)

    @property
    def gate_failed(self) -> bool:
        """Under a policy: whether any run failed the gate or could not be read."""
        return self.policy is not None and any(r.get("gate") in ("failed", "error") for r in self.rows)

    @property
    def unreadable(self) -> int:
        return sum(r.get("error") is not None for r in self.rows)


def _check_output(out: Path, paths: Iterable[Path | str], runs: list[Run]) -> None:
    """Refuse an output folder that is a path given, or a run's file or folder (or inside one):
    the fleet would write its reports among the inputs."""
    where = out.resolve()
    for p in [*paths, *(r.path for r in runs)]:
        given = Path(p).resolve()
        if where == given or (where.is_relative_to(given) and not Path(p).is_dir()) or \
                (Path(p).is_dir() and is_run_folder(Path(p)) and where.is_relative_to(given)):
            raise UsageError(f"refusing to write the fleet into {out}: it is (or is inside) the input {p}; "
                             "choose another output folder")


def _check_choices(engine: str, reports: str, plotly_js: str) -> None:
    for what, value, known in (("engine", engine, ENGINES), ("reports", reports, tuple(REPORTS)),
                               ("plotly_js", plotly_js, PLOTLY_JS)):
        if value not in known:
            raise UsageError(f"unknown {what} {value!r}; known: {', '.join(known)}")


def _prepare(out: Path, paths: list[Path | str], runs: list[Run]) -> Outputs:
    """Check the output folder against the inputs and the runs' names, and make it (before any
    scan); the fleet's writer."""
    _check_output(out, paths, runs)
    outputs = Outputs([r.path for r in runs if Path(r.path).is_file()], reports=True)  # runs' reports
    for name in (FLEET_CSV, FLEET_JSON, FLEET_HTML):
        outputs.check(out / name)
    clash = sorted({r.name.split("/")[0] for r in runs} & {FLEET_CSV, FLEET_JSON, FLEET_HTML, PLOTLY_FILE})
    if clash:
        raise UsageError(f"a run is named {clash[0]}, as a file of the fleet written into {out} is: rename the run "
                         "or give the runs' parent folder a different layout (nothing was scanned)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    return outputs


def run_fleet(paths: Iterable[Path | str], out: Path | str, *, engine: str = "local",
              address: str | None = None, workers: int | None = None, config: Config | None = None,
              policy: Policy | None = None, policy_name: str | None = None, metrics: str = "auto",
              reports: str = "html", plotly_js: str = "shared", fmt: str | None = None,
              runs: list[Run] | None = None, on_result: OnResult | None = None) -> FleetResult:
    """Find the runs under ``paths`` (or take ``runs``), scan each on ``engine``, write
    ``OUT/<run>/``, ``OUT/fleet.csv``, ``OUT/fleet.json`` and ``OUT/fleet.html``.

    ``reports`` chooses each run's files (:data:`~forensics.fleet.scan.REPORTS`: ``none``, the
    data files only, the table linking analysis.json; ``html`` also report.html; ``all`` also
    report.md); ``plotly_js`` how the pages carry plotly.js (``shared``: one copy,
    ``OUT/plotly-basic.min.js``, written once). ``fmt`` reads every run as that input format (default:
    detected). ``on_result(row)`` is called as each run finishes (progress). A run that cannot be
    read is a row with its error; the fleet itself fails only on a usage error (unknown engine,
    Ray missing) or when there is no run at all.
    """
    out, paths = Path(out), list(paths)
    _check_choices(engine, reports, plotly_js)
    runs = find_runs(paths, exclude=[out], fmt=fmt) if runs is None else runs
    if not runs:
        raise InputError("no runs found (run folders with steps.* or trainer_state.json, or log "
                         "files of a known format)", path=", ".join(str(p) for p in paths))
    outputs = _prepare(out, paths, runs)
    if REPORTS[reports] and plotly_js == "shared":
        try:
            write_plotly_asset(out, outputs)  # once, before any page refers to it
        except OSError as exc:
            raise UsageError(f"cannot write {out / PLOTLY_FILE}: {exc.strerror or exc}") from None
    tasks = [RunTask(r, str(out), config or Config(), policy, metrics, reports, plotly_js, fmt) for r in runs]
    if engine == "ray":
        rows, seen = run_ray(tasks, address, workers, on_result)
    else:
        rows, seen = run_local(tasks, workers, on_result)
    try:
        written = write_fleet(rows, out, policy_name if policy is not None else None, outputs)
    except OSError as exc:
        raise UsageError(f"cannot write the fleet table to {out}: {exc.strerror or exc}") from None
    return FleetResult(rows, written, policy_name if policy is not None else None, seen)

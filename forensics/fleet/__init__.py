"""Many runs at once (``forensics fleet``): find the runs under some paths, scan each on a local
process pool or on Ray, write each run's reports and one table of them all.

>>> from forensics.fleet import find_runs
>>> [r.name for r in find_runs(["fixtures/runs"])][:2]
['grpo_biased_baseline', 'grpo_healthy_s0']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import InputError, UsageError
from ..io.output import Outputs
from ..verdicts.gate import Policy
from .discover import Run, find_runs, is_run_folder
from .engines import ENGINES, OnResult, run_local, run_ray
from .scan import RunTask, row_from_analysis, scan_run
from .table import FLEET_CSV, FLEET_HTML, FLEET_JSON, fleet_dict, sort_rows, write_fleet

__all__ = ["ENGINES", "FleetResult", "Run", "RunTask", "find_runs", "fleet_dict", "row_from_analysis",
           "run_fleet", "scan_run", "sort_rows", "write_fleet"]


@dataclass
class FleetResult:
    """The rows (in discovery order), the files written, and the fleet's gate verdict."""

    rows: list[dict[str, Any]]
    paths: dict[str, Path]
    policy: str | None = None

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


def run_fleet(paths: Iterable[Path | str], out: Path | str, *, engine: str = "local",
              address: str | None = None, workers: int | None = None, config: Config | None = None,
              policy: Policy | None = None, policy_name: str | None = None, metrics: str = "auto",
              html: bool = True, runs: list[Run] | None = None,
              on_result: OnResult | None = None) -> FleetResult:
    """Find the runs under ``paths`` (or take ``runs``), scan each on ``engine``, write
    ``OUT/<run>/``, ``OUT/fleet.csv``, ``OUT/fleet.json`` and ``OUT/fleet.html``.

    ``html=False`` leaves each run's report.html and report.md out (the table links its
    analysis.json). ``on_result(row)`` is called as each run finishes (progress). A run that cannot be read is a
    row with its error; the fleet itself fails only on a usage error (unknown engine, Ray
    missing) or when there is no run at all.
    """
    out, paths = Path(out), list(paths)
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    runs = find_runs(paths, exclude=[out]) if runs is None else runs
    if not runs:
        raise InputError("no runs found (run folders with steps.* or trainer_state.json, or log "
                         "files of a known format)", path=", ".join(str(p) for p in paths))
    _check_output(out, paths, runs)
    outputs = Outputs([r.path for r in runs if Path(r.path).is_file()])
    for name in (FLEET_CSV, FLEET_JSON, FLEET_HTML):
        outputs.check(out / name)  # before any scan
    clash = sorted({r.name.split("/")[0] for r in runs} & {FLEET_CSV, FLEET_JSON, FLEET_HTML})
    if clash:
        raise UsageError(f"a run is named {clash[0]}, as the fleet table written into {out} is: rename the run or "
                         "give the runs' parent folder a different layout (nothing was scanned)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    tasks = [RunTask(r, str(out), config or Config(), policy, metrics, html) for r in runs]
    if engine == "ray":
        rows = run_ray(tasks, address, workers, on_result)
    else:
        rows = run_local(tasks, workers, on_result)
    try:
        written = write_fleet(rows, out, policy_name if policy is not None else None, outputs)
    except OSError as exc:
        raise UsageError(f"cannot write the fleet table to {out}: {exc.strerror or exc}") from None
    return FleetResult(rows, written, policy_name if policy is not None else None)

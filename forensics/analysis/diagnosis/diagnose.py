"""The diagnosis of a scan, computed once, in ``Scan.finish``, and stored on the
:class:`~forensics.analysis.result.Analysis` (``Analysis.diagnosis``).

Its sections, in the order of the analysis JSON: the trackers' own sections (``windows``,
``generation`` ...), the ``timeline`` and its first domino, the ``recommendations`` (and the
``windows`` annotated with the findings), the ``plots`` series and the ``cost``. ``to_dict``
only serialises them, and every renderer (the terminal, the files, the pages) reads these
sections instead of computing its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .cost import cost_section
from .recommendations import advice_sections
from .series import plots_section
from .timeline import timeline_section

if TYPE_CHECKING:
    from ..result import Analysis

__all__ = ["diagnose"]


def diagnose(analysis: Analysis, plots: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every derived section of ``analysis``, from its findings, results and per-step store;
    ``plots`` gives the plots section when it was drawn already (from the store alone, beside the
    trackers' finish)."""
    out: dict[str, Any] = {}
    for r in analysis.results:
        out.update(r.sections)
    out["timeline"] = timeline_section(analysis)
    out.update(advice_sections(analysis, out["timeline"]))  # windows annotated, recommendations
    out["plots"] = plots() if plots is not None else plots_section(analysis)
    cost = cost_section(analysis)
    if cost is not None:
        out["cost"] = cost
    return out

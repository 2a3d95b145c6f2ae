"""Reports: the analysis JSON, a short summary JSON, per-step and findings CSVs, terminal text."""

from __future__ import annotations

from .files import write_reports
from .terminal import render_summary

__all__ = ["render_summary", "write_reports"]

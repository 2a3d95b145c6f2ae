"""Canonical batches to findings, in floors that import only downward: ``stats`` (statistics),
``trackers`` (one per concept, and the window check), ``diagnosis`` (what is computed from every
tracker's result), then the scan loop (``engine``). The result is an
:class:`~forensics.analysis.result.Analysis`; docs/architecture.md describes the floors."""

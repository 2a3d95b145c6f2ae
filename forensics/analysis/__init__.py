"""Canonical batches to findings: the scan engine, the trackers, health scores, the window check
and the timeline. The result is an :class:`~forensics.analysis.result.Analysis`."""

"""The statistics floor: pure, streaming, batch-invariant statistics over arrays (trailing windows,
mergeable moments, run-long order statistics, per-step segments of the sample stream, episodes of
an alarm condition). It knows nothing of trackers, findings or the diagnosis above it."""

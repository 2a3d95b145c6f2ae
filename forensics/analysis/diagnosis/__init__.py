"""The diagnosis floor: what is computed from every tracker's result once the trackers are done
(severity from consequence, health scores, the timeline, recommendations, plot series, cost),
once, in ``Scan.finish`` (:func:`forensics.analysis.diagnosis.diagnose.diagnose`)."""

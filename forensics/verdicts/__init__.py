"""Judging saved analyses: the CI gate, the diff of two runs, and detection-quality evaluation."""

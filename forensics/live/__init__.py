"""Live runs: ``forensics watch`` (a growing log) and the callback for transformers/TRL trainers."""

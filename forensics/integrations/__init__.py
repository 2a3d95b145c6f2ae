"""Compatibility re-exports: the trainer integrations live in :mod:`forensics.live`."""

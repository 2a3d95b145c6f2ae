"""Compatibility re-export: the writer lives in :mod:`forensics.trainer.writer`."""

from .trainer.writer import RunWriter, to_host

__all__ = ["RunWriter", "to_host"]

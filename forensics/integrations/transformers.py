"""Compatibility re-export: the transformers/TRL callback lives in :mod:`forensics.live.transformers`."""

from ..live.transformers import ForensicsCallback, JsonlWriter

__all__ = ["ForensicsCallback", "JsonlWriter"]

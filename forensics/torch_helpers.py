"""Compatibility re-export: the torch helpers live in :mod:`forensics.trainer.torch_helpers`."""

from .trainer.torch_helpers import (
    PhaseTimer,
    advantage_stats,
    grad_norms,
    memory_stats,
    mfu,
    response_rows,
    throughput,
)

__all__ = ["PhaseTimer", "advantage_stats", "grad_norms", "memory_stats", "mfu", "response_rows", "throughput"]

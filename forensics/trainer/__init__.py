"""The trainer side: what runs inside a training job. Importable without the analysis.

* :mod:`forensics.trainer.writer` - :class:`RunWriter`, the streams a scan reads (no torch needed);
* :mod:`forensics.trainer.torch_helpers` - metrics computed on the device (needs torch);
* :mod:`forensics.trainer.reference` - the reference PPO/GRPO trainer that records the fixtures.
"""

from __future__ import annotations

from .writer import RunWriter

__all__ = ["RunWriter"]

"""``sign``: one bit a value plus one scale a block, the mean |x| of the block.

As in EF-signSGD and 1-bit Adam: decode gives ``+scale`` where x >= 0 and ``-scale``
where x < 0, so it is biased and meant to run under ``ErrorFeedback``. NaN and Inf: a
block holding any makes its scale NaN or Inf, and the whole block decodes non-finite.
"""
from __future__ import annotations

import numpy as np

from .base import eps_of
from .kernels import rules
from .quantize import BlockQuantizer


class Sign(BlockQuantizer):
    """1-bit sign with a mean-|x| scale per block, 8 signs a byte."""

    codec_id = "sign"
    wire_tag = 15
    bits = 1
    norm = rules.MEANABS

    @property
    def levels(self) -> int:
        """Magnitude of the one code (the scale itself)."""
        return 1

    def error_bound(self, x) -> np.ndarray:
        """|x| + the block's scale: the value is replaced by +-scale."""
        x = np.asarray(x)
        step = self._steps(x)
        bound = (np.abs(x) + step) * (1 + 2 * eps_of(x.dtype))
        return np.where(np.isfinite(bound), bound, np.inf)

"""``sign``: one bit a value plus one scale a block, the mean |x| of the block.

As in EF-signSGD and 1-bit Adam: decode gives ``+scale`` where x >= 0 and ``-scale``
where x < 0, so it is biased and meant to run under ``ErrorFeedback``.

NaN and Inf stay local to their elements. A block holding any sends, instead of signs,
which of its elements are not finite, and as its scale the block's non-finite value:
an Inf if every non-finite element of the block is that same Inf, else NaN. Those
elements decode to that value (so +-Inf to themselves, unless a block mixes them), and
the finite elements of such a block decode to 0 (an error of |x|, inside the bound).
The other blocks are unaffected. A scale beyond float32's range (float64 input) is
sent as float32's largest value.
"""
from __future__ import annotations

import numpy as np

from .base import eps_of
from .kernels import rules
from .quantize import BlockQuantizer


class Sign(BlockQuantizer):
    """1-bit sign with a mean-|x| scale per block, 8 signs a byte."""

    codec_id = "sign"
    bits = 1
    norm = rules.MEANABS

    @property
    def levels(self) -> int:
        """Magnitude of the one code (the scale itself)."""
        return 1

    def error_bound(self, x) -> np.ndarray:
        """|x| + the block's scale: the value is replaced by +-scale (by 0 in a block
        holding NaN or Inf, where the scale stands for the non-finite value)."""
        x = np.asarray(x)
        pad = (-x.size) % self.block
        a = np.abs(np.concatenate([x.astype(np.float64), np.zeros(pad)])).reshape(-1, self.block)
        counts = np.minimum(self.block, x.size - self.block * np.arange(a.shape[0]))
        with np.errstate(invalid="ignore", over="ignore"):
            norms = a.sum(axis=1) / counts
        scale = np.minimum(np.where(np.isfinite(norms), norms, 0.0), np.finfo(np.float32).max)
        step = np.repeat(scale.astype(np.float32).astype(np.float64), self.block)[:x.size]
        bound = (np.abs(x) + step) * (1 + 2 * eps_of(x.dtype))
        return np.where(np.isfinite(x), bound, np.inf)

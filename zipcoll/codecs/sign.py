"""``sign``: one bit a value plus one scale a block, the mean |x| of the block.

As in EF-signSGD and 1-bit Adam: decode gives ``+scale`` where x >= 0 and ``-scale``
where x < 0, so it is biased and meant to run under ``ErrorFeedback``.

NaN and Inf stay local to their elements. A block holding any sends, instead of signs,
which of its elements are not finite, and as its scale the block's non-finite value:
an Inf if every non-finite element of the block is that same Inf, else NaN. Those
elements decode to that value (so +-Inf to themselves, unless a block mixes them), and
the finite elements of such a block decode to 0 (an error of |x|, inside the bound).
The other blocks are unaffected.

Under ``ErrorFeedback`` the residual is halved each step (``feedback_decay``). One scale
a block under-sends the block's large elements, so their residual grows until the scale
does and they reach the model many steps late: with momentum SGD at the learning rates
plain training uses, that lag diverged (a small CNN on digits at lr 0.1: 72% test
accuracy with the whole residual kept, 97.5% with sign alone and with half of it kept). float64 input is coded as its float32 cast: an element
beyond float32's range is the Inf of its sign there; a mean |x| beyond it (float64
elements just below that) is sent as float32's largest value.
"""
from __future__ import annotations

import numpy as np

from .base import eps_of, finite_as_float32, half_subnormal
from .kernels import rules
from .quantize import BlockQuantizer


class Sign(BlockQuantizer):
    """1-bit sign with a mean-|x| scale per block, 8 signs a byte."""

    codec_id = "sign"
    bits = 1
    norm = rules.MEANABS
    feedback_decay = 0.5

    @property
    def levels(self) -> int:
        """Magnitude of the one code (the scale itself)."""
        return 1

    def error_bound(self, x) -> np.ndarray:
        """|x| + the block's scale: the value is replaced by +-scale (by 0 in a block
        holding NaN or Inf, in float32, where the scale stands for the non-finite value),
        plus the rounding of decoding into float16."""
        x = np.asarray(x)
        a = self._per_block(np.abs(x.astype(np.float64)), 0.0)
        counts = np.minimum(self.block, x.size - self.block * np.arange(a.shape[0]))
        finite = finite_as_float32(a).all(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            norms = np.where(finite, a.sum(axis=1), 0.0) / counts
        scale = np.minimum(norms, np.finfo(np.float32).max)
        step = np.repeat(scale.astype(np.float32).astype(np.float64), self.block)[:x.size]
        bound = (np.abs(x) + step) * (1 + 2 * eps_of(x.dtype)) + half_subnormal(x.dtype)
        return np.where(finite_as_float32(x), bound, np.inf)

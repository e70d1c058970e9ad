"""Blockwise quantizers: ``int8``, ``int4``, ``int2`` (absmax), ``qsgd`` (L2), ``terngrad``.

Each block of ``block`` elements gets one float32 step ``s = norm / levels`` and every
element the code ``clip(floor(x / s + u), -levels, levels)``: ``u = 1/2`` rounds to
nearest (error <= s/2), ``u`` uniform in [0, 1) rounds stochastically (unbiased, error
< s). Payload: header (p0 = block, p1 = levels), float32 steps, packed codes.

NaN and Inf: the step comes from the finite elements only; a NaN or +-Inf element gets
the spare code ``-2**(bits-1)`` and decodes to NaN (Inf becomes NaN: it stays non-finite
but loses its sign). Scales are float32: finite inputs beyond float32's range (float64
only) overflow the step to Inf and decode to NaN.
"""
from __future__ import annotations

import numpy as np

from .base import HEADER_BYTES, Codec, Header, align8, eps_of, kernel_input
from .kernels import rules

_BITS_VIEW = {4: np.uint32, 8: np.uint64}


class BlockQuantizer(Codec):
    """Shared layout and kernels of the block codecs; subclasses fix bits, levels and norm."""

    bits: int = 8
    norm = rules.ABSMAX

    def __init__(self, block: int = 256):
        if not isinstance(block, int) or block <= 0 or block % 8:
            raise ValueError(f"{self.codec_id}: block must be a positive multiple of 8, got {block!r}")
        self.block = block

    @property
    def levels(self) -> int:
        """Largest code magnitude."""
        return (1 << (self.bits - 1)) - 1

    def _layout(self, n: int) -> tuple[int, int, int]:
        """Blocks, offset of the codes, payload length for ``n`` elements."""
        nblocks = -(-n // self.block)
        codes_at = HEADER_BYTES + align8(4 * nblocks)
        return nblocks, codes_at, codes_at + -(-n * self.bits // 8)

    def wire_bytes(self, n: int, dtype="float32") -> int:
        """Payload bytes for ``n`` elements (any float dtype)."""
        return self._layout(n)[2]

    def _payload_bytes(self, h: Header) -> int:
        if (h.p0, h.p1) != (self.block, self.levels):
            raise ValueError(f"payload has block={h.p0}, levels={h.p1}; codec {self!r} has "
                             f"block={self.block}, levels={self.levels}")
        return self._layout(h.n)[2]

    def _sections(self, payload, n: int):
        """Float32 steps and packed codes of a payload, as views."""
        nblocks, codes_at, end = self._layout(n)
        return payload[HEADER_BYTES:HEADER_BYTES + 4 * nblocks].view(np.float32), payload[codes_at:end]

    def _encode(self, bk, x, out, seed):
        p = self._new_payload(bk, x, self.wire_bytes(x.size), out, self.block, self.levels)
        scales, codes = self._sections(p, x.size)
        p[HEADER_BYTES + scales.nbytes:p.size - codes.size] = 0  # alignment padding: defined bytes
        x = kernel_input(bk, x)
        xb = x.view(_BITS_VIEW[x.itemsize])
        bk.kernels.block_encode(x, xb, codes, scales, self.block, self.bits, self.levels,
                                self.norm, self.stochastic, seed)
        return p

    def _decode(self, bk, h, payload, out, accumulate):
        scales, codes = self._sections(payload, h.n)
        bk.kernels.block_decode(codes, scales, out, self.block, self.bits, accumulate)

    def _block_norms(self, x: np.ndarray) -> np.ndarray:
        """Norm of each block's finite elements (MEANABS: of all elements), per element."""
        pad = (-x.size) % self.block
        a = np.abs(np.concatenate([x.astype(np.float64), np.zeros(pad)])).reshape(-1, self.block)
        finite = np.where(np.isfinite(a), a, 0.0)
        if self.norm == rules.ABSMAX:
            norms = finite.max(axis=1, initial=0.0)
        elif self.norm == rules.L2:
            norms = np.sqrt((finite ** 2).sum(axis=1))
        else:
            counts = np.minimum(self.block, x.size - self.block * np.arange(a.shape[0]))
            norms = a.sum(axis=1) / counts
        return np.repeat(norms, self.block)[:x.size]

    def _steps(self, x: np.ndarray) -> np.ndarray:
        """The float32 step of each element's block, as float64."""
        return (self._block_norms(x) / self.levels).astype(np.float32).astype(np.float64)

    def error_bound(self, x) -> np.ndarray:
        """Half a step (one step if stochastic) of each element's block, plus rounding slack."""
        x = np.asarray(x)
        step = self._steps(x)
        slack = 2 * eps_of(x.dtype) * (step * self.levels + np.abs(x)) + 1e-38
        bound = (1.0 if self.stochastic else 0.5) * step + slack
        return np.where(np.isfinite(x), bound, np.inf)


class _Seeded:
    """Constructor part of the stochastic codecs: ``seed`` (in the config) or a Generator."""

    def _init_seed(self, seed: int | None, rng: np.random.Generator | None) -> None:
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"{self.codec_id}: seed must be an int or None, got {seed!r}")
        self.seed = seed
        self._rng = rng if rng is not None else np.random.default_rng(seed)


class _IntQuantizer(_Seeded, BlockQuantizer):
    """Absmax block quantizer, deterministic (nearest) or ``stochastic`` (unbiased)."""

    def __init__(self, block: int = 256, stochastic: bool = False, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        super().__init__(block)
        self.stochastic = bool(stochastic)
        self._init_seed(seed, rng)

    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        """Stochastic rounding is unbiased; rounding to nearest is not."""
        return self.stochastic


class Int8(_IntQuantizer):
    """8-bit blockwise absmax quantization: codes -127..127, one float32 step a block."""

    codec_id = "int8"
    wire_tag = 10
    bits = 8


class Int4(_IntQuantizer):
    """4-bit blockwise absmax quantization: codes -7..7, two a byte."""

    codec_id = "int4"
    wire_tag = 11
    bits = 4


class Int2(_IntQuantizer):
    """2-bit blockwise absmax quantization: codes -1..1, four a byte."""

    codec_id = "int2"
    wire_tag = 12
    bits = 2


class QSGD(_Seeded, BlockQuantizer):
    """QSGD: ``levels`` levels of the block's L2 norm, stochastic rounding, unbiased.

    Variance bound (Alistarh et al., Lemma 3.1): E|Q(v) - v|^2 <= min(d/s^2, sqrt(d)/s) |v|^2
    for a block v of d elements and s = ``levels``. Codes take 2, 4 or 8 bits (s <= 1, 7, 127).
    """

    codec_id = "qsgd"
    wire_tag = 13
    norm = rules.L2
    stochastic = True
    unbiased = True

    def __init__(self, levels: int = 7, block: int = 256, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        if not isinstance(levels, int) or not 1 <= levels <= 127:
            raise ValueError(f"qsgd: levels must be an int in 1..127, got {levels!r}")
        super().__init__(block)
        self._levels = levels
        self.bits = 2 if levels <= 1 else 4 if levels <= 7 else 8
        self._init_seed(seed, rng)

    def get_config(self) -> dict:
        """Id, levels, block and seed."""
        return {"id": self.codec_id, "levels": self._levels, "block": self.block, "seed": self.seed}

    @property
    def levels(self) -> int:
        """The s of QSGD."""
        return self._levels

    def variance_bound(self, x) -> np.ndarray:
        """Per block, the bound on E|Q(v) - v|^2 (float64, one value a block)."""
        norms2 = self._block_norms(np.asarray(x))[::self.block] ** 2
        d = np.minimum(self.block, np.asarray(x).size - self.block * np.arange(norms2.size))
        s = self.levels
        return np.minimum(d / s**2, np.sqrt(d) / s) * norms2


class TernGrad(_Seeded, BlockQuantizer):
    """TernGrad: {-1, 0, +1} times the block's max |x|, stochastic, unbiased."""

    codec_id = "terngrad"
    wire_tag = 14
    bits = 2
    stochastic = True
    unbiased = True

    def __init__(self, block: int = 256, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        super().__init__(block)
        self._init_seed(seed, rng)

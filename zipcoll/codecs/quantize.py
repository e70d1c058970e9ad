"""Blockwise quantizers: ``int8``, ``int4``, ``int2`` (absmax), ``qsgd`` (L2), ``terngrad``.

Each block of ``block`` elements gets one float32 step ``s = norm / levels`` and every
element the code ``clip(floor(x / s + u), -levels, levels)``: ``u = 1/2`` rounds to
nearest (error <= s/2), ``u`` uniform in [0, 1) rounds stochastically (unbiased, error
< s). Payload: header (p0 = block, p1 = levels), float32 steps, codes packed ``bits``
a code (any width 1..8, ``ceil(n * bits / 8)`` bytes; see ``kernels/rules.py``).

NaN and Inf: the step comes from the finite elements only, and every non-finite
element stays local to itself. NaN decodes to NaN. With 3 bits or more (int8, int4,
qsgd with levels >= 2) +Inf and -Inf decode to themselves: a block holding one is
coded with one level fewer (``levels - 1`` for int8/int4, a step ``norm / (levels -
1)``), so two codes are free for them; blocks without Inf are coded as if the rule did
not exist. With 2 bits (int2, terngrad, qsgd with levels = 1) the one spare code
means "not finite": +-Inf decode to NaN (the sign is lost); the rest of the block is
unaffected.

Edges of float: steps are float32, so float64 input is coded as its float32 cast: an
element beyond float32's range is the Inf of its sign there (decodes to it with 3 bits
or more, to NaN with 2), and one below float32's smallest subnormal rounds as the cast
does. A step is at most the input dtype's largest value over ``levels`` (QSGD's L2 norm
can exceed every element: a block of float32 values near 3.4e38, or of float16 values
whose norm passes 65504, is coded with that step, still unbiased), so nothing finite
decodes to Inf. Blocks of tiny or subnormal values are coded like any others (half a
step, where the step is float32's: finer than its subnormal spacing it rounds).
"""
from __future__ import annotations

import numpy as np

from .backend import backend_of
from .base import (HEADER_BYTES, Header, WireCodec, align8, check_float_array, count_nonfinite,
                   eps_of, finite_as_float32, half_subnormal, kernel_input)
from .kernels import rules

_BITS_VIEW = {4: np.uint32, 8: np.uint64}


def _bits_of(x):
    """The IEEE bits of float32/float64 ``x``, as unsigned integers (a view)."""
    return x.view(_BITS_VIEW[x.itemsize])


def _cap(dtype) -> float:
    """The most a block's step times its levels may be: the input dtype's largest value
    (float32's for float64 input, whose steps are float32)."""
    return float(np.finfo(np.float16).max) if dtype == np.float16 else rules.FLOAT32_MAX


class BlockQuantizer(WireCodec):
    """Shared layout and kernels of the block codecs; subclasses fix bits, levels and norm."""

    bits: int = 8
    norm = rules.ABSMAX

    def __init__(self, block: int = 256):
        if not isinstance(block, int) or block <= 0 or block % 8:
            raise ValueError(f"{self.codec_id}: block must be a positive multiple of 8, got {block!r}")
        if not (isinstance(self.bits, int) and 1 <= self.bits <= 8):
            raise ValueError(f"{self.codec_id}: codes of {self.bits!r} bits; 1 to 8 are packed")
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
        p, scales, codes = self._payload(bk, x, out)
        cap = _cap(x.dtype)
        x = kernel_input(bk, x)
        bk.kernels.block_encode(x, _bits_of(x), codes, scales, self.block, self.bits,
                                self.levels, self.norm, self.stochastic, seed, cap=cap)
        return p

    def encode_with_residual(self, x, residual, out=None, seed: int | None = None):
        """Payload of ``x + residual``; ``residual`` becomes the target less its decoded
        value, written while encoding (one pass; float16 takes the two-pass way)."""
        return self.encode_feedback(x, residual, out, seed)[0]

    def encode_feedback(self, x, residual, out=None, seed: int | None = None):
        """``encode_with_residual``, and whether the new residual is all finite: on the
        CPU the encode pass counts its non-finite elements while each block is in cache."""
        bk, x = backend_of(x)
        check_float_array(x, f"{self.codec_id}.encode")
        residual = self._as(bk, residual)
        check_float_array(residual, f"{self.codec_id}.encode_with_residual")
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(f"residual of {residual.shape} {residual.dtype} for an input of "
                             f"{x.shape} {x.dtype}")
        if x.dtype == np.float16:  # the kernels have no float16: the two-pass way
            p = super().encode_with_residual(x, residual, out, seed)
            return p, count_nonfinite(bk.xp, residual) == 0
        p, scales, codes = self._payload(bk, x, None if out is None else self._as(bk, out))
        nonfinite = bk.kernels.block_encode(
            x, _bits_of(x), codes, scales, self.block, self.bits, self.levels, self.norm,
            self.stochastic, self._call_seed(seed), residual, _bits_of(residual))
        if nonfinite is None:  # a kernel that does not count (CUDA): count now
            nonfinite = count_nonfinite(bk.xp, residual)
        return p, nonfinite == 0

    def _payload(self, bk, x, out):
        """A payload for ``x`` with its header and padding written, and its two sections."""
        p = self._new_payload(bk, x, self.wire_bytes(x.size), out, self.block, self.levels)
        scales, codes = self._sections(p, x.size)
        p[HEADER_BYTES + scales.nbytes:p.size - codes.size] = 0  # alignment padding: defined bytes
        return p, scales, codes

    def _decode(self, bk, h, payload, out, accumulate):
        scales, codes = self._sections(payload, h.n)
        bk.kernels.block_decode(codes, scales, out, self.block, self.bits, accumulate)

    def _per_block(self, a: np.ndarray, fill) -> np.ndarray:
        """``a`` padded with ``fill`` to whole blocks, one row a block."""
        pad = (-a.size) % self.block
        return np.concatenate([a, np.full(pad, fill, a.dtype)]).reshape(-1, self.block)

    def _block_norms(self, x: np.ndarray) -> np.ndarray:
        """Norm of each block's elements finite in float32, per element."""
        a = self._per_block(np.abs(x.astype(np.float64)), 0.0)
        finite = np.where(finite_as_float32(a), a, 0.0)
        if self.norm == rules.ABSMAX:
            norms = finite.max(axis=1, initial=0.0)
        else:
            norms = np.sqrt((finite ** 2).sum(axis=1))
        return np.repeat(norms, self.block)[:x.size]

    def _steps(self, x: np.ndarray) -> np.ndarray:
        """The float32 step of each element's block, as float64, as the kernels choose
        it (``rules.block_scale``): one level fewer in a block holding an Inf (in
        float32), from 3 bits up; at most the dtype's largest value over the levels."""
        levels = np.full(x.size, float(self.levels))
        if self.bits >= 3:
            a = self._per_block(np.abs(x.astype(np.float64)), 0.0)
            with np.errstate(invalid="ignore"):
                inf = ~finite_as_float32(a) & ~np.isnan(a)
            marked = np.repeat(inf.any(axis=1), self.block)[:x.size]
            levels[marked] = min(self.levels, (1 << (self.bits - 1)) - 2)
        cap = _cap(x.dtype)
        step = (np.minimum(self._block_norms(x), cap) / levels).astype(np.float32)
        with np.errstate(over="ignore"):
            over = levels.astype(np.float32) * step > cap
        step[over] = np.nextafter(step[over], np.float32(0))
        return step.astype(np.float64)

    def error_bound(self, x) -> np.ndarray:
        """Half a step (one step if stochastic) of each element's block, plus rounding:
        relative, and ``levels`` x 2**-149 where the step is finer than float32's
        subnormal spacing (and half the dtype's smallest subnormal, where decoding into
        float16 rounds). Inf for NaN, Inf, and float64 elements beyond float32's range
        (coded as the Inf they are in float32)."""
        x = np.asarray(x)
        step = self._steps(x)
        slack = (2 * eps_of(x.dtype) * (step * self.levels + np.abs(x))
                 + self.levels * 2.0**-149 + half_subnormal(x.dtype))
        bound = (1.0 if self.stochastic else 0.5) * step + slack
        return np.where(finite_as_float32(x), bound, np.inf)


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
    bits = 8


class Int4(_IntQuantizer):
    """4-bit blockwise absmax quantization: codes -7..7, two a byte."""

    codec_id = "int4"
    bits = 4


class Int2(_IntQuantizer):
    """2-bit blockwise absmax quantization: codes -1..1, four a byte."""

    codec_id = "int2"
    bits = 2


class QSGD(_Seeded, BlockQuantizer):
    """QSGD: ``levels`` levels of the block's L2 norm, stochastic rounding, unbiased.

    Variance bound (Alistarh et al., Lemma 3.1): E|Q(v) - v|^2 <= min(d/s^2, sqrt(d)/s) |v|^2
    for a block v of d elements and s = ``levels``. Codes take the fewest bits that hold
    +-s and a spare code: 2 bits for s = 1, 3 for s <= 3, 4 for s <= 7, ... 8 for s <= 127.
    """

    codec_id = "qsgd"
    norm = rules.L2
    stochastic = True
    unbiased = True

    def __init__(self, levels: int = 7, block: int = 256, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        if not isinstance(levels, int) or not 1 <= levels <= 127:
            raise ValueError(f"qsgd: levels must be an int in 1..127, got {levels!r}")
        self._levels = levels
        self.bits = levels.bit_length() + 1  # codes -levels..levels and the spare one
        super().__init__(block)
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
    bits = 2
    stochastic = True
    unbiased = True

    def __init__(self, block: int = 256, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        super().__init__(block)
        self._init_seed(seed, rng)

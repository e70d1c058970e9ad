"""Casts to 16 bits: ``fp16`` (IEEE half) and ``bf16`` (bfloat16), and ``none`` (raw).

Rounding is to nearest even and overflow gives +-Inf, as IEEE casts do (and as mixed
precision training expects: dynamic loss scaling detects overflow by its Inf); NaN
stays NaN and +-Inf stay +-Inf. ``error_bound`` is Inf where a finite element
overflows: |x| >= 65520 for ``fp16``, >= 2**128 - 2**119 for ``bf16``, and for ``bf16``
of float16 input >= 65408, which rounds to 65536, past float16's range on decode. ``bf16`` of float64 input rounds to odd into float32 first, so
the result is the correctly rounded bfloat16 (no double rounding).
"""
from __future__ import annotations

import numpy as np

from .base import HEADER_BYTES, WireCodec, overflow_at, overflow_of


class _Cast(WireCodec):
    """One value of ``wire_dtype`` an element after the header."""

    wire_dtype = np.dtype(np.float16)
    #: kernel decoding the wire values into float32 (``None``: NumPy's cast)
    _decode_kernel: str | None = None

    def _item(self, dtype) -> int:
        """Wire bytes an element."""
        return self.wire_dtype.itemsize

    def wire_bytes(self, n: int, dtype="float32") -> int:
        """Header plus one wire value an element."""
        return HEADER_BYTES + self._item(np.dtype(dtype)) * n

    def _payload_bytes(self, h) -> int:
        return self.wire_bytes(h.n, h.dtype)

    def _encode(self, bk, x, out, seed):
        p = self._new_payload(bk, x, self.wire_bytes(x.size, x.dtype), out)
        self._cast_to(bk, x, p[HEADER_BYTES:])
        return p

    def _decode(self, bk, h, payload, out, accumulate):
        if self._decode_kernel and out.dtype == np.float32:
            kernel = getattr(bk.kernels, self._decode_kernel)
            return kernel(payload[HEADER_BYTES:].view(np.uint16), out, accumulate)
        values = self._cast_from(bk, payload[HEADER_BYTES:], h.dtype)
        if accumulate:
            out += values
        else:
            out[...] = values

    def _cast_to(self, bk, x, body) -> None:
        """Write ``x`` as wire values into the byte array ``body``."""
        body.view(self.wire_dtype)[...] = x

    def _cast_from(self, bk, body, dtype):
        """The wire values of ``body`` (any float dtype numpy can add)."""
        return body.view(self.wire_dtype)

    #: the smallest |x| that decodes to +-Inf, by input dtype (none: the wire's own)
    _overflow_for: dict = {}

    def _wire_format(self) -> tuple[float, float, float]:
        """The wire type's eps, smallest subnormal and overflow threshold."""
        info = np.finfo(self.wire_dtype)
        return float(info.eps), float(info.smallest_subnormal), overflow_of(self.wire_dtype)

    def error_bound(self, x) -> np.ndarray:
        """Half an ulp of the wire type at |x| (relative ``eps/2``, or half its subnormal
        step); Inf where the cast overflows (the module docstring): the codec promises
        an IEEE cast there, +-Inf, not a value near x."""
        x = np.asarray(x)
        overflow = self._overflow_for.get(np.dtype(x.dtype), self._wire_format()[2])
        a = np.abs(x.astype(np.float64))
        # as Python floats: tiny / 2 in float16 would round to 0
        eps, tiny, _ = self._wire_format()
        bound = np.maximum(a * eps / 2 * (1 + 1e-12), tiny / 2)
        return np.where(a < overflow, bound, np.inf)


class FP16(_Cast):
    """IEEE half precision: 2 bytes a value; beyond 65504 overflows to +-Inf."""

    codec_id = "fp16"
    _decode_kernel = "fp16_decode"

    def _cast_to(self, bk, x, body) -> None:
        if x.dtype != np.float32:  # NumPy rounds float64 to half once, directly
            return super()._cast_to(bk, x, body)
        bk.kernels.fp16_encode(x.view(np.uint32), body.view(np.uint16))


class BF16(_Cast):
    """bfloat16 (the top 16 bits of float32, rounded to nearest even): 2 bytes a value."""

    codec_id = "bf16"
    wire_dtype = np.dtype(np.uint16)
    _decode_kernel = "bf16_decode"
    # 65408 is the midpoint of bfloat16's 65280 and 65536 (a tie, to even: 65536)
    _overflow_for = {np.dtype(np.float16): 65408.0}

    def _wire_format(self) -> tuple[float, float, float]:
        return 2.0**-7, 2.0**-133, overflow_at(128, 7)

    def _cast_to(self, bk, x, body) -> None:
        x32 = x if x.dtype == np.float32 else (
            x.astype(np.float32) if x.dtype != np.float64 else _round_to_odd32(bk.xp, x))
        bk.kernels.bf16_encode(x32.view(np.uint32), body.view(np.uint16))

    def _cast_from(self, bk, body, dtype):
        return (body.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _round_to_odd32(xp, x):
    """float32 of float64 ``x`` rounded to odd, so a later rounding to fewer bits is exact."""
    f = x.astype(np.float32)
    wide = f.astype(np.float64)
    inexact = (wide != x) & ~xp.isnan(x)
    over = inexact & (xp.abs(wide) > xp.abs(x))  # rounded away from zero: step back
    bits = f.view(np.uint32) - over.astype(np.uint32)
    return (bits | inexact.astype(np.uint32)).view(np.float32)


class Raw(_Cast):
    """No compression: the input's own bytes (lossless); the reference for the others."""

    codec_id = "none"
    lossless = True

    def _item(self, dtype) -> int:
        return dtype.itemsize

    def _cast_to(self, bk, x, body) -> None:
        body.view(x.dtype)[...] = x

    def _cast_from(self, bk, body, dtype):
        return body.view(dtype)

    def error_bound(self, x) -> np.ndarray:
        """Zero: lossless."""
        return np.zeros(np.shape(x))

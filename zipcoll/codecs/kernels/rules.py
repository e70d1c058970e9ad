"""Per-element and per-block rules shared by the CPU and the CUDA kernels.

Every function here is a plain ``numba.njit`` function: the CPU kernels call it from
``prange`` loops, the CUDA kernels call it from ``numba.cuda.jit`` kernels (numba
compiles it again for the device), so both targets apply the same arithmetic.

Block codes: a block of ``block`` elements shares one float32 ``scale``; each element
becomes a ``bits``-bit two's complement code in ``[-levels, levels]``, packed
``8 // bits`` codes a byte, lowest bits first. The code ``-2**(bits-1)`` (unused by
values) marks a non-finite element, which decodes to NaN. ``bits == 1`` is the sign
code: bit 1 means +scale, bit 0 means -scale.
"""
import math

import numpy as np
from numba import njit

# norm of a block that gives its scale
ABSMAX, L2, MEANABS = 0, 1, 2

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_U30, _U27, _U31, _U11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE = np.uint64(1)


@njit(cache=True)
def hash64(seed, i):
    """Counter-based random 64-bit word for element ``i`` of stream ``seed`` (splitmix64)."""
    z = np.uint64(seed) + (np.uint64(i) + _ONE) * _GOLDEN
    z = (z ^ (z >> _U30)) * _MIX1
    z = (z ^ (z >> _U27)) * _MIX2
    return z ^ (z >> _U31)


@njit(cache=True)
def uniform(seed, i):
    """Uniform float64 in [0, 1) for element ``i`` of stream ``seed``; no state, any order."""
    return np.float64(hash64(seed, i) >> _U11) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def bits_to_float(bits, mant, bias):
    """float64 value of the non-negative IEEE bits ``bits`` (``mant`` fraction bits)."""
    e = int(bits >> np.uint64(mant))
    m = np.float64(bits & ((np.uint64(1) << np.uint64(mant)) - np.uint64(1)))
    if e == 0:
        return math.ldexp(m, 1 - bias - mant)
    return math.ldexp(m + math.ldexp(1.0, mant), e - bias - mant)


@njit(cache=True)
def max_finite_bits(xb, sign, inf):
    """Largest ``xb[i] & sign`` below ``inf``: |x| of the finite x, on their IEEE bits."""
    m = xb.dtype.type(0)
    for i in range(xb.size):
        a = xb[i] & sign
        m = max(m, a if a < inf else xb.dtype.type(0))
    return m


@njit(cache=True)
def finite_absmax(xb):
    """Largest finite |x| of the IEEE bits ``xb`` of x, as float64; integer max vectorizes."""
    if xb.itemsize == 8:
        m = max_finite_bits(xb, np.uint64(0x7FFFFFFFFFFFFFFF), np.uint64(0x7FF0000000000000))
        return bits_to_float(np.uint64(m), 52, 1023)
    m = max_finite_bits(xb, np.uint32(0x7FFFFFFF), np.uint32(0x7F800000))
    return bits_to_float(np.uint64(m), 23, 127)


@njit(cache=True)
def block_norm(x, xb, kind):
    """Norm of the finite elements of block ``x`` (MEANABS counts every element)."""
    if kind == ABSMAX:
        return finite_absmax(xb)
    m = 0.0
    if kind == L2:
        for i in range(x.size):
            v = np.float64(x[i])
            m += v * v if math.isfinite(v) else 0.0
        return math.sqrt(m)
    for i in range(x.size):
        m += abs(np.float64(x[i]))
    return m / max(x.size, 1)


@njit(cache=True)
def block_scale(norm, levels):
    """Step between two codes of a block whose norm is ``norm`` (float32)."""
    return np.float32(norm / levels)


@njit(cache=True)
def uniform32(seed, i, stochastic):
    """Offset added before flooring: random in [0, 1) if ``stochastic``, else 0.5 (nearest)."""
    if stochastic:
        return np.float32(hash64(seed, i) >> np.uint64(40)) * np.float32(1.0 / 16777216.0)
    return np.float32(0.5)


@njit(cache=True)
def quantize(v, inv, levels, bits, u):
    """Code of value ``v``: floor(v / scale + u) clipped to +-levels, in float32."""
    if bits == 1:
        return np.int32(0 if v < 0 else 1)  # NaN counts as +; the block's scale is NaN
    f = np.floor(np.float32(v) * inv + u)
    f = min(max(f, -levels), levels)
    # a select, not a branch, so the loop vectorizes; non-finite gets the marker code
    return np.int32(f) if math.isfinite(v) else np.int32(-(1 << (bits - 1)))


@njit(cache=True)
def dequantize(c, scale, bits):
    """Value (float32) of code ``c`` (already sign-extended) in a block of step ``scale``."""
    if bits == 1:
        return scale if c else -scale
    if c == -(1 << (bits - 1)):
        return np.float32(np.nan)
    return np.float32(c) * scale


@njit(cache=True)
def block_span(b, block, n, bits):
    """Elements [lo, hi) of block ``b`` and bytes [c0, c1) of its packed codes."""
    lo = b * block
    hi = min(lo + block, n)
    per = 8 // bits
    return lo, hi, lo // per, (hi + per - 1) // per


@njit(cache=True)
def encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed):
    """Quantize block ``b`` of ``x`` (``xb``: its IEEE bits) into ``codes`` and ``scales[b]``.

    The CPU kernels compile it with ``bits``, ``kind`` and ``stochastic`` constant, so
    the byte loop unrolls and vectorizes; the CUDA kernels take them at run time.
    """
    # slices index from 0, so numba drops its negative-index check and LLVM vectorizes
    lo, hi, c0, c1 = block_span(b, block, x.size, bits)
    xs = x[lo:hi]
    cs = codes[c0:c1]
    s = block_scale(block_norm(xs, xb[lo:hi], kind), levels)
    scales[b] = s
    inv = np.float32(1.0 / np.float64(s)) if s > 0 else np.float32(0.0)
    lv = np.float32(levels)
    per = 8 // bits
    mask = (1 << bits) - 1
    full = xs.size // per
    for j in range(full):
        byte = 0
        for t in range(per):
            i = j * per + t
            q = quantize(xs[i], inv, lv, bits, uniform32(seed, lo + i, stochastic))
            byte |= (q & mask) << (t * bits)
        cs[j] = byte
    if full < cs.size:  # the last block ends inside a byte: its high bits stay 0
        byte = 0
        for i in range(full * per, xs.size):
            q = quantize(xs[i], inv, lv, bits, uniform32(seed, lo + i, stochastic))
            byte |= (q & mask) << ((i - full * per) * bits)
        cs[full] = byte


@njit(cache=True)
def code_at(byte, t, bits):
    """The ``t``-th ``bits``-bit code of ``byte``, sign-extended (bits == 1: 0 or 1)."""
    c = (np.int32(byte) >> (t * bits)) & ((1 << bits) - 1)
    if bits == 1:
        return c
    half = 1 << (bits - 1)
    return (c ^ half) - half


@njit(cache=True)
def decode_block(codes, scales, out, b, block, bits, accumulate):
    """Decode block ``b`` into ``out`` (``out += values`` when ``accumulate``)."""
    lo, hi, c0, c1 = block_span(b, block, out.size, bits)
    os = out[lo:hi]
    cs = codes[c0:c1]
    s = scales[b]
    per = 8 // bits
    full = os.size // per
    for j in range(full):
        byte = cs[j]
        for t in range(per):
            v = dequantize(code_at(byte, t, bits), s, bits)
            i = j * per + t
            os[i] = os[i] + v if accumulate else v
    for i in range(full * per, os.size):
        v = dequantize(code_at(cs[full], i - full * per, bits), s, bits)
        os[i] = os[i] + v if accumulate else v


@njit(cache=True)
def bf16_bits(b):
    """bfloat16 bits of the float32 with bits ``b``: round to nearest even, NaN kept quiet."""
    b = np.uint32(b)
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((b >> np.uint32(16)) | np.uint32(0x40))
    lsb = (b >> np.uint32(16)) & np.uint32(1)
    return np.uint16((b + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


@njit(cache=True)
def f16_bits(b):
    """IEEE half bits of the float32 with bits ``b``, as NumPy casts (round to nearest even).

    Overflow gives +-Inf; a NaN keeps its sign and top 10 payload bits (one set if none is).
    """
    b = np.uint32(b)
    sign = (b >> np.uint32(16)) & np.uint32(0x8000)
    a = b & np.uint32(0x7FFFFFFF)
    nan = np.uint32(0x7C00) + (a >> np.uint32(13) & np.uint32(0x3FF))
    nan = max(nan, np.uint32(0x7C01))
    lsb = (a >> np.uint32(13)) & np.uint32(1)
    normal = (a + np.uint32(0xFFF - 0x38000000) + lsb) >> np.uint32(13)
    # below 2**-14 (subnormal half): adding 0.5 leaves the half step as the ulp, so the
    # float addition itself rounds to nearest even
    tiny = np.float32(np.uint32(a).view(np.float32) + np.float32(0.5)).view(np.uint32) - np.uint32(0x3F000000)
    h = (nan if a > np.uint32(0x7F800000) else np.uint32(0x7C00) if a >= np.uint32(0x477FF000)
         else normal if a >= np.uint32(0x38800000) else tiny)
    return np.uint16(sign | h)


@njit(cache=True)
def f16_value(h):
    """float32 value of the IEEE half bits ``h`` (exact; NaN payloads kept, as NumPy does)."""
    h = np.uint32(h)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    e = h & np.uint32(0x7C00)
    m = h & np.uint32(0x3FF)
    sub = np.float32(np.float32(m) * np.float32(2.0**-24)).view(np.uint32)
    wide = np.uint32(0x7F800000) | (m << np.uint32(13))
    normal = ((h & np.uint32(0x7FFF)) + np.uint32(0x1C000)) << np.uint32(13)
    bits = sub if e == np.uint32(0) else wide if e == np.uint32(0x7C00) else normal
    return np.uint32(sign | bits).view(np.float32)


@njit(cache=True)
def bf16_value(h):
    """float32 value of the bfloat16 bits ``h`` (exact)."""
    return np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32)


@njit(cache=True)
def stratum(j, n, k):
    """Bounds [lo, hi) of the j-th of k equal strata of range(n)."""
    return (j * n) // k, ((j + 1) * n) // k


@njit(cache=True)
def randomk_index(j, n, k, seed):
    """Index drawn from stratum j (uniform inside it): k strata give k distinct indices."""
    lo, hi = stratum(j, n, k)
    return lo + np.int64(hash64(seed, j) % np.uint64(hi - lo))


def as_python(module):
    """A copy of ``module`` whose ``njit`` functions are plain Python calling each other.

    The CUDA simulator runs kernels as Python, and cannot pass its device arrays to a
    compiled ``njit`` function; with these it runs the very same rules as Python.
    """
    import types

    copy = types.ModuleType(module.__name__ + "_python")
    copy.__dict__.update(vars(module))
    for name, obj in vars(module).items():
        py = getattr(obj, "py_func", None)
        if py is not None:
            copy.__dict__[name] = types.FunctionType(py.__code__, copy.__dict__, name,
                                                     py.__defaults__, py.__closure__)
    return copy

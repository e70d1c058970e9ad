"""Per-element and per-block rules shared by the CPU and the CUDA kernels.

Every function here is a plain ``numba.njit`` function: the CPU kernels call it from
``prange`` loops, the CUDA kernels call it from ``numba.cuda.jit`` kernels (numba
compiles it again for the device), so both targets apply the same arithmetic.

Block codes: a block of ``block`` elements (a multiple of 8) shares one float32
``scale``; each element becomes a ``bits``-bit two's complement code in
``[-levels, levels]``. Codes are packed lowest bits first into a little-endian bit
stream, a group of ``8 / gcd(bits, 8)`` codes filling ``bits / gcd(bits, 8)`` whole
bytes, so every width from 1 to 8 packs into exactly ``ceil(n * bits / 8)`` bytes and
each block starts on a byte. (For 1, 2, 4, 8 bits a group is one byte.)

float64 input is coded as its float32 cast would be: an element at or beyond
``FLOAT32_OVERFLOW`` counts as the Inf of its sign (below float32's smallest subnormal
it rounds as the cast does). A step never exceeds ``cap / levels`` (``cap``: the largest
finite value of the input dtype), so no code decodes beyond the input's range; a step
below float32's normal range is used through ``v * 2**64`` (``inverse``), so a block of
subnormals is coded to half its step like any other.

Non-finite elements, by width (``top = 2**(bits-1) - 1``):

- ``bits >= 3``: NaN gets the spare code ``-(top + 1)``. A block holding +-Inf is
  *marked* by the sign bit of its scale: its finite elements use at most ``top - 1``
  levels, and the codes ``+top`` / ``-top`` mean +Inf / -Inf. Unmarked blocks (all
  finite, or NaN only) are coded exactly as without this rule.
- ``bits == 2``: one spare code (-2): NaN and +-Inf all decode to NaN (the sign of an
  Inf is lost); the other elements of the block are unaffected.
- ``bits == 1`` (sign): bit 1 means +scale, bit 0 means -scale. A block holding NaN or
  Inf is marked by a non-finite scale, the block's non-finite value (its one value
  if every non-finite element is the same Inf, else NaN): there, bit 1 marks a
  non-finite element, which decodes to that value, and the finite elements decode to 0.
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
FLOAT32_MAX = 3.4028234663852886e38
#: the smallest float64 that rounds to float32's Inf (2**128 - 2**103), and its bits: a
#: float64 element at or beyond it is coded as the Inf it is in float32, as a cast does
FLOAT32_OVERFLOW = 3.4028235677973366e38
_OVERFLOW_BITS = np.uint64(0x47EFFFFFF0000000)
#: below this step, 1 / step overflows float32: the codes are computed from v * 2**64
_TINY_STEP = 2.0**-126
_PRE_TINY = 2.0**64


@njit(cache=True)
def stream_state(seed, i):
    """State of element ``i`` of stream ``seed``; element ``i + 1``'s is it plus ``STEP``."""
    return np.uint64(seed) + (np.uint64(i) + _ONE) * _GOLDEN


STEP = _GOLDEN


@njit(cache=True)
def mix64(z):
    """Random 64-bit word of the state ``z`` (splitmix64's output function)."""
    z = (z ^ (z >> _U30)) * _MIX1
    z = (z ^ (z >> _U27)) * _MIX2
    return z ^ (z >> _U31)


@njit(cache=True)
def hash64(seed, i):
    """Counter-based random 64-bit word for element ``i`` of stream ``seed`` (splitmix64)."""
    return mix64(stream_state(seed, i))


@njit(cache=True)
def uniform(seed, i):
    """Uniform float64 in [0, 1) for element ``i`` of stream ``seed``; no state, any order."""
    return np.float64(hash64(seed, i) >> _U11) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def pow2(k):
    """2.0**k (float64) for -1022 <= k <= 1023, from its bits: no library call."""
    return np.uint64((k + 1023) << 52).view(np.float64)


@njit(cache=True)
def abs_top(xb, sign):
    """Largest ``xb[i] & sign``: the largest |x| on the IEEE bits ``xb`` of x, at or above
    Inf's bits if an element is NaN or Inf.

    Two maxima and no arithmetic in the loop (numba widens integer arithmetic to 64
    bits, which would halve the vector lanes): of the non-negative x, and of all (which
    is a negative x, sign bit set, if there is one).
    """
    t = xb.dtype.type
    high = t(t(sign) + t(1))  # the sign bit
    pos = t(0)
    every = t(0)
    for i in range(xb.size):
        a = xb[i]
        pos = max(pos, a if a < high else t(0))
        every = max(every, a)
    return max(pos, t(every ^ high)) if every >= high else pos


@njit(cache=True)
def max_finite_bits(xb, sign, over, inf):
    """Largest ``xb[i] & sign`` below ``over`` (|x| of the x finite in float32, on their
    IEEE bits), and how many are in [over, inf] (Inf in float32: not NaN)."""
    top = abs_top(xb, sign)
    if top < over:  # all finite: the common case takes one vectorized pass
        return top, 0
    m = xb.dtype.type(0)
    infs = 0
    for i in range(xb.size):  # rare: a NaN or an Inf
        a = xb[i] & sign
        m = max(m, a if a < over else xb.dtype.type(0))
        infs += (a >= over) & (a <= inf)
    return m, infs


@njit(cache=True)
def finite_absmax(xb):
    """Largest |x| finite in float32 of the IEEE bits ``xb`` of x (float64), and how many
    Infs x has (float64 input: Infs of its float32 cast)."""
    if xb.itemsize == 8:
        m, infs = max_finite_bits(xb, np.uint64(0x7FFFFFFFFFFFFFFF), _OVERFLOW_BITS,
                                  np.uint64(0x7FF0000000000000))
        return np.uint64(m).view(np.float64), infs
    inf = np.uint32(0x7F800000)
    m, infs = max_finite_bits(xb, np.uint32(0x7FFFFFFF), inf, inf)
    return np.float64(np.uint32(m).view(np.float32)), infs


_FIXED_GROUP = 256  # terms below 2**54 each: 256 of them sum below 2**62


@njit(cache=True)
def fixed_sum(x, top, power):
    """Sum of |x|**power (1 or 2) of a finite float32 block whose largest |x| has the
    bits ``top``, to 2**-45 of it.

    Each term is scaled by a power of two that puts the largest below 2**54 and
    truncated to an int64 (exactly its value's floor), and the integers are summed:
    integer addition is associative, so the loop vectorizes, and the result does not
    depend on the order (the same on every target). Groups of 256 are added in float64.
    """
    e = max(np.int64(top >> np.uint32(23)), 1)  # |x| < 2**(e - 126)
    shift = int(180 - e if power == 1 else 306 - 2 * e)
    f = pow2(shift)
    total = 0.0
    for g in range(0, x.size, _FIXED_GROUP):
        xs = x[g:min(g + _FIXED_GROUP, x.size)]
        acc = np.int64(0)
        for i in range(xs.size):
            v = np.float64(xs[i])
            acc += np.int64((abs(v) if power == 1 else v * v) * f)
        total += np.float64(acc)
    return total * pow2(-shift)


@njit(cache=True)
def finite_l2(x, xb):
    """L2 norm of the elements of block ``x`` finite in float32, and how many Infs it has
    (float64 input: Infs of its float32 cast). Squares of float32 values do not
    overflow float64: the norm is finite, if beyond float32's range."""
    if x.itemsize == 4:
        top = abs_top(xb, np.uint32(0x7FFFFFFF))
        if top < np.uint32(0x7F800000):
            return math.sqrt(fixed_sum(x, top, 2)), 0
    m = 0.0  # float64 input, or a NaN or an Inf: in order
    infs = 0
    for i in range(x.size):
        v = np.float64(x[i])
        a = abs(v)
        m += v * v if a < FLOAT32_OVERFLOW else 0.0
        infs += a >= FLOAT32_OVERFLOW  # False for NaN
    return math.sqrt(m), infs


@njit(cache=True)
def block_norm(x, xb, kind):
    """Norm of the finite elements of block ``x`` (ABSMAX or L2), and how many Infs it has."""
    if kind == ABSMAX:
        return finite_absmax(xb)
    return finite_l2(x, xb)


@njit(cache=True)
def sign_scale(x, xb):
    """Scale of a sign block: mean |x|, at most float32's largest; if the block holds
    NaN or Inf (float64 input: in float32), its non-finite value (the Inf that all its
    non-finite elements are, else NaN)."""
    if x.itemsize == 4:
        top = abs_top(xb, np.uint32(0x7FFFFFFF))
        if top < np.uint32(0x7F800000):
            return np.float32(fixed_sum(x, top, 1) / max(x.size, 1))
    m = 0.0  # float64 input, or a NaN or an Inf: in order
    for i in range(x.size):
        a = abs(np.float64(x[i]))
        m += a if a < FLOAT32_OVERFLOW else math.inf  # NaN too: a sum of finite ones is finite
    if math.isfinite(m):
        return np.float32(min(m / max(x.size, 1), FLOAT32_MAX))
    value = 0.0
    for i in range(x.size):  # rare: a non-finite element (in float32)
        w = np.float32(x[i])
        if not math.isfinite(w):
            value = w if value == 0.0 or value == w else math.nan
    return np.float32(value)


@njit(cache=True)
def block_scale(norm, levels, cap):
    """Step between two codes of a block whose norm is ``norm`` (float32): ``norm /
    levels``, at most ``cap / levels`` (``cap``: the input dtype's largest value, which
    every |x| is at most), and never rounded up so far that ``levels`` steps exceed it:
    no code decodes beyond the input's range, and the block's codes still span its |x|."""
    s = np.float32(min(norm, cap) / levels)
    if np.float32(levels) * s > cap:  # the top code would overflow: one ulp down
        s = np.uint32(s.view(np.uint32) - np.uint32(1)).view(np.float32)
    return s


@njit(cache=True)
def inverse(s):
    """Factors ``(pre, inv)`` with ``v * pre * inv`` = v / s (float32, rounded once).

    ``pre`` is 1 (exact: ``v * 1`` is ``v``, the same codes as a plain ``v * inv``)
    unless 1 / s would overflow float32 (a step below its normal range, from a block of
    tiny or subnormal values): then 2**64, which scales v exactly.
    """
    if s >= _TINY_STEP:
        return np.float32(1.0), np.float32(1.0 / np.float64(s))
    if s > 0:
        return np.float32(_PRE_TINY), np.float32(1.0 / (np.float64(s) * _PRE_TINY))
    return np.float32(1.0), np.float32(0.0)


@njit(cache=True)
def uniform32(z, stochastic):
    """Offset added before flooring: random in [0, 1) from the stream state ``z`` if
    ``stochastic``, else 0.5 (nearest)."""
    if stochastic:
        return np.float32(mix64(z) >> np.uint64(40)) * np.float32(1.0 / 16777216.0)
    return np.float32(0.5)


@njit(cache=True)
def quantize(v, pre, inv, levels, bits, u, marked):
    """Code of value ``v``: floor(v / scale + u) clipped to +-levels, in float32
    (``v * pre * inv``: see ``inverse``).

    Non-finite ``v`` (in float32) gets its code of the module docstring (``marked``:
    its block is).
    """
    w = np.float32(v)
    if bits == 1:
        if marked:
            return np.int32(0 if math.isfinite(w) else 1)
        return np.int32(0 if v < 0 else 1)
    # Clipped, then floored (the same, as levels is whole): math.floor, as the CUDA target
    # has no np.floor, and only for finite w (a Python floor of NaN or Inf raises).
    f = min(max(w * pre * inv + u, -levels), levels)
    top = (1 << (bits - 1)) - 1
    code = np.int32(math.floor(f)) if math.isfinite(w) else np.int32(-top - 1)  # a select
    if marked and math.isinf(w):  # marked is the block's: the loop is unswitched on it
        code = np.int32(top if w > 0 else -top)
    return code


@njit(cache=True)
def dequantize(c, scale, bits, marked):
    """Value (float32) of code ``c`` (already sign-extended) in a block of step ``scale``."""
    if bits == 1:
        return scale if c else (np.float32(0.0) if marked else -scale)
    top = (1 << (bits - 1)) - 1
    if c == -top - 1:
        return np.float32(np.nan)
    if marked and (c == top or c == -top):
        return np.float32(np.inf) if c > 0 else np.float32(-np.inf)
    return np.float32(c) * scale


@njit(cache=True)
def marker(scale, bits):
    """Step of a block and whether the block is marked (see the module docstring)."""
    if bits == 1:
        return scale, not math.isfinite(scale)
    if bits == 2:
        return scale, False
    return abs(scale), math.copysign(1.0, scale) < 0


@njit(cache=True)
def group_of(bits):
    """Codes and bytes of a packing group: the fewest codes that fill whole bytes."""
    g = bits & -bits  # gcd(bits, 8) for 1 <= bits <= 8
    return 8 // g, bits // g


@njit(cache=True)
def block_span(b, block, n, bits):
    """Elements [lo, hi) of block ``b`` and bytes [c0, c1) of its packed codes."""
    lo = b * block
    hi = min(lo + block, n)
    return lo, hi, lo * bits // 8, (hi * bits + 7) // 8


@njit(cache=True)
def add_block(x, r, b, block):
    """``r += x`` on block ``b``: the target of error feedback, where the residual was."""
    lo = b * block
    hi = min(lo + block, x.size)
    rs = r[lo:hi]
    xs = x[lo:hi]
    for i in range(rs.size):
        rs[i] = rs[i] + xs[i]


@njit(cache=True)
def code_of(xs, i, z, pre, inv, levels, scale, bits, marked, stochastic, feedback):
    """Code of ``xs[i]`` (``z``: its stream state); with ``feedback``, ``xs[i]`` becomes
    its value less the code's value: error feedback's residual, written while encoding."""
    v = xs[i]
    q = quantize(v, pre, inv, levels, bits, uniform32(z, stochastic), marked)
    if feedback:
        xs[i] = v - dequantize(q, scale, bits, marked)
    return q


@njit(cache=True)
def encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed, feedback,
                 cap):
    """Quantize block ``b`` of ``x`` (``xb``: its IEEE bits) into ``codes`` and ``scales[b]``.

    ``cap``: the largest finite value of the input's dtype (float16 input arrives here
    as float32), the most a step times ``levels`` may be.

    With ``feedback``, ``x`` is error feedback's residual array holding the target and
    each of its elements becomes target - decoded, in the same pass. The CPU kernels
    compile it with ``bits``, ``kind``, ``stochastic`` and ``feedback`` constant, so the
    byte loop unrolls and vectorizes; the CUDA kernels take them at run time.
    """
    # slices index from 0, so numba drops its negative-index check and LLVM vectorizes
    lo, hi, c0, c1 = block_span(b, block, x.size, bits)
    xs = x[lo:hi]
    cs = codes[c0:c1]
    if bits == 1:
        s = sign_scale(xs, xb[lo:hi])
        marked = not math.isfinite(s)
        scales[b] = s
        pre, inv = np.float32(1.0), np.float32(0.0)
    else:
        norm, infs = block_norm(xs, xb[lo:hi], kind)
        marked = infs > 0 and bits >= 3
        if marked:  # the two codes next to the spare one stand for +-Inf
            levels = min(levels, (1 << (bits - 1)) - 2)
        s = block_scale(norm, levels, cap)
        scales[b] = -s if marked else s
        pre, inv = inverse(s)
    lv = np.float32(levels)
    per, nbytes = group_of(bits)
    mask = (1 << bits) - 1
    full = xs.size // per
    z = stream_state(seed, lo)  # advanced by STEP an element: an add, not a multiply
    if nbytes == 1:  # 1, 2, 4, 8 bits: whole codes in a byte
        for j in range(full):
            byte = 0
            for t in range(per):
                q = code_of(xs, j * per + t, z, pre, inv, lv, s, bits, marked, stochastic, feedback)
                z += STEP
                byte |= (q & mask) << (t * bits)
            cs[j] = byte
    else:  # 3, 5, 6, 7 bits: a group of codes spans several bytes
        for j in range(full):
            word = np.uint64(0)
            for t in range(per):
                q = code_of(xs, j * per + t, z, pre, inv, lv, s, bits, marked, stochastic, feedback)
                z += STEP
                word |= np.uint64(q & mask) << np.uint64(t * bits)
            for k in range(nbytes):
                cs[j * nbytes + k] = np.uint8((word >> np.uint64(8 * k)) & np.uint64(255))
    if full * per < xs.size:  # the last block ends inside a group: its high bits stay 0
        word = np.uint64(0)
        for i in range(full * per, xs.size):
            q = code_of(xs, i, z, pre, inv, lv, s, bits, marked, stochastic, feedback)
            z += STEP
            word |= np.uint64(q & mask) << np.uint64((i - full * per) * bits)
        for k in range(cs.size - full * nbytes):
            cs[full * nbytes + k] = np.uint8((word >> np.uint64(8 * k)) & np.uint64(255))


@njit(cache=True)
def code_at(word, t, bits):
    """The ``t``-th ``bits``-bit code of ``word``, sign-extended (bits == 1: 0 or 1)."""
    c = (word >> (t * bits)) & ((1 << bits) - 1)
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
    s, marked = marker(scales[b], bits)
    per, nbytes = group_of(bits)
    full = os.size // per
    if nbytes == 1:  # 1, 2, 4, 8 bits: 32-bit arithmetic, which vectorizes wider
        for j in range(full):
            byte = np.int32(cs[j])
            for t in range(per):
                v = dequantize(code_at(byte, t, bits), s, bits, marked)
                i = j * per + t
                os[i] = os[i] + v if accumulate else v
    else:
        for j in range(full):
            word = np.int64(cs[j * nbytes])
            for k in range(1, nbytes):
                word |= np.int64(cs[j * nbytes + k]) << (8 * k)
            for t in range(per):
                v = dequantize(code_at(word, t, bits), s, bits, marked)
                i = j * per + t
                os[i] = os[i] + v if accumulate else v
    last = np.int64(0)
    for k in range(cs.size - full * nbytes):
        last |= np.int64(cs[full * nbytes + k]) << (8 * k)
    for i in range(full * per, os.size):
        v = dequantize(code_at(last, i - full * per, bits), s, bits, marked)
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

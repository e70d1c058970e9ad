"""CPU kernels: the rules of ``rules.py`` in ``numba.njit`` loops, parallel over blocks."""
import functools
import math

import numpy as np
from numba import njit, prange

from . import rules


# below this many elements a parallel launch costs more than it saves
PARALLEL_MIN = 1 << 18

# the per-block rules, inlined into each specialised kernel: with bits, norm and
# rounding constant there, LLVM unrolls the byte loop and vectorizes it
_encode_block = njit(inline="always")(rules.encode_block.py_func)
_decode_block = njit(inline="always")(rules.decode_block.py_func)


@functools.lru_cache(maxsize=None)
def _encoder(bits, kind, stochastic, parallel):
    """Block encode kernel compiled for one (bits, norm, rounding)."""
    if parallel:
        @njit(parallel=True, cache=True)
        def encode(x, xb, codes, scales, block, levels, seed):
            for b in prange(scales.size):
                _encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed)
    else:
        @njit(cache=True)
        def encode(x, xb, codes, scales, block, levels, seed):
            for b in range(scales.size):
                _encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed)
    return encode


@functools.lru_cache(maxsize=None)
def _decoder(bits, accumulate, parallel):
    """Block decode kernel compiled for one (bits, accumulate)."""
    if parallel:
        @njit(parallel=True, cache=True)
        def decode(codes, scales, out, block):
            for b in prange(scales.size):
                _decode_block(codes, scales, out, b, block, bits, accumulate)
    else:
        @njit(cache=True)
        def decode(codes, scales, out, block):
            for b in range(scales.size):
                _decode_block(codes, scales, out, b, block, bits, accumulate)
    return decode


def block_encode(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed):
    """Quantize every block of ``x`` (``xb``: its bits) into packed ``codes`` and ``scales``."""
    kernel = _encoder(bits, kind, bool(stochastic), x.size >= PARALLEL_MIN)
    kernel(x, xb, codes, scales, block, levels, seed)


def block_decode(codes, scales, out, block, bits, accumulate):
    """Decode every block into ``out`` (``out +=`` when ``accumulate``)."""
    _decoder(bits, bool(accumulate), out.size >= PARALLEL_MIN)(codes, scales, out, block)


# The kernels below close over a flag, not over the rule itself: numba keys its disk cache
# of a closure on the pickled closure values, and a pickled dispatcher differs in every
# process, so a closure over one never hits the cache (it compiled again in every process).
@functools.lru_cache(maxsize=None)
def _narrow(bf16, parallel):
    """Kernel writing ``out16[i]`` = the IEEE half (``bf16``: bfloat16) bits of ``bits32[i]``."""
    @njit(parallel=parallel, cache=True)
    def narrow(bits32, out16):
        for i in prange(bits32.size):
            if bf16:
                out16[i] = rules.bf16_bits(bits32[i])
            else:
                out16[i] = rules.f16_bits(bits32[i])
    return narrow


@functools.lru_cache(maxsize=None)
def _widen(bf16, accumulate, parallel):
    """Kernel writing ``out[i] (+)=`` the value of IEEE half (``bf16``: bfloat16) bits ``in16[i]``."""
    @njit(parallel=parallel, cache=True)
    def widen(in16, out):
        for i in prange(out.size):
            if bf16:
                v = rules.bf16_value(in16[i])
            else:
                v = rules.f16_value(in16[i])
            out[i] = out[i] + v if accumulate else v
    return widen


def fp16_encode(bits32, out16):
    """IEEE half bits of each float32 (given as its uint32 bits), as NumPy rounds."""
    _narrow(False, bits32.size >= PARALLEL_MIN)(bits32, out16)


def bf16_encode(bits32, out16):
    """bfloat16 bits of each float32 (given as its uint32 bits)."""
    _narrow(True, bits32.size >= PARALLEL_MIN)(bits32, out16)


def fp16_decode(in16, out, accumulate):
    """float32 ``out`` (+)= the IEEE halves whose bits are ``in16``."""
    _widen(False, bool(accumulate), out.size >= PARALLEL_MIN)(in16, out)


def bf16_decode(in16, out, accumulate):
    """float32 ``out`` (+)= the bfloat16 values whose bits are ``in16``."""
    _widen(True, bool(accumulate), out.size >= PARALLEL_MIN)(in16, out)


@njit(cache=True)
def randomk_gather(x, values, k, seed):
    """values[j] = x[index j] for the k stratified random indices of stream ``seed``."""
    for j in range(k):
        values[j] = x[rules.randomk_index(j, x.size, k, seed)]


@njit(cache=True)
def randomk_scatter(values, out, k, seed, scaled, accumulate):
    """out[index j] (+)= values[j], times the stratum size when ``scaled`` (unbiased)."""
    n = out.size
    for j in range(k):
        lo, hi = rules.stratum(j, n, k)
        v = np.float64(values[j]) * (hi - lo if scaled else 1)
        i = rules.randomk_index(j, n, k, seed)
        if accumulate:
            out[i] += v
        else:
            out[i] = v


@njit(cache=True)
def scatter(indices, values, out, accumulate):
    """out[indices[j]] (+)= values[j]; indices were checked to lie in range."""
    for j in range(indices.size):
        if accumulate:
            out[indices[j]] += values[j]
        else:
            out[indices[j]] = values[j]


# top-k: elements sampled to place the cut below the k-th largest |x|, and chunks of the
# parallel pass that gathers the elements above the cut
_TOPK_SAMPLE = 1 << 16
_TOPK_CHUNKS = 64


@njit(cache=True)
def _topk_key(b, absmask, nan):
    """Order key of |x| from the IEEE bits ``b`` of x: unsigned order of |x|, NaN highest."""
    return min(b & absmask, nan)


@njit(parallel=True, cache=True)
def _topk_gather(xb, absmask, nan, cut, cand, counts):
    """Indices of the keys >= ``cut``, in order; chunk c's from its first index in ``cand``."""
    nchunks = counts.size
    n = xb.size
    for c in prange(nchunks):
        lo, hi = c * n // nchunks, (c + 1) * n // nchunks
        j = lo
        g = lo
        while g < hi:  # a vectorized max skips the groups of 16 with no candidate
            end = min(g + 16, hi)
            m = xb.dtype.type(0)
            for i in range(g, end):
                m = max(m, _topk_key(xb[i], absmask, nan))
            if m >= cut:
                for i in range(g, end):
                    if _topk_key(xb[i], absmask, nan) >= cut:
                        cand[j] = i
                        j += 1
            g = end
        counts[c] = j - lo


@njit(cache=True)
def _topk_cut(xb, k, absmask, nan):
    """A key that a few more than k keys reach, from a strided sample (0: take all)."""
    n = xb.size
    step = max(n // _TOPK_SAMPLE, 1)
    sample = np.empty((n + step - 1) // step, xb.dtype)
    for j in range(sample.size):
        sample[j] = _topk_key(xb[j * step], absmask, nan)
    expect = k / n * sample.size
    rank = int(1.2 * expect + 4 * np.sqrt(expect) + 16)  # from the top
    if rank >= sample.size:
        return xb.dtype.type(0)
    return np.partition(sample, sample.size - 1 - rank)[sample.size - 1 - rank]


@njit(cache=True)
def _topk_from_bits(xb, k, absmask, nan, cand, counts):
    """Sorted indices of the k largest keys of ``xb``, ties to the lower index (0 < k < n)."""
    n = xb.size
    nchunks = counts.size
    cut = _topk_cut(xb, k, absmask, nan)
    _topk_gather(xb, absmask, nan, cut, cand, counts)
    if counts.sum() < k:  # the sample misled: every element is a candidate
        _topk_gather(xb, absmask, nan, xb.dtype.type(0), cand, counts)
    keys = np.empty(counts.sum(), xb.dtype)
    m = 0
    for c in range(nchunks):
        lo = c * n // nchunks
        for j in range(lo, lo + counts[c]):
            keys[m] = _topk_key(xb[cand[j]], absmask, nan)
            m += 1
    kth = np.partition(keys, m - k)[m - k]
    ties = k  # how many keys equal to the k-th are taken: k less those above it
    for key in keys:
        ties -= key > kth
    out = np.empty(k, np.int32)
    o = 0
    for c in range(nchunks):
        lo = c * n // nchunks
        for j in range(lo, lo + counts[c]):
            key = _topk_key(xb[cand[j]], absmask, nan)
            if key > kth or (key == kth and ties > 0):
                ties -= key == kth
                out[o] = cand[j]
                o += 1
    return out


def topk_indices(x, k):
    """Sorted int32 indices of the k largest |x| (NaN largest), ties to the lower index.

    A strided sample places a cut a little below the k-th largest |x|; one parallel pass
    gathers the indices at or above it, and the k-th is selected among those alone.
    """
    n = x.size
    if k == 0:
        return np.zeros(0, np.int32)
    if k >= n:
        return np.arange(n, dtype=np.int32)
    wide = x.dtype == np.float64
    xb = x.view(np.uint64 if wide else np.uint32)
    t = xb.dtype.type
    absmask, nan = (t(0x7FFFFFFFFFFFFFFF), t(0x7FF0000000000001)) if wide else (
        t(0x7FFFFFFF), t(0x7F800001))
    cand = np.empty(n, np.int32)  # chunk c's candidates from its first index; pages untouched
    counts = np.zeros(_TOPK_CHUNKS if n >= PARALLEL_MIN else 1, np.int64)
    return _topk_from_bits(xb, k, absmask, nan, cand, counts)


@njit(parallel=True, cache=True)
def count_nonfinite(x):
    """Number of NaN/Inf elements of ``x``."""
    c = 0
    for i in prange(x.size):
        c += not math.isfinite(x[i])
    return c

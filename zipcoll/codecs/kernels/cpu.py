"""CPU kernels: the rules of ``rules.py`` in ``numba.njit`` loops, parallel over blocks."""
import functools

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


@njit(parallel=True, cache=True)
def bf16_encode(bits32, out16):
    """bfloat16 bits of each float32 (given as its uint32 bits)."""
    for i in prange(bits32.size):
        out16[i] = rules.bf16_bits(bits32[i])


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

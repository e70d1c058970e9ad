"""CPU kernels: the rules of ``rules.py`` in ``numba.njit`` loops, parallel over blocks."""
import numpy as np
from numba import njit, prange

from . import rules


# below this many elements a parallel launch costs more than it saves
PARALLEL_MIN = 1 << 18


@njit(parallel=True, cache=True)
def _block_encode_parallel(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed):
    for b in prange(scales.size):
        rules.encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed)


@njit(cache=True)
def _block_encode_serial(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed):
    for b in range(scales.size):
        rules.encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed)


@njit(parallel=True, cache=True)
def _block_decode_parallel(codes, scales, out, block, bits, accumulate):
    for b in prange(scales.size):
        rules.decode_block(codes, scales, out, b, block, bits, accumulate)


@njit(cache=True)
def _block_decode_serial(codes, scales, out, block, bits, accumulate):
    for b in range(scales.size):
        rules.decode_block(codes, scales, out, b, block, bits, accumulate)


def block_encode(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed):
    """Quantize every block of ``x`` (``xb``: its bits) into packed ``codes`` and ``scales``."""
    big = x.size >= PARALLEL_MIN
    kernel = _block_encode_parallel if big else _block_encode_serial
    kernel(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed)


def block_decode(codes, scales, out, block, bits, accumulate):
    """Decode every block into ``out`` (``out +=`` when ``accumulate``)."""
    kernel = _block_decode_parallel if out.size >= PARALLEL_MIN else _block_decode_serial
    kernel(codes, scales, out, block, bits, accumulate)


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

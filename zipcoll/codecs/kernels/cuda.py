"""CUDA kernels: the rules of ``rules.py`` in ``numba.cuda.jit`` kernels.

The wrappers take the same arguments as ``cpu.py`` and launch one thread per block
(block codecs) or per element. They accept CuPy arrays, and NumPy arrays under the
Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which is how the tests run them.
Simple mappings, not tuned: a thread walks a whole quantization block. Checked only
under the simulator so far: on a real GPU, FMA contraction may move a last bit.
"""
import numpy as np
from numba import config, cuda

from . import rules

if config.ENABLE_CUDASIM:
    rules = rules.as_python(rules)  # noqa: F811 - the simulator runs kernels as Python

_THREADS = 32 if config.ENABLE_CUDASIM else 128  # the simulator runs a thread each


def _grid(n):
    """Blocks per grid for ``n`` threads."""
    return max(1, (n + _THREADS - 1) // _THREADS)


@cuda.jit
def _block_encode(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed, cap):
    b = cuda.grid(1)
    if b < scales.size:
        rules.encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic, seed,
                           False, cap)


@cuda.jit
def _block_encode_feedback(x, r, rb, codes, scales, block, bits, levels, kind, stochastic, seed,
                           cap):
    b = cuda.grid(1)
    if b < scales.size:
        rules.add_block(x, r, b, block)
        rules.encode_block(r, rb, codes, scales, b, block, bits, levels, kind, stochastic, seed,
                           True, cap)


@cuda.jit
def _block_decode(codes, scales, out, block, bits, accumulate):
    b = cuda.grid(1)
    if b < scales.size:
        rules.decode_block(codes, scales, out, b, block, bits, accumulate)


@cuda.jit
def _bf16_encode(bits32, out16):
    i = cuda.grid(1)
    if i < bits32.size:
        out16[i] = rules.bf16_bits(bits32[i])


@cuda.jit
def _randomk_gather(x, values, k, seed):
    j = cuda.grid(1)
    if j < k:
        values[j] = x[rules.randomk_index(j, x.size, k, seed)]


@cuda.jit
def _randomk_scatter(values, out, k, seed, scaled, accumulate):
    j = cuda.grid(1)
    if j < k:
        lo, hi = rules.stratum(j, out.size, k)
        v = np.float64(values[j]) * (hi - lo if scaled else 1)
        i = rules.randomk_index(j, out.size, k, seed)
        if accumulate:
            out[i] += v
        else:
            out[i] = v


@cuda.jit
def _scatter(indices, values, out, accumulate):
    j = cuda.grid(1)
    if j < indices.size:
        if accumulate:
            cuda.atomic.add(out, indices[j], values[j])  # duplicates only in corrupt input
        else:
            out[indices[j]] = values[j]


def block_encode(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed,
                 r=None, rb=None, cap=rules.FLOAT32_MAX):
    """Quantize every block of ``x`` (``xb``: its bits) into packed ``codes`` and float32 ``scales``.

    ``cap``: the largest finite value of the input's dtype: no step times ``levels`` exceeds it.

    With a residual ``r`` (``rb``: its bits), encode ``x + r`` and leave in ``r`` the
    target less its decoded value (error feedback), in the same pass.
    """
    if r is None:
        _block_encode[_grid(scales.size), _THREADS](
            x, xb, codes, scales, block, bits, levels, kind, stochastic, seed, float(cap))
        return
    host = r if isinstance(r, np.ndarray) else None
    if host is not None:  # simulator: it copies each NumPy argument apart, so r and rb
        r = cuda.to_device(host)  # would stop sharing memory; one device copy, two views
        rb = r.view(rb.dtype)
    _block_encode_feedback[_grid(scales.size), _THREADS](
        x, r, rb, codes, scales, block, bits, levels, kind, stochastic, seed, float(cap))
    if host is not None:
        r.copy_to_host(host)


def block_decode(codes, scales, out, block, bits, accumulate):
    """Decode every block into ``out`` (``out +=`` when ``accumulate``)."""
    _block_decode[_grid(scales.size), _THREADS](codes, scales, out, block, bits, accumulate)


def bf16_encode(bits32, out16):
    """bfloat16 bits of each float32 (given as its uint32 bits)."""
    _bf16_encode[_grid(bits32.size), _THREADS](bits32, out16)


def fp16_encode(bits32, out16):
    """IEEE half bits of each float32 (given as its uint32 bits): the array library's cast."""
    out16.view(np.float16)[...] = bits32.view(np.float32)


def fp16_decode(in16, out, accumulate):
    """float32 ``out`` (+)= the IEEE halves whose bits are ``in16``."""
    _widen(in16.view(np.float16), out, accumulate)


def bf16_decode(in16, out, accumulate):
    """float32 ``out`` (+)= the bfloat16 values whose bits are ``in16``."""
    _widen((in16.astype(np.uint32) << 16).view(np.float32), out, accumulate)


def _widen(values, out, accumulate):
    if accumulate:
        out += values
    else:
        out[...] = values


def randomk_gather(x, values, k, seed):
    """values[j] = x[index j] for the k stratified random indices of stream ``seed``."""
    _randomk_gather[_grid(k), _THREADS](x, values, k, seed)


def randomk_scatter(values, out, k, seed, scaled, accumulate):
    """out[index j] (+)= values[j], times the stratum size when ``scaled`` (unbiased)."""
    _randomk_scatter[_grid(k), _THREADS](values, out, k, seed, scaled, accumulate)


def scatter(indices, values, out, accumulate):
    """out[indices[j]] (+)= values[j]; indices were checked to lie in range."""
    _scatter[_grid(indices.size), _THREADS](indices, values, out, accumulate)

"""CPU kernels: the rules of ``rules.py`` in ``numba.njit`` loops, parallel over blocks."""
import ctypes
import functools
import math

import numpy as np
from numba import njit, prange

from . import rules
from .threads import one_launch_at_a_time

# below this many elements a parallel launch costs more than it saves
PARALLEL_MIN = 1 << 18

# the per-block rules, inlined into each specialised kernel: with bits, norm and
# rounding constant there, LLVM unrolls the byte loop and vectorizes it
_encode_block = njit(inline="always")(rules.encode_block.py_func)
_decode_block = njit(inline="always")(rules.decode_block.py_func)

# Numba's disk cache keys a closure's entry on its pickled cell values. A specialised
# kernel below closes over plain ints and bools only, which pickle to the same bytes in
# every process, so the second process loads it from the cache; every function it calls
# is a module global. A cell holding a dispatcher (an inner jitted function) pickles
# with a per-process id: such a kernel compiled again, under a new cache entry, in
# every process. ``_compiled`` refuses such a cell when the kernel is made.
_CELL_TYPES = (bool, int)


def _compiled(kernel, parallel: bool):
    """``kernel`` jitted with threads (its ``prange`` split over them) or without, cached on
    disk. Numba keys a cache entry on the function's name, code and cells, not on
    ``parallel``: one body compiled both ways would load the other's machine code in the
    next process, so each way gets a name of its own. Refuses a cell that keys the disk
    cache differently in every process."""
    for name, cell in zip(kernel.__code__.co_freevars, kernel.__closure__ or ()):
        if type(cell.cell_contents) not in _CELL_TYPES:
            raise TypeError(f"kernel {kernel.__qualname__} closes over {name} = "
                            f"{cell.cell_contents!r}: its disk-cache entry would differ in "
                            f"every process; pass it as an argument or use a module global")
    kernel.__qualname__ += ".threads" if parallel else ".serial"
    return njit(parallel=parallel, cache=True)(kernel)


@njit(inline="always")
def _encode_one(x, xb, r, rb, codes, scales, b, block, bits, levels, kind, stochastic,
                feedback, seed, cap):
    """Encode block ``b``; with ``feedback`` the residual array takes the target, then
    target - decoded. Returns the block's non-finite residual elements (0 without)."""
    if feedback:
        rules.add_block(x, r, b, block)
        _encode_block(r, rb, codes, scales, b, block, bits, levels, kind, stochastic,
                      seed, True, cap)
        return _nonfinite_in_block(r, b, block)  # the block is still in cache
    _encode_block(x, xb, codes, scales, b, block, bits, levels, kind, stochastic,
                  seed, False, cap)
    return 0


@functools.lru_cache(maxsize=None)
def _encoder(bits, kind, stochastic, feedback, parallel):
    """Block encode kernel compiled for one (bits, norm, rounding, feedback); it returns
    the number of non-finite residual elements (0 without feedback)."""
    bits, kind, stochastic, feedback = int(bits), int(kind), bool(stochastic), bool(feedback)

    def encode(x, xb, r, rb, codes, scales, block, levels, seed, cap):
        nonfinite = 0
        for b in prange(scales.size):
            nonfinite += _encode_one(x, xb, r, rb, codes, scales, b, block, bits, levels,
                                     kind, stochastic, feedback, seed, cap)
        return nonfinite
    return _compiled(encode, parallel)


@njit(inline="always")
def _nonfinite_in_block(r, b, block):
    lo = b * block
    rs = r[lo:min(lo + block, r.size)]
    n = 0
    for i in range(rs.size):
        n += not math.isfinite(rs[i])
    return n


@functools.lru_cache(maxsize=None)
def _decoder(bits, accumulate, parallel):
    """Block decode kernel compiled for one (bits, accumulate)."""
    bits, accumulate = int(bits), bool(accumulate)
    def decode(codes, scales, out, block):
        for b in prange(scales.size):
            _decode_block(codes, scales, out, b, block, bits, accumulate)
    return _compiled(decode, parallel)


@one_launch_at_a_time
def block_encode(x, xb, codes, scales, block, bits, levels, kind, stochastic, seed,
                 r=None, rb=None, cap=rules.FLOAT32_MAX):
    """Quantize every block of ``x`` (``xb``: its bits) into packed ``codes`` and ``scales``.

    ``cap``: the largest finite value of the input's dtype (65504 for float16 input
    widened to float32): no step times ``levels`` exceeds it.

    With a residual ``r`` (``rb``: its bits), encode ``x + r`` and leave in ``r`` the
    target less its decoded value (error feedback), in the same pass; returns how many
    elements of the new ``r`` are NaN/Inf (None without a residual).
    """
    feedback = r is not None
    kernel = _encoder(bits, kind, bool(stochastic), feedback, x.size >= PARALLEL_MIN)
    if not feedback:
        r = np.empty(0, x.dtype)  # not read
        rb = r.view(xb.dtype)
        # numba types a read-only array (a JAX array's memory) without setitem, which the
        # feedback branch of the shared rule has: a writable alias, never written here
        x, xb = _writable(x), _writable(xb)
    nonfinite = kernel(x, xb, r, rb, codes, scales, block, levels, seed, float(cap))
    return int(nonfinite) if feedback else None


def _writable(a):
    """`a` itself if writable, else a writable view of the same memory (no copy)."""
    if a.flags.writeable or a.size == 0:
        return a
    raw = (ctypes.c_char * a.nbytes).from_address(a.ctypes.data)
    return np.frombuffer(raw, a.dtype)


@one_launch_at_a_time
def block_decode(codes, scales, out, block, bits, accumulate):
    """Decode every block into ``out`` (``out +=`` when ``accumulate``)."""
    _decoder(bits, bool(accumulate), out.size >= PARALLEL_MIN)(codes, scales, out, block)


@functools.lru_cache(maxsize=None)
def _narrow(bf16, parallel):
    """Kernel writing ``out16[i]`` = the IEEE half (``bf16``: bfloat16) bits of ``bits32[i]``."""
    def narrow(bits32, out16):
        for i in prange(bits32.size):
            if bf16:
                out16[i] = rules.bf16_bits(bits32[i])
            else:
                out16[i] = rules.f16_bits(bits32[i])
    return _compiled(narrow, parallel)


@functools.lru_cache(maxsize=None)
def _widen(bf16, accumulate, parallel):
    """Kernel writing ``out[i] (+)=`` the value of IEEE half (``bf16``: bfloat16) bits ``in16[i]``."""
    def widen(in16, out):
        for i in prange(out.size):
            if bf16:
                v = rules.bf16_value(in16[i])
            else:
                v = rules.f16_value(in16[i])
            out[i] = out[i] + v if accumulate else v
    return _compiled(widen, parallel)


@one_launch_at_a_time
def fp16_encode(bits32, out16):
    """IEEE half bits of each float32 (given as its uint32 bits), as NumPy rounds."""
    _narrow(False, bits32.size >= PARALLEL_MIN)(bits32, out16)


@one_launch_at_a_time
def bf16_encode(bits32, out16):
    """bfloat16 bits of each float32 (given as its uint32 bits)."""
    _narrow(True, bits32.size >= PARALLEL_MIN)(bits32, out16)


@one_launch_at_a_time
def fp16_decode(in16, out, accumulate):
    """float32 ``out`` (+)= the IEEE halves whose bits are ``in16``."""
    _widen(False, bool(accumulate), out.size >= PARALLEL_MIN)(in16, out)


@one_launch_at_a_time
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


# top-k: elements sampled to place the cut below the k-th largest |x|, chunks of the
# parallel pass that gathers the elements above the cut, elements a chunk tests at once
_TOPK_SAMPLE = 1 << 16
_TOPK_CHUNKS = 64
_TOPK_GROUP = 64


@njit(cache=True)
def _topk_key(b, absmask, nan):
    """Order key of |x| from the IEEE bits ``b`` of x: unsigned order of |x|, NaN highest."""
    return min(b & absmask, nan)


@njit(parallel=True, cache=True)
def _topk_gather(xb, absmask, nan, cut, cand, keys, counts):
    """Indices and keys of the keys >= ``cut``, in order. Chunk c of ``counts.size`` writes
    from ``c * room`` (``room = cand.size // counts.size``); -1 in ``counts``: no room."""
    nchunks = counts.size
    n = xb.size
    room = cand.size // nchunks
    for c in prange(nchunks):
        lo, hi = c * n // nchunks, (c + 1) * n // nchunks
        seg = xb[lo:hi]
        start = c * room
        j = start
        groups = seg.size // _TOPK_GROUP
        for g in range(groups):
            at = g * _TOPK_GROUP
            hits = 0  # bit i: element at + i is a candidate; the compares vectorize
            for i in range(_TOPK_GROUP):
                hits |= np.int64((seg[at + i] & absmask) >= cut) << i
            while hits and j < start + room:  # one step a candidate, not an element
                low = hits & -hits
                i = math.frexp(low)[1] - 1  # the index of the lowest set bit
                cand[j] = lo + at + i
                keys[j] = _topk_key(seg[at + i], absmask, nan)
                j += 1
                hits ^= low
            if hits:
                break
        for i in range(groups * _TOPK_GROUP, seg.size):
            key = _topk_key(seg[i], absmask, nan)
            if key >= cut and j < start + room:
                cand[j] = lo + i
                keys[j] = key
                j += 1
            elif key >= cut:
                hits = 1
        counts[c] = -1 if hits else j - start


@njit(cache=True)
def _topk_cut(xb, k, absmask, nan):
    """A key that a few more than k keys reach, from a strided sample (0: take all), and
    the share of the sample that reaches it."""
    n = xb.size
    step = max(n // _TOPK_SAMPLE, 1)
    sample = np.empty((n + step - 1) // step, xb.dtype)
    for j in range(sample.size):
        sample[j] = _topk_key(xb[j * step], absmask, nan)
    expect = k / n * sample.size
    rank = int(1.2 * expect + 4 * np.sqrt(expect) + 16)  # from the top
    if rank >= sample.size:
        return xb.dtype.type(0), 1.0
    cut = np.partition(sample, sample.size - 1 - rank)[sample.size - 1 - rank]
    return cut, np.count_nonzero(sample >= cut) / sample.size


@njit(cache=True)
def _kth_largest(keys, k):
    """The k-th largest of ``keys`` (1 <= k <= size) by a radix select on 16-bit digits,
    and how many keys equal to it are among the k largest."""
    width = keys.itemsize * 8
    t = keys.dtype.type
    prefix = t(0)
    known = t(0)  # the bits of the k-th decided so far
    need = k
    hist = np.empty(1 << 16, np.int64)
    for shift in range(width - 16, -1, -16):
        hist[:] = 0
        s = t(shift)
        for key in keys:
            if key & known == prefix:
                hist[(key >> s) & t(0xFFFF)] += 1
        d = (1 << 16) - 1
        while hist[d] < need:
            need -= hist[d]
            d -= 1
        prefix |= t(d) << s
        known |= t(0xFFFF) << s
    return prefix, need


@njit(cache=True)
def _topk_candidates(xb, k, absmask, nan, nchunks):
    """Indices (ascending) and keys of at least k elements holding the k largest keys."""
    n = xb.size
    cut, share = _topk_cut(xb, k, absmask, nan)
    # room for twice the expected candidates a chunk: fresh pages cost their first touch
    room = min(int(2 * share * n / nchunks) + 4096, n // nchunks + 1)
    counts = np.zeros(nchunks, np.int64)
    for _ in range(2):
        cand = np.empty(room * nchunks, np.int32)
        keys = np.empty(room * nchunks, xb.dtype)
        _topk_gather(xb, absmask, nan, cut, cand, keys, counts)
        if counts.min() >= 0 and counts.sum() >= k:
            break
        if counts.min() >= 0:  # the sample misled: every element is a candidate
            cut = xb.dtype.type(0)
        room = n // nchunks + 1  # a chunk crowded past its room: room for all of it
    m = 0
    for c in range(nchunks):  # the candidates together, in index order
        for j in range(c * room, c * room + counts[c]):
            cand[m] = cand[j]
            keys[m] = keys[j]
            m += 1
    return cand[:m], keys[:m]


@njit(cache=True)
def _topk_from_bits(xb, k, absmask, nan, nchunks):
    """Sorted indices of the k largest keys of ``xb``, ties to the lower index (0 < k < n)."""
    cand, keys = _topk_candidates(xb, k, absmask, nan, nchunks)
    kth, ties = _kth_largest(keys, k)
    out = np.empty(k, np.int32)
    o = 0
    for j in range(keys.size):
        key = keys[j]
        if key > kth or (key == kth and ties > 0):
            ties -= key == kth
            out[o] = cand[j]
            o += 1
    return out


@one_launch_at_a_time
def topk_indices(x, k):
    """Sorted int32 indices of the k largest |x| (NaN largest), ties to the lower index.

    A strided sample places a cut a little below the k-th largest |x|; one parallel pass
    gathers the indices and keys at or above it, and a radix select over those alone
    finds the k-th exactly.
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
    return _topk_from_bits(xb, k, absmask, nan, _TOPK_CHUNKS if n >= PARALLEL_MIN else 1)


@njit(parallel=True, cache=True)
def _add_counting_nonfinite(r, x):
    """r += x; how many elements of the new r are NaN/Inf (error feedback's target)."""
    c = 0
    for i in prange(r.size):
        v = r[i] + x[i]
        r[i] = v
        c += not math.isfinite(v)
    return c


@njit(parallel=True, cache=True)
def _count_nonfinite(x):
    """Number of NaN/Inf elements of ``x``."""
    c = 0
    for i in prange(x.size):
        c += not math.isfinite(x[i])
    return c


add_counting_nonfinite = one_launch_at_a_time(_add_counting_nonfinite)
count_nonfinite = one_launch_at_a_time(_count_nonfinite)

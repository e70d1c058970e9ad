"""Sparse codecs: ``topk``, ``randomk``, ``threshold``. Elements not sent decode to 0.

Payload: header (p0 = count, p1 = randomk's seed), int32 indices (sorted ascending; not
for randomk, whose indices follow from the seed), then values (float32 or float16).
Indices are int32, so n < 2**31.

NaN and Inf: ``topk`` ranks them above every finite value and ``threshold`` always
sends them. If any is left out (more than k of them for ``topk``; ``randomk`` misses
it), the header flag LOST_NONFINITE is set and every element not sent decodes to NaN,
so a non-finite input never turns silently into a finite 0; ``error_bound`` is then
Inf everywhere (for ``randomk`` whenever k < n: which elements it sends depends on
the seed).

Edges of float: a value sent rounds to the value dtype as a cast does (float64 beyond
float32's range, or float32 beyond 65504 with ``values="float16"``, is sent as +-Inf;
below the value dtype's smallest subnormal, as 0). ``randomk``'s scaled value ``m x``
(m the stratum size) overflows to +-Inf where it passes the dtype's largest value.
``error_bound`` says Inf where these overflow.
"""
from __future__ import annotations

import math

import numpy as np

from .backend import backend_of
from .base import (FLAG_LOST_NONFINITE, HEADER_BYTES, WireCodec, align8, check_float_array,
                   count_nonfinite, cpu_kernels, eps_of, half_subnormal, kernel_input,
                   overflow_of, read_header)
from .quantize import _Seeded

_VALUE_DTYPES = ("float32", "float16")


class _Sparse(WireCodec):
    """Indices + values layout, checks and the scatter on decode."""

    sparse = True
    sends_indices = True

    def __init__(self, values: str = "float32"):
        if values not in _VALUE_DTYPES:
            raise ValueError(f"{self.codec_id}: values must be one of {_VALUE_DTYPES}, got {values!r}")
        self.values = values

    def _layout(self, count: int) -> tuple[int, int]:
        """Offset of the values and payload length for ``count`` elements sent."""
        values_at = HEADER_BYTES + (align8(4 * count) if self.sends_indices else 0)
        return values_at, values_at + count * np.dtype(self.values).itemsize

    def _payload_bytes(self, h) -> int:
        if h.p0 > h.n or h.n >= 1 << 31:
            raise ValueError(f"corrupt {self.codec_id} header: {h.p0} of {h.n} elements sent")
        return self._layout(h.p0)[1]

    def _write(self, bk, x, out, indices, count: int, seed: int = 0):
        """Payload sending ``x[indices]`` (``indices`` None: randomk's, gathered by a kernel)."""
        values_at, end = self._layout(count)
        p = self._new_payload(bk, x, end, out, count, seed)
        x = kernel_input(bk, x)
        if indices is not None:
            p[HEADER_BYTES:HEADER_BYTES + 4 * count].view(np.int32)[...] = indices
            p[HEADER_BYTES + 4 * count:values_at] = 0  # alignment padding: defined bytes
            sent = x[indices]
        else:
            sent = bk.xp.empty(count, np.float32 if x.dtype == np.float16 else x.dtype)
            bk.kernels.randomk_gather(x, sent, count, seed)
        p[values_at:end].view(self.values)[...] = sent
        if self._left_out_nonfinite(bk, x, count_nonfinite(bk.xp, sent), count):
            p[5] = FLAG_LOST_NONFINITE  # the flags byte of the header
        return p

    def _left_out_nonfinite(self, bk, x, sent: int, count: int) -> bool:
        """True if ``x`` has NaN/Inf beyond the ``sent`` of the ``count`` values sent."""
        return count_nonfinite(bk.xp, x) > sent

    def encode_with_residual(self, x, residual, out=None, seed: int | None = None):
        """Payload of ``x + residual``; ``residual`` becomes the target less its decoded value."""
        return self.encode_feedback(x, residual, out, seed)[0]

    def encode_feedback(self, x, residual, out=None, seed: int | None = None):
        """``encode_with_residual`` and whether the new residual is all finite. Elements
        not sent decode to 0, so the residual is the target but at the k sent indices: one
        pass adds (and counts NaN/Inf), the encode, then k updates; no decode of the vector."""
        bk, x = backend_of(x)
        fast = (self.sends_indices and bk.xp is np and isinstance(residual, np.ndarray)
                and x.dtype in (np.float32, np.float64) and residual.dtype == x.dtype
                and residual.shape == x.shape and residual.flags.c_contiguous)
        if not fast:  # randomk (scaled values, indices from a seed), float16, device arrays
            payload = super().encode_with_residual(x, residual, out, seed)
            return payload, count_nonfinite(bk.xp, residual) == 0
        check_float_array(x, f"{self.codec_id}.encode")
        nonfinite = cpu_kernels().add_counting_nonfinite(residual, x)
        payload = self.encode(residual, out=out, seed=seed)
        h = read_header(payload, bk)
        if h.flags & FLAG_LOST_NONFINITE:  # elements not sent decode to NaN: the plain way
            residual -= self.decode(payload)
            return payload, False
        indices, values = self._sections(payload, h)
        with np.errstate(invalid="ignore"):  # Inf - Inf: NaN, counted below, residual dropped
            sent = residual[indices] - values.astype(residual.dtype)
        residual[indices] = sent
        return payload, nonfinite == 0 and count_nonfinite(np, sent) == 0

    def _sections(self, payload, h):
        """Indices (None for randomk) and values of a payload, as views."""
        values_at, end = self._layout(h.p0)
        values = payload[values_at:end].view(self.values)
        if not self.sends_indices:
            return None, values
        return payload[HEADER_BYTES:HEADER_BYTES + 4 * h.p0].view(np.int32), values

    def _decode(self, bk, h, payload, out, accumulate):
        indices, values = self._sections(payload, h)
        if indices is not None and indices.size and (
                int(indices.min()) < 0 or int(indices.max()) >= h.n):
            raise ValueError(f"corrupt {self.codec_id} payload: index out of range")
        if values.dtype == np.float16:  # the kernels have no float16
            values = values.astype(np.float32)
        if not h.flags & FLAG_LOST_NONFINITE:
            if not accumulate:
                out[...] = 0
            return self._scatter(bk, h, indices, values, out, accumulate)
        target = bk.xp.full(h.n, np.nan, out.dtype)
        self._scatter(bk, h, indices, values, target, False)
        if accumulate:
            out += target
        else:
            out[...] = target

    def _scatter(self, bk, h, indices, values, out, accumulate) -> None:
        """out[indices] (+)= values."""
        bk.kernels.scatter(indices, values, out, accumulate)

    def _value_bound(self, x: np.ndarray) -> np.ndarray:
        """Rounding of a sent value to the value dtype (none if the input is no wider):
        an ulp, or half its smallest subnormal; Inf where it overflows to +-Inf."""
        a = np.abs(x).astype(np.float64)
        values = np.dtype(self.values)
        if values.itemsize >= x.dtype.itemsize:
            return np.zeros(a.shape)
        bound = a * np.finfo(values).eps + half_subnormal(values)
        with np.errstate(invalid="ignore"):  # NaN: the caller masks non-finite x
            return np.where(a < overflow_of(values), bound, np.inf)


def _check_count(codec_id: str, ratio, k) -> None:
    """Exactly one of ``ratio`` in (0, 1] and ``k`` >= 0 is given."""
    if (ratio is None) == (k is None):
        raise ValueError(f"{codec_id}: give exactly one of ratio= and k=")
    if ratio is not None and not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
        raise ValueError(f"{codec_id}: ratio must be in (0, 1], got {ratio!r}")
    if k is not None and not (isinstance(k, int) and k >= 0):
        raise ValueError(f"{codec_id}: k must be an int >= 0, got {k!r}")


class _Counted(_Sparse):
    """Sparse codec that sends a fixed number of elements: ``k``, or ``ceil(ratio * n)``."""

    named_settings = ("ratio", "k")

    def __init__(self, ratio: float | None = None, k: int | None = None, values: str = "float32"):
        _check_count(self.codec_id, ratio, k)
        super().__init__(values)
        self.ratio = ratio
        self.k = k

    def count(self, n: int) -> int:
        """Elements sent out of ``n``."""
        if n >= 1 << 31:
            raise ValueError(f"{self.codec_id}: n = {n} needs int64 indices (n < 2**31)")
        if self.k is not None:
            return min(self.k, n)
        return min(n, math.ceil(self.ratio * n))

    def wire_bytes(self, n: int, dtype="float32") -> int:
        """Header, ``count(n)`` indices and values."""
        return self._layout(self.count(n))[1]


class TopK(_Counted):
    """The k largest |x|, exactly (ties broken by index); NaN ranks highest, then Inf."""

    codec_id = "topk"

    def _encode(self, bk, x, out, seed):
        k = self.count(x.size)
        return self._write(bk, x, out, _topk_indices(bk.xp, x, k), k)

    def _left_out_nonfinite(self, bk, x, sent: int, count: int) -> bool:
        # NaN and Inf rank above every finite value: with a finite value sent, none is left
        return sent == count and super()._left_out_nonfinite(bk, x, sent, count)

    def error_bound(self, x) -> np.ndarray:
        """|x| of the elements not sent (0 plus value rounding for those sent); Inf
        everywhere if more than k elements are NaN/Inf (those not sent decode to NaN)."""
        x = np.asarray(x)
        bound = np.abs(x).astype(np.float64)
        k = self.count(x.size)
        sent = _topk_indices(np, x, k)
        bound[sent] = self._value_bound(x[sent])
        if count_nonfinite(np, x) > k:
            bound[:] = np.inf
        return np.where(np.isfinite(x), bound, np.inf)


def _topk_indices(xp, x, k: int):
    """Sorted int32 indices of the k largest |x| (NaN largest), ties to the lower index."""
    n = x.size
    if isinstance(x, np.ndarray) and x.dtype != np.float16:
        return cpu_kernels().topk_indices(x, k)
    if k == 0:
        return xp.zeros(0, np.int32)
    if k == n:
        return xp.arange(n, dtype=np.int32)
    key = xp.abs(x)
    part = xp.argpartition(key, n - k)
    # ties at the k-th value: take the lowest indices so the choice is reproducible
    kth = key[part[n - k]]
    if xp.isnan(kth):  # k or more NaN: the first k of them
        return xp.flatnonzero(xp.isnan(key))[:k].astype(np.int32)
    above = xp.flatnonzero(~(key <= kth))  # also NaN
    ties = xp.flatnonzero(key == kth)[: k - above.size]
    return xp.sort(xp.concatenate([above, ties])).astype(np.int32)


class RandomK(_Seeded, _Counted):
    """k coordinates drawn from a seed carried in the header: one per stratum of n/k.

    Element i of stratum j (size m_j) is sent with probability 1/m_j; with ``scaled``
    its value is multiplied by m_j on decode, which makes the codec unbiased.
    """

    codec_id = "randomk"
    stochastic = True
    sends_indices = False

    def __init__(self, ratio: float | None = None, k: int | None = None, values: str = "float32",
                 scaled: bool = True, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        super().__init__(ratio, k, values)
        self.scaled = bool(scaled)
        self._init_seed(seed, rng)

    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        """Unbiased when values are scaled by the stratum size."""
        return self.scaled

    def _encode(self, bk, x, out, seed):
        return self._write(bk, x, out, None, self.count(x.size), seed)

    def _scatter(self, bk, h, indices, values, out, accumulate) -> None:
        bk.kernels.randomk_scatter(values, out, h.p0, h.p1, self.scaled, accumulate)

    def error_bound(self, x) -> np.ndarray:
        """|x| if not sent, (m - 1)|x| if sent scaled: at most max(1, m - 1)|x| (m the
        largest stratum), plus rounding. Inf where a scaled value m|x| overflows the
        dtype on decode, and everywhere if x holds a NaN or Inf and k < n (any element
        may be left out, and then every element not sent decodes to NaN)."""
        x = np.asarray(x)
        k = self.count(x.size)
        m = np.ceil(x.size / k) if k else 1.0
        factor = max(1.0, m - 1) if self.scaled else 1.0
        a = np.abs(x).astype(np.float64)
        eps = eps_of(x.dtype)
        bound = (a * factor * (1 + 4 * eps) + self._value_bound(x) * m
                 + half_subnormal(x.dtype))
        if self.scaled:
            with np.errstate(invalid="ignore", over="ignore"):
                bound = np.where(a * m * (1 + 4 * eps) < overflow_of(x.dtype), bound, np.inf)
        if k < x.size and count_nonfinite(np, x):
            bound[:] = np.inf
        return np.where(np.isfinite(x), bound, np.inf)


class Threshold(_Sparse):
    """Every element with |x| >= ``tau`` (and every NaN/Inf): variable size."""

    codec_id = "threshold"
    fixed_size = False
    named_settings = ("tau",)

    def __init__(self, tau: float, values: str = "float32"):
        if not (isinstance(tau, (int, float)) and tau >= 0 and math.isfinite(tau)):
            raise ValueError(f"threshold: tau must be a finite number >= 0, got {tau!r}")
        super().__init__(values)
        self.tau = tau

    def wire_bytes(self, n: int, dtype="float32") -> int:
        """The largest payload: every element sent."""
        return self._layout(n)[1]

    def _encode(self, bk, x, out, seed):
        if x.size >= 1 << 31:
            raise ValueError(f"threshold: n = {x.size} needs int64 indices (n < 2**31)")
        indices = bk.xp.flatnonzero(~(bk.xp.abs(x) < self.tau)).astype(np.int32)
        return self._write(bk, x, out, indices, indices.size)

    def error_bound(self, x) -> np.ndarray:
        """|x| (< tau) where not sent, value rounding where sent."""
        x = np.asarray(x)
        a = np.abs(x).astype(np.float64)
        bound = np.where(a < self.tau, a, self._value_bound(x))
        return np.where(np.isfinite(x), bound, np.inf)

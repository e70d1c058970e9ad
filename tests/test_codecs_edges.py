"""Codecs at the edges of float: every codec's ``error_bound`` holds for every finite input.

Property-based (hypothesis) on the CPU kernels: the dtype, the codec and its block
size, the length and the values are drawn. Values: exact subnormals, 0 and -0, the
smallest normal, the largest finite value, whole vectors at one magnitude anywhere in
the dtype's range, magnitudes spread over all of it, and huge and tiny mixed in one
block. The named ``EDGE_CASES`` below are also run on the CUDA kernels under the
simulator (tests/test_codecs_cuda.py).

Where a bound is Inf the codec promises nothing (a cast that overflows to +-Inf, a
float64 element beyond float32's range); the tests also check that the bound stays
finite wherever the codecs promise it, and tight for the block quantizers, so neither
half can pass by loosening the other.
"""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zipcoll.codecs import BlockQuantizer, ErrorFeedback, Sign, get_codec, list_codecs
from zipcoll.codecs.base import half_subnormal
from zipcoll.codecs.sparsify import RandomK, Threshold, TopK

DTYPES = [np.float16, np.float32, np.float64]
BLOCKS = [8, 16, 24, 64, 256]
# every registered codec; those taking block= get one drawn from BLOCKS
BLOCK_SPECS = ["int8", "int8:stochastic=true", "int4", "int4:stochastic=true", "int2",
               "int2:stochastic=true", "qsgd", "qsgd:levels=1", "qsgd:levels=3",
               "qsgd:levels=100", "terngrad", "sign", "feedback:int8", "feedback:qsgd",
               "feedback:sign"]
OTHER_SPECS = ["none", "fp16", "bf16", "topk:ratio=0.25", "topk:k=3,values=float16",
               "randomk:ratio=0.25", "randomk:k=5,scaled=false", "randomk:ratio=0.5,values=float16",
               "threshold:tau=0", "threshold:tau=1e-40", "threshold:tau=1.0",
               "threshold:tau=1e30,values=float16", "feedback:topk:ratio=0.1",
               "feedback:randomk:ratio=0.25"]


def test_every_registered_codec_is_drawn():
    drawn = {spec.split(":")[0] for spec in BLOCK_SPECS + OTHER_SPECS}
    assert drawn == set(list_codecs())


def with_block(spec: str, block: int) -> str:
    """``spec`` with ``block=`` added (inside ``feedback:``)."""
    return f"{spec}{',' if spec.count(':') > (spec.startswith('feedback')) else ':'}block={block}"


def specials(dtype) -> list[float]:
    """The values at the edges of ``dtype``: 0, -0, subnormals, the smallest normal, the largest."""
    info = np.finfo(dtype)
    sub, tiny, big = float(info.smallest_subnormal), float(info.tiny), float(info.max)
    return [0.0, -0.0, sub, -sub, 3 * sub, tiny - sub, tiny, -tiny, big, -big,
            float(np.nextafter(dtype(big), dtype(0))), 1.0, -1.0]


def as_dtype(v: np.ndarray, dtype) -> np.ndarray:
    """float64 ``v`` in ``dtype``, clipped to its finite range."""
    big = float(np.finfo(dtype).max)
    return np.clip(v, -big, big).astype(dtype)


@st.composite
def edge_vectors(draw, dtype):
    """A finite 1-D ``dtype`` vector from one of the families of the module docstring."""
    info = np.finfo(dtype)
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lowest = info.minexp - info.nmant  # exponent of the smallest subnormal
    signs = rng.choice([-1.0, 1.0], n)
    family = draw(st.sampled_from(["one_scale", "spread", "subnormal", "huge_and_tiny", "drawn"]))
    if family == "one_scale":  # every |x| below 2**e, e anywhere in the range
        e = draw(st.integers(lowest, info.maxexp))
        v = signs * np.ldexp(rng.uniform(0, 1, n), e)  # float64's 2**1024 is past a Python float
    elif family == "spread":
        v = signs * np.exp2(rng.uniform(lowest, info.maxexp, n))
    elif family == "subnormal":  # exact multiples of the smallest subnormal
        v = rng.integers(-(2**info.nmant), 2**info.nmant, n) * float(info.smallest_subnormal)
    elif family == "huge_and_tiny":
        huge = rng.uniform(0.5, 1, n) * float(info.max)
        tiny = rng.integers(0, 2**info.nmant, n) * float(info.smallest_subnormal)
        v = signs * np.where(rng.random(n) < draw(st.floats(0, 1)), huge, tiny)
    else:  # hypothesis's own floats: it favours the edges
        v = np.array(draw(st.lists(st.floats(width=info.bits, allow_nan=False,
                                             allow_infinity=False), min_size=n, max_size=n)))
    x = as_dtype(v, dtype)
    for i, value in draw(st.lists(st.tuples(st.integers(0, max(n - 1, 0)),
                                            st.sampled_from(specials(dtype))), max_size=8)):
        if n:
            x[i] = value
    return x


def block_view(codec, a: np.ndarray) -> np.ndarray:
    """``a`` (float64) padded with zeros to whole blocks of ``codec``, one row a block."""
    pad = (-a.size) % codec.block
    return np.concatenate([a, np.zeros(pad)]).reshape(-1, codec.block)


def promises_finite(codec, dtype) -> bool:
    """Whether the bound of ``codec`` must be finite for every finite ``dtype`` input."""
    if isinstance(codec, ErrorFeedback):
        codec = codec.codec
    if isinstance(codec, BlockQuantizer):
        return dtype != np.float64  # float64 beyond float32's range is Inf in float32
    if isinstance(codec, (TopK, Threshold)) or (isinstance(codec, RandomK) and not codec.scaled):
        return np.dtype(codec.values).itemsize >= np.dtype(dtype).itemsize
    return codec.codec_id == "none"


def tight_bound(codec, x: np.ndarray) -> np.ndarray:
    """A bound no block quantizer's may exceed: a step (half if rounding to nearest) of
    the block's norm, rounding relative to the norm and the value, and an absolute
    term of float32's and the dtype's subnormal spacing (``sign``: |x| + mean |x|)."""
    a = np.abs(x.astype(np.float64))
    rows = block_view(codec, a)
    eps = max(np.finfo(x.dtype).eps, np.finfo(np.float32).eps)
    # the codec's own subnormal term, and the float32 step's rounding (half a subnormal)
    tiny = (codec.levels + 1) * 2.0**-149 + half_subnormal(x.dtype)
    if isinstance(codec, Sign):
        counts = np.minimum(codec.block, x.size - codec.block * np.arange(rows.shape[0]))
        mean = np.repeat(rows.sum(axis=1) / counts, codec.block)[:x.size]
        return (a + mean) * (1 + 4 * eps) + tiny
    norm = rows.max(axis=1) if codec.norm == 0 else np.sqrt((rows ** 2).sum(axis=1))
    norm = np.repeat(norm, codec.block)[:x.size]
    step = norm / codec.levels * (1 + 4 * eps)
    return (1.0 if codec.stochastic else 0.5) * step + 4 * eps * (norm + a) + tiny


def check_codec(spec: str, x: np.ndarray, seed: int) -> None:
    """decode(encode(x)) is within ``error_bound(x)``; the bound finite and tight where promised."""
    codec = get_codec(spec)
    if isinstance(codec, ErrorFeedback):
        payload = codec.encode(x, seed=seed, key="edge")  # a new key: no residual yet
        codec.reset()
    else:
        payload = codec.encode(x, seed=seed)
    with np.errstate(invalid="ignore", over="ignore"):
        y = codec.decode(payload).astype(np.float64)
        err = np.abs(y - x.astype(np.float64))
    bound = codec.error_bound(x)
    limited = np.isfinite(bound)
    bad = limited & ~(err <= bound)
    assert not bad.any(), (spec, x.dtype, x[bad][:4], y[bad][:4], err[bad][:4], bound[bad][:4])
    if promises_finite(codec, x.dtype):
        assert limited.all(), (spec, x.dtype, x[~limited][:4])
        assert np.isfinite(y).all(), (spec, x.dtype, x[~np.isfinite(y)][:4])
    inner = codec.codec if isinstance(codec, ErrorFeedback) else codec
    if isinstance(inner, BlockQuantizer) and x.dtype != np.float64:
        loose = bound > tight_bound(inner, x)
        assert not loose.any(), (spec, x[loose][:4], bound[loose][:4])


@st.composite
def codec_specs(draw):
    """A spec of any registered codec, with a drawn block size where it takes one."""
    if draw(st.booleans()):
        return with_block(draw(st.sampled_from(BLOCK_SPECS)), draw(st.sampled_from(BLOCKS)))
    return draw(st.sampled_from(OTHER_SPECS))


@pytest.mark.filterwarnings("ignore:overflow encountered")
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=codec_specs(), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**63 - 1))
def test_error_bound_holds_at_the_edges(data, spec, dtype, seed):
    check_codec(spec, data.draw(edge_vectors(dtype)), seed)


def edge_case(name: str, dtype, n: int = 40) -> np.ndarray:
    """The named edge vectors of ``EDGE_CASES`` (``n`` elements of ``dtype``)."""
    info = np.finfo(dtype)
    g = np.random.default_rng(n).standard_normal(n)
    sub, big = float(info.smallest_subnormal), float(info.max)
    if name == "subnormal":
        v = np.round(g * 8) * sub
    elif name.startswith("scale"):  # "scale=1e-37": one block magnitude
        v = g * float(name.partition("=")[2])
    elif name == "max":
        v = np.sign(g) * big * np.random.default_rng(1).uniform(0.5, 1, n)
    elif name == "huge_and_tiny":
        v = np.round(g * 8) * sub
        v[::7] = big
        v[3::7] = -big
    elif name == "zeros":
        v = np.zeros(n)
    elif name == "negative_zeros":
        v = -np.zeros(n)
    else:
        raise ValueError(name)
    return as_dtype(v, dtype)


EDGE_CASES = ["subnormal", "scale=1e-37", "scale=1e-38", "scale=1e-39", "scale=3e38", "max",
              "huge_and_tiny", "zeros", "negative_zeros", "scale=1e300", "scale=1e-300"]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", EDGE_CASES)
@pytest.mark.parametrize("spec", [with_block(s, 8) for s in BLOCK_SPECS] + OTHER_SPECS)
def test_error_bound_holds_on_named_edges(spec, case, dtype):
    check_codec(spec, edge_case(case, dtype), seed=3)


@pytest.mark.parametrize("spec", ["int8", "int4", "int2", "qsgd", "qsgd:levels=100", "terngrad"])
@pytest.mark.parametrize("scale", [1e-37, 1e-38, 1e-40, 1e-44])
def test_blocks_of_tiny_values_keep_their_relative_error(spec, scale):
    # a step below float32's normal range: 1 / step overflowed, every code was +-levels
    codec = get_codec(spec)
    x = (np.random.default_rng(0).standard_normal(512) * scale).astype(np.float32)
    y = codec.decode(codec.encode(x, seed=1))
    y, x = y.astype(np.float64), x.astype(np.float64)  # float32 squares would underflow
    rel = np.linalg.norm(y - x) / np.linalg.norm(x)
    limit = {"int8": 0.01, "int4": 0.2, "qsgd:levels=100": 0.1}.get(spec, 1.5)
    if scale < 1e-39:  # the step itself is subnormal: float32 holds it to fewer bits
        limit = max(limit, 0.5) if scale > 1e-41 else 2.0
    assert rel < limit, rel


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("spec", ["qsgd", "qsgd:levels=1", "qsgd:levels=100", "int8", "int4",
                                  "int8:stochastic=true", "terngrad"])
def test_nothing_finite_decodes_to_nan_or_inf(spec, dtype):
    # 3e38 (float32) or 6e4 (float16) blocks: an L2 norm past the range, or a step
    # rounded up so that levels x step overflowed
    big = float(np.finfo(dtype).max)
    for x in (np.full(256, big), np.full(256, -big * 0.9), np.r_[big, np.zeros(255)]):
        x = x.astype(dtype)
        y = get_codec(spec).decode(get_codec(spec).encode(x, seed=2))
        assert np.isfinite(y).all(), (spec, y[~np.isfinite(y)][:3])


@pytest.mark.parametrize("spec", ["int8", "int4", "qsgd", "sign", "int2", "terngrad"])
def test_float64_beyond_float32_is_its_cast_and_leaves_the_block_alone(spec):
    codec = get_codec(f"{spec}:block=8")
    x = np.linspace(-1, 1, 16)
    x[[2, 9]] = [1e300, -1e39]
    y = codec.decode(codec.encode(x, seed=4))
    expected = [math.inf, -math.inf] if codec.bits >= 3 else [math.nan, math.nan]
    if spec == "sign":
        expected = [math.inf, -math.inf]  # each block holds one kind of Inf
    np.testing.assert_array_equal(y[[2, 9]], expected)
    others = np.setdiff1d(np.arange(16), [2, 9])
    assert np.isfinite(y[others]).all()
    assert np.all(np.abs(y - x)[others] <= codec.error_bound(x)[others])


@pytest.mark.parametrize("spec,n", [("randomk:k=10", 600), ("topk:k=2", 100)])
def test_poisoned_sparse_payloads_are_unbounded(spec, n):
    # an unsent NaN makes every unsent element decode to NaN: the bound says Inf
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x[[5, 50, 77]] = np.nan
    codec = get_codec(spec)
    assert np.isinf(codec.error_bound(x)).all()
    y = codec.decode(codec.encode(x, seed=1))
    assert np.isnan(y).mean() > 0.5


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("spec,dtype,edge", [("fp16", np.float32, 65520.0),
                                             ("fp16", np.float64, 65520.0),
                                             ("bf16", np.float32, 2.0**128 - 2.0**119),
                                             ("bf16", np.float16, 65408.0)])
def test_casts_overflow_to_inf_where_the_bound_says(spec, dtype, edge):
    codec = get_codec(spec)
    below = np.nextafter(dtype(edge), dtype(0))
    x = np.array([below, -below, edge, -edge], dtype)
    y = codec.decode(codec.encode(x))
    np.testing.assert_array_equal(np.isinf(y), [False, False, True, True])
    np.testing.assert_array_equal(np.isinf(codec.error_bound(x)), [False, False, True, True])

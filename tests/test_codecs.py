"""Serial tests of zipcoll.codecs: contract, registry, bounds, formats, errors (no MPI)."""
import json
import math

import numpy as np
import pytest

from zipcoll.codecs import (FLAG_LOST_NONFINITE, HEADER_BYTES, Codec, ErrorFeedback, Int8,
                            UnknownCodecError, get_codec, list_codecs, read_header)
from zipcoll.codecs.base import parse_spec
from zipcoll.codecs.backend import host
from zipcoll.codecs.kernels.rules import FLOAT32_MAX

# one spec per codec and the variants whose layout or rounding differ
SPECS = [
    "none", "fp16", "bf16", "int8", "int8:block=64", "int8:stochastic=true,seed=1", "int4",
    "int4:block=24", "int2", "qsgd", "qsgd:levels=1", "qsgd:levels=100,seed=2", "terngrad",
    "sign", "sign:block=40", "topk:ratio=0.1", "topk:k=5,values=float16", "randomk:ratio=0.25",
    "randomk:k=3,scaled=false,seed=4", "threshold:tau=1.0", "threshold:tau=0.5,values=float16",
    "feedback:int4",
]
SIZES = [0, 1, 7, 8, 255, 256, 257, 1001]
DTYPES = [np.float16, np.float32, np.float64]


def data(n, dtype=np.float32, seed=0):
    """Gaussian test vector with a few large values."""
    x = np.random.default_rng(seed).standard_normal(n) * 3
    x[::97] *= 50
    return x.astype(dtype)


def test_every_codec_listed():
    expected = {"none", "fp16", "bf16", "int8", "int4", "int2", "qsgd", "terngrad", "sign",
                "topk", "randomk", "threshold", "feedback"}
    assert set(list_codecs()) == expected


@pytest.mark.parametrize("spec", SPECS)
def test_config_round_trip(spec):
    codec = get_codec(spec)
    config = json.loads(json.dumps(codec.get_config()))
    again = get_codec(config)
    assert again == codec and hash(again) == hash(codec)
    assert repr(again) == repr(codec) and type(codec).__name__ in repr(codec)
    assert get_codec(codec) is codec


@pytest.mark.parametrize("spec", SPECS + ["feedback:decay=0.25:sign", "feedback:feedback:int8"])
def test_spec_round_trip(spec):
    """The spec names what the codec is made from and what differs from the defaults,
    nothing else, and reads back as the same codec."""
    codec = get_codec(spec)
    assert get_codec(codec.spec()) == codec
    assert parse_spec(codec.spec()) == parse_spec(spec)  # SPECS name no default


def test_spec_leaves_out_defaults():
    assert get_codec({"id": "int8", "block": 256, "stochastic": False}).spec() == "int8"
    assert get_codec({"id": "topk", "ratio": 0.01, "values": "float32"}).spec() == "topk:ratio=0.01"
    assert get_codec("int8:seed=3,stochastic=true").spec() == "int8:seed=3,stochastic=true"
    assert ErrorFeedback("sign", decay=0.5).spec() == "feedback:sign"  # sign's own decay
    assert ErrorFeedback("int8", decay=0.5).spec() == "feedback:decay=0.5:int8"


def test_spec_strings_and_errors():
    assert get_codec("int4:block=128") == get_codec({"id": "int4", "block": 128})
    assert get_codec("topk:ratio=0.01").ratio == 0.01
    with pytest.raises(UnknownCodecError) as info:
        get_codec("zstd")
    assert isinstance(info.value, ValueError) and "int8" in str(info.value)
    for bad in ("int8:block=7", "topk", "topk:ratio=0.1,k=3", "qsgd:levels=0", "int8:nope=1",
                "int8:block", "threshold:tau=-1", "topk:k=2,values=int8"):
        with pytest.raises((ValueError, TypeError)):
            get_codec(bad)
    with pytest.raises(TypeError):
        get_codec(3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("spec", SPECS)
def test_bound_size_and_decode_add(spec, n, dtype):
    codec = get_codec(spec)
    x = data(n, dtype)
    payload = codec.encode(x)
    assert payload.dtype == np.uint8 and payload.ndim == 1
    if codec.fixed_size:
        assert payload.size == codec.wire_bytes(n, dtype)
    else:
        assert payload.size <= codec.wire_bytes(n, dtype)
    y = codec.decode(payload)
    assert y.dtype == dtype and y.shape == x.shape
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    assert np.all(err <= codec.error_bound(x)), spec
    acc = data(n, dtype, seed=1)
    expected = acc + y
    assert codec.decode_add(payload, acc) is acc
    # decode_add rounds once, acc + decode(...) twice: allow an ulp of the largest value
    scale = float(np.nanmax(np.abs(expected), initial=1.0)) * np.finfo(dtype).eps
    np.testing.assert_allclose(acc, expected, rtol=1e-6, atol=2 * scale)


@pytest.mark.parametrize("spec", ["int8", "int4", "topk:k=10", "fp16", "randomk:k=10"])
def test_encode_into_out_and_decode_into_out(spec):
    codec = get_codec(spec)
    x = data(300)
    out = np.full(codec.wire_bytes(300) + 5, 7, np.uint8)
    payload = codec.encode(x, out=out, seed=3)
    assert np.shares_memory(payload, out) and np.array_equal(payload, codec.encode(x, seed=3))
    y = np.empty(300, np.float32)
    assert codec.decode(payload, out=y) is y
    with pytest.raises(ValueError):
        codec.encode(x, out=np.empty(10, np.uint8))
    with pytest.raises(ValueError):
        codec.decode(payload, out=np.empty(299, np.float32))


def test_int8_within_half_step_of_its_block():
    codec = get_codec("int8:block=64")
    x = data(1000)
    y = codec.decode(codec.encode(x))
    pad = np.concatenate([x, np.zeros(24, x.dtype)]).reshape(-1, 64)
    step = np.repeat(np.abs(pad).max(axis=1) / 127, 64)[:1000]
    assert np.all(np.abs(y - x) <= 0.5 * step * (1 + 1e-5))


@pytest.mark.parametrize("bad", [np.arange(5), np.arange(5, dtype=np.int8),
                                 np.ones(4, np.complex64), np.array([True, False])])
@pytest.mark.parametrize("spec", ["int8", "fp16", "topk:k=1", "sign", "threshold:tau=1"])
def test_non_float_input_raises_type_error(spec, bad):
    with pytest.raises(TypeError):
        get_codec(spec).encode(bad)


def test_shape_errors():
    codec = get_codec("int8")
    with pytest.raises(ValueError):
        codec.encode(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError):
        codec.encode(np.ones(8, np.float32)[::2])


@pytest.mark.parametrize("spec", SPECS)
def test_corrupt_or_foreign_payloads_raise(spec):
    codec = get_codec(spec)
    payload = codec.encode(data(100))
    other = "int4" if spec.startswith("sign") else "sign:block=16"
    with pytest.raises(ValueError):
        get_codec(other).decode(payload)
    for broken in (payload[:HEADER_BYTES - 1], payload[:-1], np.concatenate([payload, payload[:1]])):
        with pytest.raises(ValueError):
            codec.decode(broken.copy())
    bad_magic = payload.copy()
    bad_magic[0] ^= 0xFF
    with pytest.raises(ValueError):
        codec.decode(bad_magic)
    bad_count = payload.copy()
    bad_count[8:16] = np.frombuffer(np.uint64(1 << 40).tobytes(), np.uint8)
    with pytest.raises(ValueError):
        codec.decode(bad_count)
    with pytest.raises(ValueError):
        codec.decode(payload.view(np.int8))


def test_block_mismatch_and_bad_indices_raise():
    with pytest.raises(ValueError, match="block"):
        get_codec("int8:block=128").decode(get_codec("int8").encode(data(500)))
    payload = get_codec("topk:k=4").encode(data(50))
    payload[HEADER_BYTES:HEADER_BYTES + 4] = np.frombuffer(np.int32(50).tobytes(), np.uint8)
    with pytest.raises(ValueError, match="index"):
        get_codec("topk:k=4").decode(payload)


def test_header_is_self_describing():
    x = data(1000, np.float64)
    h = read_header(get_codec("randomk:k=9").encode(x, seed=77), host())
    assert (h.n, h.dtype, h.p0, h.p1) == (1000, np.float64, 9, 77)


def test_topk_matches_a_sort():
    x = data(1001)
    for k in (0, 1, 10, 500, 1001):
        y = get_codec({"id": "topk", "k": k}).decode(get_codec({"id": "topk", "k": k}).encode(x))
        order = np.argsort(-np.abs(x), kind="stable")[:k]
        expected = np.zeros_like(x)
        expected[order] = x[order]
        np.testing.assert_array_equal(y, expected)


def _topk_reference(x, k):
    """Sorted indices of the k largest |x|, NaN largest, ties to the lower index."""
    key = np.where(np.isnan(x), np.inf, np.abs(x.astype(np.float64)))
    rank = np.lexsort((np.arange(x.size), -key))  # by key descending, then by index
    nan_first = np.concatenate([np.flatnonzero(np.isnan(x)), rank[~np.isnan(x[rank])]])
    return np.sort(nan_first[:k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["gauss", "ties", "misleading_sample", "nonfinite", "sorted"])
def test_topk_large_matches_the_reference(case, dtype):
    n = 1 << 20  # above the size where the kernels go parallel
    rng = np.random.default_rng(4)
    x = rng.standard_normal(n)
    if case == "ties":
        x = np.round(x * 4) / 4  # a few distinct values: the k-th ties with thousands
    elif case == "misleading_sample":
        x = np.ones(n)
        x[::16] = 2.0  # every sampled element is large, most others are not
    elif case == "sorted":  # the largest crowd the first chunks of the parallel pass
        x = np.linspace(1, 0, n)
    elif case == "nonfinite":
        x[rng.integers(0, n, 500)] = np.nan
        x[rng.integers(0, n, 500)] = -np.inf
    x = x.astype(dtype)
    for k in (1, 1000, n // 100, n // 10, n - 1):
        payload = get_codec({"id": "topk", "k": k}).encode(x)
        indices = payload[HEADER_BYTES:HEADER_BYTES + 4 * k].view(np.int32)
        np.testing.assert_array_equal(indices, _topk_reference(x, k), err_msg=f"k={k}")


def test_topk_ties_go_to_lower_indices():
    x = np.array([1, -2, 2, 2, 0.5, -2], np.float32)
    y = get_codec("topk:k=2").decode(get_codec("topk:k=2").encode(x))
    np.testing.assert_array_equal(y, [0, -2, 2, 0, 0, 0])


def test_threshold_sends_exactly_the_large_ones():
    x = data(1000)
    y = get_codec("threshold:tau=2").decode(get_codec("threshold:tau=2").encode(x))
    np.testing.assert_array_equal(y, np.where(np.abs(x) >= 2, x, 0))


def test_sign_is_sign_times_mean_abs():
    x = data(96)
    y = get_codec("sign:block=32").decode(get_codec("sign:block=32").encode(x))
    scale = np.repeat(np.abs(x).reshape(3, 32).mean(axis=1), 32).astype(np.float32)
    np.testing.assert_allclose(y, np.where(x >= 0, scale, -scale), rtol=1e-6)


def wide_range_blocks(block, rng):
    """float32 blocks of ``block`` values: magnitudes over all of float32 (subnormals too),
    near its largest, all equal, all zero, all subnormal, one tiny among huge ones."""
    wide = rng.choice([-1, 1], block) * np.exp2(rng.uniform(-149, 127, block))
    near_max = rng.uniform(0.5, 1, block) * np.finfo(np.float32).max
    equal = np.full(block, 1.1e-3)
    zero = np.zeros(block)
    subnormal = rng.uniform(-1, 1, block) * 1e-39
    mixed = np.full(block, 3e30)
    mixed[block // 2] = 1e-30
    return np.concatenate([wide, near_max, equal, zero, subnormal, mixed]).astype(np.float32)


@pytest.mark.parametrize("block", [8, 256, 4096])
def test_block_scales_are_within_an_ulp_of_exact(block):
    # sign's mean |x| and qsgd's L2 norm are summed in fixed point: as exact as float32 holds
    x = wide_range_blocks(block, np.random.default_rng(block))
    blocks = x.astype(np.float64).reshape(-1, block)
    for spec, exact in [
            (f"sign:block={block}", [np.float32(math.fsum(np.abs(b)) / block) for b in blocks]),
            # the step is at most float32's largest / levels: no code decodes past it
            (f"qsgd:block={block}", [min(math.sqrt(math.fsum(b * b)), FLOAT32_MAX) / 7
                                     for b in blocks])]:
        payload = get_codec(spec).encode(x, seed=1)
        scales = payload[HEADER_BYTES:HEADER_BYTES + 4 * len(blocks)].view(np.float32)
        exact = np.array(exact).astype(np.float32)
        with np.errstate(invalid="ignore"):
            near = (scales == exact) | (np.abs(scales - exact) <= np.spacing(exact))
        assert near.all(), (spec, scales[~near], exact[~near])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_casts_round_like_numpy():
    x = np.concatenate([data(500, np.float64), [70000.0, -1e300, 1e-300, 65520.0, 65519.0]])
    np.testing.assert_array_equal(get_codec("fp16").decode(get_codec("fp16").encode(x)),
                                  x.astype(np.float16).astype(np.float64))
    x32 = x.astype(np.float32)
    y = get_codec("bf16").decode(get_codec("bf16").encode(x32))
    np.testing.assert_array_equal(y, _bf16_reference(x32))


def _bf16_reference(x32):
    """bfloat16 by exact arithmetic: nearest of the two neighbours, ties to even."""
    b = x32.view(np.uint32).astype(np.uint64)
    lo = (b >> 16) << 16
    rest = b - lo
    up = (rest > 0x8000) | ((rest == 0x8000) & (((b >> 16) & 1) == 1))
    return ((lo + up * (1 << 16)).astype(np.uint32)).view(np.float32)


def test_bf16_of_float64_rounds_once():
    # ties in float32 but not in float64: a cast through float32 would round these wrongly
    x = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8, -(1 + 3 * 2**-8 - 2**-40)], np.float64)
    y = get_codec("bf16").decode(get_codec("bf16").encode(x))
    np.testing.assert_array_equal(y, [1 + 2**-7, 1, -(1 + 2**-7)])


STOCHASTIC = ["int8:stochastic=true", "int4:stochastic=true", "int2:stochastic=true",
              "qsgd", "qsgd:levels=1", "terngrad", "randomk:ratio=0.25"]


@pytest.mark.parametrize("spec", STOCHASTIC)
def test_stochastic_codecs_are_unbiased(spec):
    codec = get_codec(spec)
    assert codec.unbiased and codec.stochastic
    x = data(64, np.float64)
    trials = 4000
    samples = np.stack([codec.decode(codec.encode(x, seed=s)) for s in range(trials)])
    bound = codec.error_bound(x)
    # |mean - x| <= 5 sigma, sigma <= bound / sqrt(trials); plus float32 rounding
    assert np.all(np.abs(samples.mean(axis=0) - x) <= 5 * bound / np.sqrt(trials) + 1e-6 * np.abs(x))


def test_qsgd_variance_bound():
    codec = get_codec("qsgd:levels=4,block=64")
    x = data(256, np.float64)
    samples = np.stack([codec.decode(codec.encode(x, seed=s)) for s in range(2000)])
    variance = ((samples - x) ** 2).sum(axis=1).mean()
    assert variance <= 1.1 * codec.variance_bound(x).sum()


def test_seeds_reproduce_and_differ():
    x = data(500)
    a, b = get_codec("qsgd:seed=5"), get_codec("qsgd:seed=5")
    assert np.array_equal(a.encode(x), b.encode(x)) and np.array_equal(a.encode(x), b.encode(x))
    assert not np.array_equal(a.encode(x), a.encode(x))
    assert np.array_equal(a.encode(x, seed=9), b.encode(x, seed=9))
    rng = np.random.default_rng(3)
    c = get_codec("terngrad").__class__(rng=rng)
    assert c.encode(x).size == get_codec("terngrad").wire_bytes(500)


def test_deterministic_codecs_ignore_seed():
    x = data(300)
    for spec in ("int8", "sign", "topk:k=9", "bf16"):
        codec = get_codec(spec)
        assert not codec.stochastic
        assert np.array_equal(codec.encode(x, seed=1), codec.encode(x, seed=2))


# what each codec documents for NaN and Inf: kept as such, NaN, or the flag that poisons
NONFINITE = {
    "none": "kept", "fp16": "kept", "bf16": "kept", "topk:k=10": "kept",
    "threshold:tau=1": "kept", "int8": "kept", "int4": "kept", "int2": "nan",
    "qsgd": "kept", "qsgd:levels=3": "kept", "terngrad": "nan", "sign": "kept",
    "sign:block=8": "kept", "randomk:k=10": "poison",
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", NONFINITE)
def test_nan_and_inf_never_become_finite(spec, dtype):
    codec = get_codec(spec)
    x = data(600, dtype)
    bad = [3, 300, 599]
    x[bad] = [np.nan, np.inf, -np.inf]
    payload = codec.encode(x, seed=1)
    y = codec.decode(payload)
    assert not np.isfinite(y[bad]).any()
    rule = NONFINITE[spec]
    if rule == "kept":
        np.testing.assert_array_equal(y[bad], x[bad])
    elif rule == "nan":
        assert np.isnan(y[bad]).all()
    else:
        assert read_header(payload, host()).flags & FLAG_LOST_NONFINITE
    if rule != "poison":  # the other elements are as good as without the NaN and Inf
        ok = np.isfinite(x)
        assert np.isfinite(y[ok]).all()
        assert np.all(np.abs(y[ok] - x[ok]) <= codec.error_bound(x)[ok])
    acc = np.zeros_like(x)
    assert not np.isfinite(codec.decode_add(payload, acc)[bad]).any()


@pytest.mark.parametrize("spec", ["int8", "int4", "int2", "qsgd", "terngrad", "sign"])
def test_blocks_without_nonfinite_are_coded_as_before(spec):
    codec = get_codec(f"{spec}:block=64")
    x = data(256)
    clean = codec.decode(codec.encode(x, seed=5))
    x[70] = np.inf  # block 1
    y = codec.decode(codec.encode(x, seed=5))
    others = np.r_[0:64, 128:256]
    np.testing.assert_array_equal(y[others], clean[others])


def test_sign_block_with_nonfinite():
    codec = get_codec("sign:block=8")
    x = np.array([1, -2, np.nan, 4, 1, 1, 1, 1,  # NaN: only it non-finite
                  1, np.inf, -3, np.inf, 5, 6, 7, 8,  # one Inf twice: kept
                  np.inf, -np.inf, 1, 1, 1, 1, 1, 1,  # mixed: NaN
                  -1, 1, -1, 1, -1, 1, -1, 1], np.float32)
    y = codec.decode(codec.encode(x))
    expected = np.array([0, 0, np.nan, 0, 0, 0, 0, 0, 0, np.inf, 0, np.inf, 0, 0, 0, 0,
                         np.nan, np.nan, 0, 0, 0, 0, 0, 0, -1, 1, -1, 1, -1, 1, -1, 1], np.float32)
    np.testing.assert_array_equal(y, expected)


def test_int8_infinities_and_nan_in_one_block():
    codec = get_codec("int8:block=8")
    x = np.array([np.inf, -np.inf, np.nan, 126.0, -63.0, 0.5, 0, -126.0], np.float32)
    y = codec.decode(codec.encode(x))
    np.testing.assert_array_equal(y[:3], x[:3])
    np.testing.assert_allclose(y[3:], [126, -63, 1, 0, -126])  # step 126 / 126 = 1


class _Width(Int8):
    """Absmax codes of any width (not registered: Int8's tag, levels tell them apart)."""

    def __init__(self, bits, block=256):
        self.bits = bits
        super().__init__(block)


def _width_codec(bits, block):
    """A codec of ``bits``-bit codes: sign for 1, an absmax quantizer for the others."""
    return get_codec({"id": "sign", "block": block}) if bits == 1 else _Width(bits, block)


@pytest.mark.parametrize("block", [8, 24, 256])
@pytest.mark.parametrize("bits", range(1, 9))
def test_every_width_packs_into_exactly_wire_bytes(bits, block):
    codec = _width_codec(bits, block)
    for n in (0, 1, 5, 8, 9, 23, 24, 25, 255, 256, 257, 1001):
        x = data(n)
        nbytes = codec.wire_bytes(n)
        out = np.full(nbytes + 16, 0xA5, np.uint8)
        payload = codec.encode(x, out=out)
        assert payload.size == nbytes
        assert (out[nbytes:] == 0xA5).all(), f"{bits} bits wrote past wire_bytes"
        scales = -(-4 * -(-n // block) // 8) * 8
        assert nbytes == HEADER_BYTES + scales + -(-n * bits // 8)  # codes: ceil(n bits / 8)
        y = codec.decode(payload)
        assert np.all(np.abs(y.astype(np.float64) - x) <= codec.error_bound(x)), (bits, n)
        acc = np.ones(n, np.float32)
        np.testing.assert_allclose(codec.decode_add(payload, acc), 1 + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bits", [0, 9, 16, 2.5])
def test_widths_it_cannot_pack_are_refused(bits):
    with pytest.raises(ValueError, match="bits"):
        _width_codec(bits, 256)


@pytest.mark.parametrize("levels, bits", [(1, 2), (2, 3), (3, 3), (7, 4), (15, 5), (31, 6),
                                          (63, 7), (127, 8)])
def test_qsgd_takes_the_fewest_bits(levels, bits):
    codec = get_codec({"id": "qsgd", "levels": levels})
    assert codec.bits == bits
    x = data(1000, np.float64)
    payload = codec.encode(x, seed=3)
    assert payload.size == codec.wire_bytes(1000)
    assert np.all(np.abs(codec.decode(payload) - x) <= codec.error_bound(x))


def test_topk_drops_nonfinite_only_with_the_flag():
    x = np.zeros(10, np.float32)
    x[[1, 2, 3]] = np.nan
    codec = get_codec("topk:k=2")
    payload = codec.encode(x)
    assert read_header(payload, host()).flags & FLAG_LOST_NONFINITE
    assert np.isnan(codec.decode(payload)).all()


def test_error_feedback_tracks_the_sum():
    codec = ErrorFeedback("sign", decay=1.0)
    steps = [data(512, seed=s) for s in range(30)]
    sent = sum(codec.decode(codec.encode(x, key="w")) for x in steps)
    total = sum(steps)
    # the difference is the last residual only, not 30 steps of error
    assert np.allclose(total - sent, codec._residuals["w"], atol=1e-3)
    assert np.abs(total - sent).max() < np.abs(total).max()
    assert codec.keys() == ["w"]
    codec.encode(data(8), key="b")
    assert codec.nbytes() == (512 + 8) * 4
    codec.reset("w")
    assert codec.keys() == ["b"]
    with pytest.raises(ValueError):
        codec.encode(data(9), key="b")
    codec.reset()
    assert codec.keys() == []
    assert codec.fixed_size and not codec.lossless and codec.wire_bytes(512) == get_codec("sign").wire_bytes(512)


@pytest.mark.parametrize("spec,decay", [("sign", 0.5), ("int8", 1.0), ("topk:k=9", 1.0)])
def test_feedback_keeps_the_codecs_share_of_the_residual(spec, decay):
    """sign's residual is halved a step (its lag diverged training); the others keep it."""
    codec = ErrorFeedback(spec)
    assert codec.decay == decay and codec.get_config() == {"id": "feedback",
                                                           "codec": get_codec(spec).get_config()}
    x = data(512)
    lost = x - codec.decode(codec.encode(x, key="w"))
    np.testing.assert_array_equal(codec.residuals()["w"], np.float32(decay) * lost)


def test_feedback_decay_set_by_the_caller():
    codec = ErrorFeedback("sign", decay=0.25)
    assert ErrorFeedback.from_config(codec.get_config()).decay == 0.25
    x = data(512)
    lost = x - codec.decode(codec.encode(x, key="w"))
    np.testing.assert_array_equal(codec.residuals()["w"], np.float32(0.25) * lost)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="decay"):
            ErrorFeedback("sign", decay=bad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", ["int8", "int4:block=24", "int2", "int8:stochastic=true",
                                  "qsgd", "qsgd:levels=3", "terngrad", "sign", "sign:block=40",
                                  "topk:k=9", "topk:k=1", "topk:k=9,values=float16",
                                  "threshold:tau=1.0", "randomk:k=9", "fp16"])
def test_residual_written_while_encoding_is_the_two_pass_one(spec, dtype):
    codec = get_codec(spec)
    x = data(1001, dtype)
    x[[5, 600]] = [np.inf, np.nan]
    fused, plain = data(1001, dtype, seed=2), data(1001, dtype, seed=2)
    payload = codec.encode_with_residual(x, fused, seed=7)
    expected = Codec.encode_with_residual(codec, x, plain, seed=7)  # encode, then decode
    np.testing.assert_array_equal(payload, expected)
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("spec", ["int8", "sign", "int4:block=24", "topk:ratio=0.1"])
@pytest.mark.parametrize("n", [300, (1 << 18) + 5])  # the serial and the parallel kernels
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_error_feedback_drops_a_nonfinite_residual(spec, n, bad):
    """The encode pass counts the residual's NaN/Inf (block codecs, while encoding)."""
    codec = ErrorFeedback(spec)
    x = data(n)
    codec.encode(x, key=0)
    assert codec.keys() == [0]
    x[n - 3] = bad
    codec.encode(x, key=0)
    assert codec.keys() == []


def test_properties():
    flags = {c: (get_codec(c).lossless, get_codec(c).fixed_size, get_codec(c).sparse)
             for c in ("none", "int8", "topk:k=1", "threshold:tau=1")}
    assert flags == {"none": (True, True, False), "int8": (False, True, False),
                     "topk:k=1": (False, True, True), "threshold:tau=1": (False, False, True)}
    assert get_codec("int8:stochastic=true").unbiased and not get_codec("int8").unbiased
    assert not get_codec("randomk:k=2,scaled=false").unbiased


def test_missing_cupy_names_the_extra():
    from zipcoll.codecs import backend

    class FakeDeviceArray:
        __cuda_array_interface__ = {}

    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed")
    except ImportError:
        pass
    with pytest.raises(ImportError, match=r"zipcoll\[cuda12\]"):
        backend.backend_of(FakeDeviceArray())


def test_a_new_codec_needs_its_wire_tag(monkeypatch):
    from zipcoll.codecs import WIRE_TAGS, base
    from zipcoll.codecs.cast import _Cast

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # forget it afterwards
    with pytest.raises(ValueError, match="WIRE_TAGS"):
        type("Untagged", (_Cast,), {"codec_id": "untagged"})
    monkeypatch.setitem(WIRE_TAGS, "half2", WIRE_TAGS["fp16"])
    with pytest.raises(ValueError, match="unique"):
        type("Half2", (_Cast,), {"codec_id": "half2"})
    monkeypatch.setitem(WIRE_TAGS, "half2", max(WIRE_TAGS.values()) + 1)
    half2 = type("Half2", (_Cast,), {"codec_id": "half2"})
    codec = get_codec("half2")
    assert type(codec) is half2 and codec.wire_tag == WIRE_TAGS["half2"]
    x = data(100)
    np.testing.assert_array_equal(codec.decode(codec.encode(x)), x.astype(np.float16))
    with pytest.raises(ValueError, match="half2"):
        get_codec("fp16").decode(codec.encode(x))

"""bfloat16 buffers read in place: torch and JAX through their DLPack capsules, NumPy through
`ml_dtypes.bfloat16`; results handed back as the caller's kind; the float32 round trip."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from zipcoll import buffers
from zipcoll.collectives.dispatch import round_to_bfloat16, widen_bfloat16

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_torch_bfloat16_is_a_view_of_the_tensor():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    buf = buffers.as_array(t, writable=True)
    assert buf.dtype == BF16 and buf.shape == (3, 4) and buf.count == 12
    assert buf.array.ctypes.data == t.data_ptr()
    buf.array[5] = 2.5  # written through to the tensor
    assert t.reshape(-1)[5].item() == 2.5
    result = buffers.result_like(buf, buf.array)
    assert result.dtype == torch.bfloat16 and result.shape == (3, 4)
    assert torch.equal(result, t)


def test_the_view_keeps_the_tensor_alive():
    torch = pytest.importorskip("torch")
    buf = buffers.as_array(torch.full((1000,), 3.0, dtype=torch.bfloat16))
    gc.collect()
    assert np.all(buf.array.astype(np.float32) == 3.0)


def test_torch_bfloat16_refusals():
    torch = pytest.importorskip("torch")
    strided = torch.zeros(4, 6, dtype=torch.bfloat16)[:, ::2]
    with pytest.raises(ValueError, match="contiguous"):
        buffers.as_array(strided)
    with pytest.raises(TypeError, match="detach|grad"):
        buffers.as_array(torch.zeros(3, dtype=torch.bfloat16, requires_grad=True))


def test_jax_bfloat16_is_read_only_and_comes_back_as_jax():
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.arange(6, dtype=jnp.bfloat16)
    buf = buffers.as_array(a)
    assert buf.dtype == BF16 and not buf.writable
    np.testing.assert_array_equal(buf.array.astype(np.float32), np.arange(6))
    with pytest.raises(TypeError, match="immutable"):
        buffers.as_array(a, writable=True)
    back = buffers.result_like(buf, buf.array.copy())
    assert back.dtype == jnp.bfloat16 and bool((back == a).all())


def test_numpy_bfloat16():
    buf = buffers.as_array(np.ones((2, 3), BF16))
    assert buf.dtype == BF16 and buf.count == 6


def test_widen_and_round_to_nearest_even():
    """float32 -> bfloat16 as ml_dtypes rounds (nearest even, NaN kept), and back exactly."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(50_000).astype(np.float32) * np.float32(1e3)
    tie = np.float32(1 + 2**-8)  # exactly between two bfloat16 values: to the even one
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, tie, 3.4e38]
    out = np.empty(x.size, BF16)
    round_to_bfloat16(x, out)
    np.testing.assert_array_equal(out.view(np.uint16)[1:], x.astype(BF16).view(np.uint16)[1:])
    assert np.isnan(out[0].astype(np.float32)) and out[4] == 1.0
    wide = np.empty(x.size, np.float32)
    widen_bfloat16(out, wide)
    np.testing.assert_array_equal(wide[1:], out.astype(np.float32)[1:])

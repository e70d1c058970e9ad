"""zipcoll.lowrank on one process: orthogonalization, the compression rule, the state's
arguments and checkpoint format, and a NumPy-only run with torch not importable."""
import subprocess
import sys

import numpy as np
import pytest

from zipcoll import lowrank


@pytest.mark.parametrize("rank", [1, 2, 3, 6])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_orthogonalize_gives_orthonormal_columns_of_the_same_span(rank, dtype):
    g = np.random.default_rng(rank)
    batch = g.standard_normal((3, 20, rank)).astype(dtype)
    given = batch.copy()
    lowrank.orthogonalize(np, batch)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for q, a in zip(batch, given):
        np.testing.assert_allclose(q.T @ q, np.eye(rank), atol=tol)
        np.testing.assert_allclose(q @ (q.T @ a), a, atol=tol * 10)  # a lies in q's span


def test_gram_schmidt_matches_qr_up_to_signs():
    g = np.random.default_rng(0)
    batch = g.standard_normal((2, 12, 2))
    q = np.linalg.qr(batch)[0]
    lowrank.gram_schmidt(np, batch)
    np.testing.assert_allclose(np.abs(batch), np.abs(q), atol=1e-12)


def test_zero_column_stays_zero():
    batch = np.zeros((1, 6, 2))
    batch[0, :, 1] = 1.0
    lowrank.gram_schmidt(np, batch)
    assert np.isfinite(batch).all() and not batch[0, :, 0].any()
    np.testing.assert_allclose(np.linalg.norm(batch[0, :, 1]), 1.0)
    half = np.ones((1, 4, 2), np.float16)  # half precision: Gram-Schmidt at any rank
    lowrank.orthogonalize(np, half, 1e-8)
    assert half.dtype == np.float16 and np.isfinite(half).all()


@pytest.mark.parametrize("kwargs", [{"rank": 0}, {"rank": 1.5}, {"rank": True},
                                    {"min_compression_rate": -1},
                                    {"orthogonalization_epsilon": -1e-8},
                                    {"codec": "nonesuch"}])
def test_bad_settings_refused_at_construction(kwargs):
    with pytest.raises((ValueError, KeyError, TypeError)):
        lowrank.PowerSGDState(**kwargs)


def test_state_dict_is_plain_and_checked():
    state = lowrank.PowerSGDState(2, random_seed=5)
    state.qs[("w", 1)] = np.ones((4, 2), np.float32)
    state.residuals[("w", 1)] = np.zeros((6, 4), np.float32)
    saved = state.state_dict()
    again = lowrank.PowerSGDState(2, random_seed=99)
    # a loader that turns tuples into lists still finds the keys
    saved["qs"] = [[list(k), q] for k, q in saved["qs"]]
    again.load_state_dict(saved)
    assert list(again.qs) == [("w", 1)] and again.rng.randint(100) == state.rng.randint(100)
    with pytest.raises(ValueError, match="format"):
        again.load_state_dict({"something": "else"})
    with pytest.raises(ValueError, match="settings"):
        lowrank.PowerSGDState(2, warm_start=False).load_state_dict(saved)


def test_numpy_only_without_torch():
    """The whole step on one rank, with torch unimportable: the mean of one rank is the
    tensor itself where its rank fits, the 1-D tensor exactly, and small ones sent whole."""
    code = """
import sys
sys.modules["torch"] = None  # import torch now raises
import numpy as np
from zipcoll import lowrank
g = np.random.default_rng(0)
w = (g.standard_normal((30, 2)) @ g.standard_normal((2, 20))).astype(np.float32)
small, bias = g.standard_normal((3, 3)), g.standard_normal(7)
state = lowrank.PowerSGDState(2, use_error_feedback=False, algorithm="ring")
tensors = [w.copy(), small.copy(), bias.copy()]
lowrank.allreduce(state, tensors[:1])
lowrank.allreduce(state, tensors[1:], keys=["small", "bias"])
assert np.allclose(tensors[0], w, atol=1e-4), abs(tensors[0] - w).max()
assert np.array_equal(tensors[1], small) and np.array_equal(tensors[2], bias)
rate, before, after = state.compression_stats()
assert (before, after) == (600 + 9 + 7, 2 * 50 + 9 + 7), (before, after)
assert "torch" not in sys.modules or sys.modules["torch"] is None
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]

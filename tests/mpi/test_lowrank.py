"""zipcoll.lowrank under mpiexec, on NumPy arrays (no torch in this module).

Checked: a mean of rank <= r is recovered exactly (to rounding) over every schedule that
carries a codec and over MPI's own; with a codec on P and Q every rank ends with the same
bits; error feedback loses nothing over steps (outputs plus the mean residual add up to
the true means); a state_dict round trip continues bit for bit; non-blocking calls in
flight together, waited in any order, beside other zipcoll calls; one rank's bad argument
or different shapes fail every rank before data moves.
"""
import numpy as np
import pytest

import zipcoll
from zipcoll import lowrank
from arrays import differing_across_ranks

pytestmark = pytest.mark.mpi

N, M, TRUE_RANK = 40, 30, 3


def low_rank_grads(comm, dtype=np.float64, seed=0):
    """Each rank's matrices A Bᵢᵀ (their mean has rank 3), a 3-D one, and a bias."""
    g = np.random.default_rng(seed)
    a = g.standard_normal((N, TRUE_RANK))
    bs = [g.standard_normal((M, TRUE_RANK)) for _ in range(comm.size)]
    mine = a @ bs[comm.rank].T
    mean = a @ np.mean(bs, axis=0).T
    bias = np.arange(5.0) * (comm.rank + 1)
    tensors = [mine.astype(dtype), mine.reshape(N, 3, 10).astype(dtype), bias.astype(dtype)]
    return tensors, [mean, mean.reshape(N, 3, 10), np.arange(5.0) * (comm.size + 1) / 2]


@pytest.mark.parametrize("algorithm", ["ring", "tree", "rabenseifner", "native", "auto"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_low_rank_mean_recovered(comm, algorithm, dtype):
    for rank in (3, 5):  # QR above rank 2
        tensors, want = low_rank_grads(comm, dtype)
        state = lowrank.PowerSGDState(rank, use_error_feedback=False, algorithm=algorithm)
        lowrank.allreduce(state, tensors)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        for got, expected in zip(tensors, want):
            np.testing.assert_allclose(got, expected, atol=tol * 10, rtol=tol)
        assert not differing_across_ranks(comm, {str(i): t for i, t in enumerate(tensors)})


def test_gram_schmidt_at_low_rank(comm):
    """Rank 2 < the true rank: an approximation, the same on every rank, no better than
    the best rank-2 one (the SVD's) and no worse than sending nothing."""
    tensors, want = low_rank_grads(comm)
    state = lowrank.PowerSGDState(2, use_error_feedback=False, algorithm="ring")
    lowrank.allreduce(state, tensors)
    u, s, vt = np.linalg.svd(want[0])
    best = np.linalg.norm(want[0] - (u[:, :2] * s[:2]) @ vt[:2])
    error = np.linalg.norm(tensors[0] - want[0])
    assert best - 1e-9 <= error < np.linalg.norm(want[0])
    np.testing.assert_allclose(tensors[2], want[2])  # 1-D: exact
    assert not differing_across_ranks(comm, {"w": tensors[0]})


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "auto"])
@pytest.mark.parametrize("batched", [False, True])
def test_codec_on_p_and_q_same_bits_everywhere(comm, codec, algorithm, batched):
    state = lowrank.PowerSGDState(2, codec=codec, algorithm=algorithm,
                                  batch_tensors_with_same_shape=batched)
    g = np.random.default_rng(comm.rank)
    for step in range(4):
        tensors = [g.standard_normal((32, 24)).astype(np.float32) for _ in range(3)]
        tensors.append(g.standard_normal((8, 2, 3, 3)).astype(np.float32))
        lowrank.allreduce(state, tensors)
        assert not differing_across_ranks(comm, {f"{i}@{step}": t for i, t in enumerate(tensors)})
    rate, before, after = state.compression_stats()
    assert rate > 1 and before == 4 * (3 * 32 * 24 + 8 * 18)


def test_error_feedback_loses_nothing(comm):
    """sum of outputs + the ranks' mean residual = sum of the true means (to rounding)."""
    state = lowrank.PowerSGDState(1, algorithm="ring")
    g = np.random.default_rng(comm.rank)
    outputs, truths = np.zeros((20, 16)), np.zeros((20, 16))
    for _ in range(10):
        grad = g.standard_normal((20, 16))
        truths += comm.allreduce(grad) / comm.size
        lowrank.allreduce(state, [grad])
        outputs += grad
    residual = comm.allreduce(state.residuals[0]) / comm.size
    np.testing.assert_allclose(outputs + residual, truths, atol=1e-10)


def test_warm_start_off_draws_every_call(comm):
    state = lowrank.PowerSGDState(1, warm_start=False, use_error_feedback=False)
    lowrank.allreduce(state, [np.ones((8, 8))])
    lowrank.allreduce(state, [np.ones((8, 8))])
    reference = np.random.RandomState(0)
    reference.randint(10**9, size=2)  # one seed a call
    assert not state.qs and state.rng.randint(10**9) == reference.randint(10**9)


def test_state_dict_round_trip_continues_bit_for_bit(comm):
    def grads(step):
        g = np.random.default_rng(100 * step + comm.rank)
        return [g.standard_normal((24, 16)).astype(np.float32),
                g.standard_normal(16).astype(np.float32)]

    whole = lowrank.PowerSGDState(2, codec="int8", algorithm="ring", random_seed=3)
    for step in range(3):
        lowrank.allreduce(whole, grads(step), keys=["w", "b"])
    saved = whole.state_dict()
    resumed = lowrank.PowerSGDState(2, codec="int8", algorithm="ring", random_seed=3)
    resumed.load_state_dict(saved)
    for step in range(3, 6):
        a, b = grads(step), grads(step)
        lowrank.allreduce(whole, a, keys=["w", "b"])
        lowrank.allreduce(resumed, b, keys=["w", "b"])
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="settings"):
        lowrank.PowerSGDState(4).load_state_dict(saved)


def test_nonblocking_calls_in_flight_together(comm):
    """Two states and a plain all-reduce in flight at once, waited in reverse order:
    every rank starts the rounds in the same order, whichever rank is late."""
    tensors_a, want = low_rank_grads(comm)
    tensors_b, _ = low_rank_grads(comm)
    one = lowrank.PowerSGDState(3, use_error_feedback=False, algorithm="ring")
    two = lowrank.PowerSGDState(3, use_error_feedback=False, algorithm="tree")
    first = lowrank.iallreduce(one, tensors_a[:1], keys=["a"])
    plain = zipcoll.iallreduce(np.ones(4), op="sum", algorithm="ring")
    if comm.rank == 0:
        import time
        time.sleep(0.2)  # a late rank
    second = lowrank.iallreduce(one, tensors_a[1:], keys=["b", "c"])  # starts first's next round
    other = lowrank.iallreduce(two, tensors_b)
    assert not first.test() or comm.size == 1  # test() starts no round
    other.wait()
    second.wait()
    assert first.test() and second.test()  # second's wait finished the earlier one
    np.testing.assert_array_equal(plain.wait(), np.full(4, comm.size))
    for got, expected in zip(tensors_a + tensors_b, want + want):
        np.testing.assert_allclose(got, expected, atol=1e-9)
    assert not one.in_flight and not two.in_flight


def test_key_in_flight_refused(comm):
    state = lowrank.PowerSGDState(1)
    request = lowrank.iallreduce(state, [np.ones((8, 8))], keys=["w"])
    with pytest.raises(ValueError, match="in flight"):
        lowrank.iallreduce(state, [np.ones((8, 8))], keys=["w"])
    request.wait()


BAD = {
    "int": lambda: [np.ones((8, 8), np.int32)],
    "read-only": lambda: [np.broadcast_to(np.ones(8), (8, 8))],
    "mixed dtypes": lambda: [np.ones((8, 8)), np.ones((8, 8), np.float32)],
    "no tensors": lambda: [],
    "not an array": lambda: [[1.0, 2.0]],
}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("blocking", [True, False])
def test_one_ranks_bad_argument_fails_every_rank(comm, bad, blocking):
    if comm.size == 1:
        pytest.skip("needs another rank")
    state = lowrank.PowerSGDState(1, algorithm="ring")
    lowrank.allreduce(state, [np.ones((8, 8))])  # known keys: no comparison round
    mine = BAD[bad]() if comm.rank == comm.size - 1 else [np.ones((8, 8))]
    start = lowrank.allreduce if blocking else lambda *a: lowrank.iallreduce(*a).wait()
    expected = (TypeError, ValueError) if comm.rank == comm.size - 1 else zipcoll.MismatchError
    with pytest.raises(expected):
        start(state, mine)
    lowrank.allreduce(state, [np.ones((8, 8))])  # and the next call works again
    zipcoll.allreduce(np.ones(2), algorithm="ring")


def test_different_shapes_fail_every_rank(comm):
    """The same sizes on the wire, other shapes: the first call's comparison refuses it."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    state = lowrank.PowerSGDState(1, algorithm="ring")
    shapes = [(12, 8), (8, 12)] if comm.rank == 0 else [(8, 12), (12, 8)]
    with pytest.raises(zipcoll.MismatchError, match="different matrices"):
        lowrank.allreduce(state, [np.ones(s) for s in shapes])
    other = lowrank.PowerSGDState(2 if comm.rank == 0 else 1, algorithm="ring")
    with pytest.raises(zipcoll.MismatchError):
        lowrank.allreduce(other, [np.ones((12, 8))])


def test_strided_and_fortran_arrays_written_back(comm):
    """Arrays whose reshape is a copy (Fortran order, a transposed view) still get the result."""
    tensors, want = low_rank_grads(comm)
    given = [np.asfortranarray(tensors[0]), tensors[0].T.copy().T]
    state = lowrank.PowerSGDState(3, algorithm="ring")
    lowrank.allreduce(state, given)
    for got in given:
        np.testing.assert_allclose(got, want[0], atol=1e-9)

"""Bad arguments: a clear exception on every rank, before any message, buffers untouched.

Where every rank passes the same bad arguments, each raises the reason itself (with or
without the agreement check). Where ranks disagree, or only one rank's arguments are
bad, the agreement check (on by default for every algorithm, native and auto included)
makes the others raise MismatchError instead of waiting. Each test ends with a good call,
to show the communicator is still in step.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import expected, rank_data
from zipcoll.errors import MismatchError

pytestmark = pytest.mark.mpi

CHECKED = ("auto", "native", "ring", "tree", "dbtree", "rabenseifner")
N = 16


def raised(fn) -> BaseException | None:
    """The exception `fn()` raised, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test asserts on the type
        return exc
    return None


def assert_still_in_step(comm, algorithm: str) -> None:
    """A good call after the failed one gives MPI's answer."""
    x = rank_data("float64", N, comm.rank)
    got = zipcoll.allreduce(x, comm=comm, algorithm=algorithm)
    np.testing.assert_allclose(got, expected(comm, x), rtol=1e-12, atol=1e-12)


def buffers() -> tuple[np.ndarray, np.ndarray]:
    """A send and a receive buffer with recognisable contents."""
    return np.arange(N, dtype=np.float32), np.full(N, -7.0, np.float32)


def readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# (id, exception, make (sendbuf, recvbuf, op) from fresh buffers)
SAME_ON_EVERY_RANK = [
    ("recvbuf too small", ValueError, lambda s, r: (s, r[: N - 1], MPI.SUM)),
    ("recvbuf read-only", ValueError, lambda s, r: (s, readonly(r), MPI.SUM)),
    ("IN_PLACE recvbuf read-only", ValueError, lambda s, r: (MPI.IN_PLACE, readonly(r), MPI.SUM)),
    ("IN_PLACE without recvbuf", ValueError, lambda s, r: (MPI.IN_PLACE, None, MPI.SUM)),
    ("BAND on float32", TypeError, lambda s, r: (s, r, MPI.BAND)),
    ("MAX on complex64", TypeError,
     lambda s, r: (s.astype(np.complex64), r.astype(np.complex64), MPI.MAX)),
    ("LAND on float32 by name", TypeError, lambda s, r: (s, r, "land")),
    ("dtype mismatch", TypeError, lambda s, r: (s, r.astype(np.float64), MPI.SUM)),
    ("sendbuf not contiguous", ValueError,
     lambda s, r: (np.repeat(s, 2)[::2], r, MPI.SUM)),
    ("recvbuf not contiguous", ValueError,
     lambda s, r: (s, np.repeat(r, 2)[::2], MPI.SUM)),
    ("sendbuf not a buffer", TypeError, lambda s, r: ("not a buffer", r, MPI.SUM)),
    ("unknown op name", ValueError, lambda s, r: (s, r, "average")),
    ("op not an op", TypeError, lambda s, r: (s, r, 3)),
]


@pytest.mark.parametrize("algorithm", ("native", "auto") + CHECKED)
@pytest.mark.parametrize("exception,make", [c[1:] for c in SAME_ON_EVERY_RANK],
                         ids=[c[0] for c in SAME_ON_EVERY_RANK])
def test_bad_arguments_raise_on_every_rank(comm, algorithm, exception, make):
    send, recv = buffers()
    sendbuf, recvbuf, op = make(send, recv)
    before = [np.array(b, copy=True) for b in (sendbuf, recvbuf) if isinstance(b, np.ndarray)]
    error = raised(lambda: zipcoll.allreduce(sendbuf, recvbuf, op=op, comm=comm,
                                             algorithm=algorithm))
    after = [b for b in (sendbuf, recvbuf) if isinstance(b, np.ndarray)]
    assert type(error) is exception, f"expected {exception.__name__}, got {error!r}"
    assert not isinstance(error, MismatchError)
    for old, new in zip(before, after):
        np.testing.assert_array_equal(new, old)  # nothing the caller owns was modified
    assert_still_in_step(comm, algorithm)


@pytest.mark.parametrize("call", [zipcoll.allreduce, zipcoll.iallreduce])
def test_unknown_algorithm(comm, call):
    send, recv = buffers()
    with pytest.raises(ValueError, match="unknown algorithm"):
        call(send, recv, comm=comm, algorithm="nope")
    np.testing.assert_array_equal(recv, buffers()[1])


def test_intracomm_unknown_algorithm(comm):
    with pytest.raises(ValueError, match="nope"):
        zipcoll.Intracomm(comm, algorithm="nope")


def test_iallreduce_bad_argument_raises_at_the_call(comm):
    send, recv = buffers()
    with pytest.raises(ValueError):
        zipcoll.iallreduce(send, readonly(recv), comm=comm, algorithm="ring")
    assert_still_in_step(comm, "ring")


# -- ranks that disagree ------------------------------------------------------------------

def disagreeing(comm, field: str):
    """(sendbuf, recvbuf, op, algorithm) where rank 0 differs from the others in `field`."""
    odd = comm.rank == 0
    count = N + 1 if odd and field == "count" else N
    dtype = np.float64 if odd and field == "dtype" else np.float32
    op = MPI.MAX if odd and field == "op" else MPI.SUM
    algorithm = "tree" if odd and field == "algorithm" else "ring"
    return np.ones(count, dtype), np.full(count, -7, dtype), op, algorithm


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("common", ["ring", "native", "auto"])
@pytest.mark.parametrize("field", ["count", "dtype", "op", "algorithm"])
def test_disagreement_raises_mismatch_on_every_rank(comm, field, common):
    send, recv, op, algorithm = disagreeing(comm, field)
    algorithm = algorithm.replace("ring", common)
    error = raised(lambda: zipcoll.allreduce(send, recv, op=op, comm=comm, algorithm=algorithm))
    assert isinstance(error, MismatchError), repr(error)
    assert field in str(error)
    assert "rank 0" in str(error) and "rank" + "s" * (comm.size > 2) in str(error)
    assert np.all(recv == -7)
    assert_still_in_step(comm, common)


@pytest.mark.mpi(min_size=2)
def test_a_call_like_its_last_one_still_meets_a_changed_call(comm):
    """Agreements reuse their buffers and leave a vector like the last one in place: a
    rank whose call repeats its last one exactly still learns that another's changed."""
    x = np.ones(8, np.float32)
    for count in (8, 6, 8, 6):
        zipcoll.allreduce(x[:count], comm=comm, algorithm="ring")
    count = 6 if comm.rank == 0 else 7  # rank 0 repeats its last call
    recv = np.full(count, -7, np.float32)
    error = raised(lambda: zipcoll.allreduce(x[:count], recv, comm=comm, algorithm="ring"))
    assert isinstance(error, MismatchError) and "count" in str(error), repr(error)
    assert np.all(recv == -7)
    assert_still_in_step(comm, "ring")


@pytest.mark.mpi(min_size=2)
def test_mismatch_names_what_each_rank_had(comm):
    count = 17 if comm.rank == 0 else 16
    error = raised(lambda: zipcoll.allreduce(np.ones(count, np.float32), comm=comm))
    assert isinstance(error, MismatchError)
    assert "count: 17 on rank 0" in str(error) and "16 on rank" in str(error), str(error)


@pytest.mark.mpi(min_size=2)
def test_check_can_be_turned_off(comm, zipcoll_env):
    """ZIPCOLL_CHECK=0: no agreement round; a good call still works."""
    zipcoll_env(ZIPCOLL_CHECK="0")
    assert not zipcoll.collectives.api.checks_enabled()
    assert_still_in_step(comm, "ring")
    assert_still_in_step(comm, "native")


# (id, exception on the bad rank, bad (sendbuf, recvbuf, op) from fresh buffers)
BAD_ON_ONE_RANK = [
    ("recvbuf read-only", ValueError, lambda s, r: (s, readonly(r), MPI.SUM)),
    ("recvbuf too small", ValueError, lambda s, r: (s, r[:-1], MPI.SUM)),
    ("sendbuf not a buffer", TypeError, lambda s, r: (object(), r, MPI.SUM)),
    ("dtype mismatch", TypeError, lambda s, r: (s, r.astype(np.float64), MPI.SUM)),
]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algorithm", CHECKED)
@pytest.mark.parametrize("exception,make", [c[1:] for c in BAD_ON_ONE_RANK],
                         ids=[c[0] for c in BAD_ON_ONE_RANK])
def test_bad_argument_on_one_rank(comm, algorithm, exception, make):
    bad_rank = 1
    send, recv = buffers()
    sendbuf, recvbuf, op = make(send, recv) if comm.rank == bad_rank else (send, recv, MPI.SUM)
    error = raised(lambda: zipcoll.allreduce(sendbuf, recvbuf, op=op, comm=comm,
                                             algorithm=algorithm))
    if comm.rank == bad_rank:
        assert type(error) is exception, repr(error)
    else:
        assert isinstance(error, MismatchError), repr(error)
        assert "another rank" in str(error)
    np.testing.assert_array_equal(recv, buffers()[1])
    np.testing.assert_array_equal(send, buffers()[0])
    assert_still_in_step(comm, algorithm)


# -- more bad input (docs/errors.md lists every case and the test that shows it) ------------

@pytest.mark.parametrize("algorithm", ["ring", "auto", "hierarchical"])
@pytest.mark.parametrize("codec,exception,message", [
    ("nope", ValueError, "unknown codec 'nope'"),  # UnknownCodecError, a ValueError
    ("int8:block=0", ValueError, "block"),
    ({"id": "topk", "ratio": 2}, ValueError, "ratio"),
    (3, TypeError, "codec spec"),
], ids=["unknown", "bad-parameter", "bad-config-dict", "not-a-spec"])
def test_bad_codec_raises_on_every_rank(comm, algorithm, codec, exception, message):
    send, recv = buffers()
    error = raised(lambda: zipcoll.allreduce(send, recv, comm=comm, algorithm=algorithm,
                                             codec=codec))
    assert isinstance(error, exception) and not isinstance(error, MismatchError), repr(error)
    assert message in str(error)
    np.testing.assert_array_equal(recv, buffers()[1])
    assert_still_in_step(comm, "ring")


def test_intracomm_unknown_codec(comm):
    with pytest.raises(ValueError, match="unknown codec 'nope'"):
        zipcoll.Intracomm(comm, algorithm="ring", codec="nope")


@pytest.mark.parametrize("algorithm,exception,message", [
    (3, TypeError, "must be a string"),
    ("ring:tree", ValueError, "unknown algorithm"),
    ("hierarchical:nope", ValueError, "unknown inter-level schedule"),
    ("hierarchical:torus", ValueError, "unknown inter-level schedule"),
])
def test_bad_algorithm_name(comm, algorithm, exception, message):
    send, recv = buffers()
    with pytest.raises(exception, match=message):
        zipcoll.allreduce(send, recv, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(recv, buffers()[1])


@pytest.mark.parametrize("algorithm", ["native", "ring"])
@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_mean_on_a_non_float_dtype(comm, algorithm, dtype):
    with pytest.raises(TypeError):
        zipcoll.allreduce(np.ones(N, dtype), op="mean", comm=comm, algorithm=algorithm)
    assert_still_in_step(comm, algorithm)


@pytest.mark.parametrize("topology", ["2x2", "wrong size"])
def test_topology_that_is_not_one_of_this_communicator(comm, topology):
    if topology == "wrong size":
        topology = zipcoll.Topology.from_layout(comm.size + 1, 0)
    send, recv = buffers()
    with pytest.raises(ValueError, match=f"zipcoll.Topology of {comm.size} ranks"):
        zipcoll.allreduce(send, recv, comm=comm, algorithm="hierarchical", topology=topology)
    np.testing.assert_array_equal(recv, buffers()[1])
    assert_still_in_step(comm, "hierarchical")


@pytest.mark.mpi(min_size=2)
def test_ranks_disagree_on_the_layout(comm):
    # rank 0: every rank its own node; the others: one node of all ranks
    ranks_per_node = 1 if comm.rank == 0 else comm.size
    topology = zipcoll.Topology.from_layout(comm.size, comm.rank, ranks_per_node=ranks_per_node)
    send, recv = buffers()
    error = raised(lambda: zipcoll.allreduce(send, recv, comm=comm, algorithm="hierarchical",
                                             topology=topology))
    assert isinstance(error, MismatchError) and "layout" in str(error), repr(error)
    np.testing.assert_array_equal(recv, buffers()[1])
    assert_still_in_step(comm, "hierarchical")


@pytest.mark.parametrize("in_place", [True, False], ids=["in place", "as recvbuf"])
def test_jax_array_as_the_result_buffer(comm, in_place):
    """JAX arrays are immutable: a new array is returned, never written into one."""
    jnp = pytest.importorskip("jax.numpy")
    target = jnp.arange(N, dtype=jnp.float32)
    sendbuf = MPI.IN_PLACE if in_place else np.ones(N, np.float32)
    with pytest.raises(TypeError, match="JAX arrays are immutable"):
        zipcoll.allreduce(sendbuf, target, comm=comm, algorithm="ring")
    np.testing.assert_array_equal(np.asarray(target), np.arange(N, dtype=np.float32))
    got = zipcoll.allreduce(target, comm=comm, algorithm="ring")  # the way that works
    np.testing.assert_array_equal(np.asarray(got), np.arange(N, dtype=np.float32) * comm.size)


@pytest.mark.parametrize("call", [zipcoll.allreduce, zipcoll.iallreduce])
def test_comm_that_is_not_a_communicator(comm, call):
    send, recv = buffers()
    with pytest.raises(TypeError, match="comm must be"):
        call(send, recv, comm="world", algorithm="ring")
    np.testing.assert_array_equal(recv, buffers()[1])

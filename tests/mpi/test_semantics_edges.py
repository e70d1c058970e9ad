"""Edges of MPI's semantics: aliased buffers, and one answer from `auto` whatever the size.

Aliasing: sendbuf and recvbuf that share memory without MPI.IN_PLACE are a ValueError on
every rank that aliases, and MismatchError on the others, before any data moves (Open MPI
says MPI_ERR_BUFFER); disjoint views of one array work. The next call works.

One answer: `auto` hands the MPI library only reductions whose result is zipcoll's own
(integers wrap, MAX/MIN propagate NaN), so 8 items and 1M items agree with every other
algorithm: Open MPI saturates 8- and 16-bit integer sums, and its float MAX/MIN drop NaN.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import FakeCUDA, expected, rank_data
from zipcoll.errors import MismatchError

pytestmark = pytest.mark.mpi

N = 64
ALGORITHMS = zipcoll.ALGORITHMS  # every schedule in the registry, and auto


def raised(fn) -> BaseException | None:
    """The exception `fn()` raised, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test asserts on the type
        return exc


def assert_next_call_works(comm, algorithm: str) -> None:
    x = rank_data("float64", N, comm.rank)
    result = zipcoll.allreduce(x, comm=comm, algorithm=algorithm)
    np.testing.assert_allclose(result, expected(comm, x), rtol=1e-12, atol=1e-12)


def assert_aliasing_error(error: BaseException | None) -> None:
    assert type(error) is ValueError, repr(error)
    assert "sendbuf and recvbuf" in str(error) and "MPI.IN_PLACE" in str(error), str(error)


# (sendbuf, recvbuf) sharing memory, from one array of 2N float64
ALIASES = {
    "same array": lambda a: (a, a),
    "same memory, two views": lambda a: (a[:N], a[:N]),
    "overlapping views": lambda a: (a[:N], a[4:N + 4]),
    "recvbuf before sendbuf": lambda a: (a[8:N + 8], a[:N]),
    "one item shared": lambda a: (a[:N], a[N - 1:2 * N - 1]),
    "spec over the same array": lambda a: ([a, MPI.DOUBLE], a),
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("alias", list(ALIASES))
def test_aliased_buffers_raise_on_every_rank(comm, algorithm, alias):
    base = rank_data("float64", 2 * N, comm.rank)
    before = base.copy()
    sendbuf, recvbuf = ALIASES[alias](base)
    error = raised(lambda: zipcoll.allreduce(sendbuf, recvbuf, comm=comm, algorithm=algorithm))
    assert_aliasing_error(error)
    np.testing.assert_array_equal(base, before)  # nothing was written
    assert_next_call_works(comm, algorithm)


@pytest.mark.parametrize("algorithm", ["auto", "native", "ring", "allgather"])
@pytest.mark.parametrize("call", ["iallreduce", "Intracomm.Allreduce", "Intracomm.Iallreduce"])
def test_aliased_buffers_raise_through_every_entry_point(comm, algorithm, call):
    a = rank_data("float64", N, comm.rank)
    zcomm = zipcoll.Intracomm(comm, algorithm=algorithm)
    calls = {"iallreduce": lambda: zipcoll.iallreduce(a, a, comm=comm,
                                                      algorithm=algorithm).wait(),
             "Intracomm.Allreduce": lambda: zcomm.Allreduce(a, a),
             "Intracomm.Iallreduce": lambda: zcomm.Iallreduce(a, a).wait()}
    assert_aliasing_error(raised(calls[call]))
    assert_next_call_works(comm, algorithm)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_aliasing_on_one_rank_raises_on_every_rank(comm, algorithm):
    x = rank_data("float64", N, comm.rank)
    before = x.copy()
    recv = x if comm.rank == 1 else np.zeros_like(x)
    error = raised(lambda: zipcoll.allreduce(x, recv, comm=comm, algorithm=algorithm))
    if comm.rank == 1:
        assert_aliasing_error(error)
    else:
        assert isinstance(error, MismatchError) and "another rank" in str(error), repr(error)
        np.testing.assert_array_equal(recv, 0)
    np.testing.assert_array_equal(x, before)
    assert_next_call_works(comm, algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("order", ["send first", "recv first"])
def test_disjoint_views_of_one_array_work(comm, algorithm, order):
    """Adjacent views (the end of one is the start of the other) share no byte."""
    x = rank_data("int32", N, comm.rank)
    base = np.zeros(2 * N, np.int32)
    send, recv = (base[:N], base[N:]) if order == "send first" else (base[N:], base[:N])
    send[...] = x
    zipcoll.allreduce(send, recv, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(recv, expected(comm, x))
    np.testing.assert_array_equal(send, x)


def test_in_place_still_works(comm):
    x = rank_data("float64", N, comm.rank)
    want = expected(comm, x)
    zipcoll.allreduce(MPI.IN_PLACE, x, comm=comm, algorithm="ring")
    np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-12)


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError


@pytest.mark.parametrize("algorithm", ["auto", "ring"])
def test_aliased_device_buffers_raise(comm, algorithm, no_cupy):
    """Device memory (`__cuda_array_interface__` pointers), without CuPy: only MPI reads it."""
    a = rank_data("float64", N + 8, comm.rank)
    for sendbuf, recvbuf in ((FakeCUDA(a), FakeCUDA(a)), (FakeCUDA(a[:N]), FakeCUDA(a[4:N + 4]))):
        assert_aliasing_error(raised(lambda: zipcoll.allreduce(sendbuf, recvbuf, comm=comm,
                                                               algorithm=algorithm)))
    x = a[:N].copy()
    base = np.zeros(2 * N)
    base[:N] = x
    zipcoll.allreduce(FakeCUDA(base[:N]), FakeCUDA(base[N:]), comm=comm, algorithm=algorithm)
    np.testing.assert_allclose(base[N:], expected(comm, x), rtol=1e-12, atol=1e-12)


def test_aliased_simulated_device_arrays_raise(comm):
    """Numba's CUDA simulator's device arrays (the tests' stand-in for a GPU)."""
    from numba import cuda

    d = cuda.to_device(rank_data("float64", N, comm.rank))
    assert_aliasing_error(raised(lambda: zipcoll.allreduce(d, d, comm=comm, algorithm="ring")))
    assert_next_call_works(comm, "ring")


def test_sparse_allreduce_out_may_hold_the_values(comm):
    """sparse_allreduce reads every pair before it writes `out`: values inside `out` work."""
    size, k = 16, 4
    out = np.zeros(size)
    out[:k] = np.arange(k) + 10.0 * comm.rank
    indices = (np.arange(k) * 3 + comm.rank) % size
    result = zipcoll.sparse_allreduce(out[:k], indices, size, comm=comm, out=out)
    want = np.zeros(size)
    for r in range(comm.size):
        np.add.at(want, (np.arange(k) * 3 + r) % size, np.arange(k) + 10.0 * r)
    assert result is out
    np.testing.assert_array_equal(out, want)


# -- one answer whatever the size ----------------------------------------------------------

SIZES = (8, 1 << 20)
OVERFLOWING_SUMS = [("int8", "sum"), ("uint8", "sum"), ("int16", "sum"), ("uint16", "sum")]
NAN_MAX_MIN = [(d, op) for d in ("float16", "float32", "float64") for op in ("max", "min")]


def edge_data(dtype: str, op: str, n: int, rank: int) -> np.ndarray:
    """Sums near the top of the range (they overflow from 2 ranks up); for MAX/MIN, NaN on
    rank 1 at every third item and on rank 0 at the next one. Periodic: the first 8 items
    are the same at every length."""
    dtype = np.dtype(dtype)
    i = np.arange(n)
    if op == "sum":
        info = np.iinfo(dtype)
        return (info.max - (i + rank) % 3).astype(dtype)
    x = ((i + rank) % 5 + 1.5).astype(dtype)
    x[(i % 3 == 0) if rank == 1 else (i % 3 == 1) if rank == 0 else np.zeros(n, bool)] = np.nan
    return x


def zipcolls_answer(comm, dtype: str, op: str, n: int) -> np.ndarray:
    """C's and IEEE's rules over every rank's data: integers wrap, MAX/MIN propagate NaN."""
    parts = np.stack([edge_data(dtype, op, n, r) for r in range(comm.size)])
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(over="ignore"):
        return ufunc.reduce(parts, axis=0, dtype=parts.dtype)


def same_items(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Item by item: equal, or both NaN."""
    same = got == want
    return same | (np.isnan(got) & np.isnan(want)) if want.dtype.kind == "f" else same


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype,op", OVERFLOWING_SUMS + NAN_MAX_MIN)
def test_auto_gives_one_answer_whatever_the_size(comm, dtype, op):
    got = {}
    for n in SIZES:
        x = edge_data(dtype, op, n, comm.rank)
        got[n] = zipcoll.allreduce(x, op=op, comm=comm, algorithm="auto")
        want = zipcolls_answer(comm, dtype, op, n)
        bad = ~same_items(got[n], want)
        assert not bad.any(), (f"auto at {n} items: {got[n][bad][:4]} where C/IEEE give "
                               f"{want[bad][:4]} (first {bad.argmax()})")
    assert same_items(got[SIZES[0]], got[SIZES[1]][:SIZES[0]]).all()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype,op", [("int16", "sum"), ("float32", "max")])
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "native"])
def test_every_algorithm_but_native_gives_zipcolls_answer(comm, dtype, op, algorithm):
    x = edge_data(dtype, op, N, comm.rank)
    got = zipcoll.allreduce(x, op=op, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(got, zipcolls_answer(comm, dtype, op, N))

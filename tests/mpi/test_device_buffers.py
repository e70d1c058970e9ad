"""GPU buffers without CuPy: host arrays exposing only `__cuda_array_interface__` (as in
mpi4py's own test suite), or DLPack claiming a CUDA device, through every entry point and
algorithm.

zipcoll cannot compute on such memory, so a lossless call goes to the MPI library's own
Allreduce (Reduce_scatter / Allgatherv for the sharded collectives), whatever algorithm
was asked for (a drop-in is never worse than the call it replaces), and its result is
MPI's bit for bit; a codec or op="mean" raises MissingDependencyError on every rank
before any message moves.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import DLPackOnly, FakeCUDA, expected, rank_data
from zipcoll.collectives.ops import BY_NAME
from zipcoll.transport import cuda_aware as mpi_is_cuda_aware

pytestmark = pytest.mark.mpi

N = 37
CASES = [("float64", "sum"), ("int32", "max")]


class DLPackCUDA(DLPackOnly):
    """A host array exported through DLPack as if it were on a CUDA device."""

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


@pytest.fixture(autouse=True)
def no_cupy(request, monkeypatch):
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError


def _allreduce(comm, send, recv, op, algorithm):
    zipcoll.allreduce(send, recv, op=op, comm=comm, algorithm=algorithm)


def _iallreduce(comm, send, recv, op, algorithm):
    zipcoll.iallreduce(send, recv, op=op, comm=comm, algorithm=algorithm).wait()


def _Allreduce(comm, send, recv, op, algorithm):
    zipcoll.Intracomm(comm, algorithm=algorithm).Allreduce(send, recv, op)


def _Iallreduce(comm, send, recv, op, algorithm):
    zipcoll.Intracomm(comm, algorithm=algorithm).Iallreduce(send, recv, op).Wait()


ENTRY_POINTS = [_allreduce, _iallreduce, _Allreduce, _Iallreduce]


@pytest.mark.parametrize("dtype, op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
@pytest.mark.parametrize("call", ENTRY_POINTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", zipcoll.ALGORITHMS)
def test_equals_mpi(comm, algorithm, call, dtype, op):
    data = rank_data(dtype, N, comm.rank, op)
    out = np.full(N, 99, dtype)
    call(comm, FakeCUDA(data.copy()), FakeCUDA(out), BY_NAME[op].mpi, algorithm)
    np.testing.assert_array_equal(out, expected(comm, data, op))


@pytest.mark.parametrize("call", ENTRY_POINTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "hierarchical"])
def test_dlpack_on_cuda_equals_mpi(comm, algorithm, call):
    data = rank_data("int16", N, comm.rank, "sum")
    out = np.zeros(N, np.int16)
    call(comm, DLPackCUDA(data), DLPackCUDA(out), MPI.SUM, algorithm)
    np.testing.assert_array_equal(out, expected(comm, data))


@pytest.mark.parametrize("call", ENTRY_POINTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "hierarchical"])
def test_in_place_and_specs(comm, algorithm, call):
    """MPI.IN_PLACE, mpi4py's [buf, count, datatype] specs, a 2-D array, a longer recvbuf."""
    data = rank_data("float32", 24, comm.rank).reshape(4, 6)
    buf = data.copy()
    call(comm, MPI.IN_PLACE, FakeCUDA(buf), MPI.SUM, algorithm)
    np.testing.assert_array_equal(buf, expected(comm, data))
    out = np.full(30, 7, np.float32)
    call(comm, [FakeCUDA(data), 20, MPI.FLOAT], [FakeCUDA(out), 20, MPI.FLOAT], MPI.SUM,
         algorithm)
    np.testing.assert_array_equal(out[:20], expected(comm, data.reshape(-1)[:20]))
    assert (out[20:] == 7).all()


@pytest.mark.parametrize("codec, op", [("int8", "sum"), ("fp16", "sum"), (None, "mean")])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "hierarchical"])
def test_computing_on_the_device_needs_cupy(comm, algorithm, codec, op):
    """Every rank raises, the buffers untouched, and the communicator still works after."""
    data = rank_data("float32", N, comm.rank)
    out = np.full(N, 5, np.float32)
    with pytest.raises(zipcoll.MissingDependencyError, match=r"zipcoll\[cuda12\]"):
        zipcoll.allreduce(FakeCUDA(data), FakeCUDA(out), op=op, comm=comm,
                          algorithm=algorithm, codec=codec)
    assert (out == 5).all()
    zipcoll.allreduce(FakeCUDA(data), FakeCUDA(out), comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(out, expected(comm, data))


def test_new_result_needs_cupy(comm):
    with pytest.raises(zipcoll.MissingDependencyError, match="no recvbuf"):
        zipcoll.allreduce(FakeCUDA(np.ones(4)), comm=comm)


def test_plan_says_why(comm):
    from zipcoll.collectives.plan import make_plan
    from zipcoll.topologies import Topology

    data = np.ones(8)
    plan = make_plan(FakeCUDA(data), FakeCUDA(data.copy()), MPI.SUM, "ring", None, None,
                     Topology.from_comm(comm))
    assert plan.name == "native" and "without CuPy" in plan.reason


# -- reduce-scatter and all-gather: the same path (MPI's own on the caller's memory) ------

SHARDED_ALGORITHMS = [a for a in zipcoll.SHARDED_ALGORITHMS if a != "native"]


def _rs(comm, send, recv, op, algorithm, counts):
    zipcoll.reduce_scatter(send, recv, counts=counts, op=op, comm=comm, algorithm=algorithm)


def _irs(comm, send, recv, op, algorithm, counts):
    zipcoll.ireduce_scatter(send, recv, counts=counts, op=op, comm=comm,
                            algorithm=algorithm).wait()


def _Reduce_scatter(comm, send, recv, op, algorithm, counts):
    zipcoll.Intracomm(comm, algorithm=algorithm).Reduce_scatter(send, recv, counts, op)


def _Ireduce_scatter(comm, send, recv, op, algorithm, counts):
    zipcoll.Intracomm(comm, algorithm=algorithm).Ireduce_scatter(send, recv, counts, op).Wait()


def _ag(comm, send, recv, algorithm, counts):
    zipcoll.allgather(send, recv, counts=counts, comm=comm, algorithm=algorithm)


def _iag(comm, send, recv, algorithm, counts):
    zipcoll.iallgather(send, recv, counts=counts, comm=comm, algorithm=algorithm).wait()


def _Allgatherv(comm, send, recv, algorithm, counts):
    zipcoll.Intracomm(comm, algorithm=algorithm).Allgatherv(send, [recv, counts])


def _Iallgatherv(comm, send, recv, algorithm, counts):
    zipcoll.Intracomm(comm, algorithm=algorithm).Iallgatherv(send, [recv, counts]).Wait()


def _uneven(p: int) -> list[int]:
    return [0] + [5 * r + 3 for r in range(1, p)] if p > 1 else [4]


@pytest.mark.parametrize("dtype, op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
@pytest.mark.parametrize("call", [_rs, _irs, _Reduce_scatter, _Ireduce_scatter],
                         ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", SHARDED_ALGORITHMS)
def test_reduce_scatter_equals_mpi(comm, algorithm, call, dtype, op):
    """Uneven counts (a zero block among them), out of place and in place: MPI's bits,
    the send buffer and the receive tail untouched."""
    p, r = comm.size, comm.rank
    counts = _uneven(p)
    data = rank_data(dtype, sum(counts), r, op)
    kept = data.copy()
    want = np.zeros(counts[r], dtype)
    comm.Reduce_scatter(data, want, counts, op=BY_NAME[op].mpi)
    out = np.full(counts[r] + 2, 99, dtype)
    # MPI's blocking and non-blocking reduce-scatters may sum floats in different orders
    same = (np.testing.assert_array_equal if op != "sum" or data.dtype.kind in "iu" else
            lambda got, ref: np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12))
    call(comm, FakeCUDA(data), FakeCUDA(out[:counts[r]]), BY_NAME[op].mpi, algorithm, counts)
    same(out[:counts[r]], want)
    assert (out[counts[r]:] == 99).all() and np.array_equal(data, kept)
    inplace = data.copy()
    call(comm, MPI.IN_PLACE, FakeCUDA(inplace), BY_NAME[op].mpi, algorithm, counts)
    same(inplace[:counts[r]], want)


@pytest.mark.parametrize("call", [_ag, _iag, _Allgatherv, _Iallgatherv],
                         ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", SHARDED_ALGORITHMS)
def test_allgather_equals_mpi(comm, algorithm, call):
    p, r = comm.size, comm.rank
    counts = _uneven(p)
    data = rank_data("float64", counts[r], r)
    want = np.zeros(sum(counts))
    comm.Allgatherv(data, [want, counts])
    out = np.full(sum(counts), 99.0)
    call(comm, FakeCUDA(data), FakeCUDA(out), algorithm, counts)
    np.testing.assert_array_equal(out, want)
    inplace = np.zeros(sum(counts))
    inplace[sum(counts[:r]):sum(counts[:r + 1])] = data
    call(comm, MPI.IN_PLACE, FakeCUDA(inplace), algorithm, counts)
    np.testing.assert_array_equal(inplace, want)


@pytest.mark.parametrize("algorithm", SHARDED_ALGORITHMS)
def test_sharded_block_forms_and_dlpack(comm, algorithm):
    """Reduce_scatter_block / Allgather (and their I-forms) with equal blocks, and DLPack
    claiming a CUDA device."""
    p, r = comm.size, comm.rank
    x = rank_data("int16", 6 * p, r)
    want = np.zeros(6, np.int16)
    comm.Reduce_scatter_block(x, want)
    gathered = np.concatenate([rank_data("int16", 6 * p, j)[:6] for j in range(p)])
    ours = zipcoll.Intracomm(comm, algorithm=algorithm)
    for make in (FakeCUDA, DLPackCUDA):
        out = np.zeros(6, np.int16)
        ours.Reduce_scatter_block(make(x), make(out))
        np.testing.assert_array_equal(out, want)
        out[:] = 0
        ours.Ireduce_scatter_block(make(x), make(out)).Wait()
        np.testing.assert_array_equal(out, want)
        both = np.zeros(6 * p, np.int16)
        ours.Allgather(make(x[:6].copy()), make(both))
        np.testing.assert_array_equal(both, gathered)
        both[:] = 0
        ours.Iallgather(make(x[:6].copy()), make(both)).Wait()
        np.testing.assert_array_equal(both, gathered)


@pytest.mark.parametrize("kind", ["reduce-scatter", "all-gather"])
@pytest.mark.parametrize("codec, op", [("int8", "sum"), ("fp16", "sum"), (None, "mean")])
@pytest.mark.parametrize("algorithm", SHARDED_ALGORITHMS)
def test_sharded_computing_on_the_device_needs_cupy(comm, algorithm, codec, op, kind):
    """A codec (or mean) on memory zipcoll cannot compute on: every rank raises before a
    message moves, the buffers untouched; the communicator still works after."""
    if kind == "all-gather" and codec is None:
        pytest.skip("an all-gather has no op")
    p = comm.size
    data = rank_data("float32", 4 * p, comm.rank)
    out = np.full(4 if kind == "reduce-scatter" else 4 * p * p, 5, np.float32)
    with pytest.raises(zipcoll.MissingDependencyError, match=r"zipcoll\[cuda12\]"):
        if kind == "reduce-scatter":
            zipcoll.reduce_scatter(FakeCUDA(data), FakeCUDA(out), op=op, comm=comm,
                                   algorithm=algorithm, codec=codec)
        else:
            zipcoll.allgather(FakeCUDA(data), FakeCUDA(out), comm=comm, algorithm=algorithm,
                              codec=codec)
    assert (out == 5).all()
    request = zipcoll.ireduce_scatter(FakeCUDA(data), FakeCUDA(out[:4]), comm=comm,
                                      algorithm=algorithm)
    request.wait()
    assert request.plan.schedule.name == "native"  # MPI's own, whatever was asked for
    want = np.zeros(4, np.float32)
    comm.Reduce_scatter_block(data, want)
    np.testing.assert_array_equal(out[:4], want)


def test_sharded_new_result_needs_cupy(comm):
    with pytest.raises(zipcoll.MissingDependencyError, match="no recvbuf"):
        zipcoll.reduce_scatter(FakeCUDA(np.ones(4 * comm.size)), comm=comm, algorithm="ring")
    with pytest.raises(zipcoll.MissingDependencyError, match="no recvbuf"):
        zipcoll.allgather(FakeCUDA(np.ones(4)), comm=comm, algorithm="ring")


# -- on a real GPU, with CuPy (benchmarks/gpu_check.sh runs these: pytest -m gpu) ----------

def _cupy_on_a_gpu():
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no CuPy, no driver, no device
        return None


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_aware", ["0", "1"], ids=["staged", "direct"])
@pytest.mark.parametrize("algorithm, codec", [("native", None), ("ring", None),
                                              ("hierarchical", None), ("auto", None),
                                              ("ring", "int8"), ("hierarchical", "fp16")])
def test_cupy_arrays(comm, zipcoll_env, algorithm, codec, cuda_aware):
    """CuPy arrays: lossless results equal MPI's on the host copy; a codec's are close."""
    cupy = _cupy_on_a_gpu()
    if cupy is None:
        pytest.skip("needs CuPy and a CUDA GPU")
    if cuda_aware == "1" and not mpi_is_cuda_aware():
        pytest.skip("MPI is not CUDA-aware")
    zipcoll_env(ZIPCOLL_CUDA_AWARE=cuda_aware,
                ZIPCOLL_STAGING_CHUNK_BYTES="1024")  # staged: 4 chunks of 1000
    data = rank_data("float32", 1000, comm.rank)
    out = zipcoll.allreduce(cupy.asarray(data), comm=comm, algorithm=algorithm, codec=codec)
    assert isinstance(out, cupy.ndarray)
    want = expected(comm, data)
    if codec is None:
        np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)
    else:
        assert np.linalg.norm(out.get() - want) <= 0.1 * np.linalg.norm(want)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["native", "ring", "auto"])
def test_numba_arrays_without_cupy_are_staged_on_a_gpu(comm, monkeypatch, zipcoll_env,
                                                       algorithm):
    """No CuPy, a real GPU, MPI not CUDA-aware: Numba copies the data through pinned
    memory in chunks, and MPI's own Allreduce reduces each (the plan is native)."""
    from zipcoll.devices import cuda_driver_present

    if not cuda_driver_present():
        pytest.skip("needs a CUDA GPU (and NUMBA_ENABLE_CUDASIM unset or 0)")
    from numba import cuda

    monkeypatch.setitem(sys.modules, "cupy", None)
    zipcoll_env(ZIPCOLL_CUDA_AWARE="0", ZIPCOLL_STAGING_CHUNK_BYTES="1024")
    data = rank_data("int32", 1000, comm.rank)
    buf = cuda.to_device(data)
    zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(buf.copy_to_host(), expected(comm, data))

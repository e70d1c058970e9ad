"""Messages past the MPI library's count limit (C ints: 2**31 - 1 items in one call).

ZIPCOLL_MAX_COUNT (`zipcoll.configure(max_count=...)`) stands for the limit. Lowered to a few bytes, every message of
every algorithm goes past it (as one derived datatype of blocks, or native's chunks), on
small data, at every world size; results are compared with MPI's own Allreduce and with
the same call under the real limit, bit for bit. One test moves real messages of
2**31 + 7 bytes at 2 ranks (native, recdoubling, ring), where Open MPI refuses one count.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import LOSSLESS, expected, rank_data
from zipcoll import transport
from zipcoll.collectives.ops import BY_NAME
from zipcoll.collectives.schedule import run
from zipcoll.collectives.schedules.native import native
from zipcoll.collectives.steps import Lossless

pytestmark = pytest.mark.mpi

COUNT = 1001  # 4004 bytes of int32: more than LIMIT**2, so the datatypes nest
LIMIT = 16
ALGORITHMS = LOSSLESS + ("hierarchical", "torus")


@pytest.fixture
def small_limit():
    zipcoll.configure(max_count=LIMIT)
    return LIMIT


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op,dtype", [("sum", "int32"), ("max", "float64"), ("bxor", "uint8")])
def test_every_algorithm_past_the_limit(comm, small_limit, algorithm, op, dtype):
    data = rank_data(dtype, COUNT, comm.rank, op)
    mpi_op = BY_NAME[op].mpi
    recv = np.zeros_like(data)
    zipcoll.allreduce(data, recv, op=mpi_op, comm=comm, algorithm=algorithm)
    inplace = data.copy()
    zipcoll.allreduce(MPI.IN_PLACE, inplace, op=mpi_op, comm=comm, algorithm=algorithm)
    request = zipcoll.iallreduce(data, op=mpi_op, comm=comm, algorithm=algorithm)
    new = request.wait()
    ref = expected(comm, data, mpi_op)
    for got in (recv, inplace, new):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "dbtree", "twophase", "allgather",
                                       "hierarchical"])
def test_compressed_past_the_limit_sends_the_same_bytes(comm, algorithm):
    data = rank_data("float32", COUNT, comm.rank)
    under = zipcoll.allreduce(data, comm=comm, algorithm=algorithm, codec="int8")
    zipcoll.configure(max_count=LIMIT)
    past = zipcoll.allreduce(data, comm=comm, algorithm=algorithm, codec="int8")
    np.testing.assert_array_equal(past, under)


@pytest.mark.parametrize("algorithm", ["allgatherv", "gtopk"])
def test_sparse_past_the_limit(comm, algorithm):
    rng = np.random.default_rng(comm.rank)
    nnz = 50 + 31 * comm.rank  # every rank its own count: 600 bytes and more a rank
    indices, values = rng.integers(0, 500, nnz), rng.standard_normal(nnz)
    k = 40 if algorithm == "gtopk" else None  # a gtopk message: 648 bytes
    under = zipcoll.sparse_allgather(values, indices, comm=comm, algorithm=algorithm, k=k)
    zipcoll.configure(max_count=LIMIT)
    past = zipcoll.sparse_allgather(values, indices, comm=comm, algorithm=algorithm, k=k)
    for a, b in zip(past, under):
        np.testing.assert_array_equal(a, b)
    if algorithm == "allgatherv":  # and what MPI's own gather gives
        np.testing.assert_array_equal(past[1], np.concatenate(comm.allgather(values)))


def test_native_calls_mpi_once_per_chunk(comm, small_limit):
    """What native hands MPI: ceil(count / limit) Iallreduce calls of at most `limit` items,
    one a step, that together are MPI's Allreduce of the whole."""
    data = rank_data("int32", 100, comm.rank)
    recv = np.zeros_like(data)
    steps = list(_steps_of(native(transport.transport_for(comm), recv,
                                  Lossless(BY_NAME["sum"], data.dtype), 0, send=data)))
    assert len(steps) == -(-100 // LIMIT) and all(n == 1 for n in steps)
    np.testing.assert_array_equal(recv, expected(comm, data))


def _steps_of(steps):
    """Drive a schedule to the end; yield how many requests each step waited on."""
    for requests in steps:
        yield len(requests)
        run(iter([requests]))


# -- a real message past 2 GiB ------------------------------------------------------------

HUGE = 2**31 + 7  # bytes (uint8 items): past Open MPI's limit of one count
PERIOD = 1_000_003  # the data repeat with a prime period: a misplaced block shows


def _available_bytes() -> int:
    with open("/proc/meminfo") as info:
        fields = dict(line.split(":", 1) for line in info)
    return int(fields["MemAvailable"].split()[0]) * 1024


def _fill(buf: np.ndarray, pattern: np.ndarray) -> None:
    for start in range(0, buf.size, pattern.size):
        piece = buf[start:start + pattern.size]
        piece[...] = pattern[:piece.size]


def _matches(buf: np.ndarray, pattern: np.ndarray) -> bool:
    return all(np.array_equal(buf[s:s + pattern.size], pattern[:buf[s:s + pattern.size].size])
               for s in range(0, buf.size, pattern.size))


@pytest.mark.timeout(240)
def test_messages_past_2_gib(comm):
    """2**31 + 7 uint8 in place at 2 ranks: native (2 Iallreduce chunks), recdoubling
    (one 2 GiB message a step, as one derived datatype), ring (1 GiB chunks)."""
    if comm.size != 2:
        pytest.skip("2 ranks only (memory: about 4.3 GB a rank)")
    enough = comm.allreduce(_available_bytes() > 12 << 30, op=MPI.LAND)
    if not enough:
        pytest.skip("needs 12 GiB of available memory")
    pattern = np.random.default_rng(7).integers(0, 100, PERIOD, dtype=np.uint8)
    buf = np.empty(HUGE, np.uint8)
    took = {}
    own = comm.Dup()  # freed at the end, and with it the 2 GiB of scratch its transport keeps
    try:
        for algorithm in ("native", "recdoubling", "ring"):
            _fill(buf, pattern + comm.rank)
            start = time.perf_counter()
            zipcoll.allreduce(MPI.IN_PLACE, buf, comm=own, algorithm=algorithm)
            took[algorithm] = round(time.perf_counter() - start, 1)
            assert _matches(buf, 2 * pattern + 1), algorithm
    finally:
        own.Free()
    print(f"2**31 + 7 bytes at 2 ranks, seconds a call: {took}")

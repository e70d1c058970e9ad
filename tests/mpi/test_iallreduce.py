"""zipcoll.iallreduce: a Request that advances on test() and finishes on wait()."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import LOSSLESS, expected, rank_data

pytestmark = pytest.mark.mpi

COUNTS = (0, 5, 100_003)  # the largest spans several tree segments


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_test_until_done_then_wait(comm, algorithm, count):
    data = rank_data("int64", count, comm.rank)
    recv = np.zeros_like(data)
    request = zipcoll.iallreduce(data, recv, comm=comm, algorithm=algorithm)
    while not request.test():
        pass
    assert request.test()  # stays complete
    assert request.wait() is recv
    np.testing.assert_array_equal(recv, expected(comm, data))


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_new_result_from_wait(comm, algorithm):
    data = rank_data("float64", 1001, comm.rank).reshape(7, 143)
    request = zipcoll.iallreduce(data, op="max", comm=comm, algorithm=algorithm)
    result = request.Wait()  # mpi4py's spelling
    assert isinstance(result, np.ndarray) and result.shape == (7, 143)
    np.testing.assert_array_equal(result, expected(comm, data, MPI.MAX))


@pytest.mark.parametrize("algorithm", LOSSLESS)
def test_in_place(comm, algorithm):
    data = rank_data("uint32", 1001, comm.rank, "bxor")
    buf = data.copy()
    request = zipcoll.iallreduce(MPI.IN_PLACE, buf, op=MPI.BXOR, comm=comm, algorithm=algorithm)
    while not request.Test():
        pass
    np.testing.assert_array_equal(buf, expected(comm, data, MPI.BXOR))


@pytest.mark.parametrize("second", LOSSLESS)
@pytest.mark.parametrize("first", ["ring", "dbtree"])
def test_two_in_flight(comm, first, second):
    """Two calls on one communicator at once, finished in the opposite order."""
    a = rank_data("int32", 50_001, comm.rank)
    b = rank_data("int16", 3001, comm.rank, "max")
    ra, rb = np.zeros_like(a), np.zeros_like(b)
    req_a = zipcoll.iallreduce(a, ra, comm=comm, algorithm=first)
    req_b = zipcoll.iallreduce(b, rb, op=MPI.MAX, comm=comm, algorithm=second)
    req_a.test()
    req_b.wait()
    req_a.wait()
    np.testing.assert_array_equal(ra, expected(comm, a))
    np.testing.assert_array_equal(rb, expected(comm, b, MPI.MAX))


def test_many_in_flight_interleaved(comm):
    """Eight calls started together over several algorithms, advanced by polling all."""
    inputs = [rank_data("int32", 997 * (i + 1), comm.rank) for i in range(8)]
    outputs = [np.zeros_like(x) for x in inputs]
    algorithms = [LOSSLESS[i % len(LOSSLESS)] for i in range(8)]
    requests = [zipcoll.iallreduce(x, y, comm=comm, algorithm=a)
                for x, y, a in zip(inputs, outputs, algorithms)]
    while not all([r.test() for r in requests]):  # a list: poll every one each round
        pass
    for x, y, a in zip(inputs, outputs, algorithms):
        np.testing.assert_array_equal(y, expected(comm, x), err_msg=a)

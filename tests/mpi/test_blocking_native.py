"""A blocking call alone on its thread runs MPI's blocking Allreduce (faster than the
non-blocking one in Open MPI); only when every rank's call is alone (agreed), so the
ranks never mix a blocking with a non-blocking collective, and never where something
else of the thread needs advancing meanwhile.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import expected, rank_data
from zipcoll.transport import Transport

pytestmark = pytest.mark.mpi

N = 1000


@pytest.fixture
def blocking_calls(monkeypatch):
    """The number of blocking Allreduce calls zipcoll's steps make, counted as they run."""
    calls = []
    real = Transport.allreduce_native

    def counted(self, send, recv, op):
        calls.append(recv.size)
        return real(self, send, recv, op)

    monkeypatch.setattr(Transport, "allreduce_native", counted)
    return calls


def test_a_lone_blocking_call_runs_the_blocking_allreduce(comm, blocking_calls):
    for step in range(3):
        x = rank_data("float32", N, comm.rank + step)
        out = zipcoll.allreduce(x, algorithm="native", comm=comm)
        np.testing.assert_array_equal(out, expected(comm, x))
    assert blocking_calls == [N] * 3


def test_a_non_blocking_call_never_blocks(comm, blocking_calls):
    x = rank_data("float64", N, comm.rank)
    request = zipcoll.iallreduce(x, algorithm="native", comm=comm)
    # MPI's non-blocking algorithm may round differently from its blocking one
    np.testing.assert_allclose(request.wait(), expected(comm, x), rtol=1e-12)
    assert blocking_calls == []


def test_one_rank_with_a_call_in_flight_keeps_every_rank_non_blocking(comm, blocking_calls):
    """Rank 0 has a call on A in flight when it calls on B; the others call on B alone
    first. B's call must not block anywhere: on rank 0 it has A to advance, and a blocking
    Allreduce on the other ranks would meet rank 0's non-blocking one."""
    a, b = comm.Dup(), comm.Dup()
    for c in (a, b):  # first uses in one order (Open MPI: new communicators, README)
        zipcoll.allreduce(np.ones(1), comm=c, algorithm="native")
    blocking_calls.clear()
    x, y = rank_data("float32", N, comm.rank), rank_data("float32", N, comm.rank + 7)
    try:
        in_flight = True
        if comm.rank == 0:
            first = zipcoll.iallreduce(x, comm=a, algorithm="native")
            in_flight = not first.done  # on one rank it may finish as it starts
            second = zipcoll.allreduce(y, comm=b, algorithm="native")
            first = first.wait()
        else:
            second = zipcoll.allreduce(y, comm=b, algorithm="native")
            first = zipcoll.iallreduce(x, comm=a, algorithm="native").wait()
        np.testing.assert_allclose(first, expected(comm, x), rtol=1e-5)
        np.testing.assert_allclose(second, expected(comm, y), rtol=1e-5)
        assert blocking_calls == ([] if in_flight else [N])
    finally:
        a.Free()
        b.Free()


def test_without_the_agreement_calls_stay_non_blocking(comm, blocking_calls, zipcoll_env):
    zipcoll.allreduce(np.ones(4), algorithm="native", comm=comm)  # the first use: agreed
    zipcoll_env(ZIPCOLL_CHECK="0")
    x = rank_data("float32", N, comm.rank)
    try:
        np.testing.assert_allclose(zipcoll.allreduce(x, algorithm="native", comm=comm),
                                   expected(comm, x), rtol=1e-5)
        zipcoll.allreduce(x, algorithm="native", comm=comm)
    finally:
        zipcoll_env(ZIPCOLL_CHECK=None)
        zipcoll.allreduce(np.ones(4), algorithm="native", comm=comm)  # settings agreed again
    # blocking where an agreement ran: the first call, and each first call after the
    # settings changed (they agree once on the new settings, checks off or not)
    assert blocking_calls == [4, N, 4]


def test_mpi_in_place_and_user_ops_keep_working_blocking(comm, blocking_calls):
    x = rank_data("float64", N, comm.rank)
    want = expected(comm, x, MPI.MAX)
    inplace = x.copy()
    zipcoll.Intracomm(comm, algorithm="native").Allreduce(MPI.IN_PLACE, inplace, op=MPI.MAX)
    np.testing.assert_array_equal(inplace, want)
    assert blocking_calls == [N]

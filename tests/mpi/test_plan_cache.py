"""The plan cache: a call like an earlier one skips the argument checks its buffers do not
change, and still checks every buffer, every call, on every rank.

Each test first makes a good call (so its plan is cached), then the hostile one with the
same arguments but other buffers, then a good call again to show the ranks in step.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import expected, rank_data
from zipcoll.collectives.context import context_for
from zipcoll.errors import MismatchError

pytestmark = pytest.mark.mpi

N = 64


def cached(comm, codec=None) -> int:
    """How many plans of `codec` the communicator's cache holds."""
    return sum(1 for key in context_for(comm).plans if key != "settings" and key[2] == codec)


def call(comm, send, recv=None, **kw):
    return zipcoll.allreduce(send, recv, comm=comm, algorithm=kw.pop("algorithm", "ring"), **kw)


def test_a_repeated_call_is_cached_and_right_with_new_buffers_each_time(comm):
    context_for(comm).plans.clear()
    before = 0
    for step in range(4):
        x = rank_data("float32", N, comm.rank + step)
        out = np.full(N, -1.0, np.float32)
        call(comm, x, out)
        np.testing.assert_allclose(out, expected(comm, x), rtol=1e-5, atol=1e-5)
        inplace = x.copy()
        call(comm, MPI.IN_PLACE, inplace)
        np.testing.assert_allclose(inplace, expected(comm, x), rtol=1e-5, atol=1e-5)
    assert cached(comm) == before + 2  # out of place and in place: one plan each


@pytest.mark.parametrize("hostile", ["aliased", "overlapping", "too small", "other dtype",
                                     "read-only"])
def test_a_cached_plan_still_checks_the_buffers(comm, hostile):
    """The same arguments but bad buffers, after a good call: ValueError/TypeError on every
    rank, nothing written; on rank 0 only: the others raise MismatchError."""
    for only_rank_0 in (False, True):
        good = rank_data("float32", 2 * N, comm.rank)
        call(comm, good[:N], np.empty(N, np.float32))
        send, recv = good[:N].copy(), np.full(N, -7.0, np.float32)
        bad = not only_rank_0 or comm.rank == 0
        if bad and hostile == "aliased":
            recv = send
        elif bad and hostile == "overlapping":
            send, recv = good[:N], good[N // 2:N // 2 + N]
        elif bad and hostile == "too small":
            recv = recv[:N - 1]
        elif bad and hostile == "other dtype":
            recv = np.full(N, -7.0, np.float64)
        elif bad and hostile == "read-only":
            recv.flags.writeable = False
        kept = recv.copy()
        expected_type = ((ValueError, TypeError) if bad else MismatchError)
        if comm.size == 1 and not bad:
            continue
        with pytest.raises(expected_type):
            call(comm, send, recv)
        if hostile not in ("aliased", "overlapping"):
            np.testing.assert_array_equal(recv, kept)  # nothing written
        x = rank_data("float32", N, comm.rank)
        np.testing.assert_allclose(call(comm, x), expected(comm, x), rtol=1e-5, atol=1e-5)


def test_the_cache_holds_none_of_the_callers_buffers(comm):
    send, recv = rank_data("float32", N, comm.rank), np.empty(N, np.float32)
    call(comm, send, recv)
    call(comm, send)  # a new result array, cached too
    gone = weakref.ref(send), weakref.ref(recv)
    del send, recv
    gc.collect()
    assert all(ref() is None for ref in gone)


def test_a_settings_change_checks_again(comm):
    """A cached plan is the settings' of its time: after configure() the next call plans
    anew (here: a slice size that slices the call across nodes)."""
    nodes = zipcoll.Topology.from_comm(comm, ranks_per_node=1)
    x = rank_data("float32", 4096, comm.rank)
    first = zipcoll.iallreduce(x, algorithm="ring", comm=comm, topology=nodes)
    first.wait()
    zipcoll.configure(slice_bytes=1024)  # tests/conftest.py resets it after the test
    second = zipcoll.iallreduce(x, algorithm="ring", comm=comm, topology=nodes)
    np.testing.assert_allclose(second.wait(), expected(comm, x), rtol=1e-5, atol=1e-5)
    if comm.size > 1:
        assert second.plan.slicing.slices > first.plan.slicing.slices


def test_stateful_codecs_are_not_cached(comm):
    """A stochastic codec or error feedback spec parses to a new codec each call: such a
    plan is made anew each time (its codec's state is the call's own)."""
    x = rank_data("float32", N, comm.rank)
    for spec in ("qsgd", "feedback:sign"):
        for _ in range(2):
            call(comm, x, codec=spec)
        assert cached(comm, spec) == 0
    call(comm, x, codec="int8")
    call(comm, x, codec="int8")
    assert cached(comm, "int8") == 1


def test_different_calls_on_each_rank_still_fail_alike(comm):
    """Rank 0 repeats a cached call while the others change the op: MismatchError everywhere."""
    x = rank_data("float64", N, comm.rank)
    call(comm, x, op=MPI.SUM)
    if comm.size == 1:
        return
    with pytest.raises(MismatchError):
        call(comm, x, op=MPI.SUM if comm.rank == 0 else MPI.MAX)
    np.testing.assert_allclose(call(comm, x, op=MPI.MAX),
                               np.maximum.reduce([rank_data("float64", N, r)
                                                  for r in range(comm.size)]))

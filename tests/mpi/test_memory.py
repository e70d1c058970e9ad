"""Bounded memory: a communicator's context goes with it, scratch has one process-wide budget.

A communicator's Context and Transport live on it as an MPI attribute: freeing the
communicator retires them, and its private communicators are freed at the start of a
later zipcoll call once no call in flight holds them. mpi4py (4.1.2) frees no
communicator when its Python object is collected, so a Dup dropped without Free keeps
its context, as MPI keeps the communicator; it holds no scratch, which is process-wide.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import expected, rank_data
from zipcoll import transport
from zipcoll.collectives.context import context_for

pytestmark = pytest.mark.mpi


def _family_refs(t) -> list:
    """Weak references to a transport and every sub-transport split from it."""
    refs = [weakref.ref(t)]
    for group in t._subs.values():
        for sub in group:
            refs += _family_refs(sub)
    return refs


def _alive(refs: list) -> int:
    gc.collect()
    return sum(ref() is not None for ref in refs)


def _call_then_free(comm, algorithm: str, topology_of=None) -> tuple[list, list]:
    """One call on a fresh Dup of `comm`, then Free: weak references to its Context and
    transports, and its private communicators."""
    dup = comm.Dup()
    x = rank_data("int32", 1000, comm.rank)
    topology = topology_of(dup) if topology_of else None
    got = zipcoll.allreduce(x, comm=dup, algorithm=algorithm, topology=topology)
    np.testing.assert_array_equal(got, expected(comm, x))
    ctx = context_for(dup)
    refs = [weakref.ref(ctx)] + _family_refs(ctx.transport)
    privates = [ref().comm for ref in refs[1:]]
    del ctx
    dup.Free()
    return refs, privates


@pytest.mark.timeout(120)
def test_freed_communicators_leave_no_context_behind(comm):
    refs, privates = [], []
    for _ in range(200):
        more, comms = _call_then_free(comm, "ring")
        refs += more
        privates += comms
    zipcoll.allreduce(np.ones(2), comm=comm)  # a later call frees what was retired
    assert _alive(refs) == 0, f"{_alive(refs)} of {len(refs)} contexts/transports alive"
    assert transport.retired_count() == 0
    assert all(c == MPI.COMM_NULL for c in privates), "a private communicator was not freed"


@pytest.mark.timeout(120)
@pytest.mark.mpi(min_size=2)
def test_sub_communicators_go_with_their_communicator(comm):
    """Two-level layouts split the private communicator, and a ring over a reordered
    layout reorders it: those transports and communicators go too."""
    if comm.size % 2:
        pytest.skip("emulated nodes of 2 ranks need an even size")
    nodes = lambda c: zipcoll.Topology.from_comm(c, ranks_per_node=2)  # noqa: E731
    even_odd = lambda c: zipcoll.Topology.from_layout(  # noqa: E731
        c.Get_size(), c.Get_rank(), nodes=[range(0, c.Get_size(), 2), range(1, c.Get_size(), 2)])
    refs, privates = [], []
    for _ in range(10):
        for algorithm, layout in (("hierarchical", nodes), ("ring", even_odd)):
            more, comms = _call_then_free(comm, algorithm, layout)
            refs += more
            privates += comms
    assert len(refs) > 2 * 20, "no sub-transport was made: the test would prove nothing"
    zipcoll.allreduce(np.ones(2), comm=comm)
    assert _alive(refs) == 0, f"{_alive(refs)} of {len(refs)} contexts/transports alive"
    assert all(c == MPI.COMM_NULL for c in privates)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "native", "hierarchical"])
def test_call_in_flight_when_its_communicator_is_freed(comm, algorithm):
    """MPI lets a communicator be freed with calls in flight (they complete normally): the
    private communicator must outlive the call, and go at a call after it ended."""
    dup = comm.Dup()
    x = rank_data("int64", 200_001, comm.rank)
    request = zipcoll.iallreduce(x, comm=dup, algorithm=algorithm)
    private = context_for(dup).transport.comm
    dup.Free()
    zipcoll.allreduce(np.ones(2), comm=comm)  # must not free what the request still uses
    got = request.wait()
    del request
    gc.collect()
    zipcoll.allreduce(np.ones(2), comm=comm)
    np.testing.assert_array_equal(got, expected(comm, x))
    assert private == MPI.COMM_NULL and transport.retired_count() == 0


@pytest.mark.timeout(60)
def test_dropped_dup_keeps_its_context_until_freed(comm):
    """mpi4py frees no communicator on garbage collection (the handle stays valid: another
    Python object may name it), so neither does zipcoll; freeing the handle later does."""
    dup = comm.Dup()
    zipcoll.allreduce(np.ones(8, np.float32), comm=dup)
    ref, handle = weakref.ref(context_for(dup)), dup.handle
    del dup
    gc.collect()
    assert ref() is not None, "mpi4py freed a dropped communicator: update the docs"
    again = MPI.Intracomm.fromhandle(handle)
    assert context_for(again) is ref()
    again.Free()
    assert _alive([ref]) == 0


def _scratch_calls(comms: list, count: int) -> None:
    for c in comms:
        x = rank_data("int32", count, c.Get_rank())
        np.testing.assert_array_equal(zipcoll.allreduce(x, comm=c, algorithm="ring"),
                                      expected(c, x))


@pytest.mark.timeout(120)
def test_scratch_has_one_budget_and_idles_out(comm):
    """Calls on communicators of several sizes hold at most the budget in all (and the
    latest buffer), and scratch no call has used for a while is released."""
    budget = 6 << 20
    zipcoll.configure(scratch_bytes=budget)
    rank, size = comm.rank, comm.size
    comms = [comm.Dup(), comm.Split(int(rank >= (size + 1) // 2), rank),
             comm.Split(rank % 2, rank), comm.Split(rank % 3, rank)]
    held = {}  # asserted once every rank is done: a failed assert must not skip a collective
    try:
        for count in (1 << 20, 700_000, 300_000):  # 4 MiB, 2.8 MiB, 1.2 MiB of int32
            _scratch_calls(comms, count)
            held[count] = transport.scratch_held()
        _scratch_calls(comms, 8)  # the latest buffers are small now
        held["small"] = transport.scratch_held()
        for _ in range(transport._SCRATCH_IDLE_CALLS + 1):  # other calls, using no scratch
            zipcoll.allreduce(np.ones(4), comm=comm, algorithm="native")
        held["idle"] = transport.scratch_held()
    finally:
        for c in comms:
            c.Free()
    assert all(held[n] <= budget + 4 * n * 4 for n in (1 << 20, 700_000, 300_000)), held
    assert held["small"] <= budget + (1 << 20), held
    assert held["idle"] == 0, held


@pytest.mark.timeout(60)
def test_repeated_calls_reuse_their_scratch_on_any_communicator(comm):
    """The hot path allocates no scratch: the same call again, here or on another
    communicator, finds the buffers the last one gave back. (In place: out of place, a
    lossless ring receives into the result itself and borrows nothing.)"""
    if comm.size == 1:
        pytest.skip("one rank borrows no scratch")
    pooled = lambda: {id(raw) for idle in transport.SCRATCH._idle.values()  # noqa: E731
                      for raw, _ in idle}
    other = comm.Dup()
    x = rank_data("float32", 300_000, comm.rank)
    try:
        zipcoll.allreduce(MPI.IN_PLACE, x.copy(), comm=comm, algorithm="ring")
        first = pooled()
        after = []
        for c in (comm, other, comm):
            zipcoll.allreduce(MPI.IN_PLACE, x.copy(), comm=c, algorithm="ring")
            after.append(pooled())
    finally:
        other.Free()
    assert first, "the ring gave no scratch back: the test would prove nothing"
    assert after == [first] * 3

"""Flat schedules in slices (plan._slicing): the rule, and results equal to unsliced ones.

Every rank is its own emulated node (flat schedules slice only across nodes) and slices
are 4 KiB (`small_slices`), so messages of a few thousand elements run in several slices,
several in flight, as 64 MiB do on a cluster.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import differing_across_ranks, expected, rank_data
from zipcoll.collectives import SCHEDULES, dispatch
from zipcoll.collectives.plan import make_plan

pytestmark = pytest.mark.mpi

FLAT = tuple(name for name, s in SCHEDULES.items() if not s.two_level and not s.native)
COUNT = 30_011  # 120 KiB of int32/float32: about 30 slices of 4 KiB, 8 in flight


@pytest.fixture
def slices_run(count_slices):
    """The slices dispatch starts, call by call (a list of counts)."""
    return count_slices(dispatch)


def slicing(x, algorithm, topology, codec=None):
    return make_plan(x, None, "sum", algorithm, codec, None, topology).slicing


@pytest.mark.parametrize("algorithm", FLAT)
def test_flat_schedules_slice_per_the_rule(comm, nodes, algorithm):
    x = rank_data("int32", COUNT, comm.rank)
    if comm.size == 1:  # one node: nothing to overlap
        assert slicing(x, algorithm, nodes).slices == 1
        return
    sliced = slicing(x, algorithm, nodes)
    assert sliced.slices == -(-x.nbytes // max(4096, comm.size * 4096 // 8))
    assert sliced.window == 8
    assert slicing(x[:2047], algorithm, nodes).slices == 1  # under two slices: one
    one_node = zipcoll.Topology.from_comm(comm, ranks_per_node=comm.size)
    assert slicing(x, algorithm, one_node).slices == 1
    assert slicing(x, "native", nodes).slices == 1  # MPI's collectives match by start order


@pytest.mark.parametrize("spec", ["int8", "sign", "topk:ratio=0.01"])
def test_compressed_slices_carry_as_many_wire_bytes(comm, nodes, spec):
    """A codec's slices are its ratio times longer (from 8 ranks, also p/8 times): each
    message of a slice carries at least SLICE_BYTES / 8 on the wire. At most 128 slices:
    a call's block of 256 tags, 2 a slice for dbtree."""
    x = rank_data("float32", 8 * COUNT, comm.rank)
    ratio = x.nbytes / zipcoll.get_codec(spec).wire_bytes(x.size)
    size = max(4096, int(comm.size * ratio * 4096) // 8)
    want = min(-(-x.nbytes // size), 128) if comm.size > 1 and x.nbytes >= 2 * size else 1
    algorithm = "allgather" if spec.startswith("topk") else "ring"
    assert slicing(x, algorithm, nodes, spec).slices == want


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("algorithm", FLAT)
def test_sliced_lossless_equals_mpi(comm, nodes, slices_run, algorithm, blocking):
    """Integers: every schedule's sum is exact, sliced or not, in place or out of place."""
    x = rank_data("int32", COUNT, comm.rank)
    ref = expected(comm, x)
    start = zipcoll.allreduce if blocking else (lambda *a, **k: zipcoll.iallreduce(*a, **k).wait())
    out = np.zeros_like(x)
    start(x, out, comm=comm, algorithm=algorithm, topology=nodes)
    inplace = x.copy()
    start(MPI.IN_PLACE, inplace, comm=comm, algorithm=algorithm, topology=nodes)
    top = start(x, op=MPI.MAX, comm=comm, algorithm=algorithm, topology=nodes)
    unsliced = zipcoll.allreduce(x, comm=comm, algorithm=algorithm)  # one node: one slice
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(inplace, ref)
    np.testing.assert_array_equal(top, expected(comm, x, MPI.MAX))
    np.testing.assert_array_equal(unsliced, ref)
    if comm.size > 1:
        assert slices_run[:3] == [slicing(x, algorithm, nodes).slices] * 3


@pytest.mark.parametrize("algorithm", FLAT)
def test_sliced_floats_match_mpi(comm, nodes, algorithm):
    """Float sums differ from MPI's only by the order of additions."""
    x = rank_data("float64", COUNT, comm.rank)
    got = zipcoll.allreduce(x, comm=comm, algorithm=algorithm, topology=nodes)
    np.testing.assert_allclose(got, expected(comm, x), rtol=1e-12, atol=1e-12)
    assert not differing_across_ranks(comm, {"result": got})


@pytest.mark.parametrize("algorithm", FLAT)
def test_many_sliced_calls_in_flight(comm, nodes, algorithm):
    """Calls of several schedules in flight at once, each in slices, finished in reverse:
    slices in flight take their own tags, so no message reaches another slice or call."""
    data = [rank_data("int64", COUNT - 7 * i, comm.rank) for i in range(4)]
    names = [algorithm, "ring", "allgather", algorithm]
    requests = [zipcoll.iallreduce(x, comm=comm, algorithm=name, topology=nodes)
                for x, name in zip(data, names)]
    requests[1].test()
    results = zipcoll.waitall(reversed(requests))[::-1]
    for x, got in zip(data, results):
        np.testing.assert_array_equal(got, expected(comm, x))


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("algorithm", [a for a in FLAT if SCHEDULES[a].codecs])
def test_sliced_codec_is_the_same_on_every_rank(comm, nodes, slices_run, algorithm, blocking):
    """Compressed in slices: bit-identical on every rank, as close as unsliced (the bound
    itself: test_compressed.py::test_sliced_within_bound)."""
    x = rank_data("float32", COUNT, comm.rank)
    exact = expected(comm, x.astype(np.float64))
    if blocking:
        got = zipcoll.allreduce(x, comm=comm, algorithm=algorithm, codec="int8", topology=nodes)
    else:
        got = zipcoll.iallreduce(x, comm=comm, algorithm=algorithm, codec="int8",
                                 topology=nodes).wait()
    whole = zipcoll.allreduce(x, comm=comm, algorithm=algorithm, codec="int8")
    assert not differing_across_ranks(comm, {"sliced": got, "unsliced": whole})
    if comm.size > 1:
        assert slices_run == [slicing(x, algorithm, nodes, "int8").slices]
        # int8 scales per block of 256, not per slice: errors of the same size
        sliced_error, whole_error = np.abs(got - exact).max(), np.abs(whole - exact).max()
        assert 0 < sliced_error <= 2 * whole_error

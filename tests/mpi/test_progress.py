"""The progress engine: non-blocking calls complete in any per-rank order, many in flight,
tags never reused by a call in flight, blocking calls and sparse collectives between them.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.progress import current
from zipcoll.errors import MismatchError
from arrays import LOSSLESS, expected, rank_data

pytestmark = pytest.mark.mpi

TWO_LEVEL = ("hierarchical", "hierarchical:tree", "torus")


@pytest.mark.parametrize("algorithm", LOSSLESS + TWO_LEVEL)
def test_rank_zero_completes_in_the_other_order(comm, algorithm):
    """Rank 0 waits b then a, the others a then b (each order legal in MPI)."""
    a, b = rank_data("float64", 16, comm.rank), rank_data("int32", 100_003, comm.rank)
    ra, rb = np.zeros_like(a), np.zeros_like(b)
    req_a = zipcoll.iallreduce(a, ra, comm=comm, algorithm=algorithm)
    req_b = zipcoll.iallreduce(b, rb, comm=comm, algorithm=algorithm)
    for request in ([req_b, req_a] if comm.rank == 0 else [req_a, req_b]):
        request.wait()
    np.testing.assert_allclose(ra, expected(comm, a), rtol=1e-12)
    np.testing.assert_array_equal(rb, expected(comm, b))


@pytest.mark.parametrize("algorithm", ["ring", "native", "auto"])
def test_blocking_call_while_another_is_in_flight(comm, algorithm):
    """Rank 0 makes a blocking call before waiting on an earlier request; the others wait
    first. The blocking call (and its agreement check) must keep the earlier one moving."""
    a, b = rank_data("int64", 50_001, comm.rank), rank_data("int64", 5, comm.rank)
    ra = np.zeros_like(a)
    request = zipcoll.iallreduce(a, ra, comm=comm, algorithm="ring")
    if comm.rank == 0:
        rb = zipcoll.allreduce(b, comm=comm, algorithm=algorithm)
        request.wait()
    else:
        request.wait()
        rb = zipcoll.allreduce(b, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(ra, expected(comm, a))
    np.testing.assert_array_equal(rb, expected(comm, b))


def test_sparse_allgather_while_a_call_is_in_flight(comm):
    a = rank_data("int32", 30_001, comm.rank)
    ra = np.zeros_like(a)
    request = zipcoll.iallreduce(a, ra, comm=comm, algorithm="dbtree")
    if comm.rank != 0:
        request.wait()
    indices, values, counts = zipcoll.sparse_allgather(np.ones(comm.rank, np.float32),
                                                       np.arange(comm.rank, dtype=np.int32),
                                                       comm=comm)
    request.wait()
    assert counts == list(range(comm.size))
    np.testing.assert_array_equal(ra, expected(comm, a))


def _many_in_flight(comm, n: int, seed: int) -> list[str]:
    """n calls over every lossless schedule, completed in a random order per rank."""
    algorithms = [LOSSLESS[i % len(LOSSLESS)] for i in range(n)]
    inputs = [rank_data("int32", 1 + (37 * i) % 300, comm.rank) for i in range(n)]
    outputs = [np.zeros_like(x) for x in inputs]
    requests = [zipcoll.iallreduce(x, y, comm=comm, algorithm=a)
                for x, y, a in zip(inputs, outputs, algorithms)]
    order = np.random.default_rng([seed, comm.rank]).permutation(n)
    for i in order[: n // 2]:
        requests[i].test()
    zipcoll.waitall(requests[i] for i in order)
    return [f"call {i} ({a})" for i, (x, y, a) in enumerate(zip(inputs, outputs, algorithms))
            if not np.array_equal(y, expected(comm, x))]


def test_a_thousand_in_flight(comm):
    assert _many_in_flight(comm, 1000, seed=1) == []


def test_tags_wrap_only_onto_finished_calls(comm):
    """With 4 tag blocks, 200 calls in flight must reuse blocks only once their call ended."""
    zipcoll.configure(tag_blocks=4)
    small = comm.Dup()  # a communicator first used now takes the setting
    try:
        assert _many_in_flight(small, 200, seed=2) == []
    finally:
        small.Free()


def test_waitany_and_testall(comm):
    x = [rank_data("float64", 1000 * (i + 1), comm.rank) for i in range(3)]
    references = [expected(comm, v) for v in x]  # collective: before any rank's own order
    requests = [zipcoll.iallreduce(v, comm=comm, algorithm="ring") for v in x]
    index, result = zipcoll.waitany(requests)  # which one may differ from rank to rank
    np.testing.assert_allclose(result, references[index], rtol=1e-12)
    while not zipcoll.testall(requests):
        pass
    for reference, request in zip(references, requests):
        np.testing.assert_allclose(request.wait(), reference, rtol=1e-12)


@pytest.mark.mpi(min_size=2)
def test_calls_on_two_communicators_waited_in_opposite_orders(comm):
    """A wait on one communicator keeps the calls on another moving (MPI promises progress
    across communicators): rank 0 waits on its Dup first, the others on the world first."""
    other = comm.Dup()
    try:
        a, b = rank_data("int64", 99_999, comm.rank), rank_data("int64", 77_777, comm.rank)
        req_a = zipcoll.iallreduce(a, comm=other, algorithm="ring")
        req_b = zipcoll.iallreduce(b, comm=comm, algorithm="tree")
        if comm.rank == 0:
            got_a, got_b = req_a.wait(), req_b.wait()
        else:
            got_b, got_a = req_b.wait(), req_a.wait()
        np.testing.assert_array_equal(got_a, expected(comm, a))
        np.testing.assert_array_equal(got_b, expected(comm, b))
    finally:
        other.Free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("count", [1000, 1001])
def test_error_feedback_object_as_codec(comm, count):
    """An ErrorFeedback object keeps one residual per encode site: uneven chunks work, and
    the error of one call stays bounded while the mean over calls approaches the sum."""
    codec = zipcoll.codecs.ErrorFeedback(zipcoll.get_codec("int2"))
    x = rank_data("float32", count, comm.rank)
    exact = expected(comm, x).astype(np.float64)
    total, errors = np.zeros(count), []
    for _ in range(20):
        got = zipcoll.allreduce(x, comm=comm, algorithm="ring", codec=codec)
        total += got
        errors.append(np.abs(got - exact).max())
    scale = np.abs(exact).max() + comm.size * np.abs(x).max()
    assert max(errors) < 4 * scale, errors
    assert np.abs(total / 20 - exact).max() < 0.25 * errors[0], (errors[0], total / 20 - exact)


def test_feedback_spec_without_key_keeps_one_set_of_residuals(comm):
    """codec="feedback:int2" parses to a new object every call: the calls still share their
    residuals (the mean over calls approaches the sum) and the store does not grow per call."""
    if comm.size == 1:
        pytest.skip("one rank sends nothing, so nothing is encoded")
    x = rank_data("float32", 300, comm.rank)
    exact = expected(comm, x).astype(np.float64)
    zipcoll.feedback.reset()
    total, first = np.zeros(300), None
    for _ in range(20):
        got = zipcoll.allreduce(x, comm=comm, algorithm="ring", codec="feedback:int2")
        total += got
        first = np.abs(got - exact).max() if first is None else first
    assert len(zipcoll.feedback.keys()) == 1, zipcoll.feedback.keys()
    assert np.abs(total / 20 - exact).max() < 0.25 * first
    zipcoll.feedback.reset()


def test_residuals_of_a_feedback_object_go_with_it(comm):
    import gc
    if comm.size == 1:
        pytest.skip("one rank sends nothing, so nothing is encoded")
    zipcoll.feedback.reset()
    codec = zipcoll.codecs.ErrorFeedback(zipcoll.get_codec("int8"))
    zipcoll.allreduce(rank_data("float32", 64, comm.rank), comm=comm, algorithm="ring", codec=codec)
    assert zipcoll.feedback.nbytes() > 0
    del codec
    gc.collect()
    assert zipcoll.feedback.nbytes() == 0, zipcoll.feedback.keys()


def test_grid_variable_that_does_not_fit_is_ignored(comm, zipcoll_env):
    zipcoll_env(ZIPCOLL_GRID=f"{comm.size + 1}x1")
    other = comm.Dup()
    try:
        x = rank_data("int32", 10, comm.rank)
        with pytest.warns(RuntimeWarning, match="does not fit"):
            got = zipcoll.allreduce(x, comm=other, algorithm="native")
        np.testing.assert_array_equal(got, expected(comm, x))
    finally:
        other.Free()


def test_freed_communicator_gets_a_clear_error(comm):
    other = comm.Dup()
    zipcoll.allreduce(np.ones(2), comm=other)
    other.Free()
    with pytest.raises(TypeError, match="COMM_NULL"):
        zipcoll.allreduce(np.ones(2), comm=other)
    with pytest.raises(TypeError, match="COMM_NULL"):
        zipcoll.allreduce(np.ones(2), comm=MPI.COMM_NULL)


def test_scratch_is_bounded_and_shrinks(comm):
    from zipcoll.collectives.context import context_for

    other = comm.Dup()
    try:
        t = context_for(other).transport
        zipcoll.allreduce(np.ones(3 << 20, np.float32), comm=other, algorithm="ring")
        assert t.scratch_bytes() <= max(zipcoll.settings.get().scratch_bytes, 3 << 22)
        for _ in range(40):
            zipcoll.allreduce(np.ones(8, np.float32), comm=other, algorithm="ring")
        assert t.scratch_bytes() < 1 << 20  # the large call's scratch was dropped
    finally:
        other.Free()


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_8bit_sums_wrap_on_every_path_but_native(comm, dtype):
    """Open MPI saturates 8-bit SUM; zipcoll's schedules wrap, and auto stays off native."""
    x = np.full(100, 100, dtype)
    wrapped = np.full(100, 100 * comm.size, np.int64).astype(dtype)
    for algorithm in LOSSLESS:
        if algorithm != "native":
            np.testing.assert_array_equal(zipcoll.allreduce(x, comm=comm, algorithm=algorithm),
                                          wrapped, err_msg=algorithm)


def test_agreement_in_flight_keeps_its_buffers(comm):
    """mpi4py keeps no reference to a non-blocking collective's buffers: the agreement must,
    or memory freed and reused while it is in flight corrupts it (a spurious mismatch)."""
    import gc

    from zipcoll.collectives.context import context_for

    values = list(range(1, 9))
    agreement = context_for(comm).transport.iagree(values)
    gc.collect()
    litter = [np.full(16, -1, np.int64) for _ in range(1000)]  # same size as its buffers
    agreement.request.Wait()
    lows, highs = agreement.read()
    assert lows == values and highs == values
    del litter


def test_a_request_shows_the_plan_it_runs(comm):
    zipcoll.configure(tune=False)  # auto runs the model's pick (tuning tries others first)
    x = np.arange(1000, dtype=np.float32)
    named = zipcoll.iallreduce(x, comm=comm, algorithm="ring", codec="int8")
    auto = zipcoll.iallreduce(x, comm=comm)
    zipcoll.waitall([named, auto])
    if comm.size > 1:
        assert named.plan.name == "ring" and named.plan.codec.codec_id == "int8"
    from zipcoll.collectives.planning import bucket_size, size_bucket

    best = zipcoll.explain(bucket_size(size_bucket(x.nbytes)), comm=comm).best  # as auto prices
    assert auto.plan.name == (best.name if comm.size > 1 else "native")
    assert auto.plan.codec is None


def test_a_blocking_call_shows_the_plan_it_ran(comm):
    from zipcoll.collectives.api import start_allreduce
    from zipcoll.collectives.progress import Straight

    zipcoll.configure(tune=False)
    x = rank_data(np.float32, 1000, comm.rank)
    out = np.empty_like(x)
    call = start_allreduce(x, out, MPI.SUM, comm, "ring", "int8", None, None, blocking=True)
    assert isinstance(call, Straight)  # nothing else in flight: the straight path
    assert call.wait() is out
    assert call.plan.name == "ring" and call.plan.codec.codec_id == "int8"
    # with a call in flight it goes through the engine, and tells its plan all the same
    pending = zipcoll.iallreduce(x, comm=comm, algorithm="ring")
    in_flight = not pending.done  # one rank's may be done at its start
    call = start_allreduce(x, out, MPI.SUM, comm, "ring", None, None, None, blocking=True)
    assert isinstance(call, Straight) != in_flight
    call.wait()
    pending.wait()
    assert call.plan.name == "ring" and call.plan.codec is None
    np.testing.assert_allclose(out, expected(comm, x, "sum"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["ring", "native", "auto", "hierarchical"])
def test_blocking_calls_alone_meet_calls_in_flight_elsewhere(comm, algorithm):
    """Rank 0's calls are blocking with nothing else in flight on its thread (each step is
    waited on in MPI itself); the other ranks start the same calls non-blocking, late, and
    wait on them in the other order."""
    a, b = rank_data("float64", 1000, comm.rank), rank_data("int32", 7, comm.rank)
    if comm.rank == 0:
        ra = zipcoll.allreduce(a, comm=comm, algorithm=algorithm)
        rb = zipcoll.allreduce(b, comm=comm, algorithm=algorithm)
    else:
        time.sleep(0.05)
        req_a = zipcoll.iallreduce(a, comm=comm, algorithm=algorithm)
        req_b = zipcoll.iallreduce(b, comm=comm, algorithm=algorithm)
        rb, ra = req_b.wait(), req_a.wait()
    np.testing.assert_allclose(ra, expected(comm, a), rtol=1e-12)
    np.testing.assert_array_equal(rb, expected(comm, b))


def test_blocking_calls_leave_nothing_held(comm):
    """After blocking calls, failed or not, neither the thread nor the communicator holds a
    call, a tag block or a turn, and the next non-blocking call runs."""
    ctx = context_for(comm)
    zipcoll.allreduce(np.ones(3), comm=comm, algorithm="ring")
    if comm.size > 1:
        dtype = np.float32 if comm.rank == comm.size - 1 else np.float64
        with pytest.raises(MismatchError):
            zipcoll.allreduce(np.ones(3, dtype), comm=comm, algorithm="ring")
    assert ctx.live == 0 and ctx.agreements_posted == ctx.started
    assert not ctx.transport._held_tags and not current().busy
    request = zipcoll.iallreduce(np.ones(3), comm=comm, algorithm="ring")
    np.testing.assert_array_equal(request.wait(), np.full(3, float(comm.size)))

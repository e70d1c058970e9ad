"""reduce_scatter / allgather and their drop-ins, against the MPI library's own collectives.

Lossless: every algorithm of `zipcoll.SHARDED` on every op x dtype MPI defines, for
block counts equal, uneven, all zero, one non-zero (count < p) and zero-length, against
comm.Reduce_scatter / comm.Allgatherv (bit for bit; float SUM/PROD within reordering
error), send buffers and receive tails untouched. Compressed: within the codec's bound,
every rank the same bits of an all-gather, the owner's own block exact. Then the
agreement (MismatchError on every rank), and the hostile cases: a late rank, calls on
two communicators in per-rank orders, two threads, one rank's bad argument, aliased
buffers.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import (DTYPES, OP_DTYPE_CASES, differing_across_ranks, mismatch, rank_data)
from test_compressed import codec_bound, one_encode
from threads import on_two_communicators
from zipcoll.collectives import SHARDED
from zipcoll.collectives.ops import BFLOAT16, BY_NAME
from zipcoll.errors import MismatchError

pytestmark = pytest.mark.mpi

P = MPI.COMM_WORLD.Get_size()
ALGORITHMS = tuple(zipcoll.SHARDED_ALGORITHMS)
TAIL = 3  # receive-buffer items past the result that must stay untouched


def count_cases(p: int) -> dict[str, list[int] | None]:
    """Block sizes: equal (counts=None), uneven, all zero, one block (count < p), larger."""
    return {"equal": None, "uneven": [r + 1 for r in range(p)], "zeros": [0] * p,
            "one": [0] * (p - 1) + [1], "mixed": [(7 * r + 3) % 5 * 67 for r in range(p)]}


def _counts(counts: list[int] | None, equal: int = 3) -> list[int]:
    return [equal] * P if counts is None else counts


def _block(x: np.ndarray, counts: list[int], r: int) -> np.ndarray:
    start = sum(counts[:r])
    return x[start:start + counts[r]]


# -- lossless: against MPI's own --------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op, dtype", OP_DTYPE_CASES, ids=[f"{o}-{d}" for o, d in OP_DTYPE_CASES])
def test_reduce_scatter_matches_mpi(comm, algorithm, op, dtype):
    problems = []
    for name, given in count_cases(comm.size).items():
        counts = _counts(given)
        parts = [rank_data(dtype, sum(counts), r, op) for r in range(comm.size)]
        x = parts[comm.rank]
        kept = x.copy()
        recv = np.zeros(counts[comm.rank] + TAIL, x.dtype)
        zipcoll.reduce_scatter(x, recv, counts=given, op=BY_NAME[op].mpi, comm=comm,
                               algorithm=algorithm)
        ref = np.zeros(counts[comm.rank], x.dtype)
        comm.Reduce_scatter(x, ref, counts, op=BY_NAME[op].mpi)
        blocks = [_block(part, counts, comm.rank) for part in parts]
        why = mismatch(recv[:ref.size], ref, blocks, op)
        if why:
            problems.append(f"{name}: {why}")
        if recv[ref.size:].any() or not np.array_equal(x, kept):
            problems.append(f"{name}: wrote outside its result")
    assert not problems, problems


ALLGATHER_DTYPES = DTYPES + ("bfloat16",)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", ALLGATHER_DTYPES)
def test_allgather_matches_mpi(comm, algorithm, dtype):
    dtype = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    problems = []
    for name, given in count_cases(comm.size).items():
        counts = _counts(given)
        parts = [rank_data(np.float32 if dtype == BFLOAT16 else dtype, counts[r], r, "max")
                 .astype(dtype) for r in range(comm.size)]
        x = parts[comm.rank]
        recv = np.zeros(sum(counts) + TAIL, dtype)
        zipcoll.allgather(x, recv, counts=given, comm=comm, algorithm=algorithm)
        want = np.concatenate(parts)
        if dtype != BFLOAT16:  # the MPI library's own, to be sure the reference is MPI's
            ref = np.zeros(sum(counts), dtype)
            comm.Allgatherv(x, [ref, counts])
            assert ref.tobytes() == want.tobytes()
        if recv[:want.size].tobytes() != want.tobytes() or recv[want.size:].view(np.uint8).any():
            problems.append(name)
    assert not problems, problems


# -- the other entry points -------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_entry_point(comm, algorithm):
    p, r = comm.size, comm.rank
    counts = [r2 + 2 for r2 in range(p)]
    x = rank_data(np.int64, sum(counts), r)
    ref = np.zeros(counts[r], np.int64)
    comm.Reduce_scatter(x, ref, counts)
    zcomm = zipcoll.Intracomm(comm, algorithm=algorithm)

    inplace = x.copy()
    zipcoll.reduce_scatter(MPI.IN_PLACE, inplace, counts=counts, comm=comm, algorithm=algorithm)
    assert np.array_equal(inplace[:counts[r]], ref)
    assert np.array_equal(inplace[counts[r]:], x[counts[r]:]), "in place: the rest changed"
    assert np.array_equal(zipcoll.reduce_scatter(x, counts=counts, comm=comm,
                                                 algorithm=algorithm), ref)
    assert np.array_equal(zipcoll.ireduce_scatter(x, counts=counts, comm=comm,
                                                  algorithm=algorithm).wait(), ref)
    got = np.zeros(counts[r], np.int64)
    zcomm.Reduce_scatter(x, got, counts)
    assert np.array_equal(got, ref)
    got[:] = 0
    zcomm.Reduce_scatter([x, MPI.INT64_T], [got, MPI.INT64_T])  # counts from the receive sizes
    assert np.array_equal(got, ref)
    got[:] = 0
    zcomm.Ireduce_scatter(x, got, counts).Wait()
    assert np.array_equal(got, ref)

    block = rank_data(np.float64, 4 * p, r)
    block_ref = np.zeros(4, np.float64)
    comm.Reduce_scatter_block(block, block_ref)
    got = np.zeros(4)
    zcomm.Reduce_scatter_block(block, got)
    assert np.allclose(got, block_ref, rtol=1e-12, atol=1e-12)
    inplace = block.copy()
    zcomm.Ireduce_scatter_block(MPI.IN_PLACE, inplace, op=MPI.SUM).Wait()
    assert np.allclose(inplace[:4], block_ref, rtol=1e-12, atol=1e-12)
    mean = zipcoll.reduce_scatter(block, op="mean", comm=comm, algorithm=algorithm)
    assert np.allclose(mean, block_ref / p, rtol=1e-12, atol=1e-12)

    mine = np.full(counts[r], r, np.int32)
    want = np.concatenate([np.full(c, j, np.int32) for j, c in enumerate(counts)])
    gathered = np.full(sum(counts), -1, np.int32)
    zcomm.Allgatherv(mine, [gathered, counts])
    assert np.array_equal(gathered, want)
    gathered[:] = -1
    zcomm.Iallgatherv(mine, [gathered, (counts, np.cumsum([0] + counts[:-1]).tolist()),
                             MPI.INT32_T]).Wait()
    assert np.array_equal(gathered, want)
    equal = np.full((p, 3), -1, np.int32)
    equal[r] = r
    zcomm.Allgather(MPI.IN_PLACE, equal)
    assert np.array_equal(equal, np.repeat(np.arange(p, dtype=np.int32), 3).reshape(p, 3))
    equal[:] = -1
    zcomm.Iallgather(np.full(3, r, np.int32), equal).Wait()
    assert np.array_equal(equal.reshape(-1), np.repeat(np.arange(p, dtype=np.int32), 3))
    inplace = np.full(sum(counts), -1, np.int32)
    inplace[sum(counts[:r]):sum(counts[:r + 1])] = r
    zipcoll.iallgather(MPI.IN_PLACE, inplace, counts=counts, comm=comm,
                       algorithm=algorithm).wait()
    assert np.array_equal(inplace, want)
    assert np.array_equal(zipcoll.allgather(mine, counts=counts, comm=comm,
                                            algorithm=algorithm), want)


def test_the_plan_names_its_schedule(comm):
    request = zipcoll.ireduce_scatter(np.ones(4 * comm.size, np.float32), comm=comm)
    request.wait()
    assert request.plan.schedule.name in SHARDED


# -- compressed ---------------------------------------------------------------------------

def _carries(algorithm: str, spec: str, kind: str) -> bool:
    return algorithm == "auto" or SHARDED[algorithm].accepts(zipcoll.get_codec(spec), kind)


def rs_encodes(algorithm: str, p: int) -> int:
    """Encodes on one element's path in a compressed reduce-scatter over p ranks."""
    if p == 1:
        return 0
    if algorithm == "halving":
        q = 1 << (p.bit_length() - 1)
        return (q.bit_length() - 1) + (q != p)
    return p - 1  # ring: every hop re-encodes the partial sum; the owner keeps its sum


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("spec", ["int8", "int4", "fp16", "bf16"])
def test_compressed_reduce_scatter_within_bound(comm, algorithm, spec):
    if not _carries(algorithm, spec, "reduce-scatter"):
        with pytest.raises(ValueError, match="cannot carry"):
            zipcoll.reduce_scatter(np.ones(comm.size, np.float32), comm=comm,
                                   algorithm=algorithm, codec=spec)
        return
    p, r = comm.size, comm.rank
    counts = [1000 + 37 * j for j in range(p)]
    parts = [rank_data(np.float32, sum(counts), j) for j in range(p)]
    request = zipcoll.ireduce_scatter(parts[r], counts=counts, comm=comm, algorithm=algorithm,
                                      codec=spec)
    got = request.wait()
    schedule = request.plan.schedule.name
    mine = np.stack([_block(x, counts, r) for x in parts]).astype(np.float64)
    exact, s = mine.sum(axis=0), np.abs(mine).sum(axis=0)
    codec = zipcoll.get_codec(spec)
    e = np.zeros_like(s)
    for _ in range(rs_encodes(schedule, p)):
        e = e + one_encode(codec, s + e)
    bound = (e + (p + 4) * np.finfo(np.float32).eps * (s + e)) * 1.01 + 1e-30
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound), f"{schedule}: max err/bound {np.max(err / bound):.3g}"
    if p > 1:
        assert err.max() > 0, "no error at all: is the codec used?"


ALLGATHER_SPECS = ["int8", "int4", "fp16", "topk:ratio=0.1", "threshold:tau=1.0"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("spec", ALLGATHER_SPECS)
def test_compressed_allgather_same_bits_within_bound(comm, algorithm, spec):
    if not _carries(algorithm, spec, "all-gather"):
        with pytest.raises(ValueError, match="cannot carry"):
            zipcoll.allgather(np.ones(3, np.float32), comm=comm, algorithm=algorithm,
                              codec=spec)
        return
    p, r = comm.size, comm.rank
    counts = [500 + 91 * j for j in range(p)]
    parts = [rank_data(np.float32, counts[j], j) for j in range(p)]
    got = zipcoll.allgather(parts[r], counts=counts, comm=comm, algorithm=algorithm, codec=spec)
    codec = zipcoll.get_codec(spec)
    problems = []
    for j in range(p):
        block = _block(got, counts, j)
        if j == r:
            if block.tobytes() != parts[r].tobytes():
                problems.append("own block not exact")
            continue
        bound = codec_bound(codec, parts[j]) * 1.01 + 1e-30
        if not np.all(np.abs(block.astype(np.float64) - parts[j]) <= bound):
            problems.append(f"block {j} beyond its bound")
    assert not problems, problems
    # every rank holds the same bits of every block but its own (which it keeps exact)
    others = {j: _block(got, counts, j).tobytes() for j in range(p)}
    everyone = comm.allgather(others)
    for j in range(p):
        seen = {row[j] for k, row in enumerate(everyone) if k != j}
        assert len(seen) <= 1, f"ranks decoded block {j} differently"


@pytest.mark.parametrize("kind", ["reduce-scatter", "all-gather"])
def test_error_feedback_cancels_the_bias(comm, kind):
    """int4 of a constant vector, 30 calls: with key= the mean of the results approaches the
    exact one (the residuals carry what each call dropped); without it the bias stays."""
    p, r = comm.size, comm.rank
    n = 64 * p
    x = np.linspace(0.01, 0.97, n, dtype=np.float32) * (r + 1)

    def mean_error(key):
        total = np.zeros(n // p if kind == "reduce-scatter" else n, np.float64)
        for _ in range(30):
            if kind == "reduce-scatter":
                total += zipcoll.reduce_scatter(x, comm=comm, algorithm="ring", codec="int4",
                                                key=key)
            else:
                total += zipcoll.allgather(x[:n // p], comm=comm, algorithm="ring",
                                           codec="int4", key=key)
        if kind == "reduce-scatter":
            exact = sum(np.linspace(0.01, 0.97, n) * (j + 1) for j in range(p))[
                r * (n // p):(r + 1) * (n // p)]
        else:
            exact = np.concatenate([np.linspace(0.01, 0.97, n)[:n // p] * (j + 1)
                                    for j in range(p)])
        return np.abs(total / 30 - exact).max()

    if p == 1:  # nothing is encoded: one rank's block is its own, exact
        assert mean_error(None) < 1e-6
        return
    without, with_key = mean_error(None), mean_error(f"ef-{kind}")
    zipcoll.feedback.reset(f"ef-{kind}")
    assert with_key < without / 3, (with_key, without)


# -- agreement: MismatchError on every rank, before data moves ------------------------------

def _every_rank_raises(comm, call, error=MismatchError) -> None:
    raised = None
    try:
        call()
    except (MismatchError, ValueError, TypeError) as exc:
        raised = exc
    kinds = comm.allgather(type(raised).__name__ if raised else None)
    assert None not in kinds, f"some rank did not raise: {kinds}"
    assert isinstance(raised, (error, MismatchError)), repr(raised)


@pytest.mark.skipif(P == 1, reason="needs two ranks to disagree")
@pytest.mark.parametrize("kind", ["reduce-scatter", "all-gather"])
@pytest.mark.parametrize("what", ["counts", "dtype", "codec", "op", "collective"])
def test_ranks_that_disagree_all_raise(comm, kind, what):
    p, r = comm.size, comm.rank
    counts = [2] * p
    if what == "counts" and r == 0:
        counts = [3] + [2] * (p - 1)
    dtype = np.float64 if what == "dtype" and r == 0 else np.float32
    codec = "int8" if what == "codec" and r == 0 else None
    op = "max" if what == "op" and r == 0 else "sum"
    if what == "op" and kind == "all-gather":
        pytest.skip("an all-gather takes no op")
    recv = np.full(sum(counts) + 5, 7, dtype)
    before = recv.copy()
    as_kind = kind if not (what == "collective" and r == 0) else (
        "all-gather" if kind == "reduce-scatter" else "reduce-scatter")
    if as_kind == "reduce-scatter":
        call = lambda: zipcoll.reduce_scatter(np.ones(sum(counts), dtype), recv, counts=counts,  # noqa: E731
                                              op=op, comm=comm, algorithm="ring", codec=codec)
    else:
        call = lambda: zipcoll.allgather(np.ones(counts[r], dtype), recv, counts=counts,  # noqa: E731
                                         comm=comm, algorithm="ring", codec=codec)
    _every_rank_raises(comm, call)
    assert np.array_equal(recv, before), "data moved before the agreement failed"


@pytest.mark.skipif(P == 1, reason="needs two ranks to disagree")
def test_an_allreduce_against_a_reduce_scatter_raises_on_every_rank(comm):
    x = np.ones(4 * comm.size, np.float32)
    if comm.rank == 0:
        call = lambda: zipcoll.allreduce(x, comm=comm, algorithm="ring")  # noqa: E731
    else:
        call = lambda: zipcoll.reduce_scatter(x, comm=comm, algorithm="ring")  # noqa: E731
    _every_rank_raises(comm, call)
    assert np.array_equal(zipcoll.allreduce(x, comm=comm), x * comm.size)  # still in step


@pytest.mark.skipif(P == 1, reason="needs two ranks to disagree")
def test_allgather_send_sizes_that_differ_without_counts(comm):
    x = np.ones(3 + (comm.rank == 0), np.float32)
    _every_rank_raises(comm, lambda: zipcoll.allgather(x, comm=comm))


@pytest.mark.parametrize("bad", ["small recvbuf", "bad counts", "not divisible", "aliased",
                                 "codec on ints"])
def test_one_ranks_bad_argument_raises_on_every_rank(comm, bad):
    p, r = comm.size, comm.rank
    x = np.ones(4 * p, np.float32)
    recv = np.zeros(4, np.float32)
    counts, codec, send = None, None, x
    if r == p - 1:
        if bad == "small recvbuf":
            recv = np.zeros(3, np.float32)
        elif bad == "bad counts":
            counts = [4] * (p + 1)
        elif bad == "not divisible":
            send = np.ones(4 * p + 1, np.float32)
        elif bad == "aliased":
            recv = send[:4]
        elif bad == "codec on ints":
            send, recv, codec = x.astype(np.int32), recv.astype(np.int32), "int8"
    error = TypeError if bad == "codec on ints" else ValueError
    _every_rank_raises(comm, lambda: zipcoll.reduce_scatter(send, recv, counts=counts,
                                                            comm=comm, codec=codec), error)
    # and the communicator is still in step
    assert np.array_equal(zipcoll.reduce_scatter(x, comm=comm), np.full(4, p, np.float32))


def test_in_place_without_recvbuf_and_unknown_algorithm(comm):
    with pytest.raises(ValueError, match="IN_PLACE"):
        zipcoll.reduce_scatter(MPI.IN_PLACE, comm=comm)
    with pytest.raises(ValueError, match="unknown algorithm"):
        zipcoll.allgather(np.ones(2), comm=comm, algorithm="tree")
    assert np.array_equal(zipcoll.allgather(np.ones(2), comm=comm), np.ones(2 * comm.size))


# -- hostile orders, a late rank, threads -------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_non_blocking_start_never_waits_for_a_late_rank(comm, algorithm):
    p = comm.size
    x = np.ones(4096 * p, np.float32)
    zipcoll.reduce_scatter(x[:p * 8], comm=comm, algorithm=algorithm)  # first use behind us
    late = p - 1
    if comm.rank == late:
        time.sleep(2)
    began = time.perf_counter()
    rs = zipcoll.ireduce_scatter(x, comm=comm, algorithm=algorithm)
    ag = zipcoll.iallgather(x[:100], comm=comm, algorithm=algorithm)
    took = time.perf_counter() - began
    assert np.array_equal(rs.wait(), np.full(x.size // p, p, np.float32))
    assert np.array_equal(ag.wait(), np.ones(100 * p, np.float32))
    if p > 1 and comm.rank != late:
        assert took < 0.05, f"two starts took {took:.3f} s while rank {late} slept"


@pytest.fixture
def comms(comm):
    pair = comm.Dup(), comm.Dup()
    for c in pair:
        zipcoll.allgather(np.ones(1), comm=c)
    yield pair
    for c in pair:
        c.Free()


@pytest.mark.parametrize("algorithm", ["ring", "native", "halving", "auto"])
def test_calls_on_two_communicators_in_per_rank_orders(comms, algorithm, check):
    a_comm, b_comm = comms
    p = a_comm.size
    starts = [lambda: zipcoll.ireduce_scatter(np.full(8 * p, 1.0), comm=a_comm,
                                              algorithm=algorithm),
              lambda: zipcoll.iallgather(np.full(5, 2.0), comm=b_comm, algorithm=algorithm),
              lambda: zipcoll.iallreduce(np.full(7, 3.0), comm=a_comm)]
    order = [0, 1, 2] if a_comm.rank % 2 == 0 else [1, 0, 2]  # A's calls in one order
    requests = {i: starts[i]() for i in order}
    waits = list(order) if a_comm.rank % 3 else list(reversed(order))
    got = {i: requests[i].wait() for i in waits}
    assert np.array_equal(got[0], np.full(8, float(p)))
    assert np.array_equal(got[1], np.full(5 * p, 2.0))
    assert np.array_equal(got[2], np.full(7, 3.0 * p))


@pytest.fixture(params=["1", "0"], ids=["checked", "unchecked"])
def check(request, zipcoll_env):
    zipcoll_env(ZIPCOLL_CHECK=request.param)
    return request.param


def test_many_calls_on_one_communicator_match_in_start_order(comm, check):
    p = comm.size
    algorithms = ["native", "ring", "halving", "native", "auto", "ring"]
    requests = []
    for i, algorithm in enumerate(algorithms):
        if i % 2:
            requests.append(zipcoll.iallgather(np.full(i + 1, float(i)), comm=comm,
                                               algorithm=algorithm))
        else:
            requests.append(zipcoll.ireduce_scatter(np.full((i + 1) * p, float(i)), comm=comm,
                                                    algorithm=algorithm))
    order = list(range(len(requests)))
    if comm.rank % 2:
        order.reverse()
    for i in order:
        want = float(i) * (p if i % 2 == 0 else 1)
        assert np.array_equal(requests[i].wait(), np.full((i + 1) * (1 if i % 2 == 0 else p),
                                                          want))


@pytest.mark.skipif(MPI.Query_thread() < MPI.THREAD_MULTIPLE,
                    reason="MPI did not grant MPI_THREAD_MULTIPLE")
@pytest.mark.parametrize("codec", [None, "int8"])
def test_two_threads_on_two_communicators(comms, codec):
    p = comms[0].size

    def call(c, value, i):
        algorithm = ALGORITHMS[i % len(ALGORITHMS)] if codec is None else "ring"
        v = value + i % 3
        if i % 2:
            got = zipcoll.iallgather(np.full(300, v, np.float32), comm=c,
                                     algorithm=algorithm, codec=codec).wait()
            want = v
        else:
            got = zipcoll.reduce_scatter(np.full(300 * p, v, np.float32), comm=c,
                                         algorithm=algorithm, codec=codec)
            want = v * p
        return np.allclose(got, want, rtol=0.02 if codec else 0)

    on_two_communicators(comms, 60, call)


def test_results_alike_on_every_rank(comm):
    """An all-gather's result is every rank's, bit for bit (lossless, floats)."""
    x = rank_data(np.float32, 333, comm.rank)
    results = {a: zipcoll.allgather(x, comm=comm, algorithm=a) for a in ALGORITHMS}
    assert not differing_across_ranks(comm, results)


# -- two levels: emulated nodes ------------------------------------------------------------

def layouts(comm) -> dict:
    """Emulated node layouts of this world: one rank a node, and 2 a node (even sizes),
    with the ranks of a node interleaved (nodes {0, 2}, {1, 3}: local rank and node order
    are not rank order)."""
    p = comm.size
    found = {"1pernode": zipcoll.Topology.from_comm(comm, ranks_per_node=1)}
    if p % 2 == 0 and p > 2:
        found["2pernode"] = zipcoll.Topology.from_comm(comm, ranks_per_node=2)
        nodes = [list(range(k, p, p // 2)) for k in range(p // 2)]
        found["interleaved"] = zipcoll.Topology.from_layout(p, comm.rank, nodes=nodes)
    return found


@pytest.mark.parametrize("algorithm", ["hierarchical", "hierarchical:halving"])
@pytest.mark.parametrize("op, dtype", [("sum", "int32"), ("prod", "int16"), ("max", "float64"),
                                       ("bxor", "uint8"), ("sum", "float32")])
def test_two_level_matches_mpi_on_every_layout(comm, algorithm, op, dtype):
    problems = []
    for layout, topology in layouts(comm).items():
        for name, given in count_cases(comm.size).items():
            counts = _counts(given)
            parts = [rank_data(dtype, sum(counts), r, op) for r in range(comm.size)]
            x = parts[comm.rank]
            got = zipcoll.reduce_scatter(x, counts=given, op=op, comm=comm, algorithm=algorithm,
                                         topology=topology)
            ref = np.zeros(counts[comm.rank], x.dtype)
            comm.Reduce_scatter(x, ref, counts, op=BY_NAME[op].mpi)
            why = mismatch(got, ref, [_block(part, counts, comm.rank) for part in parts], op)
            if why:
                problems.append(f"{layout} {name} reduce-scatter: {why}")
            mine = parts[comm.rank][:counts[comm.rank]]
            gathered = zipcoll.allgather(mine, counts=counts, comm=comm, algorithm=algorithm,
                                         topology=topology)
            want = np.concatenate([parts[r][:counts[r]] for r in range(comm.size)])
            if gathered.tobytes() != want.tobytes():
                problems.append(f"{layout} {name} all-gather")
    assert not problems, problems


@pytest.mark.parametrize("spec", ["int8", "fp16"])
def test_two_level_compressed_across_nodes_only(comm, spec):
    """Lossless inside a node, the codec across: within the bound of the inner schedule's
    encodes over the nodes only; an all-gather the same bits on every rank."""
    codec = zipcoll.get_codec(spec)
    for layout, topology in layouts(comm).items():
        p, r = comm.size, comm.rank
        nodes = topology.num_nodes
        counts = [800 + 13 * j for j in range(p)]
        parts = [rank_data(np.float32, sum(counts), j) for j in range(p)]
        got = zipcoll.reduce_scatter(parts[r], counts=counts, comm=comm,
                                     algorithm="hierarchical", codec=spec, topology=topology)
        mine = np.stack([_block(x, counts, r) for x in parts]).astype(np.float64)
        exact, s = mine.sum(axis=0), np.abs(mine).sum(axis=0)
        e = np.zeros_like(s)
        for _ in range(nodes - 1):
            e = e + one_encode(codec, s + e)
        bound = (e + (p + 4) * np.finfo(np.float32).eps * (s + e)) * 1.01 + 1e-30
        err = np.abs(got - exact)
        assert np.all(err <= bound), (layout, float(np.max(err / bound)))
        if nodes > 1:
            assert err.max() > 0, "no error at all across nodes: is the codec used?"
        block = parts[r][:counts[r]]
        gathered = zipcoll.allgather(block, counts=counts, comm=comm, algorithm="hierarchical",
                                     codec=spec, topology=topology)
        assert _block(gathered, counts, r).tobytes() == block.tobytes(), "own block not exact"
        others = comm.allgather({j: _block(gathered, counts, j).tobytes() for j in range(p)})
        for j in range(p):
            assert len({row[j] for k, row in enumerate(others) if k != j}) <= 1, (layout, j)
            if j != r:
                bound_j = codec_bound(codec, parts[j][:counts[j]]) * 1.01 + 1e-30
                assert np.all(np.abs(_block(gathered, counts, j) - parts[j][:counts[j]])
                              <= bound_j), (layout, j)


def test_auto_takes_two_levels_across_slow_nodes(comm):
    """With 2 ranks a node, a large compressed reduce-scatter is priced cheapest on two levels."""
    if comm.size != 4:
        pytest.skip("2 emulated nodes x 2 ranks: 4 ranks only")
    topology = zipcoll.Topology.from_comm(comm, ranks_per_node=2)
    request = zipcoll.ireduce_scatter(np.ones(1 << 20, np.float32), comm=comm, codec="int8",
                                      topology=topology)
    assert np.allclose(request.wait(), comm.size, rtol=0.02)
    assert request.plan.schedule.name == "hierarchical", request.plan.name


# -- bfloat16: float32 inside, rounded once ---------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_bfloat16(comm, algorithm):
    p, r = comm.size, comm.rank
    counts = [5 + 3 * j for j in range(p)]
    parts = [rank_data(np.float32, sum(counts), j).astype(BFLOAT16) for j in range(p)]
    if algorithm == "native":
        with pytest.raises(TypeError, match="bfloat16"):
            zipcoll.reduce_scatter(parts[r], counts=counts, comm=comm, algorithm=algorithm)
    else:
        got = zipcoll.reduce_scatter(parts[r], counts=counts, comm=comm, algorithm=algorithm)
        exact = sum(_block(x, counts, r).astype(np.float64) for x in parts).astype(BFLOAT16)
        assert got.dtype == BFLOAT16 and got.tobytes() == exact.tobytes()
    mine = parts[r][:counts[r]]
    gathered = zipcoll.allgather(mine, counts=counts, comm=comm, algorithm=algorithm,
                                 codec="int8")
    assert gathered.dtype == BFLOAT16
    assert _block(gathered, counts, r).tobytes() == mine.tobytes(), "own block not exact"
    for j in range(p):
        want = parts[j][:counts[j]].astype(np.float32)
        scale = np.abs(want).max()
        assert np.allclose(_block(gathered, counts, j).astype(np.float32), want,
                           atol=scale * (1 / 127 + 1 / 128), rtol=0)
    others = comm.allgather({j: _block(gathered, counts, j).tobytes() for j in range(p)})
    for j in range(p):  # every rank but j decoded block j alike
        assert len({row[j] for k, row in enumerate(others) if k != j}) <= 1


# -- the benchmark's validation (not its times) ---------------------------------------------

@pytest.mark.parametrize("kind, args", [
    ("reduce-scatter", ["-a", "ring", "--codec", "int8"]),
    ("reduce-scatter", ["-a", "halving", "-d", "int32", "--op", "max"]),
    ("allgather", ["-a", "native", "--codec", "threshold:tau=0.5"]),
    ("allgather", ["-a", "hierarchical", "--codec", "int4"])])
def test_bench_validates(comm, kind, args, capsys):
    from zipcoll.bench.sharded_bench import main_for

    assert main_for(kind, ["-m", "1K:8K", "-i", "2", "-x", "1", "-c", *args]) == 0
    if comm.rank == 0:
        assert "# Validation: PASS" in capsys.readouterr().out


# -- buffer kinds ----------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_buffer_kind(comm, algorithm):
    """Host buffers of every kind, host memory posing as a GPU's (`FakeCUDA`: MPI's own,
    as mpi4py would call it), and the CUDA simulator's device arrays."""
    from numba import cuda

    from arrays import KINDS, FakeCUDA, view

    p, r = comm.size, comm.rank
    x = np.arange(4 * p, dtype=np.uint8) + r
    want_rs = np.zeros(4, np.uint8)
    comm.Reduce_scatter_block(x, want_rs)
    want_ag = np.concatenate([np.arange(4, dtype=np.uint8) + j for j in range(p)])
    for kind in KINDS:
        if kind.supports(x.dtype):
            recv = kind.make(np.zeros(4, np.uint8))
            zipcoll.reduce_scatter(kind.make(x), recv, comm=comm, algorithm=algorithm)
            assert np.array_equal(view(recv), want_rs), kind.name
            gathered = kind.make(np.zeros(4 * p, np.uint8))
            zipcoll.allgather(kind.make(x[:4].copy()), gathered, comm=comm, algorithm=algorithm)
            assert np.array_equal(view(gathered), want_ag), kind.name
    out = np.zeros(4, np.uint8)
    zipcoll.reduce_scatter(FakeCUDA(x), FakeCUDA(out), comm=comm, algorithm=algorithm)
    assert np.array_equal(out, want_rs)
    gathered = np.zeros(4 * p, np.uint8)
    zipcoll.allgather(FakeCUDA(x[:4].copy()), FakeCUDA(gathered), comm=comm, algorithm=algorithm)
    assert np.array_equal(gathered, want_ag)
    device = zipcoll.reduce_scatter(cuda.to_device(x), comm=comm, algorithm=algorithm)
    assert np.array_equal(device.copy_to_host(), want_rs)

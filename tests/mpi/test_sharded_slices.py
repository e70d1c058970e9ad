"""reduce_scatter / allgather in slices (`slicing.sharded_slicing`): the rule, results equal
to MPI's (lossless) or within the codec's bound, alike on every rank (compressed), and
`zipcoll.explain(..., collective=...)` ranking first what `auto` runs.

Every rank is its own emulated node (flat schedules slice only across nodes) and slices
are 4 KiB (`small_slices`), so messages of a few thousand elements run in several slices,
several in flight, as 64 MiB do on a cluster.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import rank_data
from test_compressed import one_encode
from zipcoll.collectives import SHARDED, sharded
from zipcoll.collectives.ops import BFLOAT16

pytestmark = pytest.mark.mpi

SLICED = tuple(name for name, s in SHARDED.items() if s.sliced)
COUNT = 20_000  # 80 KiB of int32/float32: about 20 slices of 4 KiB


@pytest.fixture
def slices_run(count_slices):
    """How many slices each call ran in (a list, call by call)."""
    return count_slices(sharded)


def _counts(p: int, kind: str) -> dict[str, list[int]]:
    """Equal, uneven with a zero block, and a block under the slice count."""
    total = COUNT if kind == "rs" else COUNT // p
    return {"equal": [total // p if kind == "rs" else total] * p,
            "uneven": [0] + [total // (p - 1) + 7 * j for j in range(1, p)] if p > 1 else [total],
            "tiny": [3] + [total] * (p - 1)}


def _block(x: np.ndarray, counts: list[int], r: int) -> np.ndarray:
    start = sum(counts[:r])
    return x[start:start + counts[r]]


def test_the_rule(comm, nodes):
    """Sliced schedules slice across nodes only, as the all-reduce's flat ones."""
    from zipcoll.collectives.slicing import sharded_slicing

    nbytes = COUNT * 4
    for name, schedule in SHARDED.items():
        cut = sharded_slicing(schedule, nbytes, 4, 4)
        if schedule.sliced and not schedule.two_level:
            assert cut.slices == -(-nbytes // 4096) and cut.window == 8, name
            assert sharded_slicing(schedule, nbytes, 4, 1).slices == 1  # one node
            assert sharded_slicing(schedule, 8191, 4, 4).slices == 1  # under two slices
        elif schedule.two_level:
            assert cut.slices == -(-nbytes // 4096), name
        else:
            assert cut.slices == 1, name


@pytest.mark.parametrize("algorithm", SLICED)
def test_lossless_in_slices_equals_mpi(comm, nodes, slices_run, algorithm):
    """Integers, bit for bit against MPI's Reduce_scatter / Allgatherv, out of place and in
    place; the send buffer and the receive tail untouched."""
    p, r = comm.size, comm.rank
    problems = []
    for name, counts in _counts(p, "rs").items():
        x = rank_data("int32", sum(counts), r)
        kept = x.copy()
        ref = np.zeros(counts[r], np.int32)
        comm.Reduce_scatter(x, ref, counts, op=MPI.SUM)
        out = np.full(counts[r] + 3, -5, np.int32)
        zipcoll.reduce_scatter(x, out, counts=counts, comm=comm, algorithm=algorithm,
                               topology=nodes)
        inplace = x.copy()
        zipcoll.reduce_scatter(MPI.IN_PLACE, inplace, counts=counts, comm=comm,
                               algorithm=algorithm, topology=nodes)
        if not (np.array_equal(out[:counts[r]], ref) and (out[counts[r]:] == -5).all()
                and np.array_equal(x, kept) and np.array_equal(inplace[:counts[r]], ref)):
            problems.append(f"reduce-scatter {name}")
    for name, counts in _counts(p, "ag").items():
        x = rank_data("int32", counts[r], r)
        ref = np.zeros(sum(counts), np.int32)
        comm.Allgatherv(x, [ref, counts])
        out = np.full(sum(counts) + 3, -5, np.int32)
        zipcoll.allgather(x, out, counts=counts, comm=comm, algorithm=algorithm,
                          topology=nodes)
        inplace = np.zeros(sum(counts), np.int32)
        _block(inplace, counts, r)[...] = x
        zipcoll.allgather(MPI.IN_PLACE, inplace, counts=counts, comm=comm,
                          algorithm=algorithm, topology=nodes)
        if not (np.array_equal(out[:ref.size], ref) and (out[ref.size:] == -5).all()
                and np.array_equal(inplace, ref)):
            problems.append(f"allgather {name}")
    assert not problems, problems
    if p > 1:
        assert max(slices_run) > 8, slices_run  # several slices, more than a window


@pytest.mark.parametrize("algorithm", SLICED)
def test_compressed_in_slices(comm, nodes, slices_run, algorithm):
    """int8: a reduce-scatter within p-1 encodes of partial sums, alike on every rank for
    the same input; an all-gather within one encode of each block, its owner's exact,
    every other rank holding the same bits."""
    p, r = comm.size, comm.rank
    codec = zipcoll.get_codec("int8")
    counts = [COUNT // p + 11 * j for j in range(p)]
    parts = [rank_data(np.float32, sum(counts), j) for j in range(p)]
    got = zipcoll.reduce_scatter(parts[r], counts=counts, comm=comm, algorithm=algorithm,
                                 codec="int8", topology=nodes)
    mine = np.stack([_block(x, counts, r) for x in parts]).astype(np.float64)
    exact, s = mine.sum(axis=0), np.abs(mine).sum(axis=0)
    e = np.zeros_like(s)
    for _ in range(p - 1):
        e = e + one_encode(codec, s + e)
    bound = (e + (p + 4) * np.finfo(np.float32).eps * (s + e)) * 1.01 + 1e-30
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / bound)

    sizes = [COUNT // p + 5 * j for j in range(p)]
    blocks = [rank_data(np.float32, sizes[j], j) for j in range(p)]
    gathered = zipcoll.allgather(blocks[r], counts=sizes, comm=comm, algorithm=algorithm,
                                 codec="int8", topology=nodes)
    for j in range(p):
        block = _block(gathered, sizes, j)
        if j == r:
            assert block.tobytes() == blocks[r].tobytes(), "own block not exact"
        else:
            within = one_encode(codec, np.abs(blocks[j]).astype(np.float64)) * 1.01 + 1e-30
            assert np.all(np.abs(block - blocks[j]) <= within), j
    everyone = comm.allgather([_block(gathered, sizes, j).tobytes() for j in range(p)])
    for j in range(p):
        assert len({row[j] for k, row in enumerate(everyone) if k != j}) <= 1, j
    if p > 1:
        assert min(slices_run) > 1, slices_run


def test_mean_bfloat16_and_feedback_in_slices(comm, nodes, slices_run):
    """op="mean" divides every slice's part; bfloat16 runs on float32 and is rounded once;
    error feedback keeps a residual per slice (a second call still within bound)."""
    p, r = comm.size, comm.rank
    n = COUNT // p
    count = n * p
    x = rank_data(np.float32, count, r)
    whole = np.sum([rank_data(np.float32, count, j) for j in range(p)], axis=0, dtype=np.float64)
    mean = zipcoll.reduce_scatter(x, op="mean", comm=comm, algorithm="ring", topology=nodes)
    np.testing.assert_allclose(mean, whole[r * n:(r + 1) * n] / p, rtol=1e-5, atol=1e-6)
    wide = zipcoll.reduce_scatter(x.astype(BFLOAT16), comm=comm, algorithm="ring",
                                  topology=nodes)
    exact = np.sum([rank_data(np.float32, count, j).astype(BFLOAT16).astype(np.float32)
                    for j in range(p)], axis=0)[r * n:(r + 1) * n]
    assert wide.dtype == BFLOAT16
    np.testing.assert_allclose(wide.astype(np.float32), exact, rtol=2 ** -7, atol=1e-30)
    for _ in range(2):
        fed = zipcoll.reduce_scatter(x, comm=comm, algorithm="ring", codec="int8",
                                     key="sliced-feedback", topology=nodes)
        assert np.max(np.abs(fed - whole[r * n:(r + 1) * n])) < 0.1 * p
    if p > 1:
        assert min(slices_run) > 1, slices_run


@pytest.mark.parametrize("collective, kind", [("reduce_scatter", "reduce-scatter"),
                                              ("allgather", "all-gather")])
@pytest.mark.parametrize("codec", [None, "int8"])
def test_explain_ranks_first_what_auto_runs(comm, small_slices, collective, kind, codec):
    if comm.size == 1:
        pytest.skip("one rank runs no plan (a copy); explain and auto agree only from 2 ranks")
    """On every layout of this many ranks, at sizes in one slice and in many: auto's plan
    is explain's first, the ranking the same on every rank, cheapest first."""
    p = comm.size
    for per_node in sorted({1, 2 if p % 2 == 0 else 1, p}):
        topology = zipcoll.Topology.from_comm(comm, ranks_per_node=per_node)
        for count in (64 * p, 4096 * p):
            x = np.ones(count, np.float32)
            if collective == "reduce_scatter":
                request = zipcoll.ireduce_scatter(x, comm=comm, codec=codec, topology=topology)
                nbytes = x.nbytes
            else:
                request = zipcoll.iallgather(x[:count // p], comm=comm, codec=codec,
                                             topology=topology)
                nbytes = x.nbytes  # the whole gathered vector
            request.wait()
            ranking = zipcoll.explain(nbytes, comm=comm, codec=codec, topology=topology,
                                      collective=collective)
            assert ranking.best.name == request.plan.name, (per_node, count, str(ranking))
            assert [s for s, _ in ranking] == sorted(s for s, _ in ranking)
            assert str(ranking).startswith(f"# {kind} of {nbytes} bytes")
            assert len({str(x) for x in comm.allgather(str(ranking))}) == 1
            if codec is not None and kind == "reduce-scatter":
                assert all(plan.algorithm != "native" for _, plan in ranking)

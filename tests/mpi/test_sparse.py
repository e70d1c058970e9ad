"""sparse_allgather / sparse_allreduce against MPI's own gather and Allreduce of the same data.

Every rank's pairs are deterministic (from rank, dtypes and pattern), so any rank can make
every other rank's and compute a serial reference. Each test makes all its MPI calls
before its first assertion; errors must be raised on every rank.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import KINDS, differing_across_ranks, mismatch, rank_data
from zipcoll.errors import MismatchError

pytestmark = pytest.mark.mpi

DENSE = 40  # length of the dense vector the pairs index
VALUE_DTYPES = ("float32", "float64", "int32")
INDEX_DTYPES = ("int32", "int64")
PATTERNS = ("varying", "same")  # varying: rank 0 has no pairs, the others 7, 3, 10, ...


def rank_pairs(rank: int, value_dtype: str, index_dtype: str, pattern: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s (indices, values): indices repeat within and across ranks."""
    nnz = 13 if pattern == "same" else (7 * rank) % 11
    rng = np.random.default_rng([zlib.crc32(f"{value_dtype}/{index_dtype}/{pattern}".encode()), rank])
    return rng.integers(0, DENSE, nnz).astype(index_dtype), rank_data(value_dtype, nnz, rank)


def disjoint_pairs(rank: int, value_dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s pairs on indices no other rank uses, some of them shuffled."""
    nnz = 2 + (5 * rank) % 7
    indices = (rank * DENSE + np.random.default_rng(rank).permutation(DENSE)[:nnz]).astype(np.int64)
    return indices, rank_data(value_dtype, nnz, rank)


def dense_of(indices: np.ndarray, values: np.ndarray, size: int = DENSE) -> np.ndarray:
    """The dense vector of one rank's pairs."""
    out = np.zeros(size, values.dtype)
    np.add.at(out, indices, values)
    return out


# -- a serial gtopk: the same merge tree, written independently -----------------------

def serial_topk(pairs: list[tuple[int, object]], k: int, dtype: np.dtype) -> list[tuple[int, object]]:
    """Sum at equal indices (in order, from 0), keep the k largest |v| (ties: lower index)."""
    sums: dict[int, object] = {}
    for i, v in pairs:
        sums[int(i)] = sums.get(int(i), dtype.type(0)) + v
    best = sorted(sums.items(), key=lambda iv: (-abs(float(iv[1])), iv[0]))[:k]
    return sorted(best)


def serial_gtopk(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[tuple[int, object]]:
    """Local top-k, fold the first 2*rem ranks in pairs, binomial reduce to new rank 0."""
    dtype = parts[0][1].dtype
    held = [serial_topk(list(zip(i, v)), k, dtype) for i, v in parts]
    pof2 = 1 << (len(parts).bit_length() - 1)
    rem = len(parts) - pof2
    alive = [serial_topk(held[2 * r + 1] + held[2 * r], k, dtype) for r in range(rem)]
    alive += held[2 * rem:]
    mask = 1
    while mask < pof2:
        for r in range(0, pof2, 2 * mask):
            alive[r] = serial_topk(alive[r] + alive[r + mask], k, dtype)
        mask *= 2
    return alive[0]


def as_pairs(indices: np.ndarray, values: np.ndarray) -> list[tuple[int, object]]:
    return list(zip(indices.tolist(), values.tolist()))


# -- allgatherv -----------------------------------------------------------------------

@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES)
def test_allgatherv_matches_gather(comm, value_dtype, index_dtype, pattern):
    indices, values = rank_pairs(comm.rank, value_dtype, index_dtype, pattern)
    sent = indices.copy(), values.copy()
    got_i, got_v, counts = zipcoll.sparse_allgather(values, indices, comm=comm)
    gathered = comm.allgather((indices, values))
    same = differing_across_ranks(comm, {"indices": got_i, "values": got_v})
    assert counts == [i.size for i, _ in gathered]
    assert got_i.dtype == index_dtype and got_v.dtype == value_dtype
    np.testing.assert_array_equal(got_i, np.concatenate([i for i, _ in gathered]))
    np.testing.assert_array_equal(got_v, np.concatenate([v for _, v in gathered]))
    np.testing.assert_array_equal(indices, sent[0])
    np.testing.assert_array_equal(values, sent[1])
    assert same == []


@pytest.mark.parametrize("kind", [k for k in KINDS if k.supports(np.dtype(np.float64))
                                  and k.supports(np.dtype(np.int64))], ids=repr)
def test_allgatherv_buffer_kinds(comm, kind):
    indices, values = rank_pairs(comm.rank, "float64", "int64", "varying")
    got_i, got_v, counts = zipcoll.sparse_allgather(kind.make(values), kind.make(indices), comm=comm)
    gathered = comm.allgather((indices, values))
    np.testing.assert_array_equal(got_i, np.concatenate([i for i, _ in gathered]))
    np.testing.assert_array_equal(got_v, np.concatenate([v for _, v in gathered]))


# -- sparse_allreduce -----------------------------------------------------------------

@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES)
def test_sparse_allreduce_matches_dense_allreduce(comm, value_dtype, index_dtype, pattern):
    indices, values = rank_pairs(comm.rank, value_dtype, index_dtype, pattern)
    new = zipcoll.sparse_allreduce(values, indices, DENSE, comm=comm)
    out = np.full(DENSE, 7, value_dtype)
    returned = zipcoll.sparse_allreduce(values, indices, DENSE, comm=comm, out=out)
    ref = np.empty(DENSE, value_dtype)
    comm.Allreduce(dense_of(indices, values), ref, op=MPI.SUM)
    same = differing_across_ranks(comm, {"new": new, "out": out})
    parts = [dense_of(*rank_pairs(r, value_dtype, index_dtype, pattern)) for r in range(comm.size)]
    assert returned is out
    assert mismatch(new, ref, parts, "sum") is None
    np.testing.assert_array_equal(out, new)
    assert same == []


# -- gtopk ----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [None, 4, 0, 1000])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES)
def test_gtopk_matches_serial_merge_tree(comm, value_dtype, pattern, k):
    indices, values = rank_pairs(comm.rank, value_dtype, "int32", pattern)
    got_i, got_v, counts = zipcoll.sparse_allgather(values, indices, comm=comm,
                                                    algorithm="gtopk", k=k)
    dense = zipcoll.sparse_allreduce(values, indices, DENSE, comm=comm, algorithm="gtopk", k=k)
    same = differing_across_ranks(comm, {"indices": got_i, "values": got_v, "dense": dense})
    parts = [rank_pairs(r, value_dtype, "int32", pattern) for r in range(comm.size)]
    k_used = max(i.size for i, _ in parts) if k is None else k
    assert same == []
    assert counts == [got_i.size] and got_i.size <= k_used
    assert got_i.dtype == np.int32 and got_v.dtype == value_dtype
    assert np.all(np.diff(got_i) > 0)
    assert as_pairs(got_i, got_v) == serial_gtopk(parts, k_used)
    np.testing.assert_array_equal(dense, dense_of(got_i, got_v))


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES)
def test_gtopk_disjoint_is_exact_global_topk(comm, value_dtype, k):
    indices, values = disjoint_pairs(comm.rank, value_dtype)
    got_i, got_v, _ = zipcoll.sparse_allgather(values, indices, comm=comm, algorithm="gtopk", k=k)
    gathered = comm.allgather((indices, values))
    union = as_pairs(np.concatenate([i for i, _ in gathered]), np.concatenate([v for _, v in gathered]))
    best = sorted(sorted(union, key=lambda iv: (-abs(iv[1]), iv[0]))[:k])
    assert as_pairs(got_i, got_v) == best


# -- errors: raised on every rank, before anything is sent ----------------------------

def call_catching(comm, values, indices, size=None, **kwargs) -> Exception | None:
    """Run one sparse call; the exception it raised, or None."""
    try:
        if size is None:
            zipcoll.sparse_allgather(values, indices, comm=comm, **kwargs)
        else:
            zipcoll.sparse_allreduce(values, indices, size, comm=comm, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None


BAD_CALLS = {
    "lengths differ": (np.ones(3), np.arange(2), None, {}, ValueError),
    "complex values": (np.ones(2, np.complex64), np.arange(2), None, {}, TypeError),
    "bool values": (np.ones(2, bool), np.arange(2), None, {}, TypeError),
    "float indices": (np.ones(2), np.arange(2.0), None, {}, TypeError),
    "uint32 indices": (np.ones(2), np.arange(2, dtype=np.uint32), None, {}, TypeError),
    "2-D values": (np.ones((2, 1)), np.arange(2), None, {}, ValueError),
    "index >= size": (np.ones(2), np.array([0, DENSE]), DENSE, {}, ValueError),
    "index < 0": (np.ones(2), np.array([-1, 0]), DENSE, {}, ValueError),
    "negative size": (np.ones(2), np.arange(2), -1, {}, ValueError),
    "unknown algorithm": (np.ones(2), np.arange(2), None, {"algorithm": "ring"}, ValueError),
    "k without gtopk": (np.ones(2), np.arange(2), None, {"k": 1}, ValueError),
    "negative k": (np.ones(2), np.arange(2), None, {"algorithm": "gtopk", "k": -1}, ValueError),
    "out too short": (np.ones(2), np.arange(2), DENSE, {"out": np.zeros(DENSE - 1)}, ValueError),
    "out dtype": (np.ones(2), np.arange(2), DENSE, {"out": np.zeros(DENSE, np.float32)}, TypeError),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_arguments_raise_on_every_rank(comm, case):
    values, indices, size, kwargs, error = BAD_CALLS[case]
    raised = call_catching(comm, values, indices, size, **kwargs)
    assert type(raised) is error, repr(raised)


@pytest.mark.parametrize("case", ["lengths differ", "index >= size", "float indices"])
def test_one_rank_rejecting_makes_the_others_raise_mismatch(comm, case):
    values, indices, size, kwargs, error = BAD_CALLS[case]
    bad = comm.size - 1
    if comm.rank != bad:
        values, indices = np.ones(2), np.arange(2)
    raised = call_catching(comm, values, indices, size, **kwargs)
    assert type(raised) is (error if comm.rank == bad else MismatchError), repr(raised)


@pytest.mark.parametrize("differing", ["values dtype", "indices dtype", "algorithm", "size", "k"])
def test_ranks_disagreeing_raise_mismatch(comm, differing):
    if comm.size == 1:
        pytest.skip("one rank always agrees with itself")
    odd = comm.rank % 2 == 1
    values = np.ones(2, np.float32 if odd and differing == "values dtype" else np.float64)
    indices = np.arange(2, dtype=np.int32 if odd and differing == "indices dtype" else np.int64)
    size = DENSE + (odd and differing == "size")
    kwargs = {"algorithm": "gtopk" if odd and differing in ("algorithm", "k") else "allgatherv"}
    if differing == "k":
        kwargs = {"algorithm": "gtopk", "k": 1 + odd}
    raised = call_catching(comm, values, indices, size, **kwargs)
    assert type(raised) is MismatchError and differing in str(raised), repr(raised)


def test_empty_everywhere(comm):
    empty_i, empty_v = np.zeros(0, np.int64), np.zeros(0, np.float32)
    gathered = zipcoll.sparse_allgather(empty_v, empty_i, comm=comm)
    top = zipcoll.sparse_allgather(empty_v, empty_i, comm=comm, algorithm="gtopk")
    dense = zipcoll.sparse_allreduce(empty_v, empty_i, 5, comm=comm, algorithm="gtopk")
    assert gathered[0].size == 0 and gathered[2] == [0] * comm.size
    assert top[0].size == 0 and top[2] == [0]
    np.testing.assert_array_equal(dense, np.zeros(5, np.float32))

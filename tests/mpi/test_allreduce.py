"""Every algorithm against the MPI library's own Allreduce, for every op x dtype MPI defines.

One test per (algorithm, op, dtype) makes all its calls first, sizes 0, 1, p-1, p and
1001, then checks every result: the same as comm.Allreduce (bit for bit, floats within
reordering error), the send buffer and the receive buffer's tail untouched, and
bit-identical on every rank. The full op x dtype grid runs out of place; the other entry
points (in place, new result, Intracomm, iallreduce) take one dtype per op, and about
1 MiB a few (op, dtype): per-call latency, not size, is what costs here.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import (LOSSLESS, OP_DTYPE_CASES, all_rank_data, differing_across_ranks, expected,
                    mismatch, rank_data)
from zipcoll.collectives.ops import BY_NAME

pytestmark = pytest.mark.mpi

def algorithm_cases(cases: list[tuple[str, str]], skip: tuple = ()) -> list[tuple[str, str, str]]:
    """(algorithm, op, dtype) for every algorithm that supports the op on the dtype."""
    out = []
    for op, dtype in cases:
        out += [(a, op, dtype) for a in LOSSLESS if a not in skip]
    return out


SENTINEL_TAIL = 3  # extra receive-buffer items that must stay untouched


def out_of_place(x: np.ndarray, op: str, comm: MPI.Intracomm, algorithm: str) -> dict:
    """zipcoll.allreduce into a longer receive buffer."""
    recv = np.zeros(x.size + SENTINEL_TAIL, x.dtype)
    zipcoll.allreduce(x, recv, op=BY_NAME[op].mpi, comm=comm, algorithm=algorithm)
    return {"allreduce": recv}


def every_entry_point(x: np.ndarray, op: str, comm: MPI.Intracomm, algorithm: str) -> dict:
    """allreduce out of place, in place and into a new array (op by name);
    Intracomm.Allreduce out of place and in place; iallreduce."""
    results = out_of_place(x, op, comm, algorithm)
    inplace = x.copy()
    zipcoll.allreduce(MPI.IN_PLACE, inplace, op=BY_NAME[op].mpi, comm=comm, algorithm=algorithm)
    new = zipcoll.allreduce(x, op=op, comm=comm, algorithm=algorithm)
    zcomm = zipcoll.Intracomm(comm, algorithm=algorithm)
    recv = np.zeros(x.size + SENTINEL_TAIL, x.dtype)
    zcomm.Allreduce(x, recv, op=BY_NAME[op].mpi)
    zinplace = x.copy()
    zcomm.Allreduce(MPI.IN_PLACE, zinplace, op=BY_NAME[op].mpi)
    started = zipcoll.iallreduce(x, op=op, comm=comm, algorithm=algorithm).wait()
    return {**results, "allreduce IN_PLACE": inplace, "allreduce new": new,
            "Intracomm.Allreduce": recv, "Intracomm.Allreduce IN_PLACE": zinplace,
            "iallreduce": started}


def check_all(comm: MPI.Intracomm, op: str, dtype: str, counts: list[int], algorithm: str,
              callers: list[Callable[..., dict]]) -> list[str]:
    """Run every (count, caller) first, then check; the problems found, each naming its case."""
    runs = []
    for count in counts:
        x = rank_data(dtype, count, comm.rank, op)
        sent = x.copy()
        ref = expected(comm, x, op)
        results = {}
        for call in callers:
            results.update(call(x, op, comm, algorithm))
        runs.append((count, x, sent, ref, results))
    problems, finals = [], {}
    for count, x, sent, ref, results in runs:
        parts = all_rank_data(dtype, count, comm.size, op)
        if not np.array_equal(x.view(np.uint8), sent.view(np.uint8)):
            problems.append(f"count={count}: sendbuf was modified")
        for how, got in results.items():
            case = f"count={count} {how}"
            got = np.asarray(got)
            if got.size == count + SENTINEL_TAIL:
                if np.any(got[count:]):
                    problems.append(f"{case}: wrote past count into the receive buffer")
                got = got[:count]
            why = mismatch(got, ref, parts, op)
            if why:
                problems.append(f"{case}: {why}")
            finals[case] = got
    problems += [f"{case}: not bit-identical across ranks"
                 for case in differing_across_ranks(comm, finals)]
    return problems


def small_counts(size: int) -> list[int]:
    return sorted({0, 1, size - 1, size, 1001})


# "auto" is "native" at these sizes: it runs with the entry points and at 1 MiB.
@pytest.mark.parametrize("algorithm,op,dtype", algorithm_cases(OP_DTYPE_CASES, skip=("auto",)))
def test_matches_mpi(comm, algorithm, op, dtype):
    problems = check_all(comm, op, dtype, small_counts(comm.size), algorithm, [out_of_place])
    assert not problems, "\n".join(problems)


# The entry points share allreduce's code path once the dtype is known: one dtype per op.
ENTRY_POINT_CASES = [("sum", "float64"), ("prod", "int16"), ("max", "float32"),
                     ("min", "uint32"), ("land", "bool"), ("lor", "uint8"), ("lxor", "int8"),
                     ("band", "int64"), ("bor", "uint64"), ("bxor", "int32")]


@pytest.mark.parametrize("algorithm,op,dtype", algorithm_cases(ENTRY_POINT_CASES))
def test_entry_points_match_mpi(comm, algorithm, op, dtype):
    problems = check_all(comm, op, dtype, small_counts(comm.size), algorithm,
                         [every_entry_point])
    assert not problems, "\n".join(problems)


LARGE_CASES = [("sum", "float32"), ("sum", "int32"), ("max", "float64"), ("bxor", "uint8")]


@pytest.mark.parametrize("algorithm,op,dtype", algorithm_cases(LARGE_CASES))
def test_matches_mpi_1mib(comm, algorithm, op, dtype):
    # a little over 1 MiB: several tree segments, chunks that do not divide evenly
    count = (1 << 20) // np.dtype(dtype).itemsize + 7
    problems = check_all(comm, op, dtype, [count], algorithm, [out_of_place])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("algorithm", zipcoll.ALGORITHMS)
def test_nan_and_inf_pass_through(comm, algorithm):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32)
    got = zipcoll.allreduce(x, comm=comm, algorithm=algorithm)
    ref = expected(comm, x, "sum")
    np.testing.assert_array_equal(got, ref)  # NaN where MPI gives NaN, same infinities

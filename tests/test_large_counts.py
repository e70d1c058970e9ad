"""Messages past the MPI library's count limit: the datatypes and chunks zipcoll hands MPI.

MPI-3 counts are C ints (Open MPI 5.0 has no large-count "_c" functions):
`transport.max_count()` (2**31 - 1, or ZIPCOLL_MAX_COUNT) items at most in one call.
tests/mpi/test_large_counts.py runs every algorithm past it.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi4py import MPI

import zipcoll
from zipcoll import transport
from zipcoll.collectives.schedules.native import native_chunks


def counts_in(datatype: MPI.Datatype) -> list[int]:
    """Every count a derived datatype was built with (contiguous counts, struct block
    lengths), through all its layers."""
    if datatype.combiner == MPI.COMBINER_NAMED:
        return []
    base, combiner, params = datatype.decode()
    if combiner == "CONTIGUOUS":
        counts, parts = [params["count"]], [base]
    elif combiner == "STRUCT":
        counts, parts = list(params["blocklengths"]), list(params["datatypes"])
    else:
        raise AssertionError(f"unexpected combiner {combiner}")
    for part in parts:
        counts += counts_in(part)
        if part.combiner != MPI.COMBINER_NAMED:
            part.Free()
    return counts


@pytest.mark.parametrize("limit", [2, 3, 16, 100, 2**31 - 1])
@pytest.mark.parametrize("nbytes", [0, 1, 2, 15, 16, 17, 255, 256, 257, 4004, 65537,
                                    2**31 + 7, 5 << 30, 2**63 - 1])
def test_bytes_type_is_all_the_bytes_and_no_count_past_the_limit(limit, nbytes):
    zipcoll.configure(max_count=limit)
    if limit < 16 and nbytes > 1 << 20:
        pytest.skip("too deep a type to build in a test")
    datatype = transport.bytes_type(nbytes)
    try:
        assert datatype.Get_size() == nbytes
        assert datatype.Get_extent() == (0, nbytes) and datatype.Get_true_extent() == (0, nbytes)
        counts = counts_in(datatype)
        assert counts and max(counts) <= limit
    finally:
        datatype.Free()


def test_bytes_type_at_an_offset():
    zipcoll.configure(max_count=100)
    datatype = transport.bytes_type(1000, offset=3 << 31)
    try:
        assert datatype.Get_size() == 1000
        assert datatype.Get_true_extent() == (3 << 31, 1000)
        assert max(counts_in(datatype)) <= 100
    finally:
        datatype.Free()


@pytest.mark.parametrize("count,limit,chunks", [(0, 10, 1), (1, 10, 1), (10, 10, 1), (11, 10, 2),
                                                (100, 10, 10), (101, 10, 11),
                                                (2**31 + 7, 2**31 - 1, 2)])
def test_native_chunks(count, limit, chunks):
    zipcoll.configure(max_count=limit)
    bounds = native_chunks(count)
    assert len(bounds) == chunks
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(hi - lo <= limit for lo, hi in bounds)


def test_limit_from_the_environment():
    code = "from zipcoll import transport; print(transport.max_count())"
    env = dict(os.environ, ZIPCOLL_MAX_COUNT="1000")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip() == "1000"
    env.pop("ZIPCOLL_MAX_COUNT")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip() == str(2**31 - 1)

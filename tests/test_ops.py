"""zipcoll.collectives.ops: looking ops up, which dtypes each takes, and applying them."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from arrays import DTYPES, OPS
from zipcoll.collectives import ops
from zipcoll.collectives.ops import BY_NAME, ReduceOp, check_supported, lookup, op_code

# The MPI standard's table (MPI-4.1, 6.9.2) by dtype group, written out independently
GROUPS = {
    "sum": "int uint float complex", "prod": "int uint float complex",
    "max": "int uint float", "min": "int uint float",
    "land": "bool int uint", "lor": "bool int uint", "lxor": "bool int uint",
    "band": "int uint", "bor": "int uint", "bxor": "int uint",
}


KIND_GROUPS = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def group(dtype: str) -> str:
    return KIND_GROUPS[np.dtype(dtype).kind]


def mpi_accepts(op: MPI.Op, dtype: str) -> bool:
    """Whether the MPI library itself reduces `dtype` with `op` (on COMM_SELF)."""
    x = np.ones(2, dtype)
    try:
        MPI.COMM_SELF.Allreduce(x, np.empty_like(x), op)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_OP
        return False
    return True


def test_every_predefined_op_is_known():
    assert set(OPS) == set(GROUPS)


@pytest.mark.parametrize("name", OPS)
def test_lookup_by_name_and_by_mpi_op(name):
    op = BY_NAME[name]
    assert lookup(name) is op
    assert lookup(name.upper()) is op
    assert lookup(op.mpi) is op
    assert isinstance(op, ReduceOp) and op.name == name


def test_lookup_errors():
    with pytest.raises(ValueError, match="unknown op 'avg'"):
        lookup("avg")
    with pytest.raises(ValueError, match="OP_NULL"):
        lookup(MPI.OP_NULL)
    with pytest.raises(TypeError, match="int"):
        lookup(3)


def test_user_defined_op_is_passed_through():
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        assert lookup(op) is op
        assert op_code(op) not in {op_code(o) for o in BY_NAME.values()}
    finally:
        op.Free()


def test_op_codes_are_distinct():
    codes = [op_code(BY_NAME[name]) for name in OPS]
    assert len(set(codes)) == len(codes)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", OPS)
def test_support_table(name, dtype):
    op = BY_NAME[name]
    defined = group(dtype) in GROUPS[name].split()
    assert op.supports(np.dtype(dtype)) == defined
    assert mpi_accepts(op.mpi, dtype) == defined  # the library agrees
    if defined:
        check_supported(op, np.dtype(dtype))
    else:
        with pytest.raises(TypeError, match=f"{name}.*{dtype}"):
            check_supported(op, np.dtype(dtype))


# acc, other, expected acc after `acc (op) other`
APPLY = {
    "sum": ([1, -2, 3], [4, 5, -6], [5, 3, -3]),
    "prod": ([1, -2, 3], [4, 5, -6], [4, -10, -18]),
    "max": ([1, -2, 3], [4, -5, -6], [4, -2, 3]),
    "min": ([1, -2, 3], [4, -5, -6], [1, -5, -6]),
    "land": ([0, 2, 3, 0], [0, 0, 5, 7], [0, 0, 1, 0]),
    "lor": ([0, 2, 3, 0], [0, 0, 5, 7], [0, 1, 1, 1]),
    "lxor": ([0, 2, 3, 0], [0, 0, 5, 7], [0, 1, 0, 1]),
    "band": ([12, 10], [10, 6], [8, 2]),
    "bor": ([12, 10], [10, 6], [14, 14]),
    "bxor": ([12, 10], [10, 6], [6, 12]),
}


@pytest.mark.parametrize("name", OPS)
def test_reduce_into_applies_the_op_in_place(name):
    acc, other, want = (np.array(v, np.int32) for v in APPLY[name])
    target = acc
    BY_NAME[name].reduce_into(acc, other)
    assert acc is target
    np.testing.assert_array_equal(acc, want)


def test_logical_ops_on_bool():
    acc = np.array([True, True, False, False])
    other = np.array([True, False, True, False])
    for name, want in [("land", [1, 0, 0, 0]), ("lor", [1, 1, 1, 0]), ("lxor", [0, 1, 1, 0])]:
        out = acc.copy()
        BY_NAME[name].reduce_into(out, other)
        np.testing.assert_array_equal(out, np.array(want, bool))


def _saturates(dtype: str) -> bool:
    """Whether this process's MPI library saturates a 64-item SUM of dtype's max and 1."""
    top = np.full(64, np.iinfo(dtype).max, dtype)
    ones = np.ones(64, dtype)
    MPI.SUM.Reduce_local(top, ones)
    return bool(ones[0] == np.iinfo(dtype).max)


def test_native_never_runs_where_open_mpi_differs():
    """Open MPI 5 saturates 8- and 16-bit sums and drops NaN in float MAX/MIN: auto must
    not hand those to the MPI library, whatever this process's library does."""
    for dtype in ("int8", "uint8", "int16", "uint16"):
        assert not ops.native_agrees(ops.BY_NAME["sum"], np.dtype(dtype))
    for dtype in ("float16", "float32", "float64"):
        for name in ("max", "min"):
            assert not ops.native_agrees(ops.BY_NAME[name], np.dtype(dtype))
        assert ops.native_agrees(ops.BY_NAME["sum"], np.dtype(dtype))  # within rounding


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint64"])
def test_the_probe_sees_what_the_mpi_library_does(dtype):
    """MPI_Reduce_local on overflowing values: the probe says "differs" exactly where this
    MPI library saturates (int8/int16 here, with Open MPI 5's vectorised ops)."""
    assert ops._probe("sum", np.dtype(dtype).str) == (not _saturates(dtype))
    assert ops._probe("bxor", np.dtype(dtype).str)  # bit operations cannot differ
    assert ops.native_agrees(ops.BY_NAME["prod"], np.dtype(dtype)) == ops._probe(
        "prod", np.dtype(dtype).str)

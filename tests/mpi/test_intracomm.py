"""zipcoll.Intracomm as a drop-in mpi4py communicator, over every kind of buffer.

Each test runs for every lossless algorithm, over the buffer kinds of arrays.KINDS and
mpi4py's buffer specs, and compares with the MPI library's own Allreduce.
"""
from __future__ import annotations

import array as pyarray

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import KINDS, LOSSLESS, DLPackOnly, expected, rank_data, view
from zipcoll.collectives.ops import BY_NAME, lookup

pytestmark = pytest.mark.mpi

N = 37  # not a multiple of any world size here

# One (dtype, op) per kind, so every kind's reduction is exact and comparable bit for bit.
KIND_CASES = {
    "numpy": ("float32", "max"),
    "array.array": ("int32", "sum"),
    "bytearray": ("uint8", "band"),
    "memoryview": ("int64", "prod"),
    "dlpack": ("uint16", "bxor"),
}


def kind_params():
    return [pytest.param(kind, dtype, BY_NAME[op].mpi, id=kind.name)
            for kind in KINDS for dtype, op in [KIND_CASES[kind.name]]]


def make_input(kind, dtype, op, rank, count=N):
    data = rank_data(dtype, count, rank, lookup(op).name)
    return data, kind.make(data)


def add_op_fn(inbuf, outbuf, datatype):
    """A user-defined op: outbuf += inbuf, as float64."""
    out = np.frombuffer(outbuf, np.float64)
    out += np.frombuffer(inbuf, np.float64)


ADD = MPI.Op.Create(add_op_fn, commute=True)


@pytest.mark.parametrize("algorithm", LOSSLESS)
class TestIntracomm:
    """Every test runs once per algorithm."""

    @pytest.fixture
    def zcomm(self, comm, algorithm):
        return zipcoll.Intracomm(comm, algorithm=algorithm)

    def test_is_an_mpi_intracomm(self, comm, zcomm):
        assert isinstance(zcomm, MPI.Intracomm)
        assert zcomm == comm  # the same communicator, not a copy
        assert (zcomm.Get_rank(), zcomm.Get_size()) == (comm.Get_rank(), comm.Get_size())
        value = zcomm.bcast("hello" if comm.rank == 0 else None, root=0)
        assert value == "hello"

    @pytest.mark.parametrize("kind,dtype,op", kind_params())
    def test_kinds(self, comm, zcomm, kind, dtype, op, algorithm):
        data, sendbuf = make_input(kind, dtype, op, comm.rank)
        recvbuf = kind.make(np.zeros_like(data))
        zcomm.Allreduce(sendbuf, recvbuf, op=op)
        inplace = kind.make(data)
        zcomm.Allreduce(MPI.IN_PLACE, inplace, op=op)
        new = zipcoll.allreduce(sendbuf, op=op, comm=comm, algorithm=algorithm)
        ref = expected(comm, data, op)
        np.testing.assert_array_equal(view(recvbuf), ref)
        np.testing.assert_array_equal(view(inplace), ref)
        np.testing.assert_array_equal(np.asarray(new), ref)
        np.testing.assert_array_equal(view(sendbuf), data)  # the input is left alone

    @pytest.mark.parametrize("kind,dtype,op", kind_params())
    def test_new_result_is_the_callers_kind(self, comm, kind, dtype, op, algorithm):
        data, sendbuf = make_input(kind, dtype, op, comm.rank)
        new = zipcoll.allreduce(sendbuf, op=op, comm=comm, algorithm=algorithm)
        if isinstance(sendbuf, (np.ndarray, pyarray.array, bytearray)):
            assert type(new) is type(sendbuf)
        if isinstance(sendbuf, pyarray.array):
            assert new.typecode == sendbuf.typecode
        assert new is not sendbuf
        np.testing.assert_array_equal(np.asarray(new).reshape(-1), expected(comm, data, op))

    @pytest.mark.parametrize("spec", ["[buf, FLOAT]", "(buf, FLOAT)", "[buf, count, FLOAT]"])
    def test_buffer_specs(self, comm, zcomm, spec):
        data = rank_data("float32", N, comm.rank, "max")
        count = N - 5 if "count" in spec else N
        send, recv = data.copy(), np.full(N, -1.0, np.float32)

        def wrap(buf):
            return {"[buf, FLOAT]": [buf, MPI.FLOAT], "(buf, FLOAT)": (buf, MPI.FLOAT),
                    "[buf, count, FLOAT]": [buf, count, MPI.FLOAT]}[spec]

        zcomm.Allreduce(wrap(send), wrap(recv), op=MPI.MAX)
        ref = np.full(N, -1.0, np.float32)
        comm.Allreduce([data, count, MPI.FLOAT], [ref, count, MPI.FLOAT], op=MPI.MAX)
        np.testing.assert_array_equal(recv, ref)  # past count: untouched

    def test_spec_retypes_raw_bytes(self, comm, zcomm):
        # bytearray + MPI.INT: the datatype, not the buffer, says what the bytes are
        data = rank_data("int32", N, comm.rank)
        send, recv = bytearray(data.tobytes()), bytearray(data.nbytes)
        zcomm.Allreduce([send, MPI.INT], [recv, MPI.INT], op=MPI.SUM)
        np.testing.assert_array_equal(np.frombuffer(recv, np.int32), expected(comm, data))

    def test_dlpack_in_place(self, comm, zcomm):
        data = rank_data("complex128", N, comm.rank)
        buf = DLPackOnly(data.copy())
        zcomm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        np.testing.assert_allclose(view(buf), expected(comm, data), rtol=1e-12, atol=1e-12)

    def test_keeps_shape(self, comm, algorithm):
        data = rank_data("int16", 24, comm.rank).reshape(4, 3, 2)
        new = zipcoll.allreduce(data, comm=comm, algorithm=algorithm)
        recv = np.empty_like(data)
        zipcoll.Intracomm(comm, algorithm=algorithm).Allreduce(data, recv)
        assert new.shape == (4, 3, 2)
        np.testing.assert_array_equal(new, expected(comm, data))
        np.testing.assert_array_equal(recv, expected(comm, data))

    def test_user_defined_op_runs_natively(self, comm, zcomm, algorithm):
        data = rank_data("float64", N, comm.rank)
        recv = np.empty_like(data)
        zcomm.Allreduce(data, recv, op=ADD)  # only MPI can apply it: every algorithm falls back
        new = zipcoll.allreduce(data, op=ADD, comm=comm, algorithm=algorithm)
        np.testing.assert_array_equal(recv, expected(comm, data, ADD))
        np.testing.assert_array_equal(new, recv)

    def test_iallreduce(self, comm, zcomm):
        data = rank_data("int32", N, comm.rank)
        recv = np.zeros_like(data)
        request = zcomm.Iallreduce(data, recv, op=MPI.SUM)
        assert request.Wait() is recv
        np.testing.assert_array_equal(recv, expected(comm, data))


# -- communicators made from a zipcoll.Intracomm keep its algorithm and codec ------------

def _idup(comm):
    new, request = comm.Idup()
    request.Wait()
    return new


def _reversed_group(comm):
    return comm.Get_group().Incl(list(reversed(range(comm.Get_size()))))


# Each makes a communicator of every rank of `comm` (some in another rank order).
CONSTRUCTORS = {
    "Dup": lambda c: c.Dup(),
    "Dup(info)": lambda c: c.Dup(MPI.INFO_NULL),
    "Dup_with_info": lambda c: c.Dup_with_info(MPI.INFO_NULL),
    "Clone": lambda c: c.Clone(),
    "Idup": _idup,
    "Split": lambda c: c.Split(0, key=-c.Get_rank()),
    "Split_type": lambda c: c.Split_type(MPI.COMM_TYPE_SHARED, key=c.Get_rank()),
    "Create": lambda c: c.Create(_reversed_group(c)),
    "Create_group": lambda c: c.Create_group(_reversed_group(c)),
}


def _runs_ring_int8(new):
    """new's Allreduce is zipcoll's ring with int8: the same bits as asking for them, and
    (on more than one rank) not the exact sum."""
    data = rank_data("float32", 4099, new.Get_rank())
    recv = np.zeros_like(data)
    new.Allreduce(data, recv, op=MPI.SUM)
    asked = zipcoll.allreduce(data, comm=new, algorithm="ring", codec="int8")
    np.testing.assert_array_equal(recv, asked)
    exact = expected(MPI.Intracomm(new), data.astype(np.float64))
    error = np.abs(recv - exact).max()
    assert error < 0.5 * new.Get_size()
    if new.Get_size() > 1:
        assert error > 0  # int8 ran: a lossless schedule would be within rounding
    inplace = data.copy()
    new.Allreduce(MPI.IN_PLACE, inplace)
    np.testing.assert_array_equal(inplace, asked)


@pytest.mark.parametrize("make", CONSTRUCTORS.values(), ids=CONSTRUCTORS.keys())
def test_new_communicator_keeps_algorithm_and_codec(comm, make):
    zcomm = zipcoll.Intracomm(comm, algorithm="ring", codec="int8")
    new = make(zcomm)
    try:
        assert type(new) is zipcoll.Intracomm
        assert (new.algorithm, new.codec) == ("ring", "int8")
        assert new.Get_size() <= comm.Get_size()
        _runs_ring_int8(new)
        grandchild = new.Dup()
        assert (type(grandchild), grandchild.algorithm, grandchild.codec) == (
            zipcoll.Intracomm, "ring", "int8")
        _runs_ring_int8(grandchild)
        grandchild.Free()
        assert grandchild == MPI.COMM_NULL
    finally:
        new.Free()
    assert new == MPI.COMM_NULL
    assert zcomm != MPI.COMM_NULL and (zcomm.algorithm, zcomm.codec) == ("ring", "int8")


@pytest.mark.parametrize("how", ["Split", "Create"])
def test_ranks_left_out_get_comm_null(comm, how):
    zcomm = zipcoll.Intracomm(comm, algorithm="recdoubling")
    rank = comm.Get_rank()
    if how == "Split":
        new = zcomm.Split(MPI.UNDEFINED if rank % 2 else 0, key=rank)
    else:
        new = zcomm.Create(comm.Get_group().Incl(list(range(0, comm.Get_size(), 2))))
    if rank % 2:
        assert new == MPI.COMM_NULL
        assert not isinstance(new, zipcoll.Intracomm)  # as mpi4py returns it
        return
    assert type(new) is zipcoll.Intracomm and new.algorithm == "recdoubling"
    data = rank_data("int32", N, new.Get_rank())
    recv = np.zeros_like(data)
    new.Allreduce(data, recv)
    np.testing.assert_array_equal(recv, expected(MPI.Intracomm(new), data))
    new.Free()
    assert new == MPI.COMM_NULL

"""Arrays contiguous in memory in another order than C's (Fortran order, transposed arrays).

mpi4py hands such arrays to MPI as they lie in memory; zipcoll does the same: element i
of the send buffer's memory is reduced into element i of the receive buffer's memory,
whatever either's shape or order, and a new result has the sender's shape and layout.
Each case is compared with the MPI library's own Allreduce of the same arrays.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import LOSSLESS, rank_data

pytestmark = pytest.mark.mpi

SHAPE = (5, 7)  # 35 items: not a multiple of any world size here


def fortran(dtype, rank):
    return np.asfortranarray(rank_data(dtype, 35, rank, "sum").reshape(SHAPE))


def transposed(dtype, rank):
    return rank_data(dtype, 35, rank, "sum").reshape(SHAPE[::-1]).T


LAYOUTS = {"Fortran": fortran, "transposed C": transposed}


def mpi_allreduce(comm, send, recv=None):
    """mpi4py's own Allreduce of these very arrays (a new array laid out as `send`)."""
    recv = np.empty_like(send) if recv is None else recv  # empty_like keeps the layout
    comm.Allreduce(send, recv)
    return recv


@pytest.mark.parametrize("algorithm", LOSSLESS)
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_lossless_in_memory_order(comm, algorithm, layout):
    send = layout("int32", comm.rank)
    assert not send.flags.c_contiguous
    ref = mpi_allreduce(comm, send)

    new = zipcoll.allreduce(send, comm=comm, algorithm=algorithm)
    assert new.shape == SHAPE and new.strides == ref.strides  # the sender's layout
    np.testing.assert_array_equal(new, ref)

    inplace = send.copy(order="K")
    zipcoll.allreduce(MPI.IN_PLACE, inplace, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(inplace, ref)

    c_recv = np.zeros(SHAPE, np.int32)  # a C-order receive buffer: filled in memory order
    zipcoll.allreduce(send, c_recv, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(c_recv, mpi_allreduce(comm, send, np.zeros(SHAPE, np.int32)))
    assert not np.array_equal(c_recv, ref)  # (so the layouts really differ)

    recv = np.zeros_like(send)
    zipcoll.Intracomm(comm, algorithm=algorithm).Allreduce([send, MPI.INT], [recv, MPI.INT])
    np.testing.assert_array_equal(recv, ref)
    np.testing.assert_array_equal(send, layout("int32", comm.rank))  # the input is left alone


@pytest.mark.parametrize("algorithm", ["ring", "allgather"])
def test_compressed_in_memory_order(comm, algorithm):
    """A codec sees the memory-order values: the same bits as the C-order call on them."""
    send = fortran("float32", comm.rank)
    new = zipcoll.allreduce(send, comm=comm, algorithm=algorithm, codec="int8")
    flat = zipcoll.allreduce(send.ravel(order="K"), comm=comm, algorithm=algorithm,
                             codec="int8")
    assert new.shape == SHAPE and new.flags.f_contiguous
    np.testing.assert_array_equal(new.ravel(order="K"), flat)

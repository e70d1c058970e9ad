"""Sparse all-gather and all-reduce: each rank holds (indices, values) pairs, its own number.

algorithm="allgatherv" (exact):

    counts   one Allgather of every rank's nnz (int64)
    gather   one Allgatherv of the indices and one of the values, side by side

Every rank receives every rank's pairs concatenated in rank order; `sparse_allreduce`
adds them into a dense vector in that order, so every rank computes the same bits.

algorithm="gtopk" (global top-k, Shi et al., ICDCS 2019): each rank sums its pairs at
equal indices and keeps its k largest |value|; then ranks merge pairwise (sum at equal
indices, keep the k largest |value|, ties to the lower index), the pairs sorted by index:

     fold (p not a power of two)    binomial reduce, log2(pof2) rounds     broadcast
     0 --> 1   2 --> 3   (even       new rank r receives from r + mask,     root --> all
     ranks hand theirs over)         merges; r + mask sends and stops

as Rabenseifner folds (`pof2_fold`). The root is new rank 0; every rank returns its
bytes. A message has a fixed size (an int64 count, room for k indices and k values), so
receivers preallocate and the broadcast is one message.

The agreement check (one small Iallreduce) runs first: ranks must agree on the dtypes,
algorithm, size and k, and a rank that rejects its arguments still joins it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll import buffers
from zipcoll.buffers import CUDA, Buffer
from zipcoll.codecs.base import align8
from zipcoll.collectives.agreement import code
from zipcoll.collectives.call import Call, start
from zipcoll.collectives.context import context_for
from zipcoll.collectives.ops import BFLOAT16, kind_of
from zipcoll.collectives.progress import check_threads
from zipcoll.collectives.schedule import Steps
from zipcoll.failures import abort_on_error
from zipcoll.topologies.trees import pof2_fold, pof2_rank
from zipcoll.transport import Transport

ALGORITHMS = ("allgatherv", "gtopk")
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_COUNT_BYTES = 8  # the int64 count that opens a gtopk message


@dataclass
class SparseCall:
    """One validated sparse collective: this rank's pairs and how to combine them."""

    indices: np.ndarray  # host, 1-D, int32 or int64
    values: np.ndarray  # host, 1-D, same length
    algorithm: str
    size: int | None  # dense length (sparse_allreduce); None for sparse_allgather
    k: int | None
    out: Buffer | None = None


def sparse_allgather(values: Any, indices: Any, *, comm: MPI.Intracomm = MPI.COMM_WORLD,
                     algorithm: str = "allgatherv", k: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Every rank's (indices, values) pairs, on every rank: `(indices, values, counts)`.

    "allgatherv": all pairs concatenated in rank order, counts[i] of them from rank i.
    "gtopk": the global top-k of the summed sparse vectors (k = `k`, default the largest
    nnz of any rank), sorted by index, the same bits on every rank; counts = [len].
    Indices and values keep the caller's dtypes; results are NumPy arrays.

    >>> idx, val, counts = zipcoll.sparse_allgather(val, idx)   # doctest: +SKIP
    """
    call, (all_indices, all_values, counts) = _run(values, indices, comm, algorithm, None, k,
                                                   None)
    return all_indices, all_values.astype(call.values.dtype, copy=False), counts


def sparse_allreduce(values: Any, indices: Any, size: int, *,
                     comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "allgatherv",
                     out: Any = None, k: int | None = None) -> Any:
    """The dense sum (length `size`) of every rank's pairs; in `out` if given, else a new array.

    Adds in rank order, so every rank gets the same bits. With "gtopk" only the global
    top-k entries (see `sparse_allgather`) are non-zero.
    """
    call, (all_indices, all_values, _) = _run(values, indices, comm, algorithm, size, k, out)
    given = call.values.dtype
    all_values = _widened(all_values)
    dense = np.zeros(size, all_values.dtype)
    np.add.at(dense, all_indices, all_values)  # sequential: rank order, same bits everywhere
    dense = dense.astype(given, copy=False)  # bfloat16: the float32 sum rounded once
    if call.out is None:
        return dense
    if call.out.device == CUDA:
        call.out.array.set(dense)
    else:
        call.out.array[...] = dense
    return out


def _widened(values: np.ndarray) -> np.ndarray:
    """bfloat16 values as float32 (exactly), to be summed; other dtypes as they are."""
    return values.astype(np.float32) if values.dtype == BFLOAT16 else values


# -- checks -------------------------------------------------------------------------------

def _run(values: Any, indices: Any, comm: MPI.Intracomm, algorithm: str, size: int | None,
         k: int | None, out: Any) -> tuple[SparseCall, tuple]:
    """Validate, agree (every rank, even one that rejected its arguments), gather: the
    validated call and (indices, values, counts). A blocking call in the communicator's
    order (`call.start`)."""
    check_threads()
    ctx = context_for(comm)
    abort_on_error.install()

    def steps(call: SparseCall, tag: int, highs: Any, may_block: bool) -> Steps:
        largest_nnz = int(highs[len(_FIELDS)])
        combined = yield from _combined(ctx.transport, call, largest_nnz if call.k is None
                                        else call.k, tag)
        gathered.append(combined)

    gathered: list = []
    call = Call(ctx, "sparse collective", _FIELDS,
                lambda: _validate(values, indices, algorithm, size, k, out), _signature, _shown,
                collective=lambda call: True, first_use=lambda call: False, steps=steps,
                outcome=lambda call: (call, gathered[0]))
    return start(call, blocking=True).wait()


def _validate(values: Any, indices: Any, algorithm: str, size: int | None, k: int | None,
              out: Any) -> SparseCall:
    """All local checks; raises TypeError/ValueError, touching nothing."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    _check_count("k", k)
    if k is not None and algorithm != "gtopk":
        raise ValueError(f"k= applies to algorithm 'gtopk' only, not {algorithm!r}")
    vals, idx = _host_vector("values", values), _host_vector("indices", indices)
    if kind_of(vals.dtype) not in "iuf":
        raise TypeError(f"values must have an integer or float dtype, not {vals.dtype}")
    if idx.dtype not in INDEX_DTYPES:
        raise TypeError(f"indices must be int32 or int64, not {idx.dtype}")
    if idx.size != vals.size:
        raise ValueError(f"{idx.size} indices but {vals.size} values")
    if size is not None:
        _check_count("size", size)
        _check_range(idx, size)
    return SparseCall(idx, vals, algorithm, size, k, _check_out(out, size, vals.dtype))


def _check_count(name: str, n: Any) -> None:
    """`n` is None or an int >= 0."""
    if n is None:
        return
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")


def _check_range(indices: np.ndarray, size: int) -> None:
    """Every index lies in [0, size)."""
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= size):
        raise ValueError(f"indices must lie in [0, {size}); got {int(indices.min())}.."
                         f"{int(indices.max())}")


def _host_vector(name: str, obj: Any) -> np.ndarray:
    """A 1-D buffer of any kind as a NumPy array (device data copied to the host)."""
    buf = buffers.as_array(obj)
    if len(buf.shape) != 1:
        raise ValueError(f"{name} must be 1-D, not of shape {buf.shape}")
    if buf.device == CUDA:
        buffers.synchronize(buf)
        return buffers.cupy().asnumpy(buf.array)
    return buf.array


def _check_out(out: Any, size: int | None, dtype: np.dtype) -> Buffer | None:
    """The caller's result buffer: writable, `size` items of the values' dtype."""
    if out is None:
        return None
    buf = buffers.as_array(out, writable=True)
    if buf.dtype != dtype:
        raise TypeError(f"out has dtype {buf.dtype} but values have {dtype}")
    if buf.count != size:
        raise ValueError(f"out holds {buf.count} items, not size={size}")
    return buf


_FIELDS = ("", "values dtype", "indices dtype", "algorithm", "size", "k")


def _signature(call: SparseCall | None) -> list[int]:
    """Numbers every rank must agree on (then this rank's nnz, whose maximum is the default k)."""
    if call is None:
        return [1] + [0] * len(_FIELDS)
    return [0, code(call.values.dtype.str), code(call.indices.dtype.str),
            ALGORITHMS.index(call.algorithm), -1 if call.size is None else call.size,
            -1 if call.k is None else call.k, call.indices.size]


def _shown(call: SparseCall | None) -> list[str]:
    """How this rank describes the fields it must agree on (for the mismatch message)."""
    if call is None:
        return ["rejected"] * len(_FIELDS)
    return ["", call.values.dtype.name, call.indices.dtype.name, call.algorithm,
            str(call.size), str(call.k)]


# -- dispatch -----------------------------------------------------------------------------

def _combined(t: Transport, call: SparseCall, k: int, tag: int) -> Steps:
    """The call's schedule; its steps return (indices, values, counts)."""
    if call.algorithm == "gtopk":  # its sums: bfloat16 in float32, rounded once by the caller
        values = _widened(call.values)
        wire = Wire(k, call.indices.dtype, values.dtype)
        msg = wire.pack(*top_k(*combine(call.indices, values), k))
        yield from gtopk_sparse(t, msg, wire, tag)
        indices, values = (a.copy() for a in wire.unpack(msg))
        return indices, values, [int(indices.size)]
    steps, gathered = allgatherv_sparse(t, call.indices, call.values)
    yield from steps
    return gathered()


# -- allgatherv ---------------------------------------------------------------------------

def allgatherv_sparse(t: Transport, indices: np.ndarray, values: np.ndarray) -> tuple[Steps, Any]:
    """The steps gathering every rank's pairs in rank order, and what they give once run:
    (all indices, all values, counts[i] pairs from rank i)."""
    gathered: list = []

    def steps() -> Steps:
        mine, counts = np.array([indices.size], np.int64), np.zeros(t.size, np.int64)
        yield [t.iallgather_count(mine, counts)]
        counts = counts.tolist()
        all_indices = np.empty(sum(counts), indices.dtype)
        all_values = np.empty(sum(counts), values.dtype)
        yield [_allgatherv(t, indices, all_indices, counts),
               _allgatherv(t, values, all_values, counts)]
        gathered.extend([all_indices, all_values, counts])

    return steps(), lambda: tuple(gathered)


def _allgatherv(t: Transport, send: np.ndarray, recv: np.ndarray, counts: list[int]) -> MPI.Request:
    """Start an Allgatherv of typed items, as bytes."""
    width = send.dtype.itemsize
    return t.iallgatherv(send.view(np.uint8), recv.view(np.uint8), [c * width for c in counts])


# -- gtopk --------------------------------------------------------------------------------

def gtopk_sparse(t: Transport, msg: np.ndarray, wire: "Wire", tag: int) -> Steps:
    """Global top-k in place: `msg` holds this rank's pairs, at the end the root's result."""
    if t.size == 1:
        return
    incoming = np.zeros_like(msg)
    fold = pof2_fold(t.rank, t.size)
    if fold.partner is not None and fold.new_rank is None:  # fold: hand mine over, sit out
        yield [t.isend(msg, fold.partner, tag)]
    elif fold.partner is not None:  # fold: take the partner's
        yield [t.irecv(incoming, fold.partner, tag)]
        wire.merge_into(msg, incoming)
    if fold.new_rank is not None:
        yield from _reduce_binomial(t, fold.new_rank, fold.pof2, msg, incoming, wire, tag)
    yield [t.ibcast(msg, pof2_rank(0, t.size))]  # the root's bytes on every rank


def _reduce_binomial(t: Transport, me: int, pof2: int, msg: np.ndarray, incoming: np.ndarray,
                     wire: "Wire", tag: int) -> Steps:
    """Merge towards new rank 0: at distance mask, r + mask sends to r and stops."""
    mask = 1
    while mask < pof2:
        if me & mask:
            yield [t.isend(msg, pof2_rank(me - mask, t.size), tag)]
            return
        yield [t.irecv(incoming, pof2_rank(me + mask, t.size), tag)]
        wire.merge_into(msg, incoming)
        mask <<= 1


class Wire:
    """A gtopk message: an int64 count, room for k indices, then (8-aligned) room for k values."""

    def __init__(self, k: int, index_dtype: np.dtype, value_dtype: np.dtype):
        self.k = k
        self.index_dtype = np.dtype(index_dtype)
        self.value_dtype = np.dtype(value_dtype)
        self.values_at = _COUNT_BYTES + align8(k * self.index_dtype.itemsize)
        self.nbytes = self.values_at + k * self.value_dtype.itemsize

    def pack(self, indices: np.ndarray, values: np.ndarray, msg: np.ndarray | None = None) -> np.ndarray:
        """Write up to k pairs into `msg` (a new zeroed message if None); return it."""
        msg = np.zeros(self.nbytes, np.uint8) if msg is None else msg
        msg[:_COUNT_BYTES].view(np.int64)[0] = indices.size
        stored_indices, stored_values = self._sections(msg, indices.size)
        stored_indices[...] = indices
        stored_values[...] = values
        return msg

    def unpack(self, msg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Views of the indices and values a message holds."""
        count = int(msg[:_COUNT_BYTES].view(np.int64)[0])
        if not 0 <= count <= self.k:
            raise ValueError(f"corrupt gtopk message: {count} pairs, room for {self.k}")
        return self._sections(msg, count)

    def merge_into(self, msg: np.ndarray, other: np.ndarray) -> None:
        """`msg` becomes the top k of the sum of both messages."""
        indices, values = (np.concatenate(pair) for pair in zip(self.unpack(msg), self.unpack(other)))
        self.pack(*top_k(*combine(indices, values), self.k), msg)

    def _sections(self, msg: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        index_bytes = count * self.index_dtype.itemsize
        value_bytes = count * self.value_dtype.itemsize
        return (msg[_COUNT_BYTES:_COUNT_BYTES + index_bytes].view(self.index_dtype),
                msg[self.values_at:self.values_at + value_bytes].view(self.value_dtype))


def combine(indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum values at equal indices: unique indices ascending, values summed in input order."""
    unique, where = np.unique(indices, return_inverse=True)
    sums = np.zeros(unique.size, values.dtype)
    np.add.at(sums, where.reshape(-1), values)
    return unique, sums


def top_k(indices: np.ndarray, values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Of pairs with ascending unique indices, the k of largest |value| (NaN, Inf first; ties: lower index)."""
    if indices.size <= k:
        return indices, values
    keep = np.sort(np.lexsort((indices, _descending_magnitude(values)))[:k])  # still ascending
    return indices[keep], values[keep]


def _descending_magnitude(values: np.ndarray) -> np.ndarray:
    """A key whose ascending order is descending |value|, exact for every int and float."""
    if values.dtype.kind == "f":
        magnitude = np.abs(values.astype(np.float64))
        magnitude[np.isnan(magnitude)] = np.inf  # never drop a NaN before a finite value
        return -magnitude
    if values.dtype.kind == "i":  # |INT64_MIN| wraps to itself: as uint64 it is 2**63
        return ~np.abs(values.astype(np.int64)).view(np.uint64)
    return ~values.astype(np.uint64)

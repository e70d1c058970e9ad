"""allreduce / iallreduce / Intracomm: argument checks, the agreement check, dispatch.

Every check that can fail runs before any data moves. Where the agreement check runs
(see `agreement_checked`), a rank that rejects its arguments still joins it, so every
other rank learns of the failure and raises too, instead of waiting forever.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from zipcoll import buffers
from zipcoll.buffers import CUDA, Buffer
from zipcoll.collectives import select
from zipcoll.collectives.allgather import allgather_allreduce_compressed
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.ops import BY_NAME, ReduceOp, check_supported, lookup, op_code
from zipcoll.collectives.recursive import rabenseifner_allreduce
from zipcoll.collectives.ring import ring_allreduce, ring_allreduce_compressed
from zipcoll.collectives.schedule import Steps, copy_in, run, test, wait
from zipcoll.collectives.tree import (dbtree_allreduce, dbtree_allreduce_compressed,
                                      tree_allreduce, tree_allreduce_compressed)
from zipcoll.collectives.twophase import twophase_allreduce_compressed
from zipcoll.codecs import Codec, get_codec
from zipcoll.errors import MismatchError
from zipcoll.transport import Transport, cuda_aware, transport_for

# In-place schedules over a Transport; "native" is the MPI library's own Allreduce.
SCHEDULES: dict[str, Callable[..., Steps]] = {
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "dbtree": dbtree_allreduce,
    "rabenseifner": rabenseifner_allreduce,
}
# Compressed schedules (SUM and mean on floats), fed by an Encoder.
COMPRESSED: dict[str, Callable[..., Steps]] = {
    "ring": ring_allreduce_compressed,
    "tree": tree_allreduce_compressed,
    "dbtree": dbtree_allreduce_compressed,
    "twophase": twophase_allreduce_compressed,
    "allgather": allgather_allreduce_compressed,
}
# Per-hop schedules preallocate what they receive: fixed-size payloads only.
ANY_SIZE_PAYLOADS = ("allgather",)
ALGORITHMS = ("auto", "native") + tuple(SCHEDULES) + ("twophase", "allgather")


def debug_enabled() -> bool:
    """ZIPCOLL_DEBUG=1: run the agreement check on every call, native ones included."""
    return os.environ.get("ZIPCOLL_DEBUG", "0") not in ("", "0")


@dataclass
class Call:
    """One validated all-reduce: what to reduce, where the result goes, how."""

    send: Buffer | None  # None: in place
    recv: Buffer
    op: ReduceOp | MPI.Op
    algorithm: str
    result: Any  # what allreduce returns
    codec: Codec | None = None
    key: Any = None
    mean: bool = False  # divide the sum by the number of ranks

    @property
    def count(self) -> int:
        return self.recv.count if self.send is None else self.send.count


def allreduce(sendbuf: Any, recvbuf: Any = None, *, op: Any = MPI.SUM,
              comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "auto",
              codec: Any = None, key: Any = None) -> Any:
    """All-reduce `sendbuf` over `comm`; the result is in `recvbuf` if given, else a new array.

    `op`: an MPI.Op or "sum", "prod", "max", "min", ..., or "mean" (floats).
    `codec`: compress on the wire (a spec such as "int8" or {"id": "topk", "ratio": 0.01});
    SUM and "mean" only. `key`: names the tensor, for error feedback across calls.

    >>> total = zipcoll.allreduce(np.ones(4, np.float32), algorithm="ring")   # doctest: +SKIP
    """
    steps, result = _start(sendbuf, recvbuf, op, comm, algorithm, codec, key, blocking=True)
    run(steps)
    return result


def iallreduce(sendbuf: Any, recvbuf: Any = None, *, op: Any = MPI.SUM,
               comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "auto",
               codec: Any = None, key: Any = None) -> "Request":
    """Start an all-reduce; the returned Request advances on test() and finishes on wait()."""
    steps, result = _start(sendbuf, recvbuf, op, comm, algorithm, codec, key, blocking=False)
    return Request(steps, result)


class Request:
    """A zipcoll all-reduce in flight. `test()` advances it; `wait()` finishes it.

    `wait()` returns what `allreduce` would have returned. `Test`/`Wait` are aliases,
    so code written against `mpi4py.MPI.Request` keeps working.
    """

    def __init__(self, steps: Steps, result: Any):
        self._steps = steps
        self._result = result
        self._pending: list = []
        self._done = False
        self._advance()  # post the first step now, so data moves while the caller computes

    def _advance(self) -> None:
        try:
            self._pending = next(self._steps)
        except StopIteration:
            self._pending, self._done = [], True

    def test(self) -> bool:
        """Advance as far as possible without blocking; True once the result is complete."""
        while not self._done:
            if self._pending and not test(self._pending):
                return False
            self._advance()
        return True

    def wait(self) -> Any:
        """Block until complete; return the result."""
        while not self._done:
            wait(self._pending)
            self._advance()
        return self._result

    Test = test
    Wait = wait


def _start(sendbuf: Any, recvbuf: Any, op: Any, comm: MPI.Intracomm, algorithm: str,
           codec: Any, key: Any, blocking: bool) -> tuple[Steps, Any]:
    """Validate, agree, and build the schedule of one call (nothing has moved yet)."""
    t = transport_for(_as_comm(comm))
    try:
        call, error = _validate(sendbuf, recvbuf, op, algorithm, codec, key, t.size), None
    except (TypeError, ValueError) as exc:
        call, error = None, exc
    if agreement_checked(call):
        _agree(t, call, error, algorithm)
    elif error is not None:
        raise error
    return _schedule(t, call, blocking), call.result


def _as_comm(comm: Any) -> MPI.Intracomm:
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py Intracomm, not {comm!r}")
    return comm


def agreement_checked(call: Call | None) -> bool:
    """Whether this call runs the agreement check (every rank decides alike).

    Always with ZIPCOLL_DEBUG=1; else for every algorithm but native. The check is one
    Allreduce of 12 int64 (a few microseconds): "auto" only leaves native for messages
    large enough that this stays under 1% of the call (see README, "Agreement check").
    """
    if debug_enabled():
        return True
    return call is None or call.algorithm != "native"


def _validate(sendbuf: Any, recvbuf: Any, op: Any, algorithm: str, codec: Any, key: Any,
              size: int) -> Call:
    """All local checks; raises TypeError/ValueError, touching nothing."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    mean = isinstance(op, str) and op.lower() == "mean"
    reduce_op = BY_NAME["sum"] if mean else lookup(op)
    in_place = sendbuf is MPI.IN_PLACE
    if in_place and recvbuf is None:
        raise ValueError("sendbuf is MPI.IN_PLACE but no recvbuf was given")
    send = None if in_place else buffers.as_array(sendbuf)
    recv = buffers.as_array(recvbuf, writable=True) if recvbuf is not None else None
    source = send if send is not None else recv
    check_supported(reduce_op, source.dtype)
    if mean and source.dtype.kind not in "fc":
        raise TypeError(f"op 'mean' needs a float or complex dtype, not {source.dtype}")
    codec = _check_codec(codec, reduce_op, algorithm, source.dtype)
    if recv is None:
        recv = _new_result(send)
        result = buffers.result_like(send, recv.array)
    else:
        _check_matching(send, recv)
        result = recvbuf
    name = _resolve(algorithm, reduce_op, source, size, codec)
    return Call(send, recv, reduce_op, name, result, codec, key, mean)


def _check_codec(spec: Any, op: ReduceOp | MPI.Op, algorithm: str, dtype: np.dtype) -> Codec | None:
    """The codec of `spec`, after checking that the op, algorithm and dtype can use it."""
    if spec is None:
        if algorithm in COMPRESSED and algorithm not in SCHEDULES:
            spec = "none"  # twophase/allgather without a codec: raw values on the wire
        else:
            return None
    codec = get_codec(spec)
    if op != BY_NAME["sum"]:
        name = op.name if isinstance(op, ReduceOp) else "a user-defined op"
        raise ValueError(f"compressed all-reduce supports op SUM and 'mean', not {name}; "
                         "use codec=None for other ops")
    if dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"codec {codec.codec_id!r} compresses float16/32/64, not {dtype}")
    accepting = [a for a in COMPRESSED if codec.fixed_size or a in ANY_SIZE_PAYLOADS]
    if algorithm != "auto" and algorithm not in accepting:
        raise ValueError(f"algorithm {algorithm!r} cannot use codec {codec.codec_id!r}; "
                         f"algorithms that can: {', '.join(accepting)}")
    return codec


def _new_result(send: Buffer) -> Buffer:
    array = buffers.empty_like(send)
    return Buffer(array, send.device, array, send.shape)


def _check_matching(send: Buffer | None, recv: Buffer) -> None:
    if send is None:
        return
    if send.dtype != recv.dtype:
        raise TypeError(f"sendbuf has dtype {send.dtype} but recvbuf has {recv.dtype}")
    if send.device != recv.device:
        raise TypeError(f"sendbuf is on {send.device} but recvbuf is on {recv.device}")
    if recv.count < send.count:
        raise ValueError(f"recvbuf holds {recv.count} items, fewer than the {send.count} sent")


def _resolve(algorithm: str, op: ReduceOp | MPI.Op, source: Buffer, size: int,
             codec: Codec | None) -> str:
    """The algorithm that will run: user-defined ops can only run natively."""
    if not isinstance(op, ReduceOp):
        return "native"
    if algorithm != "auto":
        return algorithm
    nbytes = source.count * source.dtype.itemsize
    if codec is not None:
        return select.choose_compressed(nbytes, size, codec)
    return select.choose(nbytes, size, source.device)


def _signature(call: Call | None, error: Exception | None, algorithm: str) -> list[int]:
    """Numbers every rank must agree on; the first says whether this rank rejected its input."""
    if call is None:
        return [1, 0, 0, 0, 0, 0, 0]
    codec = json.dumps(call.codec.get_config(), sort_keys=True) if call.codec else ""
    return [0, call.count, _code(call.recv.dtype.str), op_code(call.op) * 2 + call.mean,
            ALGORITHMS.index(algorithm), ALGORITHMS.index(call.algorithm), _code(codec)]


def _code(text: str) -> int:
    """A number every process computes alike for the same text."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


_FIELDS = ("", "count", "dtype", "op", "algorithm", "resolved algorithm", "codec")


def _agree(t: Transport, call: Call | None, error: Exception | None, algorithm: str) -> None:
    """One small Allreduce: every rank raises if any rank rejected its input or they differ."""
    lows, highs = t.agree(_signature(call, error, algorithm))
    if error is not None:
        raise error
    if highs[0]:
        raise MismatchError("another rank rejected its arguments to this all-reduce "
                            "(it raised the reason); nothing was sent")
    differing = [_FIELDS[i] for i in range(1, len(_FIELDS)) if lows[i] != highs[i]]
    if differing:
        raise MismatchError(f"ranks disagree on {', '.join(differing)} of this all-reduce "
                            f"(count ranges {lows[1]}..{highs[1]}); nothing was sent")


def _schedule(t: Transport, call: Call, blocking: bool) -> Steps:
    """The steps of the call: stage device data if MPI cannot read it, then run in place."""
    if call.recv.device == CUDA:
        buffers.synchronize(call.recv)
        if not cuda_aware():
            return _staged(t, call, blocking)
    return _run_on(t, call, call.send.array if call.send else None, call.recv.array, blocking)


def _run_on(t: Transport, call: Call, send: Any, recv: Any, blocking: bool) -> Steps:
    """Steps over arrays MPI can read: native, or copy in and reduce in place."""
    recv = recv[: call.count]
    if call.algorithm == "native":
        steps = _native(t, MPI.IN_PLACE if send is None else send, recv, call.op, blocking)
        return _scaled(steps, recv, t.size) if call.mean else steps
    xp = buffers.cupy() if call.recv.device == CUDA else np
    tag = t.next_tag()
    if call.codec is None:
        steps = SCHEDULES[call.algorithm](t, recv, call.op, tag, xp, send=send)
    else:
        copy_in(recv, send)
        encoder = Encoder(call.codec, rank=t.rank, call=tag, key=call.key,
                          context=(call.algorithm, call.count, recv.dtype.str, t.size))
        steps = COMPRESSED[call.algorithm](t, recv, encoder, tag, xp)
    return _scaled(steps, recv, t.size) if call.mean else steps


def _scaled(steps: Steps, arr: Any, size: int) -> Steps:
    """Run `steps`, then divide the sum by the number of ranks (op="mean")."""
    yield from steps
    arr /= size


def _native(t: Transport, send: Any, recv: Any, op: Any, blocking: bool) -> Steps:
    """The MPI library's own Allreduce (blocking) or Iallreduce, as one step."""
    mpi_op = op.mpi if isinstance(op, ReduceOp) else op
    if blocking:
        t.allreduce_native(send, recv, mpi_op)
    else:
        yield [t.iallreduce_native(send, recv, mpi_op)]


def _staged(t: Transport, call: Call, blocking: bool) -> Steps:
    """Device data through host memory for an MPI that cannot read GPU memory."""
    cp = buffers.cupy()
    host = cp.asnumpy(call.recv.array[: call.count] if call.send is None else call.send.array)
    yield from _run_on(t, _host_call(call), None, host, blocking)
    call.recv.array[: call.count].set(host)


def _host_call(call: Call) -> Call:
    host = Buffer(np.empty(0, call.recv.dtype), buffers.HOST, None, (0,))
    return Call(None, host, call.op, call.algorithm, None, call.codec, call.key, call.mean)


class Intracomm(MPI.Intracomm):
    """An mpi4py Intracomm over the same communicator whose Allreduce/Iallreduce are zipcoll's.

    Existing mpi4py code switches by wrapping its communicator and changing nothing else:

    >>> comm = zipcoll.Intracomm(MPI.COMM_WORLD, algorithm="ring")   # doctest: +SKIP
    >>> comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)                 # doctest: +SKIP
    """

    def __new__(cls, comm: MPI.Intracomm | None = None, algorithm: str = "auto",
                codec: Any = None):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
        self = super().__new__(cls, MPI.COMM_WORLD if comm is None else comm)
        self.algorithm = algorithm
        self.codec = None if codec is None else get_codec(codec)
        return self

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:
        """Like MPI.Intracomm.Allreduce, with zipcoll's algorithm and codec."""
        allreduce(sendbuf, recvbuf, op=op, comm=self, algorithm=self.algorithm,
                  codec=self.codec)

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> Request:
        """Like MPI.Intracomm.Iallreduce; returns a zipcoll.Request (Test/Wait)."""
        return iallreduce(sendbuf, recvbuf, op=op, comm=self, algorithm=self.algorithm,
                          codec=self.codec)

"""Argument checks: the caller's arguments -> a `Plan` of one all-reduce, or TypeError/ValueError.

Nothing here sends a message or writes a caller's buffer; every rank can run it alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Mapping

import numpy as np
from mpi4py import MPI

from zipcoll import buffers
from zipcoll.buffers import Buffer
from zipcoll.collectives import select
from zipcoll.collectives.select import COMPRESSED, accepting_schedules
from zipcoll.collectives.hierarchical import KINDS, check_topology
from zipcoll.collectives.ops import BY_NAME, ReduceOp, check_supported, lookup
from zipcoll.codecs import Codec, get_codec
from zipcoll.topologies import Topology

LOSSLESS = ("native", "ring", "tree", "dbtree", "rabenseifner")
FLAT = tuple(dict.fromkeys(LOSSLESS + COMPRESSED))
ALGORITHMS = ("auto",) + FLAT + KINDS
FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


@dataclass
class Plan:
    """One validated all-reduce: what to reduce, where the result goes, how."""

    send: Buffer | None  # None: in place
    recv: Buffer
    op: ReduceOp | MPI.Op
    algorithm: str  # resolved: a FLAT name, or "hierarchical:ring", "torus:allgather", ...
    recvbuf: Any  # the caller's recvbuf, or None: a new result is returned
    codec: Codec | None = None  # the flat codec, or the inter level's
    intra_codec: Codec | None = None  # two-level schedules' level 1
    key: Hashable = None
    mean: bool = False  # divide the sum by the number of ranks
    topology: Topology | None = None

    @property
    def count(self) -> int:
        return self.recv.count if self.send is None else self.send.count

    def outcome(self) -> Any:
        """What allreduce returns once the steps are done: recvbuf, or the caller's kind of array."""
        if self.recvbuf is not None:
            return self.recvbuf
        return buffers.result_like(self.send, self.recv.array)

    @property
    def kind(self) -> str:
        """"hierarchical", "torus", or the flat algorithm."""
        return self.algorithm.partition(":")[0]

    @property
    def inner(self) -> str:
        """The level-2 schedule of a two-level algorithm."""
        return self.algorithm.partition(":")[2]


def make_plan(sendbuf: Any, recvbuf: Any, op: Any, algorithm: str, codec: Any, key: Hashable,
              topology: Topology) -> Plan:
    """All local checks of one call; raises TypeError/ValueError, touching nothing."""
    kind, inner = split_algorithm(algorithm)
    mean = isinstance(op, str) and op.lower() == "mean"
    reduce_op = BY_NAME["sum"] if mean else lookup(op)
    send, recv = _buffers(sendbuf, recvbuf)
    source = send if send is not None else recv
    check_supported(reduce_op, source.dtype)
    if mean and source.dtype.kind not in "fc":
        raise TypeError(f"op 'mean' needs a float or complex dtype, not {source.dtype}")
    intra_codec, codec = _codecs(codec, kind, inner)
    if codec is not None or intra_codec is not None:
        _check_compressible(reduce_op, source.dtype, codec or intra_codec)
    if kind in KINDS:
        check_topology(kind, topology)
    if recv is None:
        recv = _new_result(send)
    else:
        _check_matching(send, recv)
    plan = Plan(send, recv, reduce_op, algorithm, recvbuf, codec, intra_codec, key, mean, topology)
    return _resolve(plan, kind, inner)


def split_algorithm(algorithm: str) -> tuple[str, str]:
    """("hierarchical", "ring") from "hierarchical:ring"; ValueError for unknown names."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, not {type(algorithm).__name__}")
    kind, _, inner = algorithm.partition(":")
    if kind not in ALGORITHMS or (inner and kind not in KINDS):
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of "
                         f"{', '.join(ALGORITHMS)} (two-level ones also as 'hierarchical:tree')")
    if inner and inner not in FLAT:
        raise ValueError(f"unknown inter-level schedule {inner!r} in {algorithm!r}; "
                         f"expected one of {', '.join(FLAT)}")
    return kind, inner


def _buffers(sendbuf: Any, recvbuf: Any) -> tuple[Buffer | None, Buffer | None]:
    if sendbuf is MPI.IN_PLACE and recvbuf is None:
        raise ValueError("sendbuf is MPI.IN_PLACE but no recvbuf was given")
    send = None if sendbuf is MPI.IN_PLACE else buffers.as_array(sendbuf)
    recv = None if recvbuf is None else buffers.as_array(recvbuf, writable=True)
    return send, recv


def _codecs(spec: Any, kind: str, inner: str) -> tuple[Codec | None, Codec | None]:
    """(level-1 codec, flat or level-2 codec) of a `codec=` argument, checked against the schedule."""
    levels = isinstance(spec, Mapping) and "id" not in spec
    if levels and kind not in KINDS + ("auto",):
        raise ValueError(f"a codec per level ({sorted(spec)}) needs a two-level algorithm "
                         f"({', '.join(KINDS)}), not {kind!r}")
    if levels and set(spec) - {"intra", "inter"}:
        raise ValueError(f"codec levels are 'intra' and 'inter', got {sorted(spec)}")
    intra = _codec(spec.get("intra")) if levels else None
    flat = _codec(spec.get("inter") if levels else spec)
    if flat is None and ("twophase" in (kind, inner) or "allgather" in (kind, inner)):
        flat = get_codec("none")  # raw values on the wire
    if flat is not None and kind in FLAT:
        _check_schedule(kind, flat)
    if flat is not None and inner:
        _check_schedule(inner, flat)
    if intra is not None:
        _check_schedule("ring", intra)  # level 1 is a per-hop ring
    return intra, flat


def _codec(spec: Any) -> Codec | None:
    return None if spec is None else get_codec(spec)


def _check_schedule(schedule: str, codec: Codec) -> None:
    accepting = accepting_schedules(codec)
    if schedule not in accepting:
        raise ValueError(f"algorithm {schedule!r} cannot use codec {codec.codec_id!r}; "
                         f"algorithms that can: {', '.join(accepting)} (and hierarchical:X, "
                         f"torus:X for those X)")


def _check_compressible(op: ReduceOp | MPI.Op, dtype: np.dtype, codec: Codec) -> None:
    if op != BY_NAME["sum"]:
        name = op.name if isinstance(op, ReduceOp) else "a user-defined op"
        raise ValueError(f"compressed all-reduce supports op SUM and 'mean', not {name}; "
                         "use codec=None for other ops")
    if dtype not in FLOATS:
        raise TypeError(f"codec {codec.codec_id!r} compresses float16/32/64, not {dtype}")


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


def _resolve(plan: Plan, kind: str, inner: str) -> Plan:
    """Fill in what "auto" and a bare two-level name leave open; user ops run natively."""
    if not isinstance(plan.op, ReduceOp):
        plan.algorithm = "native"  # only the MPI library can apply a user-defined op
        return plan
    if kind == "auto":
        source = plan.send or plan.recv
        plan.algorithm, compress = select.choose(source.count * source.dtype.itemsize,
                                                 plan.topology, plan.codec)
        if not compress:
            plan.codec = plan.intra_codec = None  # auto compresses only where it pays
    elif kind in KINDS and not inner:
        plan.algorithm = f"{kind}:{select.default_inner(plan.codec)}"
    return plan

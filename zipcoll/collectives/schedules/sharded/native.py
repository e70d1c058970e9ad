"""The MPI library's own MPI_Ireduce_scatter and MPI_Iallgatherv: the reference, the answer
for small messages and for device memory zipcoll cannot compute on, and the only one for
user-defined ops.

Called on the caller's own buffers, as mpi4py would (`send` may be MPI.IN_PLACE). A
compressed all-gather goes through it too, with any codec, variable-size ones included:
each rank encodes its block once, the payload sizes are gathered, then the payloads
(bytes: nothing lossy happens in MPI), and every rank decodes the same bytes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import ShardSchedule, register_sharded
from zipcoll.collectives.schedule import Steps
from zipcoll.collectives.schedules.sharded.halving import doubling_ag_cost, halving_rs_cost
from zipcoll.collectives.schedules.sharded.ring import ring_ag_cost, ring_rs_cost
from zipcoll.collectives.steps import Encoding
from zipcoll.transport import Transport


def native_reduce_scatter(t: Transport, send: Any, recv: Any, counts: list, op: Any) -> Steps:
    """MPI's Ireduce_scatter of `send` (or MPI.IN_PLACE: `recv` holds every block) into `recv`."""
    yield [t.ireduce_scatter_native(send, recv, counts, getattr(op, "mpi", op))]


def native_allgather(t: Transport, send: Any, recv: Any, counts: list, enc: Encoding | None,
                     xp: Any = np) -> Steps:
    """MPI's Iallgatherv of every rank's block into `recv`; with a lossy `enc`, of payloads.

    `send`: this rank's block, or MPI.IN_PLACE (it is in `recv` already).
    """
    if enc is None or not enc.lossy:
        yield [t.iallgatherv_native(send, recv, counts)]
        return
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    blocks = list(zip(starts[:-1], starts[1:]))
    mine = recv[slice(*blocks[t.rank])] if send is MPI.IN_PLACE else send
    slot = xp.empty(enc.wire_bytes(mine.size), np.uint8)
    payload = enc.pack(mine, "native/own", slot)
    size = np.array([payload.size], np.int64)
    sizes = np.zeros(t.size, np.int64)
    yield [t.iallgather_count(size, sizes)]
    gathered = xp.empty(int(sizes.sum()), np.uint8)
    yield [t.iallgatherv(payload, gathered, sizes.tolist())]
    at = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    for j, (lo, hi) in enumerate(blocks):
        if j != t.rank:
            enc.unpack(gathered[at[j]:at[j + 1]], recv[lo:hi])
    if send is not MPI.IN_PLACE:
        recv[slice(*blocks[t.rank])] = send  # its own block exact


def _in_c(work: Work) -> Work:
    return Work(work.profile, 1, "uint8", 0.0)


def native_rs_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """The library's reduce-scatter, modelled as the better of ring and recursive halving
    run in C (no per-step overhead); lossless only."""
    c_loops = _in_c(work)
    return min(ring_rs_cost(n, span, c_loops), halving_rs_cost(n, span, c_loops))


def native_ag_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """The library's all-gather (ring or recursive doubling, in C) of n bytes, or of their
    payloads: one encode of n/p, p-1 decodes, and an all-gather of the sizes first."""
    c_loops = _in_c(work)
    wire = n if codec is None else work.wire(codec, n)
    moves = min(ring_ag_cost(wire, span, c_loops), doubling_ag_cost(wire, span, c_loops))
    if codec is None:
        return moves
    p = span.size
    sizes = doubling_ag_cost(8 * p, span, c_loops)
    return sizes + moves + work.step + work.encode(codec, n / p) + (p - 1) * work.decode(codec, n / p)


register_sharded(ShardSchedule(
    "native", native_reduce_scatter, native_allgather, "the MPI library's own "
    "Reduce_scatter / Allgatherv; small messages; an all-gather of any codec's payloads",
    fixed_size_payloads=False, native=True, cost_rs=native_rs_cost, cost_ag=native_ag_cost))

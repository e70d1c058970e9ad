"""Ring all-reduce: a reduce-scatter ring (p-1 steps), then an allgather ring (p-1 steps).

Each rank sends to its right neighbour and receives from its left. After the
reduce-scatter, rank r owns chunk (r + 1) mod p fully reduced; the allgather passes the
owned chunks around unchanged, so every rank ends with the same bits. Bandwidth-optimal:
each rank sends 2(p-1)/p of the message.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in
from zipcoll.transport import Transport


def ring_allreduce(t: Transport, buf: Any, op: ReduceOp, tag: int, xp: Any = np,
                   send: Any = None) -> Steps:
    """All-reduce into `buf` around the ring of t.comm's ranks (from `send`, else in place).

    Out of place, `send` is read where it is: every chunk of `buf` is written once, by a
    reduction or by the allgather, so no copy of the input is needed.
    """
    chunks = chunk_bounds(buf.size, t.size)
    yield from reduce_scatter_ring(t, buf, chunks, op, tag, xp, send)
    yield from allgather_ring(t, buf, chunks, tag)


def neighbours(t: Transport) -> tuple[int, int]:
    """(right, left): a ring step sends to the right and receives from the left."""
    return (t.rank + 1) % t.size, (t.rank - 1) % t.size


def owned_chunk(t: Transport) -> int:
    """The chunk a rank holds complete after a ring reduce-scatter."""
    return (t.rank + 1) % t.size


def reduce_scatter_ring(t: Transport, buf: Any, chunks: list, op: ReduceOp, tag: int,
                        xp: Any = np, send: Any = None) -> Steps:
    """p-1 steps; afterwards chunk `owned_chunk(t)` of `buf` is reduced over all ranks.

    Chunks of `send` are read the first time they are used; partial sums live in `buf`.
    """
    p, r = t.size, t.rank
    if p == 1:
        copy_in(buf, send)
        return
    send = buf if send is None else send
    right, left = neighbours(t)
    scratch = t.borrow(max(b - a for a, b in chunks), buf.dtype, xp)
    try:
        for step in range(p - 1):
            outgoing = slice(*chunks[(r - step) % p])
            received = slice(*chunks[(r - step - 1) % p])
            incoming = scratch.array[: received.stop - received.start]
            # step s: pass on the partial sum made last step, take the left one's partial
            source = send if step == 0 else buf
            yield t.exchange(source[outgoing], right, incoming, left, tag)
            op.reduce_into(buf[received], incoming, xp, first=send[received])
    finally:
        t.give_back(scratch, xp)


def allgather_ring(t: Transport, buf: Any, chunks: list, tag: int) -> Steps:
    """p-1 steps passing each owner's final chunk around, unchanged, into every rank's buf."""
    p, r = t.size, t.rank
    right, left = neighbours(t)
    for step in range(p - 1):
        send_lo, send_hi = chunks[(r + 1 - step) % p]
        recv_lo, recv_hi = chunks[(r - step) % p]
        yield t.exchange(buf[send_lo:send_hi], right, buf[recv_lo:recv_hi], left, tag)


def ring_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                              xp: Any = np) -> Steps:
    """Sum `buf` in place around the ring, compressing per hop.

    Reduce-scatter steps decode, add and re-encode the partial chunk; each owner then
    encodes its final chunk once, keeps the decoded value, and the allgather forwards
    those bytes unchanged, so every rank decodes the same bytes into the same bits.
    """
    chunks = chunk_bounds(buf.size, t.size)
    yield from reduce_scatter_ring_encoded(t, buf, chunks, enc, tag, xp)
    yield from allgather_ring_encoded(t, buf, chunks, enc, tag, xp)


def _payload_slots(t: Transport, buf: Any, chunks: list, enc: Encoder, xp: Any):
    """Payload sizes of the chunks, and scratch for two payloads (one out, one in)."""
    wire = [enc.wire_bytes(b - a, buf.dtype) for a, b in chunks]
    space = t.borrow(2 * max(wire), np.uint8, xp)
    return wire, space, (space.array[: max(wire)], space.array[max(wire):])


def reduce_scatter_ring_encoded(t: Transport, buf: Any, chunks: list, enc: Encoder, tag: int,
                                xp: Any = np) -> Steps:
    """Compressed reduce-scatter: each hop decodes, adds and re-encodes the partial chunk."""
    p, r = t.size, t.rank
    if p == 1:
        return
    (right, left), (wire, space, slots) = neighbours(t), _payload_slots(t, buf, chunks, enc, xp)
    try:
        for step in range(p - 1):
            sent, received = (r - step) % p, (r - step - 1) % p
            payload = enc.encode(buf[slice(*chunks[sent])], f"ring/rs/{sent}", out=slots[0])
            incoming = slots[1][: wire[received]]
            yield t.exchange(payload, right, incoming, left, tag)
            enc.decode_add(incoming, buf[slice(*chunks[received])])
    finally:
        t.give_back(space, xp)


def allgather_ring_encoded(t: Transport, buf: Any, chunks: list, enc: Encoder, tag: int,
                           xp: Any = np) -> Steps:
    """Each owner encodes its chunk once (keeping the decoding); the bytes go round unchanged."""
    p, r = t.size, t.rank
    if p == 1:
        return
    (right, left), (wire, space, slots) = neighbours(t), _payload_slots(t, buf, chunks, enc, xp)
    owned = slice(*chunks[owned_chunk(t)])
    try:
        outgoing = enc.encode(buf[owned], f"ring/ag/{owned_chunk(t)}", out=slots[0])
        enc.decode(outgoing, buf[owned])  # the owner keeps what the others get
        free = 1  # the slot not holding `outgoing`
        for step in range(p - 1):
            received = (r - step) % p
            incoming = slots[free][: wire[received]]
            yield t.exchange(outgoing, right, incoming, left, tag)
            enc.decode(incoming, buf[slice(*chunks[received])])
            outgoing, free = incoming, 1 - free  # forwarded unchanged next step
    finally:
        t.give_back(space, xp)

"""Ring all-reduce: a reduce-scatter ring (p-1 steps), then an allgather ring (p-1 steps).

Each rank sends to its right neighbour and receives from its left. After the
reduce-scatter, rank r owns chunk (r + 1) mod p fully reduced; the owner settles it
(compressed: encodes it once and keeps the decoding) and the allgather passes the final
bytes around unchanged, so every rank ends with the same bits. Bandwidth-optimal: each
rank sends 2(p-1)/p of the message. Compressed, every reduce-scatter hop decodes, adds
and re-encodes the partial chunk.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in
from zipcoll.collectives.steps import Encoding, Slots, send_recv_copy, send_recv_reduce
from zipcoll.topologies.trees import ring_neighbors
from zipcoll.transport import Transport


def ring(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
         send: Any = None) -> Steps:
    """All-reduce `buf` around the ring of t's ranks (from `send`, else in place).

    Out of place, `send` is read where it is: every chunk of `buf` is written once, by a
    reduction or by the allgather, so no copy of the input is needed.
    """
    chunks = chunk_bounds(buf.size, t.size)
    yield from reduce_scatter(t, buf, chunks, enc, tag, xp, send)
    yield from allgather(t, buf, chunks, enc, tag, xp)


def owned_chunk(t: Transport) -> int:
    """The chunk a rank holds complete after a ring reduce-scatter."""
    return (t.rank + 1) % t.size


def reduce_scatter(t: Transport, buf: Any, chunks: list, enc: Encoding, tag: int,
                   xp: Any = np, send: Any = None) -> Steps:
    """p-1 steps; afterwards chunk `owned_chunk(t)` of `buf` is reduced over all ranks.

    Chunks of `send` are read the first time they are used; partial sums live in `buf`.
    """
    p, r = t.size, t.rank
    if p == 1:
        copy_in(buf, send)
        return
    source = buf if send is None else send
    left, right = ring_neighbors(r, p)
    most = max(b - a for a, b in chunks)
    # one packed out, one received; none out of place where values land in place (each
    # chunk of buf is received once, onto nothing of value: `send_recv_reduce`)
    landing = send is not None and enc.lands_in_place
    slots = Slots(t, 2, 0 if landing else enc.wire_bytes(most), xp)
    try:
        for step in range(p - 1):
            sent, received = (r - step) % p, (r - step - 1) % p
            # step s: pass on the partial sum made last step, take the left one's partial
            outgoing = enc.pack((source if step == 0 else buf)[slice(*chunks[sent])],
                                f"ring/rs/{sent}", slots[0])
            mine = None if send is None else send[slice(*chunks[received])]
            yield from send_recv_reduce(t, enc, outgoing, right, buf[slice(*chunks[received])],
                                        left, tag, slots[1], first=mine)
    finally:
        slots.give_back()


def allgather(t: Transport, buf: Any, chunks: list, enc: Encoding, tag: int,
              xp: Any = np) -> Steps:
    """p-1 steps passing each owner's settled chunk around, unchanged, into every rank's buf."""
    p, r = t.size, t.rank
    if p == 1:
        return
    left, right = ring_neighbors(r, p)
    owned = owned_chunk(t)
    slots = Slots(t, 2, enc.forward_bytes(max(b - a for a, b in chunks)), xp)
    try:
        outgoing = enc.settle(buf[slice(*chunks[owned])], f"ring/ag/{owned}", slots[0])
        free = 1  # the slot not holding `outgoing`
        for step in range(p - 1):
            received = buf[slice(*chunks[(r - step) % p])]
            outgoing = yield from send_recv_copy(t, enc, outgoing, right, received, left, tag,
                                                 slots[free])
            free = 1 - free  # forwarded unchanged next step
    finally:
        slots.give_back()


def ring_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Ring: reduce-scatter p-1 steps + allgather p-1 steps, each of n/p bytes.

        lossless:    2(p-1) (alpha + n/p beta) + (p-1) n/p gamma
        compressed:  2(p-1) (alpha + w(n/p) beta)
                     + (p-1) [enc + dec_add](n/p)             reduce-scatter, per hop
                     + [enc + dec](n/p) + (p-1) dec(n/p)      owner's encode, allgather
    """
    p = span.size
    if p == 1:
        return 0.0
    m = n / p
    moves = 2 * (p - 1) * work.hop(span.ring_link, work.wire(codec, m))
    if codec is None:
        return moves + (p - 1) * work.reduce(m)
    return (moves + (p - 1) * (work.encode(codec, m) + work.decode_add(codec, m))
            + work.encode(codec, m) + p * work.decode(codec, m))


register(Schedule("ring", ring, "reduce-scatter + allgather rings; large messages, "
                  "bandwidth-optimal", per_hop=True, cost=ring_cost))

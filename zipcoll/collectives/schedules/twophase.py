"""Two-phase all-reduce: scatter-reduce by all-to-all, then allgather (1-bit Adam's shape).

Phase 1: each rank packs chunk j of its vector for its owner j, an all-to-all delivers
them, and the owner reduces the p-1 received chunks into its own, in rank order.
Phase 2: each owner settles its chunk (compressed: encodes it once, keeps the decoding)
and every rank receives the same final bytes. Compressed, that is two encodes whatever p
is (1-bit Adam's worker and server compression).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, all_to_all
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in
from zipcoll.collectives.steps import Encoding, Slots
from zipcoll.transport import Transport


def twophase(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
             send: Any = None) -> Steps:
    """All-reduce `buf` in place: packed all-to-all, owners reduce, allgather of the owners'."""
    copy_in(buf, send)
    if t.size == 1:
        return
    chunks = chunk_bounds(buf.size, t.size)
    most = max(b - a for a, b in chunks)
    # slot j: what goes to rank j, then rank j's final bytes; slot p + j: what rank j sent
    slots = Slots(t, 2 * t.size, enc.wire_bytes(most), xp)
    try:
        yield from _scatter_reduce(t, buf, chunks, enc, tag, slots)
        yield from _allgather(t, buf, chunks, enc, tag, slots)
    finally:
        slots.give_back()


def _scatter_reduce(t: Transport, buf: Any, chunks: list, enc: Encoding, tag: int,
                    slots: Slots) -> Steps:
    r, p = t.rank, t.size
    peers = [j for j in range(p) if j != r]
    mine = buf[slice(*chunks[r])]
    outgoing = {j: enc.pack(buf[slice(*chunks[j])], f"twophase/scatter/{j}", slots[j])
                for j in peers}
    incoming = {j: enc.inbox(slots[p + j], mine.size) for j in peers}
    yield ([t.irecv(incoming[j], j, tag) for j in peers]
           + [t.isend(outgoing[j], j, tag) for j in peers])
    for j in peers:  # rank order, so the result does not depend on arrival
        enc.reduce(incoming[j], mine)


def _allgather(t: Transport, buf: Any, chunks: list, enc: Encoding, tag: int,
               slots: Slots) -> Steps:
    r = t.rank
    final = enc.settle(buf[slice(*chunks[r])], "twophase/gather", slots[r])
    landings = [None if j == r else enc.landing(buf[slice(*chunks[j])], slots[j])
                for j in range(t.size)]
    yield t.exchange_with_all(final, landings, tag)
    for j, landing in enumerate(landings):
        if j != r:
            enc.unpack(landing, buf[slice(*chunks[j])])


def twophase_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Two-phase (1-bit Adam): all-to-all of chunks, owners sum, allgather of the sums.

        2 x all-to-all of w(n/p) per pair
        compressed: + p enc(n/p) + (p-1) dec_add(n/p) + p dec(n/p)
        raw values: + (p-1) (n/p) gamma
    """
    p = span.size
    if p == 1:
        return 0.0
    m = n / p
    moves = 2 * (all_to_all(span, work.wire(codec, m)) + work.step)
    if codec is None:
        return moves + (p - 1) * work.reduce(m)
    return (moves + p * work.encode(codec, m) + (p - 1) * work.decode_add(codec, m)
            + p * work.decode(codec, m))


register(Schedule("twophase", twophase, "all-to-all scatter-reduce + allgather; compressed "
                  "twice whatever p is (1-bit Adam)", cost=twophase_cost))

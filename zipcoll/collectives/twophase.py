"""Two-phase compressed all-reduce (1-bit Adam's worker and server compression).

Phase 1 (scatter-reduce): each rank encodes its vector once, chunk j for its owner j,
and an all-to-all delivers the chunks; the owner adds the p-1 decoded chunks to its own
uncompressed one. Phase 2 (allgather): each owner encodes its sum once, keeps the
decoded value, and every rank decodes the same bytes. Two compressions whatever p is.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.schedule import Steps, chunk_bounds, split_space
from zipcoll.transport import Transport


def twophase_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                                  xp: Any = np) -> Steps:
    """Sum `buf` in place: compressed all-to-all, owners sum, compressed allgather."""
    if t.size == 1:
        return
    chunks = chunk_bounds(buf.size, t.size)
    wire = [enc.wire_bytes(b - a, buf.dtype) for a, b in chunks]
    space = t.borrow(sum(wire) + t.size * wire[t.rank], np.uint8, xp)
    outbox = split_space(space.array[: sum(wire)], wire)
    inbox = split_space(space.array[sum(wire):], [wire[t.rank]] * t.size)
    try:
        yield from _scatter_reduce(t, buf, chunks, outbox, inbox, enc, tag)
        yield from _allgather(t, buf, chunks, outbox, enc, tag)
    finally:
        t.give_back(space, xp)


def _scatter_reduce(t: Transport, buf: Any, chunks: list, outbox: list, inbox: list,
                    enc: Encoder, tag: int) -> Steps:
    r = t.rank
    peers = [j for j in range(t.size) if j != r]
    for j in peers:
        enc.encode(buf[slice(*chunks[j])], f"twophase/scatter/{j}", out=outbox[j])
    yield [t.irecv(inbox[j], j, tag) for j in peers] + [t.isend(outbox[j], j, tag) for j in peers]
    mine = buf[slice(*chunks[r])]
    for j in peers:  # rank order, so the sum does not depend on arrival
        enc.decode_add(inbox[j], mine)


def _allgather(t: Transport, buf: Any, chunks: list, outbox: list, enc: Encoder,
               tag: int) -> Steps:
    r = t.rank
    peers = [j for j in range(t.size) if j != r]
    mine = buf[slice(*chunks[r])]
    final = enc.encode(mine, "twophase/gather", out=outbox[r])
    enc.decode(final, mine)  # the owner keeps what the others get
    yield t.exchange_with_all(final, outbox, tag)
    for j in peers:
        enc.decode(outbox[j], buf[slice(*chunks[j])])

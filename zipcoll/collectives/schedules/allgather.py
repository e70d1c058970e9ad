"""All-reduce by allgather: every rank packs its vector once, gathers every rank's, reduces all.

Works with every codec, variable-size ones included (sizes are exchanged first). Every
rank reduces the same p vectors in rank order, so every rank ends with the same bits.
Each rank receives p-1 whole vectors: it pays off when payloads are small (top-k,
threshold) or p is small. Point to point, not MPI_Allgatherv: slices of a pipelined
call may start in different orders on different ranks; collectives match by order,
messages by tag.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, all_to_all
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, split_space
from zipcoll.collectives.steps import Encoding, Slots, reduce_in_rank_order
from zipcoll.transport import Transport


def allgather(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
              send: Any = None) -> Steps:
    """All-reduce `buf` in place from every rank's packed copy of its vector."""
    own = Slots(t, 1, enc.wire_bytes(buf.size), xp)
    try:
        source = buf if send is None else send
        payload = enc.pack(source, "allgather", own[0])
        if payload is buf:  # raw values about to be overwritten by rank 0's: keep a copy
            payload = enc.inbox(own[0], buf.size)
            payload[...] = buf
        counts = [int(payload.nbytes)] * t.size
        if not enc.fixed_size:
            counts = yield from _payload_sizes(t, int(payload.nbytes), tag)
        yield from _gather_and_reduce(t, buf, enc, tag, xp, payload, counts)
    finally:
        own.give_back()


def _payload_sizes(t: Transport, mine: int, tag: int) -> Steps:
    """Every rank's payload size in bytes, for codecs whose size depends on the data."""
    sizes = np.zeros(t.size, dtype=np.int64)
    yield t.exchange_with_all(np.array([mine], np.int64), split_space(sizes, [1] * t.size), tag)
    return [mine if j == t.rank else int(n) for j, n in enumerate(sizes)]


def _gather_and_reduce(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any,
                       payload: Any, counts: list) -> Steps:
    space = Slots(t, 1, sum(counts), xp)
    try:
        inbox = [enc.inbox(box, buf.size) for box in split_space(space[0], counts)]
        yield t.exchange_with_all(payload, inbox, tag)
        reduce_in_rank_order(enc, [payload if j == t.rank else inbox[j] for j in range(t.size)], buf)
    finally:
        space.give_back()


def allgather_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Allgather of every rank's vector (encoded once), then each rank sums all p of them.

        all-to-all of w(n) per pair
        compressed: + enc(n) + p dec_add(n)
                    (+ one all-to-all of 8 bytes first, for variable-size codecs)
        raw values: + (p-1) n gamma
    """
    p = span.size
    if p == 1:
        return 0.0
    moves = all_to_all(span, work.wire(codec, n)) + work.step
    if codec is None:
        return moves + (p - 1) * work.reduce(n)
    sizes = 0.0 if codec.fixed_size else all_to_all(span, 8) + work.step
    return sizes + moves + work.encode(codec, n) + p * work.decode_add(codec, n)


register(Schedule("allgather", allgather, "every rank's vector to every rank, reduced in "
                  "rank order; any codec, threshold included", fixed_size_payloads=False, cost=allgather_cost))

"""Compressed all-reduce by allgather: encode once, gather every payload, decode and sum.

Works with every codec, sparse and variable-size ones included (their sizes are
exchanged first, then one Allgatherv). Every rank sums the same payloads in rank order,
so every rank ends with the same bits. Each rank receives (p-1) payloads: it pays off
when payloads are small (top-k, threshold) or p is small.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.schedule import Steps, split_space
from zipcoll.transport import Transport


def allgather_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                                   xp: Any = np) -> Steps:
    """Sum `buf` in place from every rank's encoded copy of it.

    Point to point (sizes first, for variable-size codecs), not MPI_Allgatherv: slices of a
    pipelined call may start in different orders on different ranks, and collectives
    match by order, messages by tag.
    """
    payload = enc.encode(buf, "allgather")
    counts = [int(payload.size)] * t.size
    if not enc.codec.fixed_size:
        sizes = np.zeros(t.size, dtype=np.int64)
        yield t.exchange_with_all(np.array([payload.size], np.int64),
                                  split_space(sizes, [1] * t.size), tag)
        counts = [int(payload.size) if j == t.rank else int(n) for j, n in enumerate(sizes)]
    space = t.borrow(sum(counts), np.uint8, xp)
    try:
        inbox = split_space(space.array, counts)
        yield t.exchange_with_all(payload, inbox, tag)
        buf[...] = 0
        for j, received in enumerate(inbox):  # rank order: the same sum on every rank
            enc.decode_add(payload if j == t.rank else received, buf)
    finally:
        t.give_back(space, xp)

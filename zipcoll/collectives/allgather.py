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
from zipcoll.collectives.schedule import Steps
from zipcoll.transport import Transport


def allgather_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                                   xp: Any = np) -> Steps:
    """Sum `buf` in place from every rank's encoded copy of it."""
    payload = enc.encode(buf, "allgather")
    if enc.codec.fixed_size:
        counts = [int(payload.size)] * t.size
    else:
        counts = t.allgather_counts(int(payload.size))
    space = t.borrow(sum(counts), np.uint8, xp)
    try:
        yield [t.iallgatherv(payload, space.array, counts)]
        buf[...] = 0
        start = 0
        for count in counts:
            enc.decode_add(space.array[start:start + count], buf)
            start += count
    finally:
        t.give_back(space, xp)

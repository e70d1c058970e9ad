"""Bruck's all-reduce: an allgather of every rank's packed vector in ceil(log2 p) steps,
for any p, then every rank reduces the p vectors in rank order.

Step k sends what a rank holds (up to 2^k vectors) to the rank 2^k below and receives as
many from the rank 2^k above; after the last step every rank holds all p. No power of
two is needed, so unlike recursive doubling there is no fold and unfold: the schedule for
small messages on p that is not a power of two. Each rank receives p-1 whole vectors, so
it pays off only while a message's latency outweighs its bytes. Every rank reduces the
same vectors in the same order, so every rank ends with the same bits; a codec encodes
each vector once (fixed-size payloads: receivers preallocate).

    p = 3, rank r holds        after step 0       after step 1
                 r             r, r+1             r, r+1, r+2
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, split_space
from zipcoll.collectives.steps import Encoding, Slots, reduce_in_rank_order
from zipcoll.transport import Transport


def bruck(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
          send: Any = None) -> Steps:
    """All-reduce `buf` in place: Bruck's allgather of packed vectors, reduced in rank order."""
    p, me = t.size, t.rank
    stride = (enc.wire_bytes(buf.size) + 7) & ~7  # blocks 8-aligned, so codecs view them typed
    space = Slots(t, 1, p * stride, xp)
    try:
        blocks = split_space(space[0], [stride] * p)  # block j: rank (me + j) % p's vector
        source = buf if send is None else send
        if enc.pack(source, "bruck", blocks[0]) is source:  # raw values: MPI would send buf itself
            enc.inbox(blocks[0], buf.size)[...] = source
        held = 1
        while held < p:
            count = min(held, p - held)
            yield t.exchange(space[0][:count * stride], (me - held) % p,
                             space[0][held * stride:(held + count) * stride], (me + held) % p, tag)
            held += count
        reduce_in_rank_order(enc, [enc.inbox(blocks[(j - me) % p], buf.size) for j in range(p)], buf)
    finally:
        space.give_back()


def bruck_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """ceil(log2 p) steps; step k sends min(2^k, p - 2^k) vectors of w(n) to a partner 2^k away.

        sum over steps of (alpha_k + count_k w(n) beta_k)
        lossless:    + (p-1) n gamma + 2 n gamma     reductions; the copies in and out
        compressed:  + enc(n) + dec(n) + (p-1) dec_add(n)
    """
    p = span.size
    if p == 1:
        return 0.0
    w = work.wire(codec, n)
    total, held = 0.0, 1
    while held < p:
        count = min(held, p - held)
        total += work.hop(span.pair_link(held), count * w)
        held += count
    if codec is None:
        return total + (p + 1) * work.reduce(n)
    return (total + work.encode(codec, n) + work.decode(codec, n)
            + (p - 1) * work.decode_add(codec, n))


register(Schedule("bruck", bruck, "Bruck's allgather of every rank's vector, reduced in rank "
                  "order; small messages on any p", cost=bruck_cost))

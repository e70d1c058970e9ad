"""Recursive doubling all-reduce: log2 p steps, each trading the whole vector with a partner.

Step i pairs ranks that differ in bit i and both reduce the pair's vectors, the lower
rank's first, so after log2 p steps every rank holds the same bits. It sends log2(p) times the message
(a ring sends 2(p-1)/p of it) but takes only log2 p latencies: the schedule for small
messages. Non-powers of two fold first and unfold after (`steps.on_power_of_two`).

    distance 1      distance 2      (p = 4)
    0 <-> 1         0 <-> 2
    2 <-> 3         1 <-> 3
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, fold, pof2
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps
from zipcoll.collectives.steps import Encoding, on_power_of_two, send_recv_reduce
from zipcoll.topologies.trees import pof2_rank
from zipcoll.transport import Transport


def recdoubling(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
                send: Any = None) -> Steps:
    """All-reduce `buf` in place by recursive doubling; any number of ranks."""

    def doubling(me: int, pof2: int, slot: Any) -> Steps:
        mask = 1
        while mask < pof2:
            partner = pof2_rank(me ^ mask, t.size)
            # the step's wait covers the send too: buf is free to reduce into after it
            outgoing = enc.pack(buf, f"recdoubling/{mask}", None)  # lossless: buf itself
            # the lower rank's operand first, on both sides: the same bits
            yield from send_recv_reduce(t, enc, outgoing, partner, buf, partner, tag, slot,
                                        received_first=partner < t.rank)
            mask <<= 1

    yield from on_power_of_two(t, buf, enc, tag, xp, send, "recdoubling", doubling)


def recdoubling_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Recursive doubling: log2(q) exchanges of the whole vector (q = largest power of 2 <= p).

        sum over i < log2 q of (alpha_i + n beta_i + n gamma)    partner at distance 2^i
        + fold/unfold when p is not a power of two
    """
    q = pof2(span.size)
    total = fold(n, span, work, codec)
    for i in range(q.bit_length() - 1):
        link = span.pair_link(1 << i)
        if codec is None:
            total += work.hop(link, n) + work.reduce(n)
        else:
            total += (work.hop(link, work.wire(codec, n)) + work.encode(codec, n)
                      + work.decode_add(codec, n))
    return total


register(Schedule("recdoubling", recdoubling, "recursive doubling, whole vector each step; "
                  "small messages", codecs=False, cost=recdoubling_cost))

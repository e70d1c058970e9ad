"""Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling allgather.

For p not a power of two, the first 2*rem ranks (rem = p - pof2) fold in pairs before
and unfold after, as MPICH does: even ranks hand their vector to the odd neighbour and
sit out; the pof2 remaining ranks run the power-of-two algorithm.

     fold      halving (RS)            doubling (AG)        unfold
   0 --> 1    1 <-> 2  (halves)      1 <-> 2  (quarters)    1 --> 0
             ...  distance 1, 2, 4 ...  distance ..., 4, 2, 1

Lossless only: the doubling steps trade ranges that grow by whole received ranges, so a
codec would re-encode settled values and ranks would end with different bits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, fold, pof2
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds
from zipcoll.collectives.steps import Encoding, on_power_of_two, send_recv_copy, send_recv_reduce
from zipcoll.topologies.trees import pof2_rank
from zipcoll.transport import Transport


def rabenseifner(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
                 send: Any = None) -> Steps:
    """All-reduce `buf` in place; correct for any number of ranks."""

    def halving_doubling(me: int, pof2: int, slot: Any) -> Steps:
        blocks = chunk_bounds(buf.size, pof2)
        history = yield from _halving(t, me, buf, blocks, enc, tag, slot)
        yield from _doubling(t, me, buf, blocks, history, enc, tag)

    yield from on_power_of_two(t, buf, enc, tag, xp, send, "rabenseifner", halving_doubling)


def _span(blocks: list, lo: int, hi: int) -> slice:
    """Elements of blocks lo..hi-1."""
    return slice(blocks[lo][0], blocks[hi - 1][1])


def _halving(t: Transport, me: int, buf: Any, blocks: list, enc: Encoding, tag: int,
             slot: Any) -> Steps:
    """Recursive halving: each step keeps half the block range, reduced with the partner's."""
    lo, hi, mask, history = 0, len(blocks), 1, []
    while mask < len(blocks):
        partner = pof2_rank(me ^ mask, t.size)
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if me & mask == 0 else ((mid, hi), (lo, mid))
        outgoing = enc.pack(buf[_span(blocks, *give)], f"rabenseifner/{mask}", None)
        yield from send_recv_reduce(t, enc, outgoing, partner, buf[_span(blocks, *keep)],
                                    partner, tag, slot)
        history.append((mask, give))
        lo, hi = keep
        mask <<= 1
    return (lo, hi), history


def _doubling(t: Transport, me: int, buf: Any, blocks: list, owned: tuple, enc: Encoding,
              tag: int) -> Steps:
    """Recursive doubling: undo the halving steps in reverse, trading final blocks."""
    (lo, hi), history = owned
    for mask, give in reversed(history):
        partner = pof2_rank(me ^ mask, t.size)
        # what I gave away at this halving step is exactly what the partner now owns
        yield from send_recv_copy(t, enc, buf[_span(blocks, lo, hi)], partner,
                                  buf[_span(blocks, *give)], partner, tag, None)
        lo, hi = min(lo, give[0]), max(hi, give[1])


def rabenseifner_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather (lossless
    only: `codec` is always None).

        halving step i (partner 2^i away) sends n / 2^(i+1) and reduces as much;
        doubling mirrors it without the reduction:
        sum over i < log2 q of [2 (alpha_i + n/2^(i+1) beta_i) + n/2^(i+1) gamma]
        + fold/unfold (2 messages of n, one reduction of n) when p is not a power of two
    """
    q = pof2(span.size)
    total = fold(n, span, work, None)
    for i in range(q.bit_length() - 1):
        m = n / (2 << i)
        total += 2 * work.hop(span.pair_link(1 << i), m) + work.reduce(m)
    return total


register(Schedule("rabenseifner", rabenseifner, "recursive halving + doubling "
                  "(any p, MPICH's fold); medium sizes", codecs=False, cost=rabenseifner_cost))

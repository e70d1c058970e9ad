"""Ring reduce-scatter and ring all-gather: the two halves of the ring all-reduce, run alone.

The very loops of `schedules/ring.py` (one copy of each): the ring's reduce-scatter leaves
chunk (r + 1) mod p complete on rank r, so the blocks are handed to it rotated by one,
and rank r ends with its own block r. Any block sizes (0 and uneven included), anywhere
in the buffer (so a call runs in slices, each on a part of every block): each step moves
one block, the same one on sender and receiver.

    reduce-scatter:  p-1 steps of one block, reduced (compressed: decoded, added and
                     re-encoded at every hop)
    all-gather:      p-1 steps forwarding each owner's block unchanged (compressed: the
                     owner encodes once, every other rank decodes the same bytes)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import ShardSchedule, register_sharded
from zipcoll.collectives.schedule import Steps
from zipcoll.collectives.schedules.ring import allgather, reduce_scatter
from zipcoll.collectives.steps import Encoding
from zipcoll.transport import Transport


def ring_order(blocks: list) -> list:
    """The blocks as the ring's chunks: chunk (r + 1) mod p is block r."""
    p = len(blocks)
    return [blocks[(j - 1) % p] for j in range(p)]


def ring_reduce_scatter(t: Transport, work: Any, blocks: list, enc: Encoding, tag: int,
                        xp: Any = np, send: Any = None) -> Steps:
    """Reduce-scatter over the ring: block t.rank of `work` complete at the end."""
    yield from reduce_scatter(t, work, ring_order(blocks), enc, tag, xp, send)


def ring_allgather(t: Transport, buf: Any, blocks: list, enc: Encoding, tag: int,
                   xp: Any = np) -> Steps:
    """All-gather over the ring: every rank's block of `buf` on every rank."""
    yield from allgather(t, buf, ring_order(blocks), enc, tag, xp)


def ring_rs_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """p-1 steps of n/p bytes; lossless: a reduction each, compressed: encode + decode_add.

        lossless:    (p-1) (alpha + n/p beta + n/p gamma)
        compressed:  (p-1) (alpha + w(n/p) beta + [enc + dec_add](n/p))
    """
    p, m, moves = _moves(n, span, work, codec)
    if p == 1:
        return 0.0
    if codec is None:
        return moves + (p - 1) * work.reduce(m)
    return moves + (p - 1) * (work.encode(codec, m) + work.decode_add(codec, m))


def ring_ag_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """p-1 steps of n/p bytes forwarded unchanged; compressed: one encode, p-1 decodes.

        lossless:    (p-1) (alpha + n/p beta)
        compressed:  (p-1) (alpha + w(n/p) beta) + [enc + dec](n/p) + (p-1) dec(n/p)
    """
    p, m, moves = _moves(n, span, work, codec)
    if p == 1:
        return 0.0
    if codec is None:
        return moves
    return moves + work.encode(codec, m) + p * work.decode(codec, m)


def _moves(n: float, span: Span, work: Work, codec: Codec | None) -> tuple[int, float, float]:
    """(p, m = n/p, the moves of either direction: p-1 ring steps of one block's payload)."""
    p = span.size
    m = n / p
    return p, m, (p - 1) * work.hop(span.ring_link, work.wire(codec, m))


register_sharded(ShardSchedule(
    "ring", ring_reduce_scatter, ring_allgather, "p-1 steps of one block each way; large "
    "messages, bandwidth-optimal", per_hop=True, cost_rs=ring_rs_cost, cost_ag=ring_ag_cost,
    sliced=True))

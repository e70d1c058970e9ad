"""Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling allgather.

For p not a power of two, the first 2*rem ranks (rem = p - pof2) fold in pairs before
and unfold after, as MPICH does: even ranks hand their vector to the odd neighbour and
sit out; the pof2 remaining ranks run the power-of-two algorithm.

     fold      halving (RS)            doubling (AG)        unfold
   0 --> 1    1 <-> 2  (halves)      1 <-> 2  (quarters)    1 --> 0
             ...  distance 1, 2, 4 ...  distance ..., 4, 2, 1
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.schedule import Steps, copy_in, chunk_bounds
from zipcoll.topologies.trees import pof2_fold, pof2_rank
from zipcoll.transport import Transport


def rabenseifner_allreduce(t: Transport, buf: Any, op: ReduceOp, tag: int, xp: Any = np,
                           send: Any = None) -> Steps:
    """All-reduce `buf` in place; correct for any number of ranks."""
    copy_in(buf, send)
    if t.size == 1:
        return
    scratch = t.borrow(buf.size, buf.dtype, xp)
    try:
        yield from _fold(t, buf, scratch.array, op, tag, xp)
        fold = pof2_fold(t.rank, t.size)
        if fold.new_rank is not None:
            me = fold.new_rank
            blocks = chunk_bounds(buf.size, fold.pof2)
            owned = yield from _halving(t, me, buf, scratch.array, blocks, op, tag, xp)
            yield from _doubling(t, me, buf, blocks, owned, tag)
        yield from _unfold(t, buf, tag)
    finally:
        t.give_back(scratch, xp)


def _fold(t: Transport, buf: Any, tmp: Any, op: ReduceOp, tag: int, xp: Any) -> Steps:
    fold = pof2_fold(t.rank, t.size)
    if fold.partner is None:
        return
    if fold.new_rank is None:  # hand my vector over and sit out
        yield [t.isend(buf, fold.partner, tag)]
    else:
        yield [t.irecv(tmp, fold.partner, tag)]
        op.reduce_into(buf, tmp, xp)


def _unfold(t: Transport, buf: Any, tag: int) -> Steps:
    fold = pof2_fold(t.rank, t.size)
    if fold.partner is None:
        return
    if fold.new_rank is None:
        yield [t.irecv(buf, fold.partner, tag)]
    else:
        yield [t.isend(buf, fold.partner, tag)]


def _span(blocks: list, lo: int, hi: int) -> slice:
    """Elements of blocks lo..hi-1."""
    return slice(blocks[lo][0], blocks[hi - 1][1])


def _halving(t: Transport, me: int, buf: Any, tmp: Any, blocks: list, op: ReduceOp,
             tag: int, xp: Any) -> Steps:
    """Recursive halving: each step keeps half the block range, reduced with the partner's."""
    lo, hi, mask, history = 0, len(blocks), 1, []
    while mask < len(blocks):
        partner = pof2_rank(me ^ mask, t.size)
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if me & mask == 0 else ((mid, hi), (lo, mid))
        kept = _span(blocks, *keep)
        incoming = tmp[kept]
        yield t.exchange(buf[_span(blocks, *give)], partner, incoming, partner, tag)
        op.reduce_into(buf[kept], incoming, xp)
        history.append((mask, give))
        lo, hi = keep
        mask <<= 1
    return (lo, hi), history


def _doubling(t: Transport, me: int, buf: Any, blocks: list, owned: tuple, tag: int) -> Steps:
    """Recursive doubling: undo the halving steps in reverse, trading final blocks."""
    (lo, hi), history = owned
    for mask, give in reversed(history):
        partner = pof2_rank(me ^ mask, t.size)
        # what I gave away at this halving step is exactly what the partner now owns
        yield t.exchange(buf[_span(blocks, lo, hi)], partner, buf[_span(blocks, *give)],
                         partner, tag)
        lo, hi = min(lo, give[0]), max(hi, give[1])

"""Recursive halving reduce-scatter and recursive doubling all-gather, for any p.

Not a power of two: MPICH's fold first (`steps.fold`: among the first 2*rem ranks each
even rank hands its vector to the odd one above and sits out). New rank i then stands
for the original ranks of its *group*: 2i and 2i+1 (i < rem) or i + rem, a contiguous
run of blocks, so the power-of-two phase splits group ranges in half.

    reduce-scatter   distance q/2, q/4, ..., 1: keep the half of the range holding my
                     group, send the other half, reduce what comes back; then each odd
                     folding rank hands its partner its block (final values)
    all-gather       the mirror: a folded-out rank's block to its partner, then distance
                     1, 2, ..., q/2 trading everything held so far, then the whole vector
                     back to the folded-out rank

log2(q) steps instead of the ring's p-1; each rank sends about as much as in the ring.
Compressed, the reduce-scatter re-encodes its partial sums at every step, and the
all-gather moves payloads only (each block encoded once by its owner, every rank
decoding the same bytes; the owner's block, too, becomes its decoding, as in the ring).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, pof2
from zipcoll.collectives.registry import ShardSchedule, register_sharded
from zipcoll.collectives.schedule import Steps, copy_in
from zipcoll.collectives.steps import Encoding, Slots, fold, send_recv_reduce
from zipcoll.topologies.trees import pof2_fold, pof2_rank
from zipcoll.transport import Transport


def groups(bounds: list, size: int) -> list:
    """(start, stop) of each new rank's group of blocks, in the units of `bounds`."""
    q = pof2(size)
    rem = size - q
    firsts = [2 * i if i < rem else i + rem for i in range(q)]
    lasts = [2 * i + 1 if i < rem else i + rem for i in range(q)]
    return [(bounds[a][0], bounds[b][1]) for a, b in zip(firsts, lasts)]


def _span(ranges: list, lo: int, hi: int) -> slice:
    return slice(ranges[lo][0], ranges[hi - 1][1])


def halving_reduce_scatter(t: Transport, work: Any, blocks: list, enc: Encoding, tag: int,
                           xp: Any = np, send: Any = None) -> Steps:
    """Block t.rank of `work` reduced over every rank at the end."""
    copy_in(work, send)
    p, r = t.size, t.rank
    if p == 1:
        return
    slots = Slots(t, 2, enc.wire_bytes(work.size), xp)  # one packed out, one received
    try:
        yield from fold(t, enc, work, tag, slots[1], "halving/fold")
        folding = pof2_fold(r, p)
        if folding.new_rank is not None:
            me, ranges = folding.new_rank, groups(blocks, p)
            lo, hi, mask = 0, folding.pof2, folding.pof2 // 2
            while mask:
                partner = pof2_rank(me ^ mask, p)
                mid = lo + mask
                keep, give = ((lo, mid), (mid, hi)) if me & mask == 0 else ((mid, hi), (lo, mid))
                outgoing = enc.pack(work[_span(ranges, *give)], f"halving/{mask}", slots[0])
                yield from send_recv_reduce(t, enc, outgoing, partner,
                                            work[_span(ranges, *keep)], partner, tag, slots[1])
                lo, hi = keep
                mask //= 2
        if folding.partner is not None:  # the pair's group: the even rank's block to it
            if folding.new_rank is None:
                yield [t.irecv(work[slice(*blocks[r])], folding.partner, tag)]
            else:
                yield [t.isend(work[slice(*blocks[folding.partner])], folding.partner, tag)]
    finally:
        slots.give_back()


def doubling_allgather(t: Transport, buf: Any, blocks: list, enc: Encoding, tag: int,
                       xp: Any = np) -> Steps:
    """Every rank's block of `buf` on every rank at the end."""
    p, r = t.size, t.rank
    if p == 1:
        return
    slots = None
    if enc.lossy:  # the payloads side by side, each block's at its own offset
        sizes = [enc.wire_bytes(hi - lo) for lo, hi in blocks]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        bounds = list(zip(starts[:-1], starts[1:]))
        slots = Slots(t, 1, starts[-1], xp)
        wire = slots[0][:starts[-1]]
        # the owner's block settled as the ring's: encoded once into its place, kept as
        # the others will decode it (or exact, where the encoding keeps the owner's own)
        _settle_into(enc, buf[slice(*blocks[r])], wire[slice(*bounds[r])], xp)
    else:
        wire, bounds = buf, blocks
    try:
        folding = pof2_fold(r, p)
        if folding.partner is not None and folding.new_rank is None:
            yield [t.isend(wire[slice(*bounds[r])], folding.partner, tag)]
        elif folding.partner is not None:
            yield [t.irecv(wire[slice(*bounds[folding.partner])], folding.partner, tag)]
        if folding.new_rank is not None:
            me, ranges, mask = folding.new_rank, groups(bounds, p), 1
            while mask < folding.pof2:
                partner = me ^ mask
                mine, theirs = me & ~(mask - 1), partner & ~(mask - 1)
                yield t.exchange(wire[_span(ranges, mine, mine + mask)], pof2_rank(partner, p),
                                 wire[_span(ranges, theirs, theirs + mask)],
                                 pof2_rank(partner, p), tag)
                mask <<= 1
        if folding.partner is not None and folding.new_rank is None:
            yield [t.irecv(wire, folding.partner, tag)]
        elif folding.partner is not None:
            yield [t.isend(wire, folding.partner, tag)]
        if enc.lossy:
            for j, (lo, hi) in enumerate(blocks):
                if j != r:
                    enc.unpack(wire[slice(*bounds[j])], buf[lo:hi])
    finally:
        if slots is not None:
            slots.give_back()


def _settle_into(enc: Encoding, chunk: Any, region: Any, xp: Any) -> None:
    """Settle `chunk` into `region` (its payload's exact place in the gathered bytes)."""
    payload = enc.settle(chunk, "doubling/own", region)
    if not getattr(xp, "shares_memory", np.shares_memory)(payload, region):
        region[...] = payload


def halving_rs_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Fold (n bytes, a reduction), log2 q halving steps of n/2, n/4, ... (each reduced),
    the folding pairs' block (n/p).

        sum over masks m = q/2 .. 1 of [alpha_m + w(n m/q) beta_m + red(n m/q)]
        red: gamma lossless, [enc + dec_add] compressed
    """
    p = span.size
    if p == 1:
        return 0.0
    q = pof2(p)
    total = 0.0
    if q != p:
        link = span.pair_link(1)
        total += (work.hop(link, work.wire(codec, n)) + _reduced(work, codec, n)
                  + work.hop(link, n / p))
    mask = q // 2
    while mask:
        m = n * mask / q
        total += work.hop(span.pair_link(mask), work.wire(codec, m)) + _reduced(work, codec, m)
        mask //= 2
    return total


def _reduced(work: Work, codec: Codec | None, nbytes: float) -> float:
    if codec is None:
        return work.reduce(nbytes)
    return work.encode(codec, nbytes) + work.decode_add(codec, nbytes)


def doubling_ag_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """A folded-out block in (n/p), log2 q doubling steps of n/q, 2n/q, ..., n/2, the whole
    vector back out (n); compressed: one encode of n/p and p-1 decodes of n/p."""
    p = span.size
    if p == 1:
        return 0.0
    q = pof2(p)
    total = 0.0
    if q != p:
        link = span.pair_link(1)
        total += work.hop(link, work.wire(codec, n / p)) + work.hop(link, work.wire(codec, n))
    mask = 1
    while mask < q:
        total += work.hop(span.pair_link(mask), work.wire(codec, n * mask / q))
        mask <<= 1
    if codec is not None:
        total += work.encode(codec, n / p) + (p - 1) * work.decode(codec, n / p)
    return total


register_sharded(ShardSchedule(
    "halving", halving_reduce_scatter, doubling_allgather, "recursive halving reduce-scatter "
    "/ recursive doubling all-gather (any p, MPICH's fold); small and medium messages",
    per_hop=True, cost_rs=halving_rs_cost, cost_ag=doubling_ag_cost))

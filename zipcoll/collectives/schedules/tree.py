"""Tree all-reduce: a reduce up a binomial tree rooted at rank 0, then a broadcast down it.

Both are pipelined in segments (latency 2 log2 p steps, plus one per segment). Each node
reduces its children's partial sums in the tree's fixed order and the root's settled
result goes down unchanged, so every rank ends with the same bits. Compressed, every hop
up decodes, adds and re-encodes; the root's encoded bytes go down as they are.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, segments
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in
from zipcoll.collectives.steps import Encoding, Slots
from zipcoll.topologies.trees import Links, binomial_tree
from zipcoll.transport import Transport

# Pipeline segment: large enough to amortise a step, small enough to overlap the levels.
SEGMENT_BYTES = 1 << 19


def tree(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
         send: Any = None) -> Steps:
    """All-reduce `buf` in place: binomial reduce to rank 0, binomial broadcast from it."""
    copy_in(buf, send)
    yield from reduce_then_broadcast(t, buf, binomial_tree(t.rank, t.size), enc, tag, xp,
                                     "tree")


def reduce_then_broadcast(t: Transport, buf: Any, links: Links, enc: Encoding, tag: int,
                          xp: Any, name: str) -> Steps:
    """Reduce `buf` up the tree given by this rank's `links`, then broadcast it back down."""
    per_segment = max(1, SEGMENT_BYTES // buf.itemsize)
    segments = chunk_bounds(buf.size, max(1, -(-buf.size // per_segment)))
    longest = max(b - a for a, b in segments)
    # one slot to send up and one a child; the broadcast reuses the first two
    slots = Slots(t, max(2, len(links.children) + 1), enc.wire_bytes(longest), xp)
    try:
        yield from tree_reduce(t, buf, links, segments, enc, tag, slots, name)
        yield from tree_broadcast(t, buf, links, segments, enc, tag, slots.slots[:2], name)
    finally:
        slots.give_back()


def tree_reduce(t: Transport, buf: Any, links: Links, segments: list, enc: Encoding, tag: int,
                slots: Slots, name: str) -> Steps:
    """Step k takes segment k from the children and sends the reduced segment k-1 up."""
    parent, children = links
    up, incoming = slots[0], slots.slots[1:1 + len(children)]
    outgoing = None
    for k in range(len(segments) + 1):
        requests, boxes = [], []
        if k < len(segments):
            lo, hi = segments[k]
            boxes = [enc.inbox(slot, hi - lo) for slot in incoming]
            requests += [t.irecv(box, child, tag) for box, child in zip(boxes, children)]
        if outgoing is not None:
            requests.append(t.isend(outgoing, parent, tag))
        yield requests
        if k == len(segments):
            break
        for box in boxes:  # children in the tree's fixed order
            enc.reduce(box, buf[lo:hi])
        if parent is not None:
            outgoing = enc.pack(buf[lo:hi], f"{name}/up/{k}", up)


def tree_broadcast(t: Transport, buf: Any, links: Links, segments: list, enc: Encoding,
                   tag: int, slots: list, name: str) -> Steps:
    """Step k takes segment k's final bytes from the parent and passes segment k-1's down."""
    parent, children = links
    held = None  # the previous segment's final bytes, for the children
    for k in range(len(segments) + 1):
        requests, final = [], None
        if k < len(segments):
            chunk = buf[slice(*segments[k])]
            if parent is None:
                final = enc.settle(chunk, f"{name}/down/{k}", slots[k % 2])
            else:
                final = enc.landing(chunk, slots[k % 2])
                requests.append(t.irecv(final, parent, tag))
        if held is not None:
            # largest subtree first: it has the most levels still to go
            requests += [t.isend(held, child, tag) for child in reversed(children)]
        yield requests
        if final is not None and parent is not None:
            enc.unpack(final, chunk)
        held = final


def _root_step(children_intra: int, children_inter: int, span: Span, nbytes: float) -> float:
    """The root's step: a segment from each child, the two link classes side by side."""
    times = [link.alpha + k * nbytes * link.beta
             for k, link in ((children_intra, span.intra), (children_inter, span.inter)) if k]
    return max(times, default=0.0)


def tree_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Binomial tree, reduce then broadcast, each pipelined in S segments of s bytes.

    Depth d = ceil(log2 p); the root has d children (those under per_node away on its node)
    and bounds the pace: per step it takes (reduce) or gives (broadcast) d segments.

        per phase: (d-1) (alpha + s beta)            fill: a segment descends the levels
                   + S (alpha + d s beta + step)     the root's steps
        reduce:    + S d s gamma   (compressed: S [d dec_add(s) + enc(s)], down: S [enc + dec](s))
    """
    p = span.size
    if p == 1:
        return 0.0
    d = math.ceil(math.log2(p))
    near = sum(1 for i in range(d) if (1 << i) < span.per_node)
    count, s = segments(n, SEGMENT_BYTES)
    w = work.wire(codec, s)
    fill = (d - 1) * work.hop(span.ring_link, w)
    root = count * (_root_step(near, d - near, span, w) + work.step)
    if codec is None:
        return 2 * (fill + root) + count * d * work.reduce(s)
    up = count * (d * work.decode_add(codec, s) + work.encode(codec, s))
    down = count * (work.encode(codec, s) + work.decode(codec, s))
    return 2 * (fill + root) + up + down


register(Schedule("tree", tree, "binomial reduce + broadcast, pipelined; latency-bound",
                  per_hop=True, cost=tree_cost))

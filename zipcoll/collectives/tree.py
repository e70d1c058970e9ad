"""Tree all-reduces: a reduce up a tree, then a broadcast down it, both pipelined in segments.

`tree`: one binomial tree rooted at rank 0 (latency: 2 log2 p steps).
`dbtree`: NCCL's double binary tree: two trees, each carrying half of the data, every
rank interior in at most one of them, so no link carries more than one half twice.
Each node reduces its children's partial sums in a fixed order and the root's result
is broadcast unchanged, so every rank ends with the same bits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.schedule import Steps, copy_in, chunk_bounds, side_by_side
from zipcoll.topologies.trees import Links, binomial_tree, double_binary_tree
from zipcoll.transport import Transport

# Pipeline segment: large enough to amortise a step, small enough to overlap the levels.
SEGMENT_BYTES = 1 << 19


def tree_allreduce(t: Transport, buf: Any, op: ReduceOp, tag: int, xp: Any = np,
                   send: Any = None) -> Steps:
    """All-reduce `buf` in place: binomial reduce to rank 0, binomial broadcast from it."""
    copy_in(buf, send)
    yield from reduce_then_broadcast(t, buf, binomial_tree(t.rank, t.size), op, tag, xp)


def dbtree_allreduce(t: Transport, buf: Any, op: ReduceOp, tag: int, xp: Any = np,
                     send: Any = None) -> Steps:
    """All-reduce `buf` in place over a double binary tree, one half of `buf` per tree."""
    copy_in(buf, send)
    tree0, tree1 = double_binary_tree(t.rank, t.size)
    half = buf.size // 2
    yield from side_by_side(
        reduce_then_broadcast(t, buf[:half], tree0, op, tag, xp),
        reduce_then_broadcast(t, buf[half:], tree1, op, tag + 1, xp),
    )


def reduce_then_broadcast(t: Transport, buf: Any, links: Links, op: ReduceOp, tag: int,
                          xp: Any = np) -> Steps:
    """Reduce `buf` up the tree given by this rank's `links`, then broadcast it back down."""
    segments = _segments(buf)
    yield from tree_reduce(t, buf, links, segments, op, tag, xp)
    yield from tree_broadcast(t, buf, links, segments, tag)


def _segments(buf: Any) -> list[tuple[int, int]]:
    per_segment = max(1, SEGMENT_BYTES // buf.itemsize)
    return chunk_bounds(buf.size, max(1, -(-buf.size // per_segment)))


def tree_reduce(t: Transport, buf: Any, links: Links, segments: list, op: ReduceOp,
                tag: int, xp: Any = np) -> Steps:
    """Pipelined reduce: step k takes segment k from the children, sends segment k-1 up."""
    parent, children = links
    longest = max(b - a for a, b in segments)
    scratch = t.borrow(longest * len(children), buf.dtype, xp)
    incoming = [scratch.array[i * longest:(i + 1) * longest] for i in range(len(children))]
    try:
        for k in range(len(segments) + 1):
            requests = []
            if k < len(segments):
                lo, hi = segments[k]
                requests += [t.irecv(tmp[: hi - lo], c, tag) for tmp, c in zip(incoming, children)]
            if k > 0 and parent is not None:
                requests.append(t.isend(buf[slice(*segments[k - 1])], parent, tag))
            yield requests
            if k < len(segments):
                for tmp in incoming:  # children in the tree's fixed order
                    op.reduce_into(buf[lo:hi], tmp[: hi - lo], xp)
    finally:
        t.give_back(scratch, xp)


def tree_broadcast(t: Transport, buf: Any, links: Links, segments: list, tag: int) -> Steps:
    """Pipelined broadcast: step k takes segment k from the parent, passes segment k-1 down."""
    parent, children = links
    for k in range(len(segments) + 1):
        requests = []
        if k < len(segments) and parent is not None:
            requests.append(t.irecv(buf[slice(*segments[k])], parent, tag))
        if k > 0:
            # largest subtree first: it has the most levels still to go
            requests += [t.isend(buf[slice(*segments[k - 1])], c, tag) for c in reversed(children)]
        yield requests


def tree_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                              xp: Any = np) -> Steps:
    """Sum `buf` in place over a binomial tree, compressing per hop."""
    links = binomial_tree(t.rank, t.size)
    yield from encoded_reduce_then_broadcast(t, buf, links, enc, tag, "tree", xp)


def dbtree_allreduce_compressed(t: Transport, buf: Any, enc: Encoder, tag: int,
                                xp: Any = np) -> Steps:
    """Sum `buf` in place over a double binary tree, compressing per hop."""
    tree0, tree1 = double_binary_tree(t.rank, t.size)
    half = buf.size // 2
    yield from side_by_side(
        encoded_reduce_then_broadcast(t, buf[:half], tree0, enc, tag, "dbtree0", xp),
        encoded_reduce_then_broadcast(t, buf[half:], tree1, enc, tag + 1, "dbtree1", xp),
    )


def encoded_reduce_then_broadcast(t: Transport, buf: Any, links: Links, enc: Encoder,
                                  tag: int, name: str, xp: Any = np) -> Steps:
    """Per-hop compressed reduce up the tree; the root's encoded result goes down unchanged."""
    segments = _segments(buf)
    wire = [enc.wire_bytes(b - a, buf.dtype) for a, b in segments]
    most = max(wire)
    slots_needed = len(links.children) + 2
    space = t.borrow(most * slots_needed, np.uint8, xp)
    slots = [space.array[i * most:(i + 1) * most] for i in range(slots_needed)]
    try:
        yield from _encoded_reduce(t, buf, links, segments, wire, slots, enc, tag, name)
        yield from _encoded_broadcast(t, buf, links, segments, wire, slots[:2], enc, tag, name)
    finally:
        t.give_back(space, xp)


def _encoded_reduce(t: Transport, buf: Any, links: Links, segments: list, wire: list,
                    slots: list, enc: Encoder, tag: int, name: str) -> Steps:
    """Step k takes the children's payloads of segment k and sends up segment k-1's."""
    parent, children = links
    up, incoming = slots[0], slots[2:]
    outgoing = None
    for k, (lo, hi) in enumerate(segments + [(0, 0)]):
        last = k == len(segments)
        requests = [] if last else [t.irecv(tmp[: wire[k]], c, tag)
                                    for tmp, c in zip(incoming, children)]
        if outgoing is not None:
            requests.append(t.isend(outgoing, parent, tag))
        yield requests
        if last:
            break
        for tmp in incoming:  # children in the tree's fixed order
            enc.decode_add(tmp[: wire[k]], buf[lo:hi])
        if parent is not None:
            outgoing = enc.encode(buf[lo:hi], f"{name}/up/{k}", out=up)


def _encoded_broadcast(t: Transport, buf: Any, links: Links, segments: list, wire: list,
                       slots: list, enc: Encoder, tag: int, name: str) -> Steps:
    """The root encodes each final segment once (and keeps its decoding); bytes go down as is."""
    parent, children = links
    held = None  # the payload of the previous segment, to pass to the children
    for k, (lo, hi) in enumerate(segments + [(0, 0)]):
        last = k == len(segments)
        requests, payload = [], None
        if not last and parent is None:
            payload = enc.encode(buf[lo:hi], f"{name}/down/{k}", out=slots[k % 2])
            enc.decode(payload, buf[lo:hi])
        elif not last:
            payload = slots[k % 2][: wire[k]]
            requests.append(t.irecv(payload, parent, tag))
        if held is not None:
            requests += [t.isend(held, c, tag) for c in reversed(children)]
        yield requests
        if payload is not None and parent is not None:
            enc.decode(payload, buf[lo:hi])
        held = payload

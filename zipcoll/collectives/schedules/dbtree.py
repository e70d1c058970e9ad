"""Double binary tree all-reduce (NCCL's): two trees, each carrying half of the data.

Every rank is interior in at most one tree, so no link carries more than one half
twice; latency log2 p like a tree, bandwidth near a ring's. Each half is a pipelined
reduce + broadcast (`tree.reduce_then_broadcast`); the two run side by side.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work, segments
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, copy_in, side_by_side
from zipcoll.collectives.schedules.tree import SEGMENT_BYTES, reduce_then_broadcast
from zipcoll.collectives.steps import Encoding
from zipcoll.topologies.trees import double_binary_tree
from zipcoll.transport import Transport


def dbtree(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any = np,
           send: Any = None) -> Steps:
    """All-reduce `buf` in place over a double binary tree, one half of `buf` per tree."""
    copy_in(buf, send)
    tree0, tree1 = double_binary_tree(t.rank, t.size)
    half = buf.size // 2
    yield from side_by_side(
        reduce_then_broadcast(t, buf[:half], tree0, enc, tag, xp, "dbtree0"),
        reduce_then_broadcast(t, buf[half:], tree1, enc, tag + 1, xp, "dbtree1"),
    )


def dbtree_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Double binary tree (NCCL's): two trees of depth d = floor(log2 p), n/2 each, side by side.

    Each rank is interior (2 children) in one tree and a leaf in the other, so per step it
    sends 2 segments (one per tree) and takes 2 (NCCL: ~ the ring's bandwidth, log p latency).

        per phase: (d-1) (alpha + s beta) + S (alpha + 2 s beta + step)   S segments of n/2
        reduce:    + S 2 s gamma   (compressed: S [2 dec_add(s) + 2 enc(s)], down: S [enc + dec](s) x2)
    """
    p = span.size
    if p == 1:
        return 0.0
    d = max(1, int(math.log2(p)))
    count, s = segments(n / 2, SEGMENT_BYTES)
    w = work.wire(codec, s)
    link = span.ring_link
    phase = (d - 1) * work.hop(link, w) + count * work.hop(link, 2 * w)
    if codec is None:
        return 2 * phase + count * 2 * work.reduce(s)
    up = count * 2 * (work.decode_add(codec, s) + work.encode(codec, s))
    down = count * 2 * (work.encode(codec, s) + work.decode(codec, s))
    return 2 * phase + up + down


register(Schedule("dbtree", dbtree, "double binary tree (NCCL's); latency-bound, large p",
                  per_hop=True, tags=2, cost=dbtree_cost))

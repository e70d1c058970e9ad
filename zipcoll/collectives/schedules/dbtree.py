"""Double binary tree all-reduce (NCCL's): two trees, each carrying half of the data.

Every rank is interior in at most one tree, so no link carries more than one half
twice; latency log2 p like a tree, bandwidth near a ring's. Each half is a pipelined
reduce + broadcast (`tree.reduce_then_broadcast`); the two run side by side.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, copy_in, side_by_side
from zipcoll.collectives.schedules.tree import reduce_then_broadcast
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


register(Schedule("dbtree", dbtree, "double binary tree (NCCL's); latency-bound, large p",
                  per_hop=True, tags=2))

"""Two-level reduce-scatter and all-gather (ZeRO++'s qgZ / qwZ shape): lossless inside a
node, compressed across nodes, only 1/L of the vector crossing the slow links per rank.

Rank g sits at (k, l): node index k (its rank among the ranks of local rank l), local rank
l. The blocks are regrouped (one copy) so that local rank l's *group* holds the blocks
of every rank with local rank l, in node order:

    reduce-scatter   ring reduce-scatter of the groups inside the node, lossless (local
                     rank l: the node's sum of group l), then the inner schedule's
                     reduce-scatter of group l across nodes, compressed (node k: block
                     (k, l) = this rank's, summed over every rank)
    all-gather       the mirror: the inner all-gather of this rank's block across nodes
                     (compressed: each block encoded once, decoded alike), then the ring
                     all-gather of the groups inside the node, lossless

Every node must hold the same number of ranks. Inner schedule: ring (default) or halving
("hierarchical:halving").
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import ShardSchedule, register_sharded
from zipcoll.collectives.schedule import Steps
from zipcoll.collectives.schedules.sharded.ring import (ring_ag_cost, ring_allgather,
                                                        ring_reduce_scatter, ring_rs_cost)
from zipcoll.collectives.steps import Encoding
from zipcoll.collectives.twolevel import Levels
from zipcoll.topologies import Topology


def node_levels(topology: Topology) -> tuple[int, int]:
    """(intra, inter) colors: the node, and the rail of ranks with the same local rank."""
    if not topology.is_uniform:
        raise ValueError("a two-level reduce-scatter / all-gather needs the same number of "
                         f"ranks on every node; nodes here: {[len(n) for n in topology.nodes]}")
    return topology.node_levels()


@functools.lru_cache(maxsize=64)
def rank_grid(nodes: tuple) -> tuple[tuple[int, ...], ...]:
    """grid[k][l]: the rank at node index k (inter rank), local rank l (intra rank), as the
    levels' communicators number them (split with key = rank)."""
    local = {g: ranks.index(g) for ranks in nodes for g in ranks}
    size = len(local)
    rails = [[g for g in range(size) if local[g] == l] for l in range(len(nodes[0]))]
    return tuple(tuple(rail[k] for rail in rails) for k in range(len(rails[0])))


def regrouped(blocks: list, grid: tuple) -> tuple[list, list, list]:
    """(order, groups, members): the ranks' blocks in group order, each group's bounds in the
    regrouped vector, and each group's blocks' bounds within the group."""
    columns = len(grid[0])
    order = [grid[k][l] for l in range(columns) for k in range(len(grid))]
    sizes = [blocks[g][1] - blocks[g][0] for g in order]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
    n = len(grid)
    groups = [(starts[l * n], starts[(l + 1) * n]) for l in range(columns)]
    members = [[(starts[l * n + k] - starts[l * n], starts[l * n + k + 1] - starts[l * n])
                for k in range(n)] for l in range(columns)]
    return order, groups, members


def hierarchical_reduce_scatter(levels: Levels, work: Any, blocks: list,
                                encs: tuple[Encoding, Encoding], tag: int, xp: Any = np,
                                send: Any = None, inner: Any = None, grid: tuple = ()) -> Steps:
    """Block g (this rank's) of `work` reduced over every rank at the end."""
    order, groups, members = regrouped(blocks, grid)
    source = work if send is None else send
    staged = xp.empty(_held(blocks), work.dtype)
    _gather(staged, source, blocks, order)
    yield from ring_reduce_scatter(levels.intra, staged, groups, encs[0], tag, xp)
    group = staged[slice(*groups[levels.intra.rank])]
    yield from inner.reduce_scatter(levels.inter, group, members[levels.intra.rank], encs[1],
                                    tag, xp)
    mine = slice(*members[levels.intra.rank][levels.inter.rank])
    g = grid[levels.inter.rank][levels.intra.rank]
    work[slice(*blocks[g])] = group[mine]


def hierarchical_allgather(levels: Levels, buf: Any, blocks: list,
                           encs: tuple[Encoding, Encoding], tag: int, xp: Any = np,
                           inner: Any = None, grid: tuple = ()) -> Steps:
    """Every rank's block of `buf` on every rank at the end."""
    order, groups, members = regrouped(blocks, grid)
    staged = xp.empty(_held(blocks), buf.dtype)
    l, k = levels.intra.rank, levels.inter.rank
    group = staged[slice(*groups[l])]
    group[slice(*members[l][k])] = buf[slice(*blocks[grid[k][l]])]
    yield from inner.allgather(levels.inter, group, members[l], encs[1], tag, xp)
    yield from ring_allgather(levels.intra, staged, groups, encs[0], tag, xp)
    _scatter(buf, staged, blocks, order)


def _held(blocks: list) -> int:
    """Items of every block: the regrouped vector (the blocks may be a slice's parts)."""
    return sum(hi - lo for lo, hi in blocks)


def _gather(staged: Any, source: Any, blocks: list, order: list) -> None:
    at = 0
    for g in order:
        lo, hi = blocks[g]
        staged[at:at + hi - lo] = source[lo:hi]
        at += hi - lo


def _scatter(buf: Any, staged: Any, blocks: list, order: list) -> None:
    at = 0
    for g in order:
        lo, hi = blocks[g]
        buf[lo:hi] = staged[at:at + hi - lo]
        at += hi - lo


def hierarchical_rs_cost(n: float, rows: Span, columns: Span, work: Work,
                         codec: Codec | None = None, inner: Any = None) -> float:
    """The regrouping copy, the node's lossless ring reduce-scatter of n, then the inner
    reduce-scatter of n/L across nodes with the codec."""
    return (work.reduce(n) + ring_rs_cost(n, rows, work)
            + (inner.cost_rs if inner else ring_rs_cost)(n / rows.size, columns, work, codec))


def hierarchical_ag_cost(n: float, rows: Span, columns: Span, work: Work,
                         codec: Codec | None = None, inner: Any = None) -> float:
    """The inner all-gather of n/L across nodes with the codec, the node's lossless ring
    all-gather of n, the copy back."""
    return ((inner.cost_ag if inner else ring_ag_cost)(n / rows.size, columns, work, codec)
            + ring_ag_cost(n, rows, work) + work.reduce(n))


register_sharded(ShardSchedule(
    "hierarchical", hierarchical_reduce_scatter, hierarchical_allgather, "lossless ring "
    "inside each node, the inner schedule compressed across nodes on 1/L of the vector; "
    "fast nodes, slow network", per_hop=True, two_level=True, split=node_levels,
    cost_rs=hierarchical_rs_cost, cost_ag=hierarchical_ag_cost, sliced=True))

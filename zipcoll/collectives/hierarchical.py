"""Two-level all-reduces: `hierarchical` (nodes) and `torus` (the rows and columns of a grid).

    level 1 (intra: a node, or a grid row)      ring reduce-scatter: local rank l owns shard l+1
    level 2 (inter: same local rank elsewhere)  all-reduce of the owned shard (any schedule)
    level 1 again                               ring allgather of the shards

Only 1/L of the message crosses the slow level per rank (L ranks a node), and all L
ranks of a node use their own inter-node links at once. Each level has its own codec:
by default only the inter level compresses. Mikami et al.'s 2-D torus is the same
schedule over grid rows (X ranks) and columns (Y ranks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.ring import (allgather_ring, allgather_ring_encoded, owned_chunk,
                                      reduce_scatter_ring, reduce_scatter_ring_encoded)
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in
from zipcoll.topologies import Topology
from zipcoll.transport import Transport

KINDS = ("hierarchical", "torus")
InnerSchedule = Callable[[Transport, Any, int, Any], Steps]


@dataclass(frozen=True)
class Levels:
    """The transports of the two levels, made once per (communicator, kind, topology)."""

    intra: Transport
    inter: Transport


def make_levels(t: Transport, kind: str, topology: Topology) -> Levels:
    """Split t.comm into the two levels of `kind` (collective on first use, then cached)."""
    def split(comm):
        if kind == "hierarchical":
            return topology.split(comm)
        return topology.grid_comms(comm) if topology.grid else grid_of(topology).grid_comms(comm)

    intra, inter = t.sub_transports((kind, topology), split)
    return Levels(intra, inter)


def grid_of(topology: Topology) -> Topology:
    """The topology with a grid: rows = nodes when nodes are uniform, else near-square."""
    size = topology.size
    if topology.num_nodes > 1 and topology.is_uniform:
        x = topology.local_size
    else:
        x = max(d for d in range(1, int(size ** 0.5) + 1) if size % d == 0)
    return Topology.from_layout(size, topology.rank, grid=(x, size // x))


def check_topology(kind: str, topology: Topology) -> None:
    """ValueError when the two-level schedule cannot run on `topology`."""
    if kind == "hierarchical" and not topology.is_uniform:
        raise ValueError("hierarchical all-reduce needs the same number of ranks on every "
                         f"node; nodes here: {[len(n) for n in topology.nodes]}")


def two_level_allreduce(levels: Levels, buf: Any, op: ReduceOp, inner: InnerSchedule,
                        tag: int, xp: Any = np, send: Any = None,
                        intra_encoders: tuple[Encoder, Encoder] | None = None) -> Steps:
    """Reduce-scatter in level 1, `inner` all-reduce of the shard in level 2, allgather in level 1.

    `intra_encoders` (reduce-scatter's, allgather's) compress level 1; None keeps it lossless.
    """
    intra = levels.intra
    chunks = chunk_bounds(buf.size, intra.size)
    if intra_encoders is None:
        yield from reduce_scatter_ring(intra, buf, chunks, op, tag, xp, send)
    else:
        copy_in(buf, send)
        yield from reduce_scatter_ring_encoded(intra, buf, chunks, intra_encoders[0], tag, xp)
    shard = buf[slice(*chunks[owned_chunk(intra)])]
    yield from inner(levels.inter, shard, tag, xp)
    if intra_encoders is None:
        yield from allgather_ring(intra, buf, chunks, tag)
    else:
        yield from allgather_ring_encoded(intra, buf, chunks, intra_encoders[1], tag, xp)

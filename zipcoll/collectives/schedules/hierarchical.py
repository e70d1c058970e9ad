"""Hierarchical all-reduce: ring reduce-scatter inside each node, any flat schedule across
nodes on the owned shard (`hierarchical:tree`, ...; default ring), ring allgather inside.

Nodes are shared-memory domains (`Topology.from_comm`) or an emulated layout; every node
must hold the same number of ranks. See `zipcoll.collectives.twolevel`.
"""
from __future__ import annotations

from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.twolevel import two_level
from zipcoll.topologies import Topology


def node_levels(topology: Topology) -> tuple[int, int]:
    """(intra, inter) colors: the node, and the rail of ranks with the same local rank."""
    if not topology.is_uniform:
        raise ValueError("hierarchical all-reduce needs the same number of ranks on every "
                         f"node; nodes here: {[len(n) for n in topology.nodes]}")
    return topology.node_levels()


register(Schedule("hierarchical", two_level, "intra-node ring RS, inter-node schedule on the "
                  "shard, intra-node ring AG; fast nodes, slow network", two_level=True,
                  split=node_levels))

"""2-D torus all-reduce (Mikami et al.): ring reduce-scatter along grid rows, any flat
schedule down the columns on the owned shard (default ring), ring allgather along rows.

The grid is the topology's (`grid=(X, Y)`, ZIPCOLL_GRID), else rows are nodes when
nodes are uniform, else near-square. See `zipcoll.collectives.twolevel`.
"""
from __future__ import annotations

from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.twolevel import two_level
from zipcoll.topologies import Topology


def grid_levels(topology: Topology) -> tuple[int, int]:
    """(intra, inter) colors: the grid row and the grid column."""
    return topology.with_grid().grid_levels()


register(Schedule("torus", two_level, "2-D grid: rows as intra, columns as inter; large p",
                  two_level=True, split=grid_levels))

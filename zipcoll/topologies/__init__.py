"""Where ranks are: nodes, rings, trees and 2-D grids. Pure functions and values; no data moves."""

from .topology import GRID_ENV, RANKS_PER_NODE_ENV, Topology
from .trees import (
    Fold,
    Links,
    binary_tree,
    binomial_tree,
    double_binary_tree,
    pof2_fold,
    pof2_rank,
    ring_neighbors,
    ring_order,
)

__all__ = [
    "Topology", "RANKS_PER_NODE_ENV", "GRID_ENV",
    "Links", "binomial_tree", "binary_tree", "double_binary_tree",
    "ring_order", "ring_neighbors",
    "Fold", "pof2_fold", "pof2_rank",
]

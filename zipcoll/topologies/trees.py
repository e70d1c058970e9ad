"""Peers of a rank in rings, trees and recursive halving: pure functions of (rank, size).

Nothing here talks to MPI. Ranks are communicator ranks; every function raises
ValueError when `rank` is not in `range(size)`. Trees are returned as `Links`
(parent, children): `parent` is None at the root, `children` a list in the order
each function documents.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

__all__ = [
    "Links", "binomial_tree", "binary_tree", "double_binary_tree",
    "ring_order", "ring_neighbors",
    "Fold", "pof2_fold", "pof2_rank",
]


class Links(NamedTuple):
    """A rank's place in a tree: its parent (None at the root) and its children."""

    parent: int | None
    children: list[int]


def _check_rank(rank: int, size: int) -> None:
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in range({size})")


def _pow2_floor(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


# ---------------------------------------------------------------- binomial tree

def binomial_tree(rank: int, size: int, root: int = 0) -> Links:
    r"""Binomial tree rooted at `root`: children in order of distance 1, 2, 4, ... (smallest subtree first).

    Relative rank v = (rank - root) % size; v's parent clears v's lowest set bit,
    its children are v + 1, v + 2, v + 4, ... below that bit (and below size).
    size=8, root=0:

                0
             /  |  \
            1   2   4
                |   | \
                3   5  6
                       |
                       7

    Order: a reduce that receives from the children in the returned order combines
    contiguous blocks of relative ranks, own block first ([v, v+m) op [v+m, v+2m)),
    so even a non-commutative op is applied in rank order; a bcast sends in reverse
    order (largest subtree first) and finishes in ceil(log2(size)) rounds. The tree's
    height is floor(log2(size)).
    """
    _check_rank(rank, size)
    _check_rank(root, size)
    v = (rank - root) % size
    low = v & -v if v else 1 << size.bit_length()  # the root may use every bit
    parent = None if v == 0 else (v - low + root) % size
    children = []
    mask = 1
    while mask < low and v + mask < size:
        children.append((v + mask + root) % size)
        mask <<= 1
    return Links(parent, children)


# ---------------------------------------------------------- double binary tree

def binary_tree(rank: int, size: int) -> Links:
    r"""NCCL's in-order binary tree (ncclGetBtree): root 0, children ascending.

    Rank 0 is the root and has one child, the largest power of two below size;
    odd ranks are leaves; an even rank r with lowest set bit b has children
    r - b/2 and r + b/2 (or r + b/4, ... when that is past the end). size=14:

          0---------------8
                   ______/ \______
                  4               12
                /   \            /  \
              2       6       10     \
             / \     / \     /  \     \
            1   3   5   7   9   11    13
    """
    _check_rank(rank, size)
    if rank == 0:
        return Links(None, [_pow2_floor(size - 1)] if size > 1 else [])
    bit = rank & -rank
    parent = rank ^ bit | bit << 1
    if parent >= size:
        parent = rank ^ bit
    half = bit >> 1
    children = [rank - half] if half else []
    while half and rank + half >= size:
        half >>= 1
    if half:
        children.append(rank + half)
    return Links(parent, children)


def double_binary_tree(rank: int, size: int) -> tuple[Links, Links]:
    r"""NCCL's double binary tree: (tree 0, tree 1), each rank interior in at most one of them.

    Tree 0 is `binary_tree` (root 0): its interior nodes are the even ranks.
    Tree 1's interior nodes are the odd ranks, so a rank is a leaf in one tree
    at least, and each tree can carry half the data at full bandwidth.
    - even size: tree 1 is tree 0 mirrored (rank r plays size-1-r); root size-1.
    - odd size: tree 1 is tree 0 of size+1 shifted by one (rank r plays r+1) with
      its root 0 dropped; root 2**floor(log2(size)) - 1. (NCCL shifts cyclically
      instead, which leaves rank 0 interior in both trees.)
    Children are in ascending rank order. size=12, mirrored:

      0---------------8                   3----------------11
               ______/ \                 / \______
              4         \               /         7
            /   \        \             /        /   \
          2       6       10         1        5      9
         / \     / \     /  \       / \      / \    / \
        1   3   5   7   9   11     0   2    4   6  8   10

    size=13, shifted (tree 1 is tree 0 of 14 over ranks -1..12, with -1 dropped):

      0---------------8                    7
               ______/ \______          ______/ \______
              4               12       3               11
            /   \            /       /   \            /  \
          2       6       10        1       5       9      12
         / \     / \     /  \      / \     / \     / \
        1   3   5   7   9   11    0   2   4   6   8   10
    """
    tree0 = binary_tree(rank, size)
    if size % 2 == 0:
        parent, children = binary_tree(size - 1 - rank, size)
        tree1 = Links(None if parent is None else size - 1 - parent,
                      sorted(size - 1 - c for c in children))
    else:
        parent, children = binary_tree(rank + 1, size + 1)
        tree1 = Links(parent - 1 if parent else None, [c - 1 for c in children])
    return tree0, tree1


# ------------------------------------------------------------------------ rings

def ring_order(size: int, ranks_per_node: int | None = None,
               node_of: Sequence[int] | None = None) -> list[int]:
    """Ring positions -> ranks, each node's ranks contiguous (nodes by lowest rank, ranks ascending).

    The ring then crosses between nodes only num_nodes times. With `ranks_per_node`
    (consecutive blocks) that is range(size); `node_of` (node id of each rank)
    handles any placement, e.g. round-robin node_of=[0, 1, 0, 1] -> [0, 2, 1, 3].
    """
    if ranks_per_node is not None and node_of is not None:
        raise ValueError("give ranks_per_node or node_of, not both")
    if ranks_per_node is not None and ranks_per_node < 1:
        raise ValueError(f"ranks_per_node must be at least 1, got {ranks_per_node}")
    if node_of is None:
        node_of = [r // (ranks_per_node or size) for r in range(size)]
    if len(node_of) != size:
        raise ValueError(f"node_of has {len(node_of)} entries for {size} ranks")
    lowest: dict[int, int] = {}
    for r, node in enumerate(node_of):
        lowest.setdefault(node, r)
    return sorted(range(size), key=lambda r: (lowest[node_of[r]], r))


def ring_neighbors(rank: int, size: int, order: Sequence[int] | None = None) -> tuple[int, int]:
    """(left, right): the rank before and after `rank` in the ring `order` (default 0, 1, ..., size-1).

    A ring step receives from left and sends to right.
    """
    _check_rank(rank, size)
    if order is None:  # every flat ring's case, once a call
        return (rank - 1) % size, (rank + 1) % size
    pos = order.index(rank)
    return order[pos - 1], order[(pos + 1) % size]


# ------------------------------------------------------------ recursive halving

class Fold(NamedTuple):
    """A rank's part in folding size ranks onto the largest power of two pof2 <= size."""

    pof2: int  # ranks left after the fold
    new_rank: int | None  # index among them; None: this rank folds out
    partner: int | None  # rank it folds with; None: it has no fold partner


def pof2_fold(rank: int, size: int) -> Fold:
    """MPICH's fold for Rabenseifner / recursive doubling when size is not a power of two.

    pof2 = largest power of two <= size, rem = size - pof2. Among the first 2*rem
    ranks, each even rank sends its data to rank+1 and folds out (new_rank None,
    partner rank+1); each odd rank combines it and stays as new_rank rank//2
    (partner rank-1). Ranks >= 2*rem stay as new_rank rank-rem (partner None).
    After the power-of-two phase each odd rank sends the result back to rank-1.
    size=6 (pof2=4, rem=2):

      rank      0   1   2   3   4   5
      fold      0-->1   2-->3   |   |
      new_rank  .   0   .   1   2   3
    """
    _check_rank(rank, size)
    pof2 = _pow2_floor(size)
    rem = size - pof2
    if rank >= 2 * rem:
        return Fold(pof2, rank - rem, None)
    if rank % 2 == 0:
        return Fold(pof2, None, rank + 1)
    return Fold(pof2, rank // 2, rank - 1)


def pof2_rank(new_rank: int, size: int) -> int:
    """The rank that plays `new_rank` after `pof2_fold` (the inverse mapping)."""
    pof2 = _pow2_floor(size)
    _check_rank(new_rank, pof2)
    rem = size - pof2
    return 2 * new_rank + 1 if new_rank < rem else new_rank + rem

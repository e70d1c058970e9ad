"""Where ranks are: nodes (shared-memory domains), rails across nodes, and a 2-D grid.

A `Topology` is a frozen value: build it from a communicator (`from_comm`, which
costs a split and one allgather, done by `zipcoll.transport`) or from a layout
(`from_layout`, no MPI). It never moves data; `node_levels` and `grid_levels` give the
colors that split a communicator into its two levels.

Environment (read by `from_comm` only, where the argument is not given):
  ZIPCOLL_RANKS_PER_NODE=k   emulate nodes of k consecutive ranks
  ZIPCOLL_GRID=XxY           a 2-D grid of Y rows of X ranks, e.g. "4x2"
"""

from __future__ import annotations

import functools
import numbers
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from zipcoll import settings

from .trees import ring_order

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["Topology", "RANKS_PER_NODE_ENV", "GRID_ENV"]

RANKS_PER_NODE_ENV = "ZIPCOLL_RANKS_PER_NODE"
GRID_ENV = "ZIPCOLL_GRID"


@dataclass(frozen=True)
class Topology:
    """The nodes and optional grid of a communicator, as seen from `rank`.

    node_of[r] is the node id of rank r; node ids are 0, 1, ... in the order of
    each node's lowest rank. grid=(X, Y) lays ranks out row by row, Y rows of X:

        grid=(4, 2)   0 1 2 3     row(5)    = [4, 5, 6, 7]
                      4 5 6 7     column(5) = [1, 5]

    Methods that take a rank default to this topology's own rank; the lists they
    return include that rank, ascending (a rail: in node order).
    """

    size: int
    rank: int
    node_of: tuple[int, ...]
    grid: tuple[int, int] | None = None
    nodes: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        node_of = tuple(self.node_of)
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in range({self.size})")
        if len(node_of) != self.size:
            raise ValueError(f"node_of has {len(node_of)} entries for {self.size} ranks")
        if node_of != _canonical(node_of):
            raise ValueError("node ids must be 0, 1, ... in the order of each node's lowest rank")
        nodes = tuple(tuple(r for r in range(self.size) if node_of[r] == n)
                      for n in range(max(node_of) + 1))
        object.__setattr__(self, "node_of", node_of)
        object.__setattr__(self, "grid", _check_grid(self.grid, self.size))
        object.__setattr__(self, "nodes", nodes)
        # every call's plan look-up hashes its topology: once here, not per rank per call
        object.__setattr__(self, "_hash", hash((self.size, self.rank, node_of, self.grid)))

    def __hash__(self) -> int:
        return self._hash

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_layout(cls, size: int, rank: int, ranks_per_node: int | None = None,
                    nodes: Sequence[Sequence[int]] | None = None,
                    grid: tuple[int, int] | None = None) -> Topology:
        """A topology without MPI: one node, nodes of `ranks_per_node` consecutive ranks, or explicit `nodes`.

        >>> Topology.from_layout(4, 0, nodes=[[1, 3], [0, 2]]).node_of
        (0, 1, 0, 1)
        """
        if ranks_per_node is not None and nodes is not None:
            raise ValueError("give ranks_per_node or nodes, not both")
        if nodes is not None:
            node_of = _node_of_partition(nodes, size)
        else:
            node_of = _node_of_blocks(size, max(size, 1) if ranks_per_node is None else ranks_per_node)
        return cls(size, rank, _canonical(node_of), grid)

    @classmethod
    def from_comm(cls, comm: MPI.Comm, ranks_per_node: int | None = None,
                  grid: tuple[int, int] | None = None) -> Topology:
        """The topology of `comm` (collective): nodes are shared-memory domains unless emulated.

        `ranks_per_node` (or ZIPCOLL_RANKS_PER_NODE) emulates nodes of that many
        consecutive ranks; `grid` (or ZIPCOLL_GRID="XxY") adds a grid. Settings are
        compared across ranks first, so every rank raises the same ValueError. The
        environment variables apply to communicators whose size they fit (a multiple of
        the ranks per node; X*Y ranks): others get a warning and shared-memory nodes.
        """
        from zipcoll.transport import gather_placement

        chosen = settings.get()
        env = (chosen.ranks_per_node, chosen.grid)
        refused = [chosen.errors[name] for name in (RANKS_PER_NODE_ENV, GRID_ENV)
                   if name in chosen.errors]
        rows = gather_placement(comm, (ranks_per_node, grid, env, refused))
        # From here on only `rows` (the same on every rank) decides what is raised.
        bad = next((r for r, row in enumerate(rows) if row[4]), None)
        if bad is not None:
            raise ValueError(f"{'; '.join(rows[bad][4])} (on rank {bad})")
        other = next((r for r, row in enumerate(rows) if row[1:4] != rows[0][1:4]), None)
        if other is not None:
            raise ValueError(f"ranks disagree on (ranks_per_node, grid, ({RANKS_PER_NODE_ENV}, "
                             f"{GRID_ENV})): rank 0 has {rows[0][1:4]}, rank {other} "
                             f"{rows[other][1:4]}")
        size, rank = comm.Get_size(), comm.Get_rank()
        if ranks_per_node is None and env[0] is not None:
            ranks_per_node = _fitting(RANKS_PER_NODE_ENV, str(env[0]), env[0],
                                      size % env[0] == 0, size)
        if grid is None and env[1] is not None:
            grid = _fitting(GRID_ENV, "{}x{}".format(*env[1]), env[1],
                            env[1][0] * env[1][1] == size, size)
        if ranks_per_node is not None:
            return cls.from_layout(size, rank, ranks_per_node=ranks_per_node, grid=grid)
        return cls(size, rank, _canonical([row[0] for row in rows]), grid)

    def with_grid(self) -> Topology:
        """This topology with a grid: its own, else rows = nodes when uniform, else near-square."""
        if self.grid is not None:
            return self
        if self.num_nodes > 1 and self.is_uniform:
            x = self.local_size
        else:
            x = max(d for d in range(1, int(self.size ** 0.5) + 1) if self.size % d == 0)
        return Topology(self.size, self.rank, self.node_of, (x, self.size // x))

    # ------------------------------------------------------------------ nodes

    @property
    def node_id(self) -> int:
        """This rank's node."""
        return self.node_of[self.rank]

    @property
    def num_nodes(self) -> int:
        """How many nodes there are."""
        return len(self.nodes)

    @property
    def local_rank(self) -> int:
        """This rank's index within its node."""
        return self.nodes[self.node_id].index(self.rank)

    @property
    def local_size(self) -> int:
        """How many ranks share this rank's node."""
        return len(self.nodes[self.node_id])

    @property
    def is_uniform(self) -> bool:
        """Whether every node has the same number of ranks."""
        return len({len(ranks) for ranks in self.nodes}) == 1

    def node_ranks(self, node: int) -> list[int]:
        """The ranks on `node`."""
        if not 0 <= node < self.num_nodes:
            raise ValueError(f"node {node} is not in range({self.num_nodes})")
        return list(self.nodes[node])

    def local_peers(self, rank: int | None = None) -> list[int]:
        """The ranks on the node of `rank`, `rank` included."""
        return list(self.nodes[self.node_of[self._rank(rank)]])

    def leaders(self) -> list[int]:
        """The lowest rank of each node, in node order."""
        return [ranks[0] for ranks in self.nodes]

    def same_local_rank(self, rank: int | None = None) -> list[int]:
        """The ranks with the same local index as `rank` on every node that has one (a rail)."""
        rank = self._rank(rank)
        index = self.nodes[self.node_of[rank]].index(rank)
        return [ranks[index] for ranks in self.nodes if index < len(ranks)]

    def ring_order(self) -> list[int]:
        """Ring positions -> ranks, each node contiguous (see `trees.ring_order`)."""
        return list(self._ring)

    @functools.cached_property
    def _ring(self) -> tuple[int, ...]:
        return tuple(ring_order(self.size, node_of=self.node_of))

    @functools.cached_property
    def ring_key(self) -> "Key":
        """The ring order as a key hashed once: calls look their sub-communicator up by it."""
        return Key(self._ring)

    @functools.cached_property
    def layout_key(self) -> "Key":
        """The nodes and grid (not the rank: the same on every rank) as a key hashed once."""
        return Key((self.node_of, self.grid))

    @functools.cached_property
    def ring_is_rank_order(self) -> bool:
        """Whether the ring order is 0, 1, ..., size-1 (nodes hold consecutive ranks)."""
        return self._ring == tuple(range(self.size))

    # ------------------------------------------------------------------- grid

    def row(self, rank: int | None = None) -> list[int]:
        """The grid row of `rank`: X consecutive ranks."""
        x, _ = self._grid()
        start = self._rank(rank) // x * x
        return list(range(start, start + x))

    def column(self, rank: int | None = None) -> list[int]:
        """The grid column of `rank`: Y ranks X apart."""
        x, _ = self._grid()
        return list(range(self._rank(rank) % x, self.size, x))

    # ------------------------------------------------------------------ levels

    def node_levels(self) -> tuple[int, int]:
        """Colors splitting a communicator into (this rank's node, its rail: same local rank).

        Split with key = rank, both keep the rank order: the intra rank is the local
        rank, and on a uniform topology the inter rank is the node id.
        """
        return self.node_id, self.local_rank

    def grid_levels(self) -> tuple[int, int]:
        """Colors splitting a communicator into (this rank's grid row, its column)."""
        x, _ = self._grid()
        return self.rank // x, self.rank % x

    # ---------------------------------------------------------------- helpers

    def _rank(self, rank: int | None) -> int:
        if rank is None:
            return self.rank
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not in range({self.size})")
        return rank

    def _grid(self) -> tuple[int, int]:
        if self.grid is None:
            raise ValueError(f"this topology has no grid: pass grid=(X, Y) or set {GRID_ENV}")
        return self.grid



def _canonical(node_of: Sequence[int]) -> tuple[int, ...]:
    """Node labels renumbered 0, 1, ... in the order of each node's lowest rank."""
    ids: dict[int, int] = {}
    return tuple(ids.setdefault(label, len(ids)) for label in node_of)


def _node_of_blocks(size: int, ranks_per_node: int) -> list[int]:
    if ranks_per_node < 1:
        raise ValueError(f"ranks_per_node must be at least 1, got {ranks_per_node}")
    return [r // ranks_per_node for r in range(size)]


def _node_of_partition(nodes: Sequence[Sequence[int]], size: int) -> list[int]:
    node_of = [-1] * size
    for n, ranks in enumerate(nodes):
        for r in ranks:
            if not 0 <= r < size or node_of[r] != -1:
                raise ValueError(f"nodes must split range({size}) into disjoint lists; {r} is out of range or repeated")
            node_of[r] = n
    if -1 in node_of:
        raise ValueError(f"nodes must cover range({size}); rank {node_of.index(-1)} is missing")
    return node_of


def _check_grid(grid: Sequence[int] | None, size: int) -> tuple[int, int] | None:
    if grid is None:
        return None
    if len(grid) != 2 or any(not isinstance(n, numbers.Integral) or n < 1 for n in grid):
        raise ValueError(f"grid must be two positive ints (X, Y), got {grid!r}")
    x, y = int(grid[0]), int(grid[1])
    if x * y != size:
        raise ValueError(f"grid {x}x{y} has {x * y} places for {size} ranks")
    return (x, y)


def _fitting(name: str, text: str, value, fits: bool, size: int):
    """`value` of environment variable `name` if it fits a communicator of `size`, else None."""
    if fits:
        return value
    warnings.warn(f"{name}={text} does not fit a communicator of {size} ranks: ignored there",
                  RuntimeWarning, stacklevel=3)
    return None


class Key:
    """A tuple as a dictionary key whose hash is taken once: a tuple hashes every item
    at each look-up (a 1024-rank layout, some microseconds a call)."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple):
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and self._hash == other._hash and self.value == other.value

    def __repr__(self) -> str:
        return f"Key({self.value!r})"

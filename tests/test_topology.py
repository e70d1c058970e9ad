"""Topology.from_layout: nodes, rails, grids and the errors they raise (no MPI)."""

import pytest

from zipcoll import settings
from zipcoll.topologies import Topology


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 16])
def test_one_node_by_default(size):
    topo = Topology.from_layout(size, size - 1)
    assert topo.num_nodes == 1 and topo.is_uniform
    assert topo.nodes == (tuple(range(size)),)
    assert (topo.node_id, topo.local_rank, topo.local_size) == (0, size - 1, size)
    assert topo.leaders() == [0] and topo.same_local_rank() == [size - 1]
    assert topo.grid is None


@pytest.mark.parametrize("size, k", [(1, 1), (4, 2), (6, 4), (7, 2), (8, 8), (5, 9)])
def test_ranks_per_node(size, k):
    num_nodes = -(-size // k)
    for rank in range(size):
        topo = Topology.from_layout(size, rank, ranks_per_node=k)
        assert topo.num_nodes == num_nodes
        assert topo.node_of == tuple(r // k for r in range(size))
        assert (topo.node_id, topo.local_rank) == divmod(rank, k)
        assert topo.local_peers() == topo.node_ranks(rank // k)
        assert topo.is_uniform == (size % k == 0 or num_nodes == 1)
        assert topo.leaders() == list(range(0, size, k))
        assert topo.same_local_rank() == list(range(rank % k, size, k))


def test_explicit_nodes_are_renumbered_by_lowest_rank():
    topo = Topology.from_layout(5, 4, nodes=[[4, 1], [3, 0, 2]])
    assert topo.node_of == (0, 1, 0, 0, 1)
    assert topo.nodes == ((0, 2, 3), (1, 4))
    assert (topo.node_id, topo.local_rank, topo.local_size) == (1, 1, 2)
    assert topo.leaders() == [0, 1]
    assert topo.same_local_rank(2) == [2, 4] and topo.same_local_rank(3) == [3]
    assert topo.local_peers(3) == [0, 2, 3]
    assert topo.ring_order() == [0, 2, 3, 1, 4]
    assert not topo.is_uniform


def test_grid():
    topo = Topology.from_layout(8, 5, ranks_per_node=4, grid=(4, 2))
    assert topo.grid == (4, 2)
    assert topo.row() == [4, 5, 6, 7] and topo.column() == [1, 5]
    assert topo.row(2) == [0, 1, 2, 3] and topo.column(3) == [3, 7]
    assert Topology.from_layout(6, 0, grid=[1, 6]).column() == list(range(6))


def test_value_semantics():
    a = Topology.from_layout(4, 1, ranks_per_node=2)
    assert a == Topology(4, 1, (0, 0, 1, 1)) and hash(a) == hash(Topology(4, 1, [0, 0, 1, 1]))
    with pytest.raises(AttributeError):
        a.rank = 2


@pytest.mark.parametrize("kwargs, message", [
    ({"grid": (3, 2)}, "6 places for 4 ranks"),
    ({"grid": (4,)}, "two positive ints"),
    ({"grid": (0, 4)}, "two positive ints"),
    ({"ranks_per_node": 0}, "at least 1"),
    ({"ranks_per_node": 2, "nodes": [[0, 1], [2, 3]]}, "not both"),
    ({"nodes": [[0, 1], [1, 2, 3]]}, "repeated"),
    ({"nodes": [[0, 1], [2, 4]]}, "out of range"),
    ({"nodes": [[0, 1], [3]]}, "rank 2 is missing"),
])
def test_layout_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Topology.from_layout(4, 0, **kwargs)


@pytest.mark.parametrize("args, message", [
    ((4, 4, (0, 0, 1, 1)), "not in range"),
    ((4, 0, (0, 0, 1)), "3 entries"),
    ((4, 0, (1, 1, 0, 0)), "lowest rank"),
])
def test_constructor_errors(args, message):
    with pytest.raises(ValueError, match=message):
        Topology(*args)


@pytest.mark.parametrize("method, args", [("row", ()), ("column", ()), ("local_peers", (4,)), ("node_ranks", (2,))])
def test_method_errors(method, args):
    with pytest.raises(ValueError):
        getattr(Topology.from_layout(4, 0, ranks_per_node=2), method)(*args)


@pytest.mark.parametrize("text, grid", [("2x2", (2, 2)), ("4X1", (4, 1)), (" 3x5 ", (3, 5))])
def test_parse_grid(text, grid):
    assert settings.parse(settings.BY_NAME["grid"], text) == grid


@pytest.mark.parametrize("text", ["2", "2x", "x2", "2x2x2", "2*2", "-1x4", "axb", "0x4"])
def test_parse_grid_errors(text):
    with pytest.raises(ValueError, match="ZIPCOLL_GRID"):
        settings.parse(settings.BY_NAME["grid"], text)


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5"])
def test_parse_ranks_per_node_errors(text):
    with pytest.raises(ValueError, match="ZIPCOLL_RANKS_PER_NODE"):
        settings.parse(settings.BY_NAME["ranks_per_node"], text)


def test_layout_keys_name_the_layout_not_the_rank():
    """Sub-communicators are looked up by these keys every call: equal layouts give equal
    keys on every rank, other layouts other keys, and equal topologies hash alike."""
    a = Topology.from_layout(8, 0, ranks_per_node=4)
    b = Topology.from_layout(8, 5, ranks_per_node=4)
    assert a.layout_key == b.layout_key and hash(a.layout_key) == hash(b.layout_key)
    assert a.layout_key != Topology.from_layout(8, 0, ranks_per_node=2).layout_key
    assert a.layout_key != Topology.from_layout(8, 0, ranks_per_node=4, grid=(4, 2)).layout_key
    spread = Topology.from_layout(8, 1, nodes=[[0, 2, 4, 6], [1, 3, 5, 7]])
    assert spread.ring_key.value == tuple(spread.ring_order()) != tuple(range(8))
    assert spread.ring_key == Topology.from_layout(8, 6, nodes=[[0, 2, 4, 6], [1, 3, 5, 7]]).ring_key
    assert {a: 1}[Topology.from_layout(8, 0, ranks_per_node=4)] == 1
    assert a != b and hash(a) != hash(b)

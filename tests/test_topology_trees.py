"""Trees, rings and power-of-two folds are well formed for every size 1..65."""

import pytest

from zipcoll.topologies import (
    binary_tree, binomial_tree, double_binary_tree, pof2_fold, pof2_rank,
    ring_neighbors, ring_order,
)

SIZES = range(1, 66)


def check_tree(links, size):
    """Assert that links[r] = (parent, children) form one tree over range(size); return (root, depth)."""
    roots = [r for r in range(size) if links[r].parent is None]
    assert len(roots) == 1, roots
    for r in range(size):
        parent, children = links[r]
        assert parent is None or r in links[parent].children
        assert all(links[c].parent == r for c in children)
        assert len(set(children)) == len(children) and r not in children
    depth, frontier, seen = 0, [roots[0]], {roots[0]}
    while frontier:
        frontier = [c for r in frontier for c in links[r].children]
        depth += bool(frontier)
        seen.update(frontier)
    assert seen == set(range(size))  # reachable from the root, so also acyclic
    return roots[0], depth


def bcast_rounds(links, root):
    """Rounds a bcast takes when each rank sends to its children one per round, in reverse order."""
    done, pending = {root: 0}, [root]
    while pending:
        r = pending.pop()
        for step, c in enumerate(reversed(links[r].children), start=1):
            done[c] = done[r] + step
            pending.append(c)
    return max(done.values())


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_binomial_tree(size, where):
    root = {"first": 0, "middle": size // 2, "last": size - 1}[where]
    links = [binomial_tree(r, size, root) for r in range(size)]
    assert check_tree(links, size) == (root, (size).bit_length() - 1)  # height floor(log2 p)
    assert bcast_rounds(links, root) == (size - 1).bit_length()  # ceil(log2 p) rounds
    for r in range(size):  # children by growing distance: each one's subtree is the next block
        distances = [(c - r) % size for c in links[r].children]
        assert distances == [1 << i for i in range(len(distances))]


def test_binomial_tree_drawing():
    assert [binomial_tree(r, 8).children for r in range(8)] == [[1, 2, 4], [], [3], [], [5, 6], [], [7], []]


@pytest.mark.parametrize("size", SIZES)
def test_double_binary_tree(size):
    trees = [double_binary_tree(r, size) for r in range(size)]
    root0, depth0 = check_tree([t[0] for t in trees], size)
    root1, depth1 = check_tree([t[1] for t in trees], size)
    assert (root0, root1) == (0, size - 1 if size % 2 == 0 else (1 << (size.bit_length() - 1)) - 1)
    assert max(depth0, depth1) <= size.bit_length()
    for r, (tree0, tree1) in enumerate(trees):
        assert tree0 == binary_tree(r, size)
        assert not (tree0.children and tree1.children), f"rank {r} is interior in both trees"
        assert len(tree0.children) <= 2 and len(tree1.children) <= 2
        assert tree0.children == sorted(tree0.children) and tree1.children == sorted(tree1.children)


def test_double_binary_tree_drawings():
    assert [double_binary_tree(r, 12)[1].parent for r in range(12)] == [1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, None]
    assert [binary_tree(r, 13).parent for r in range(13)] == [None, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8]
    assert [double_binary_tree(r, 13)[1].parent for r in range(13)] == [1, 3, 1, 7, 5, 3, 5, None, 9, 11, 9, 7, 11]


@pytest.mark.parametrize("size", SIZES)
def test_ring(size):
    assert ring_order(size) == list(range(size))
    assert ring_order(size, ranks_per_node=3) == list(range(size))
    for r in range(size):
        left, right = ring_neighbors(r, size)
        assert ring_neighbors(right, size)[0] == r and ring_neighbors(left, size)[1] == r


def test_ring_order_groups_nodes():
    node_of = [0, 1, 2, 0, 1, 2, 0]
    order = ring_order(7, node_of=node_of)
    assert order == [0, 3, 6, 1, 4, 2, 5]
    crossings = sum(node_of[order[i]] != node_of[order[i - 1]] for i in range(7))
    assert crossings == 3
    assert ring_neighbors(0, 7, order) == (5, 3)


@pytest.mark.parametrize("kwargs", [{"ranks_per_node": 0}, {"ranks_per_node": 2, "node_of": [0, 0, 1]},
                                    {"node_of": [0, 0]}])
def test_ring_order_errors(kwargs):
    with pytest.raises(ValueError):
        ring_order(3, **kwargs)


@pytest.mark.parametrize("size", SIZES)
def test_pof2_fold(size):
    folds = [pof2_fold(r, size) for r in range(size)]
    pof2 = folds[0].pof2
    assert pof2 <= size < 2 * pof2 and pof2 & (pof2 - 1) == 0
    kept = {f.new_rank: r for r, f in enumerate(folds) if f.new_rank is not None}
    assert sorted(kept) == list(range(pof2))
    assert all(pof2_rank(j, size) == r for j, r in kept.items())
    for r, f in enumerate(folds):
        if f.partner is not None:  # pairs: one folds out into the other
            assert folds[f.partner].partner == r
            assert (f.new_rank is None) != (folds[f.partner].new_rank is None)


@pytest.mark.parametrize("call, args", [
    (binomial_tree, (3, 3)), (binomial_tree, (0, 3, 5)), (binary_tree, (0, 0)),
    (double_binary_tree, (-1, 4)), (ring_neighbors, (4, 4)), (pof2_fold, (6, 6)), (pof2_rank, (4, 6)),
])
def test_rank_out_of_range(call, args):
    with pytest.raises(ValueError, match="not in range|at least 1"):
        call(*args)

"""Topology.from_comm and its communicators, under mpiexec at any world size.

Every test makes all its MPI calls first and asserts afterwards, so a failed
assert on one rank never leaves the others waiting in a collective.
"""

import pytest
from mpi4py import MPI

from zipcoll.topologies import GRID_ENV, RANKS_PER_NODE_ENV, Topology

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


@pytest.fixture(autouse=True)
def _no_env(zipcoll_env):
    zipcoll_env(**{RANKS_PER_NODE_ENV: None, GRID_ENV: None})


def comm_sizes(colors):
    """The sizes and ranks of the communicators COMM splits into by `colors`, then freed."""
    comms = [COMM.Split(color, key=RANK) for color in colors()]
    try:
        return [(c.Get_size(), c.Get_rank()) for c in comms]
    finally:
        for c in comms:
            c.Free()


@pytest.mark.mpi
def test_one_node_by_default():
    topo = Topology.from_comm(COMM)
    sizes = comm_sizes(topo.node_levels)
    assert (topo.size, topo.rank, topo.num_nodes) == (SIZE, RANK, 1)  # one machine here
    assert topo.local_peers() == list(range(SIZE)) and topo.local_rank == RANK
    assert sizes == [(SIZE, RANK), (1, 0)]


@pytest.mark.mpi
def test_ranks_per_node():
    topo = Topology.from_comm(COMM, ranks_per_node=2)
    sizes = comm_sizes(topo.node_levels)
    assert topo.num_nodes == (SIZE + 1) // 2
    assert topo == Topology.from_layout(SIZE, RANK, ranks_per_node=2)
    intra_size = min(2, SIZE - RANK // 2 * 2)
    inter_size = len(range(RANK % 2, SIZE, 2))
    assert sizes == [(intra_size, RANK % 2), (inter_size, RANK // 2)]


@pytest.mark.mpi
def test_environment(zipcoll_env):
    zipcoll_env(**{RANKS_PER_NODE_ENV: "1"})
    by_env = Topology.from_comm(COMM)
    by_arg = Topology.from_comm(COMM, ranks_per_node=2)  # an argument beats the variable
    assert by_env.num_nodes == SIZE and by_env.leaders() == list(range(SIZE))
    assert by_arg.num_nodes == (SIZE + 1) // 2


@pytest.mark.mpi
def test_grid():
    if SIZE != 4:
        pytest.skip("grid=(2, 2) needs 4 ranks")
    topo = Topology.from_comm(COMM, grid=(2, 2))
    sizes = comm_sizes(topo.grid_levels)
    assert topo.row() == [RANK // 2 * 2, RANK // 2 * 2 + 1] and topo.column() == [RANK % 2, RANK % 2 + 2]
    assert sizes == [(2, RANK % 2), (2, RANK // 2)]


@pytest.mark.mpi
def test_grid_from_environment(zipcoll_env):
    zipcoll_env(**{GRID_ENV: f"1x{SIZE}"})
    topo = Topology.from_comm(COMM)
    sizes = comm_sizes(topo.grid_levels)
    assert topo.grid == (1, SIZE)
    assert sizes == [(1, 0), (SIZE, RANK)]


@pytest.mark.mpi
@pytest.mark.parametrize("kwargs, env, message", [
    ({"grid": (SIZE + 1, 1)}, {}, "places for"),
    ({}, {GRID_ENV: "2by2"}, GRID_ENV),
    ({}, {RANKS_PER_NODE_ENV: "0"}, RANKS_PER_NODE_ENV),
    ({"ranks_per_node": 0}, {}, "at least 1"),
])
def test_errors_on_every_rank(zipcoll_env, kwargs, env, message):
    zipcoll_env(**env)
    with pytest.raises(ValueError, match=message):
        Topology.from_comm(COMM, **kwargs)


@pytest.mark.mpi
def test_ranks_that_disagree_all_raise(zipcoll_env):
    if SIZE == 1:
        pytest.skip("needs two ranks to disagree")
    zipcoll_env(**{RANKS_PER_NODE_ENV: "1" if RANK == 0 else "2"})
    with pytest.raises(ValueError, match="ranks disagree"):
        Topology.from_comm(COMM)


@pytest.mark.mpi
def test_flat_schedules_follow_a_round_robin_ring_order():
    """Nodes of alternate ranks: flat schedules run on the communicator renumbered in the
    topology's ring order (each node's ranks neighbours), and still give MPI's answer."""
    import numpy as np

    import zipcoll
    from arrays import LOSSLESS

    nodes = [list(range(0, SIZE, 2)), list(range(1, SIZE, 2))] if SIZE > 1 else [[0]]
    topo = Topology.from_layout(SIZE, RANK, nodes=nodes)
    x = np.arange(1001, dtype=np.int64) * (RANK + 1)
    ref = np.empty_like(x)
    COMM.Allreduce(x, ref)
    results = {a: zipcoll.iallreduce(x, algorithm=a, topology=topo).wait() for a in LOSSLESS}
    assert topo.ring_is_rank_order == (SIZE <= 2)
    for algorithm, got in results.items():
        np.testing.assert_array_equal(got, ref, err_msg=algorithm)

"""Per-call look-ups that grew with the job, at 1024 ranks, on one process.

    TREE=/path/to/checkout python scale.py

A 1024-rank Topology (nodes of 8 ranks; and one whose nodes interleave, so the ring is
reordered) in plans on the one-rank communicator: each call's sub-communicator look-ups
(`first_use` of its split keys and `uses_collectives`), and the sharded collectives'
agreement numbers (`sharded._signature`), timed with timeit. Only the look-ups: no
messages (the transport has one rank).
"""
import os, sys
sys.meta_path[:] = [f for f in sys.meta_path if "ditable" not in type(f).__name__]
sys.path.insert(0, os.environ["TREE"])
import timeit, numpy as np
from mpi4py import MPI
import zipcoll
from zipcoll.buffers import as_array
from zipcoll.collectives import dispatch, sharded
from zipcoll.collectives.plan import Plan
from zipcoll.collectives.registry import SCHEDULES
from zipcoll.collectives.ops import BY_NAME
from zipcoll.collectives.context import context_for
from zipcoll.topologies import Topology
print("zipcoll from", zipcoll.__file__)
p = 1024
ctx = context_for(MPI.COMM_WORLD); t = ctx.transport
x = np.ones(8, np.float32)
b = as_array(x)
for name, node_of in [("hierarchical, nodes of 8", tuple(r // 8 for r in range(p))),
                      ("ring, nodes interleaved", None)]:
    if node_of is None:
        topo = Topology.from_layout(p, 3, nodes=[list(range(i, p, 8)) for i in range(8)])
        plan = Plan(None, b, x, BY_NAME["sum"], SCHEDULES["ring"], topology=topo)
    else:
        topo = Topology(p, 3, node_of)
        plan = Plan(None, b, x, BY_NAME["sum"], SCHEDULES["hierarchical"], SCHEDULES["ring"], topology=topo)
    ctx.first_use(dispatch.split_keys(plan))
    f = lambda: (ctx.first_use(dispatch.split_keys(plan)), dispatch.uses_collectives(t, plan))
    print(f"{name}: first_use + uses_collectives {min(timeit.repeat(f, number=2000, repeat=3)) / 2000 * 1e6:.2f} us a call")
topo = Topology(p, 3, tuple(r // 8 for r in range(p)))
sp = sharded.ShardPlan("reduce_scatter", b, b, x, [8] * p, 3, BY_NAME["sum"], None, topology=topo)
sp.schedule = type("S", (), {"name": "ring"})()
f = lambda: sharded._signature(sp, "auto")
print(f"sharded signature, 1024 ranks: {min(timeit.repeat(f, number=2000, repeat=3)) / 2000 * 1e6:.2f} us a call")

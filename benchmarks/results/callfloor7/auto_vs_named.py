"""auto, once settled, against the plan it settled on named, at one size: blocks of 200
calls in turn (20 untimed before each), a barrier before each call, REPS blocks each
(default 10); medians and means of the slowest rank's per-call microseconds.

    mpiexec -n 4 python auto_vs_named.py 65536
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning.tuning import key_of

comm = MPI.COMM_WORLD
clock = time.perf_counter
nbytes = int(sys.argv[1])
x = np.ones(nbytes // 4, np.float32)
y = np.empty_like(x)
for _ in range(300):  # the learning, and well past it
    zipcoll.allreduce(x, y, comm=comm)
ctx = context_for(comm)
kind = ctx.tuner.kinds.get(key_of(nbytes, "float32", "sum", None, ctx.topology, True))
name = str(kind.best())
calls = {"auto": lambda: zipcoll.allreduce(x, y, comm=comm),
         "named": lambda: zipcoll.allreduce(x, y, comm=comm, algorithm=name)}
took = {k: [] for k in calls}
for _ in range(int(os.environ.get("REPS", 10))):
    for k, call in calls.items():
        for i in range(220):
            comm.Barrier()
            start = clock()
            call()
            if i >= 20:
                took[k].append(clock() - start)
slowest = {}
for k, v in took.items():
    mine = np.array(v) * 1e6
    slowest[k] = np.empty_like(mine)
    comm.Allreduce(mine, slowest[k], op=MPI.MAX)
if comm.rank == 0:
    tree = os.environ.get("PYTHONPATH", "installed").rstrip("/").split("/")[-1]
    a, n = slowest["auto"], slowest["named"]
    print(f"{tree}: {comm.size} ranks, {nbytes} B, auto settled on {name}: auto median "
          f"{np.median(a):.1f} mean {a.mean():.1f} us | named median {np.median(n):.1f} mean "
          f"{n.mean():.1f} us | auto/named (medians) {np.median(a) / np.median(n):.3f}")

"""A job's tuning saved, then reloaded by the next job: does the next one start tuned?

    cluster.sh run -n 4 --ranks-per-node 1 -- python reload.py learn tuned.json
    cluster.sh run -n 4 --ranks-per-node 1 -- env ZIPCOLL_PROFILE=tuned.json python reload.py reuse tuned.json

Each job makes 30 calls of `auto` with int8 allowed at each size (256 KiB, 1, 4, 16 MiB),
a barrier before each, and prints per size: the plans its calls ran (in order, runs of one
plan folded), the slowest rank's mean time of the first 20 calls and of the last 10, and
whether the size's kind was tuned (a profile that measured it: not) and still learning. "learn" then saves what it
learned (`zipcoll.save_profile`).
"""
import itertools
import sys

import numpy as np
from mpi4py import MPI

import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning.tuning import key_of

mode, path = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
for nbytes in (256 << 10, 1 << 20, 4 << 20, 16 << 20):
    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    ran, took = [], []
    for _ in range(30):
        comm.Barrier()
        start = MPI.Wtime()
        request = zipcoll.iallreduce(x, out, comm=comm, codec="int8")
        request.wait()
        took.append(comm.allreduce(MPI.Wtime() - start, op=MPI.MAX))
        ran.append(str(request.plan.shape))
    ctx = context_for(comm)
    kind = ctx.tuner.kinds.get(key_of(nbytes, x.dtype, "sum", "int8", ctx.topology, True))
    state = "not tuned" if kind is None else ("learning" if kind.learning else "settled")
    if comm.rank == 0:
        runs = ", ".join(f"{plan} x{len(list(group))}" for plan, group in itertools.groupby(ran))
        print(f"{mode} {nbytes >> 10:>6} KiB: first 20 calls {np.mean(took[:20]) * 1e3:8.2f} ms, "
              f"last 10 {np.mean(took[20:]) * 1e3:8.2f} ms; kind {state}; ran {runs}", flush=True)
if mode == "learn":
    zipcoll.save_profile(path, comm)

"""Each call auto's online tuning timed, per rank, at 64 KiB-2 MiB: whether a plan's first
call at a new size is slower than its later ones (the slowest rank's time decides).

    mpiexec -n 4 python first_calls.py

Like `zipcoll-bench autocheck --online`: every plan a few calls at 64 KiB first (compiles,
splits), then at each size fresh buffers and 12 calls of lossless auto, then 12 of auto
with int8 allowed (on one node: the same lossless candidates). Prints, per call, the plan
and each rank's time in ms: what `Tuner.measure` was given, warm-ups included (their
times are not learned).
"""
import numpy as np
from mpi4py import MPI

import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning import candidate_plans
from zipcoll.topologies import Topology

comm = MPI.COMM_WORLD
tuner = context_for(comm).tuner
timed = []
tuner.measure = lambda plan, seconds: (timed.append((str(plan), seconds)), seconds)[1]

send = np.ones(1 << 14, np.float32)
recv = np.empty_like(send)
for plan in candidate_plans(Topology.from_comm(comm), None):
    for _ in range(3):
        zipcoll.allreduce(send, recv, algorithm=plan.name, comm=comm)
for kib in [64, 128, 256, 512, 1024, 2048]:
    send = np.random.default_rng(comm.rank).standard_normal(kib * 256, dtype=np.float32)
    recv = np.empty_like(send)
    for codec in (None, "int8"):
        timed.clear()
        for _ in range(12):
            zipcoll.allreduce(send, recv, comm=comm, codec=codec)
        every = comm.gather(timed, root=0)
        if comm.rank == 0:
            print(f"{kib} KiB, codec {codec}")
            for i, row in enumerate(zip(*every)):
                print(f"  {i:2d} {row[0][0]:22s}", " ".join(f"{s * 1e3:6.3f}" for _, s in row))

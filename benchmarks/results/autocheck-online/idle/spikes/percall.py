"""Each call's time (slowest rank) of one plan at one size: mpiexec ... python percall.py ALG CODEC MiB CALLS"""
import sys, time
import numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
alg, codec, mib, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = np.random.default_rng(comm.rank).standard_normal(mib << 18).astype(np.float32)
out = np.empty_like(x)
times = []
for i in range(calls + 2):
    comm.Barrier(); t = time.perf_counter()
    zipcoll.allreduce(x, out, comm=comm, algorithm=alg, codec=codec)
    times.append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
if comm.rank == 0:
    print(f"{alg} + {codec} {mib} MiB, ms a call (first two untimed):", " ".join(f"{t*1e3:.0f}" for t in times), flush=True)

"""The blocking 1 MiB ring on 2 ranks right after a series of MPI's Allreduce: 110 MPI calls,
then 300 ring calls (medians/means of calls 0-10, 10-30, 30-110, 110-300), then 110 more
ring calls; four times. A barrier before each call, MPI.Wtime around it.

    mpiexec -n 2 python after_mpi.py
"""
import sys
import numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
a = np.ones(262144, np.float32); b = np.empty_like(a); c = np.empty_like(a)
def series(f, n, warm=0):
    for _ in range(warm): comm.Barrier(); f()
    ts = []
    for _ in range(n):
        comm.Barrier(); s = MPI.Wtime(); f(); ts.append(MPI.Wtime() - s)
    return np.array(ts) * 1e6
ring = lambda: zipcoll.allreduce(a, c, algorithm="ring", comm=comm)
for _ in range(50): ring()
for rep in range(4):
    m = series(lambda: comm.Allreduce(a, b), 110)
    r = series(ring, 300)
    r2 = series(ring, 110)
    if comm.rank == 0:
        seg = lambda x, i, j: f"{np.median(x[i:j]):6.1f}/{x[i:j].mean():6.1f}"
        print(f"MPI {seg(m,10,110)}  ring after MPI: 0-10 {seg(r,0,10)} 10-30 {seg(r,10,30)} 30-110 {seg(r,30,110)} 110-300 {seg(r,110,300)} | ring after ring 10-110 {seg(r2,10,110)}")

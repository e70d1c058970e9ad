"""What MPI itself costs inside one small zipcoll call, on this machine.

mpiexec -n 2 python mpi_only.py [CALLS]: mean time (us, slowest rank) of the MPI calls a
lossless 8-byte zipcoll call is made of: the agreement (an Iallreduce of 24 int64 and its
Wait), the same as a blocking Allreduce, and one ring step (Isend/Irecv of 8 B, Waitall).
"""
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
peer = (comm.rank + 1) % comm.size
agreed = np.zeros(24, np.int64)
mine = np.ones(24, np.int64)
small = np.ones(2, np.float32)
got = np.empty_like(small)


def timed(fn):
    for _ in range(50):
        fn()
    comm.Barrier()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    return comm.allreduce((time.perf_counter() - began) / calls, op=MPI.MAX) * 1e6


def ring_step():
    MPI.Request.Waitall([comm.Irecv(got, source=peer), comm.Isend(small, dest=peer)])


for name, fn in (("Iallreduce 24 int64 + Wait", lambda: comm.Iallreduce(mine, agreed, op=MPI.MAX).Wait()),
                 ("Allreduce 24 int64", lambda: comm.Allreduce(mine, agreed, op=MPI.MAX)),
                 ("Isend/Irecv 8 B + Waitall", ring_step)):
    took = timed(fn)
    if comm.rank == 0:
        print(f"{name:<28} {took:6.2f} us", flush=True)

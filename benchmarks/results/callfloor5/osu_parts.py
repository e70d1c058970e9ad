"""The quickstart table's timing at 1 MiB, call by call: MPI's Allreduce, zipcoll's blocking
allreduce (ring) and iallreduce(...).wait() (ring, what zipcoll-bench allreduce times, to
learn each call's plan), each 10 warm-up calls then 100 timed, a barrier before each call
and MPI.Wtime around it (OSU's way), three times.

    mpiexec -n 2 python osu_parts.py
"""
import numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
a = np.ones(262144, np.float32); b = np.empty_like(a); c = np.empty_like(a)
def series(f, n, warm=10):
    for _ in range(warm): comm.Barrier(); f()
    ts = []
    for _ in range(n):
        comm.Barrier(); s = MPI.Wtime(); f(); ts.append(MPI.Wtime() - s)
    return np.array(ts) * 1e6
for rep in range(3):
    m = series(lambda: comm.Allreduce(a, b), 100)
    r = series(lambda: zipcoll.allreduce(a, c, algorithm="ring", comm=comm), 100); q = series(lambda: zipcoll.iallreduce(a, c, algorithm="ring", comm=comm).wait(), 100)
    if comm.rank == 0:
        for name, x in (("MPI", m), ("ring", r), ("iring", q)):
            print(f"{name:5s} mean {x.mean():6.1f} median {np.median(x):6.1f} p10 {np.percentile(x,10):6.1f} p90 {np.percentile(x,90):6.1f} max {x.max():7.1f}  first10 {x[:10].mean():6.1f} last50 {x[50:].mean():6.1f}")

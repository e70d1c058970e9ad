"""Whether Python's garbage collector makes the slow calls of the 1 MiB ring on 2 ranks: 200
calls each of MPI's Allreduce, the blocking ring and iallreduce+wait, with the collector on
and off in turn, counting the collections started during each series.

    mpiexec -n 2 python gc_probe.py
"""
import gc, sys
import numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
a = np.ones(262144, np.float32); b = np.empty_like(a); c = np.empty_like(a)
gens = []
def cb(phase, info):
    if phase == "start": gens.append(info["generation"])
gc.callbacks.append(cb)
def series(f, n, warm=10):
    for _ in range(warm): comm.Barrier(); f()
    ts = []
    for _ in range(n):
        comm.Barrier(); s = MPI.Wtime(); f(); ts.append(MPI.Wtime() - s)
    return np.array(ts) * 1e6
for mode in ("on", "off", "on", "off"):
    if mode == "off": gc.disable()
    else: gc.enable()
    del gens[:]
    m = series(lambda: comm.Allreduce(a, b), 200)
    r = series(lambda: zipcoll.allreduce(a, c, algorithm="ring", comm=comm), 200)
    q = series(lambda: zipcoll.iallreduce(a, c, algorithm="ring", comm=comm).wait(), 200)
    if comm.rank == 0:
        print("gc", mode, "collections", {g: gens.count(g) for g in set(gens)})
        for name, x in (("MPI", m), ("ring", r), ("iring", q)):
            print(f"  {name:5s} mean {x.mean():6.1f} median {np.median(x):6.1f} p90 {np.percentile(x,90):6.1f} max {x.max():7.1f}")

"""Blocking zipcoll.allreduce(algorithm=ALG) against MPI's own Allreduce, interleaved:
python time_native.py NBYTES [ALG] [ITERS] under mpiexec; 5 rounds, rank 0's mean per call."""
import sys, time, os, numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
n = int(sys.argv[1]) // 4
alg = sys.argv[2] if len(sys.argv) > 2 else "ring"
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 200
x = np.random.default_rng(comm.rank).random(n, dtype=np.float32)
y = np.empty_like(x); z = np.empty_like(x)
def t_native():
    comm.Barrier(); t0 = time.perf_counter()
    for _ in range(iters): comm.Allreduce(x, y)
    return (time.perf_counter() - t0) / iters
def t_zip():
    comm.Barrier(); t0 = time.perf_counter()
    for _ in range(iters): zipcoll.allreduce(x, z, algorithm=alg)
    return (time.perf_counter() - t0) / iters
for _ in range(3): t_native(); t_zip()
res = []
for r in range(5):
    a = t_native(); b = t_zip(); res.append((a, b))
if comm.rank == 0:
    for a, b in res: print(f"{n*4} B  MPI {a*1e6:8.1f} us  zipcoll {b*1e6:8.1f} us  ratio {a/b:.2f}")

"""Cost of the agreement check against a native 1 MiB Allreduce: mpiexec -n N python benchmarks/agreement_cost.py"""
from mpi4py import MPI
import numpy as np, zipcoll, time
from zipcoll.collectives.api import _transport
c = MPI.COMM_WORLD
t = _transport(c)
sig = list(range(8))
for _ in range(200): t.agree(sig)
reps = 2000
c.Barrier(); t0 = time.perf_counter()
for _ in range(reps): t.agree(sig)
ta = c.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX)
x = np.ones(1 << 18, np.float32); y = np.empty_like(x)   # 1 MiB
for _ in range(20): c.Allreduce(x, y)
c.Barrier(); t0 = time.perf_counter()
for _ in range(200): c.Allreduce(x, y)
tn = c.allreduce((time.perf_counter() - t0) / 200, op=MPI.MAX)
if c.rank == 0: print(f"{c.size} ranks: agreement check {ta*1e6:.1f} us; native 1 MiB Allreduce {tn*1e6:.0f} us; ratio {ta/tn*100:.2f}%")

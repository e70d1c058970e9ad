"""MPI's own Allreduce against its Iallreduce + Wait, 3 rounds a size, under mpiexec."""
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.rank
for n in (2048, 1 << 18, 1 << 22):
    a = np.ones(n, np.float32); b = np.empty_like(a)
    it = max(20, 2000 * 2048 // n // 4)
    def blk():
        c.Barrier(); t = time.perf_counter()
        for _ in range(it): c.Allreduce(a, b)
        return (time.perf_counter() - t) / it * 1e6
    def nb():
        c.Barrier(); t = time.perf_counter()
        for _ in range(it): c.Iallreduce(a, b).Wait()
        return (time.perf_counter() - t) / it * 1e6
    blk(); nb()
    out = [(blk(), nb()) for _ in range(3)]
    if r == 0: print(n * 4, " ".join("blocking %.0f us / nonblocking %.0f us;" % x for x in out))

"""Back-to-back calls (no barrier), as the tuning's learning makes them: 6 lossless plans, then
4 int8 ones twice, at 4 MiB; each call's time (slowest rank)."""
import time
import numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
x = np.random.default_rng(comm.rank).standard_normal(1 << 20).astype(np.float32)
out = np.empty_like(x)
lossless = ["native", "hierarchical:rabenseifner", "rabenseifner", "hierarchical:twophase", "twophase", "hierarchical:ring"]
coded = ["twophase", "ring", "hierarchical:twophase", "hierarchical:ring"]
plans = [(a, None) for a in lossless] + [(a, "int8") for a in coded] * 2
for a, c in plans[:]:  # warm-up of each, untimed
    zipcoll.allreduce(x, out, comm=comm, algorithm=a, codec=c)
for r in range(4):
    row = []
    for a, c in (plans if r % 2 == 0 else [(a, "int8") for a in coded] * 2):
        t = time.perf_counter()
        zipcoll.allreduce(x, out, comm=comm, algorithm=a, codec=c)
        row.append((a, c, time.perf_counter() - t))
    mine = np.array([s for *_, s in row])
    slowest = np.empty_like(mine)
    comm.Allreduce(mine, slowest, op=MPI.MAX)
    if comm.rank == 0:
        kind = "6 lossless, then int8" if r % 2 == 0 else "int8 only"
        print(f"round {r} ({kind}):", "  ".join(f"{a.replace('hierarchical:', 'h:')}{'+8' if c else ''} {s*1e3:.0f}"
                                   for (a, c, _), s in zip(row, slowest)), flush=True)

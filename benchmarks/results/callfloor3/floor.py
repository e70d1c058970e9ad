"""zipcoll's per-call time beside MPI's own Allreduce, 2 ranks, blocking float32 calls.

    mpiexec -n 2 python floor.py                 # the installed zipcoll
    mpiexec -n 2 -x TREE=/path/to/checkout python floor.py   # another checkout's

Each kind: 5 warm-up calls, then 5 rounds of N calls; the median round's mean, the
slowest rank's. TREE imports zipcoll from that checkout instead of the editable install.
"""
import os
import sys

if os.environ.get("TREE"):
    sys.meta_path[:] = [f for f in sys.meta_path if "ditable" not in type(f).__name__]
    sys.path.insert(0, os.environ["TREE"])

import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import zipcoll  # noqa: E402

comm = MPI.COMM_WORLD


def per_call(call, n):
    for _ in range(5):
        call()
    rounds = []
    for _ in range(5):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(n):
            call()
        rounds.append((time.perf_counter() - start) / n)
    return comm.allreduce(sorted(rounds)[2], op=MPI.MAX)


for nbytes in [8, 64 << 10]:
    a = np.ones(max(1, nbytes // 4), np.float32)
    b = np.empty_like(a)
    row = {"MPI": per_call(lambda: comm.Allreduce(a, b), 1000)}
    for alg in ["native", "ring", "auto"]:
        row[alg] = per_call(lambda: zipcoll.allreduce(a, b, algorithm=alg, comm=comm), 1000)
    if comm.rank == 0:
        print(nbytes, "  ".join(f"{k} {v * 1e6:.1f}us" for k, v in row.items()), flush=True)

"""zipcoll's per-call time beside MPI's own Allreduce, 2 ranks, blocking float32 calls.

    mpiexec -n 2 python floor.py                 # the installed zipcoll
    mpiexec -n 2 -x TREE=/path/to/checkout python floor.py   # another checkout's
    mpiexec -n 2 -x SIZES=8,16384,65536,262144,1048576 python floor.py

Each kind: 5 warm-up calls, then 5 rounds of N calls (1000 up to 64 KiB, 300 above);
the median round's mean, the slowest rank's. TREE imports zipcoll from that checkout
instead of the editable install; SIZES gives the sizes in bytes (default 8 and 64 KiB).
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


for nbytes in [int(size) for size in os.environ.get("SIZES", "8,65536").split(",")]:
    a = np.ones(max(1, nbytes // 4), np.float32)
    b = np.empty_like(a)
    calls = 1000 if nbytes <= 64 << 10 else 300
    row = {"MPI": per_call(lambda: comm.Allreduce(a, b), calls)}
    for alg in ["native", "ring", "auto"]:
        row[alg] = per_call(lambda: zipcoll.allreduce(a, b, algorithm=alg, comm=comm), calls)
    if comm.rank == 0:
        print(nbytes, "  ".join(f"{k} {v * 1e6:.1f}us" for k, v in row.items()),
              f"ring/MPI {row['MPI'] / row['ring']:.2f}x", flush=True)

"""zipcoll's blocking ring against MPI's Allreduce on the same buffers, at 8 B and 1 MiB:
blocks of 300 calls in turn (20 untimed before each), a barrier before each call, six
blocks each; medians and means of this rank's (rank 0's) per-call microseconds.

    mpiexec -n 2 python ring_vs_mpi.py
"""
import os
import time

import numpy as np
from mpi4py import MPI

import zipcoll

comm = MPI.COMM_WORLD
clock = time.perf_counter


def series(call, calls):
    took = []
    for _ in range(calls):
        comm.Barrier()
        start = clock()
        call()
        took.append(clock() - start)
    return np.array(took) * 1e6


out = {}
for size in (8, 1 << 20):
    x = np.ones(size // 4, np.float32)
    y = np.empty_like(x)
    ring = lambda: zipcoll.allreduce(x, y, algorithm="ring", comm=comm)  # noqa: E731
    mpi = lambda: comm.Allreduce(x, y)  # noqa: E731
    ours, theirs = [], []
    for _ in range(6):
        series(ring, 20)
        ours.append(series(ring, 300))
        series(mpi, 20)
        theirs.append(series(mpi, 300))
    out[size] = np.concatenate(ours), np.concatenate(theirs)
if comm.rank == 0:
    tree = os.environ.get("PYTHONPATH", "installed").rstrip("/").split("/")[-1]
    small, large = out[8], out[1 << 20]
    print(f"{tree}: 8 B ring median {np.median(small[0]):.1f} us | 1 MiB ring median "
          f"{np.median(large[0]):.1f} mean {large[0].mean():.1f}, MPI median "
          f"{np.median(large[1]):.1f} mean {large[1].mean():.1f}, MPI/ring (means) "
          f"{large[1].mean() / large[0].mean():.3f}")

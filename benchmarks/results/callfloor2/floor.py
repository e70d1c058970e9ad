"""Per-call time of zipcoll's lossless ring and native beside MPI's own Allreduce.

mpiexec -n 2 python floor.py [ROUNDS] [CALLS]: at 8 B, 64 KiB, 1 MiB and 4 MiB of float32,
after 20 untimed calls of each kind, each round times a run of blocking calls of each kind
in turn (CALLS below 4 KiB, CALLS/2 up to 1 MiB, CALLS/8 above, at least 10) and prints the
mean time a call (us) as the slowest rank saw it, then ring / native and native / MPI as
speed ratios (above 1: the first is faster).
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import zipcoll

comm = MPI.COMM_WORLD
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200


def timed(fn, n):
    comm.Barrier()
    began = time.perf_counter()
    for _ in range(n):
        fn()
    took = (time.perf_counter() - began) / n
    return comm.allreduce(took, op=MPI.MAX) * 1e6


def calls_at(nbytes):
    """Fewer calls for larger messages, so each size takes about as long."""
    return calls if nbytes < 4096 else max(calls // 2 if nbytes <= 1 << 20 else calls // 8, 10)


for nbytes in (8, 64 << 10, 1 << 20, 4 << 20):
    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    kinds = {
        "mpi": lambda: comm.Allreduce(x, out),
        "native": lambda: zipcoll.allreduce(x, out, algorithm="native"),
        "ring": lambda: zipcoll.allreduce(x, out, algorithm="ring"),
    }
    for fn in kinds.values():
        timed(fn, 20)
    for r in range(rounds):
        row = {name: timed(fn, calls_at(nbytes)) for name, fn in kinds.items()}
        if comm.rank == 0:
            print(f"{nbytes:>8} B round {r}: " + "  ".join(f"{k} {v:8.1f} us" for k, v in row.items())
                  + f"  ring/native speedup {row['native'] / row['ring']:.2f}"
                  + f"  native/mpi {row['mpi'] / row['native']:.2f}", flush=True)

"""Seconds of a new process's first compressed all-reduce: kernels compiled or loaded.

    mpiexec -n 2 python benchmarks/first_call.py [--codec int8] [--algorithm ring]

Run it twice with the same NUMBA_CACHE_DIR (empty the first time): the first run
compiles the codec's Numba kernels and saves them, the second should only load them.
Prints, from the slowest rank: the import of zipcoll, the first call (1 Mi float32,
op "mean"), and a second call in the same process (nothing left to compile or load).
"""
import argparse
import time

start = time.perf_counter()
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import zipcoll  # noqa: E402

imported = time.perf_counter() - start


def slowest(seconds: float) -> float:
    return MPI.COMM_WORLD.allreduce(seconds, op=MPI.MAX)


def timed_call(x, args) -> float:
    MPI.COMM_WORLD.Barrier()
    t = time.perf_counter()
    zipcoll.allreduce(x, op="mean", algorithm=args.algorithm, codec=args.codec)
    return slowest(time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codec", default="int8")
    parser.add_argument("--algorithm", default="ring")
    args = parser.parse_args()
    x = np.random.default_rng(MPI.COMM_WORLD.rank).standard_normal(1 << 20, dtype=np.float32)
    first = timed_call(x, args)
    again = timed_call(x, args)
    if MPI.COMM_WORLD.rank == 0:
        print(f"{args.algorithm} + {args.codec}, {MPI.COMM_WORLD.size} ranks: import "
              f"{slowest(imported):.2f} s, first call {first:.2f} s, second call {again:.3f} s")
    else:
        slowest(imported)


if __name__ == "__main__":
    main()

"""Cost of the agreement check beside a native 1 MiB Allreduce, on the same ranks.

    mpiexec -n N python benchmarks/agreement_cost.py
"""
import time

import numpy as np
from mpi4py import MPI

from zipcoll.transport import transport_for


def mean_seconds(call, repeats: int, comm: MPI.Intracomm) -> float:
    """Mean time of `call` over `repeats`, the slowest rank's."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return comm.allreduce((time.perf_counter() - start) / repeats, op=MPI.MAX)


def main() -> None:
    comm = MPI.COMM_WORLD
    transport = transport_for(comm)
    signature = list(range(8))  # the all-reduce check states 8 numbers
    x = np.ones(1 << 18, np.float32)  # 1 MiB
    y = np.empty_like(x)
    mean_seconds(lambda: transport.agree(signature), 200, comm)  # warm-up
    mean_seconds(lambda: comm.Allreduce(x, y), 20, comm)
    check = mean_seconds(lambda: transport.agree(signature), 2000, comm)
    native = mean_seconds(lambda: comm.Allreduce(x, y), 200, comm)
    if comm.rank == 0:
        print(f"{comm.size} ranks: agreement check {check * 1e6:.1f} us; native 1 MiB "
              f"Allreduce {native * 1e6:.0f} us; ratio {check / native * 100:.2f}%")


if __name__ == "__main__":
    main()

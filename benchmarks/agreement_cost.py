"""What the agreement check (on by default) costs, beside the MPI library's own Allreduce.

    mpiexec -n 4 python benchmarks/agreement_cost.py [--repeats 7]

At each size (8 B, 4 KiB, 1 MiB, 16 MiB of float32) it times, interleaved so that all
three see the same machine state: MPI's Allreduce, zipcoll.allreduce(algorithm="native")
with the check, and the same with ZIPCOLL_CHECK=0. The check's cost is the difference
of the two zipcoll times, shown as a share of MPI's own time. Each figure is the median
over `--repeats` rounds of the slowest rank's mean per call.
"""
import argparse
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

import zipcoll

SIZES = (8, 4 << 10, 1 << 20, 16 << 20)


def mean_seconds(call, calls: int, comm: MPI.Intracomm, check: bool | None = None) -> float:
    """Mean time of `call` over `calls`, the slowest rank's; `check`: zipcoll's check on or
    off for them (the first call after a switch agrees once: settings changed; untimed)."""
    if check is not None and zipcoll.settings.get().check != check:
        zipcoll.configure(check=check)
        call()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return comm.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)


def measure(nbytes: int, repeats: int, comm: MPI.Intracomm) -> dict:
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    calls = max(3, min(2000, (64 << 20) // max(nbytes, 1) // 8))
    zipcoll_call = lambda: zipcoll.allreduce(x, y, algorithm="native")  # noqa: E731
    runs = {"mpi": (lambda: comm.Allreduce(x, y), None), "checked": (zipcoll_call, True),
            "unchecked": (zipcoll_call, False)}
    for run, check in runs.values():
        mean_seconds(run, max(1, calls // 10), comm, check)  # warm-up
    times: dict = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (run, check) in runs.items():
            times[name].append(mean_seconds(run, calls, comm, check))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {MPI.Get_library_version().splitlines()[0]}; "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"{'size':>10} {'MPI (us)':>10} {'checked':>10} {'unchecked':>10} "
              f"{'check (us)':>11} {'check / MPI':>12}")
    for nbytes in SIZES:
        t = measure(nbytes, args.repeats, comm)
        check = t["checked"] - t["unchecked"]
        if comm.rank == 0:
            print(f"{nbytes:>10} {t['mpi'] * 1e6:>10.1f} {t['checked'] * 1e6:>10.1f} "
                  f"{t['unchecked'] * 1e6:>10.1f} {check * 1e6:>11.1f} "
                  f"{check / t['mpi'] * 100:>11.2f}%")


if __name__ == "__main__":
    main()

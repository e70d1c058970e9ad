"""Timing helpers shared by the benchmark subcommands: OSU's method, sizes, iteration counts.

OSU's C benchmarks time each iteration alone (MPI_Wtime around the call only), keep a
barrier outside the timed region, skip warm-up iterations, average per rank, and report
the average, minimum and maximum of those per-rank averages across ranks.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
from mpi4py import MPI

TIMING_METHOD = (
    "OSU's: MPI.Wtime around each call only, a barrier before each iteration outside "
    "the timed region, warm-up excluded; per-rank average, then Avg/Min/Max across ranks")
IN_TURN = 10  # calls per block where two calls are timed in turn (`time_in_turn`)
IN_TURN_METHOD = ("at each size native's warm-up, then zipcoll's, then the two in turn, "
                  f"{IN_TURN} calls each")

# OSU's defaults: 1000 iterations + 100 warm-up up to 8 KiB, 100 + 10 above.
LARGE_MESSAGE = 8192
ITERATIONS = (1000, 100)
WARMUP = (100, 10)

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from '4', '64K', '64M', '1G' or '16KiB' (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (expected e.g. 4, 64K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_range(text: str, default_min: int = 4) -> tuple[int, int]:
    """(MIN, MAX) from OSU's '-m' argument: 'MIN:MAX', 'MAX' or 'MIN:'."""
    low, sep, high = text.partition(":")
    if not sep:
        low, high = "", low
    lo = parse_size(low) if low.strip() else default_min
    hi = parse_size(high) if high.strip() else max(lo, 1 << 20)
    if lo < 1 or hi < lo:
        raise ValueError(f"bad size range {text!r}: need 1 <= MIN <= MAX")
    return lo, hi


def message_sizes(lo: int, hi: int) -> list[int]:
    """OSU's sizes: MIN, then doubling while <= MAX."""
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def iteration_counts(size: int, iterations: int | None = None,
                     warmup: int | None = None) -> tuple[int, int]:
    """(iterations, warm-up) for a message size: OSU's defaults unless given (-i, -x)."""
    large = size > LARGE_MESSAGE
    return (ITERATIONS[large] if iterations is None else iterations,
            WARMUP[large] if warmup is None else warmup)


def time_per_call(call: Callable[[], object], iterations: int, warmup: int,
                  comm: MPI.Comm) -> float:
    """This rank's average seconds per call, timed OSU's way (warm-up excluded)."""
    total = 0.0
    for i in range(warmup + iterations):
        comm.Barrier()
        start = MPI.Wtime()
        call()
        elapsed = MPI.Wtime() - start
        if i >= warmup:
            total += elapsed
    return total / max(iterations, 1)


def time_in_turn(calls: list[Callable[[], object]], iterations: int, warmup: int,
                 comm: MPI.Comm) -> list[float]:
    """Each call's average seconds on this rank, OSU's way (`time_per_call`): each call's
    `warmup` calls, one call after the other, then the calls timed in turn in blocks of
    IN_TURN, so a machine whose speed drifts during the run (a shared one's does, within
    seconds) weighs on each alike and their ratio is the calls', not the moments they
    were timed at."""
    for call in calls:
        time_per_call(call, 0, warmup, comm)
    totals = [0.0] * len(calls)
    done = 0
    while done < iterations:
        block = min(IN_TURN, iterations - done)
        for i, call in enumerate(calls):
            totals[i] += time_per_call(call, block, 0, comm) * block
        done += block
    return [total / max(iterations, 1) for total in totals]


@dataclass
class Spread:
    """Avg, Min and Max across ranks of one per-rank value."""

    avg: float
    min: float
    max: float


def across_ranks(value: float, comm: MPI.Comm) -> Spread:
    """Avg/Min/Max of `value` over the ranks of `comm` (every rank gets the result)."""
    total = comm.allreduce(value, op=MPI.SUM)
    return Spread(total / comm.Get_size(), comm.allreduce(value, op=MPI.MIN),
                  comm.allreduce(value, op=MPI.MAX))


def machine() -> dict:
    """What ran a benchmark: CPU model and count, kernel threads, versions, load average."""
    import platform

    import numba

    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "numba_threads": numba.get_num_threads(),
            "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "load_average": os.getloadavg()}

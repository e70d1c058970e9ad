"""Check an emulated cluster from inside MPI, and time the MPI library's own Allreduce.

    cluster.sh run -n 4 --ranks-per-node 2 -- python benchmarks/cluster/probe.py \
        --sizes 4M,16M,64M --rate 1gbit

Prints the processor name of each rank, the COMM_TYPE_SHARED split, then per size the
slowest rank's time of a float32 Allreduce (median of --calls calls) next to the
on-wire bound of the link: each node pushes 2(N-1)/N of the message through its link,
plus Ethernet/IP/TCP headers (1514 bytes on the wire per 1448-byte segment).
"""

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from zipcoll.bench.timing import parse_size

WIRE_PER_PAYLOAD = 1514 / 1448


def parse_rate(text: str) -> float | None:
    """'1gbit' -> 1e9 bits/s; 'none' -> None."""
    text = text.lower()
    if text == "none":
        return None
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise ValueError(f"rate {text!r}")


def describe(comm: MPI.Comm) -> int:
    """Print where each rank runs; returns the number of distinct nodes."""
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    rows = comm.gather((comm.rank, MPI.Get_processor_name(), shared.rank, shared.size))
    shared.Free()
    names = comm.bcast(sorted({r[1] for r in rows}) if comm.rank == 0 else None)
    if comm.rank == 0:
        for rank, name, local, size in rows:
            print(f"rank {rank}: node {name}, shared-memory rank {local} of {size}")
        print(f"{len(names)} nodes: {', '.join(names)}")
    return len(names)


def time_allreduce(comm: MPI.Comm, nbytes: int, calls: int) -> list[float]:
    """Seconds of the slowest rank for each of `calls` Allreduce calls (after 2 warm-ups)."""
    send = np.ones(nbytes // 4, dtype=np.float32)   # np.ones touches every page before timing
    recv = np.zeros_like(send)
    times = []
    for i in range(calls + 2):
        comm.Barrier()                                # outside the timed region
        t0 = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if i >= 2:
            times.append(dt)
    assert recv[0] == comm.size and recv[-1] == comm.size
    return times


def pingpong(comm: MPI.Comm, peer: int, nbytes: int, iters: int = 1000) -> float | None:
    """Half round-trip seconds between rank 0 and `peer` (other ranks idle); None off rank 0."""
    buf = np.zeros(max(nbytes, 1), dtype=np.uint8)
    comm.Barrier()
    if comm.rank not in (0, peer):
        return None
    other = peer if comm.rank == 0 else 0
    for i in range(iters + 10):
        if i == 10:
            t0 = time.perf_counter()   # after 10 warm-up round trips
        if comm.rank == 0:
            comm.Send(buf, other)
            comm.Recv(buf, other)
        else:
            comm.Recv(buf, other)
            comm.Send(buf, other)
    return (time.perf_counter() - t0) / iters / 2 if comm.rank == 0 else None


def report_pingpong(comm: MPI.Comm, nbytes: int) -> None:
    """Latency to the next rank on the same node (if any) and to the first rank of node 1."""
    names = comm.allgather(MPI.Get_processor_name())
    peers = {"same node": 1 if comm.size > 1 and names[1] == names[0] else None,
             "other node": next((r for r, n in enumerate(names) if n != names[0]), None)}
    for label, peer in peers.items():
        if peer is None:
            continue
        t = pingpong(comm, peer, nbytes)
        if t is not None:
            print(f"ping-pong {nbytes} B, rank 0 <-> {peer} ({label}): {t * 1e6:.1f} us one way", flush=True)


def wire_bound(nbytes: int, nodes: int, rate: float) -> float:
    """Seconds each node's link needs for its share of a ring/recursive-halving Allreduce."""
    return 2 * (nodes - 1) / nodes * nbytes * WIRE_PER_PAYLOAD * 8 / rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="", help="comma-separated, e.g. 4M,16M,64M")
    ap.add_argument("--calls", type=int, default=7)
    ap.add_argument("--rate", default="none", help="the link rate, for the bound column")
    ap.add_argument("--pingpong", type=int, metavar="BYTES", help="also time a ping-pong of BYTES")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    nodes = describe(comm)
    rate = parse_rate(args.rate)
    if args.pingpong is not None:
        report_pingpong(comm, args.pingpong)
    for size in filter(None, args.sizes.split(",")):
        nbytes = parse_size(size)
        times = time_allreduce(comm, nbytes, args.calls)
        if comm.rank == 0:
            bound = f"{wire_bound(nbytes, nodes, rate) * 1e3:8.1f}" if rate and nodes > 1 else "       -"
            print(f"{size:>6} Allreduce float32: median {statistics.median(times) * 1e3:8.1f} ms"
                  f"  [min {min(times) * 1e3:.1f} max {max(times) * 1e3:.1f}]  on-wire bound {bound} ms",
                  flush=True)


if __name__ == "__main__":
    main()

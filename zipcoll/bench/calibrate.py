"""zipcoll-bench calibrate: measure this job's links, reduction and codecs; write a cost profile.

    mpiexec -n 4 zipcoll-bench calibrate -o profile.json
    ZIPCOLL_RANKS_PER_NODE=2 mpiexec -n 4 zipcoll-bench calibrate -o profile.json --quick
    ZIPCOLL_PROFILE=profile.json python train.py      # the cost model reads it

What it measures, every rank taking part so each figure is what a rank gets while the
others work too (on a shared machine that is less than one core's worth):
- alpha and beta of each link class: ring steps (send right, receive left) inside every
  node at once (intra), then along every rail across nodes at once (inter, beta divided
  by the ranks a node has: they share its link), 8 B to 16 MiB (``fit_line``); nodes
  come from ``zipcoll.Topology.from_comm`` (shared memory, or ZIPCOLL_RANKS_PER_NODE);
- gamma: ``numpy.add`` in place, every rank at once;
- zipcoll's overheads: its ring schedule driven directly at 8 bytes gives the cost of a
  step (less the link's alpha), ``zipcoll.allreduce`` at 8 bytes the rest of a call;
- the MPI library's own Allreduce at a few sizes (stored for this layout: "NxL");
- each codec's encode, decode and decode_add at two sizes (overhead + throughput),
  with ``zipcoll-bench codecs``' measurement, every rank at once; the per-call overhead
  is at least what a codec call costs inside a schedule (ring + int8 against ring, 1 KiB).
- PowerSGD's local work (``LowRankSpeed``): ``zipcoll.lowrank`` steps on one rank's own
  64 MiB matrix, every rank at once: at 4 columns without error feedback (its products,
  bytes of the matrix a second), with it (its elementwise passes), at 32 columns (the
  products' flops), and ``zipcoll.lowrank.orthogonalize`` of a factor at two sizes;
- with ``--plans [CODEC ...]``: every plan ``auto`` may pick (lossless, and those carrying
  each CODEC), whole calls at every size of ``--plan-sizes``, timed as ``zipcoll-bench
  autocheck`` times them; ``auto`` then ranks those plans by what they took on this layout.
Each time is the slowest rank's median over the iterations. Rank 0 writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

import numpy as np
from mpi4py import MPI

from zipcoll.bench import autocheck
from zipcoll.bench.codec_bench import measure, timed
from zipcoll.bench.timing import message_sizes, parse_range, time_per_call
from zipcoll.topologies import Topology
from zipcoll.collectives.planning import (DEFAULT_CODECS, DEFAULT_PROFILE, CodecSpeed, Link, Profile,
                                      Rate, Shape, candidate_plans)
from zipcoll.collectives.planning.profile import DEFAULT_LOWRANK, LowRankSpeed, Product
from zipcoll.lowrank import PowerSGDState, orthogonalize
from zipcoll.lowrank import allreduce as lowrank_allreduce
from zipcoll.transport import Transport

STEP_SIZES = [8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24]
NATIVE_SIZES = [8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24]
LOWRANK_SIDE = 4096  # a 64 MiB float32 matrix: out of any cache, as a large layer's gradient
LOWRANK_FACTOR_ROWS = (1 << 10, 1 << 16)  # orthogonalized factors of 4 columns: 16 KiB, 1 MiB
CODEC_SIZES = (1 << 12, 1 << 24)  # per-call overhead from the small, throughput out of cache
PLAN_SIZES = [1 << k for k in range(3, 27)]  # 8 B to 64 MiB
PLAN_ROUNDS = 5  # as autocheck: close plans are told apart by the median of rounds
CODECS = ["none", "fp16", "bf16", "int8", "int4", "int2", "qsgd", "terngrad", "sign",
          "topk:ratio=0.01", "randomk:ratio=0.01", "threshold:tau=2.5"]


def ring_step(comm: MPI.Comm, ring: list[int], nbytes: int, iterations: int) -> float:
    """Seconds of one ring step: every rank of ``ring`` sends ``nbytes`` right, takes as many from the left.

    Collective over ``comm``; rings of other ranks run at the same time (every rank
    calls it with its own ring), as the steps of a real schedule do. A rank alone
    in its ring only waits at the barriers.
    """
    t = Transport(comm)
    out, into = np.ones(max(nbytes, 1), np.uint8), np.zeros(max(nbytes, 1), np.uint8)  # touched
    me = ring.index(comm.rank)
    right, left = ring[(me + 1) % len(ring)], ring[me - 1]

    def step():
        if len(ring) > 1:
            MPI.Request.Waitall(t.exchange(out, right, into, left, 7))

    return slowest(comm, typical_call(step, iterations, 2, comm) if len(ring) > 1 else 0.0)


def typical_call(call, iterations: int, warmup: int, comm: MPI.Comm) -> float:
    """This rank's median seconds per call, each timed OSU's way (a barrier before it).

    The median, not OSU's mean: on a shared machine one call in ten can take 10x longer,
    and a profile should describe the machine, not the moment a neighbour's job ran.
    """
    time_per_call(call, 0, warmup, comm)
    return statistics.median(time_per_call(call, 1, 0, comm) for _ in range(max(iterations, 1)))


def fit_line(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(alpha, beta) of seconds = alpha + beta * size, robust to one noisy point.

    beta: least squares over the sizes from 1 MiB up (the two largest if fewer), where
    bandwidth dominates; alpha: the least, over the sizes up to 1 KiB, of what beta does
    not explain (noise only ever adds time to a small message; from about 16 KiB a shaped
    link's burst lets a message beat the long-run rate). Both >= 0.
    """
    x, y = np.asarray(sizes, float), np.asarray(seconds, float)
    large = x >= (1 << 20) if np.count_nonzero(x >= (1 << 20)) >= 2 else x >= np.sort(x)[-2]
    beta = float(np.polyfit(x[large], y[large], 1)[0])
    if beta <= 0:
        beta = float(y[large].max() / x[large].max())
    small = x <= (1 << 10) if np.any(x <= (1 << 10)) else x == x.min()
    alpha = float(np.min(y[small] - beta * x[small]))
    return max(alpha, 0.0), max(beta, 1e-15)


def measure_link(comm: MPI.Comm, ring: list[int], sizes: list[int], iterations: int,
                 streams: int = 1) -> tuple[Link, list]:
    """The Link of ring steps over ``ring``, and the points it was fitted to.

    ``streams`` rings share each link at once (rails across nodes: one per rank of a
    node); the measured beta is divided by it, so the Link is one stream's alone.
    """
    points = [(n, ring_step(comm, ring, n, iterations if n < (1 << 20) else max(3, iterations // 4)))
              for n in sizes]
    alpha, beta = fit_line(*zip(*points))
    return Link(alpha, beta / streams), points


def slowest(comm: MPI.Comm, seconds: float) -> float:
    """The largest of every rank's figure."""
    return comm.allreduce(seconds, op=MPI.MAX)


def measure_reduce(comm: MPI.Comm, sizes: tuple[int, int], iterations: int) -> Rate:
    """numpy's in-place add, every rank at once: overhead + bytes/s from two sizes."""
    times = []
    for nbytes in sizes:
        acc = np.ones(nbytes // 4, np.float32)
        other = np.ones_like(acc)
        comm.Barrier()
        times.append(slowest(comm, timed(lambda: np.add(acc, other, out=acc), iterations, 1)))
    return two_point_rate(sizes, times)


def measure_lowrank(comm: MPI.Comm, iterations: int, side: int = LOWRANK_SIDE) -> LowRankSpeed:
    """PowerSGD's local work as ``zipcoll.lowrank`` does it, every rank at once, each on
    its own (MPI.COMM_SELF: no wire): a step on one large matrix at 4 columns without
    error feedback (its three products), with it (two elementwise passes more), and at
    32 columns (the products' flops); orthogonalization of factors at two sizes."""
    rng = np.random.default_rng(comm.rank)
    matrix = rng.standard_normal((side, side), dtype=np.float32)
    factors = [rng.standard_normal((1, rows, 4), dtype=np.float32) for rows in LOWRANK_FACTOR_ROWS]
    orth = two_point_rate(tuple(f.nbytes for f in factors),
                          [_every_rank(comm, lambda f=f: orthogonalize(np, f), iterations)
                           for f in factors])
    speed = LowRankSpeed(DEFAULT_LOWRANK.product, DEFAULT_LOWRANK.elementwise_bytes_per_s,
                         orth.bytes_per_s, orth.overhead)

    def products(rank: int, feedback: bool) -> float:
        """Seconds of a step, less its orthogonalizations: the products (and passes)."""
        state = PowerSGDState(rank=rank, use_error_feedback=feedback, comm=MPI.COMM_SELF,
                              algorithm="ring")
        step = _every_rank(comm, lambda: lowrank_allreduce(state, [matrix]), iterations)
        return max(step - 2 * speed.orthogonalize(side, rank, 4), 1e-9)

    narrow, wide, with_feedback = products(4, False), products(32, False), products(4, True)
    return replace(speed, product=Product(3 * matrix.nbytes / narrow,
                                          3 * 2.0 * matrix.size * 32 / wide,
                                          DEFAULT_LOWRANK.product.overhead),
                   elementwise_bytes_per_s=2 * matrix.nbytes / max(with_feedback - narrow, 1e-9))


def _every_rank(comm: MPI.Comm, work, iterations: int) -> float:
    """The slowest rank's median seconds of ``work``, every rank running it at once."""
    comm.Barrier()
    return slowest(comm, timed(work, iterations, 2))


def two_point_rate(sizes: tuple[int, int], times: list[float]) -> Rate:
    """The Rate through (sizes[0], times[0]) and (sizes[1], times[1])."""
    (n0, n1), (t0, t1) = sizes, times
    per_byte = max((t1 - t0) / (n1 - n0), 1e-13)
    return Rate(1.0 / per_byte, max(t0 - n0 * per_byte, 0.0))


def measure_codec(comm: MPI.Comm, spec: str, iterations: int) -> CodecSpeed:
    """A codec's encode/decode/decode_add Rates on this job, every rank at once."""
    from zipcoll.codecs import get_codec

    codec = get_codec(spec)
    rows = []
    for nbytes in CODEC_SIZES:
        x = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
        comm.Barrier()
        rows.append(measure(codec, x, iterations, 1, copy_s=1.0))
    parts = {}
    for part in ("encode", "decode", "decode_add"):
        times = [slowest(comm, row["bytes"] / (row[f"{part}_GBps"] * 1e9)) for row in rows]
        parts[part] = two_point_rate(CODEC_SIZES, times)
    return CodecSpeed(**parts)


def measure_native(comm: MPI.Comm, sizes: list[int], iterations: int) -> list[tuple[int, float]]:
    """The MPI library's own Allreduce (float32 SUM), OSU-timed, slowest rank's average."""
    points = []
    warm = np.ones(2, np.float32)
    for _ in range(20):  # the first calls set up connections and buffers
        comm.Allreduce(MPI.IN_PLACE, warm, MPI.SUM)
    for nbytes in sizes:
        send = np.ones(max(nbytes // 4, 2), np.float32)
        recv = np.zeros_like(send)
        runs = iterations if nbytes < (1 << 20) else max(3, iterations // 4)
        seconds = typical_call(lambda: comm.Allreduce(send, recv, MPI.SUM), runs, 2, comm)
        points.append((send.nbytes, slowest(comm, seconds)))
    return points


def measure_overheads(comm: MPI.Comm, link: Link, iterations: int) -> tuple[float, float]:
    """(per step, per call) seconds zipcoll adds, from 8-byte all-reduces.

    The ring schedule driven directly takes 2(p-1) steps, each a link's alpha plus the
    step overhead; zipcoll.allreduce adds the call's overhead and the agreement check
    (a small native Allreduce, subtracted here: the model adds it itself).
    """
    import zipcoll
    from zipcoll.collectives.schedule import run

    p = comm.size
    if p == 1:
        return DEFAULT_PROFILE.step_overhead, DEFAULT_PROFILE.call_overhead
    t = Transport(comm.Dup())
    buf = np.ones(2, np.float32)
    try:
        direct = slowest(comm, typical_call(
            lambda: run(ring_steps(t, buf)), iterations, 5, comm))
    finally:
        t.comm.Free()
    whole = slowest(comm, typical_call(
        lambda: zipcoll.allreduce(buf, algorithm="ring", comm=comm), iterations, 5, comm))
    agree = measure_native(comm, [64], iterations)[0][1]
    step = max(direct / (2 * (p - 1)) - link.alpha, 0.0)
    return step, max(whole - direct - agree, 0.0)


def ring_steps(t, buf):
    """The lossless ring schedule's steps (SUM) on transport t: the one place calibrate
    reaches into the collectives."""
    from zipcoll.collectives import SCHEDULES
    from zipcoll.collectives.ops import BY_NAME
    from zipcoll.collectives.steps import Lossless

    return SCHEDULES["ring"].run(t, buf, Lossless(BY_NAME["sum"], buf.dtype), t.next_tag())


def codec_call_in_place(comm: MPI.Comm, iterations: int) -> float:
    """Seconds a codec call costs inside a schedule, beyond its work: ring + int8 less ring, 1 KiB.

    Between a schedule's encodes the rank waits on MPI and the codec's worker threads go
    idle; waking them, the encoder's bookkeeping and the payload's header cost more than
    back-to-back calls show. The compressed ring makes 3p - 1 codec calls (p encodes,
    p - 1 decode_adds, p decodes).
    """
    import zipcoll

    p = comm.size
    if p == 1:
        return 0.0
    buf = np.ones(256, np.float32)
    plain = slowest(comm, typical_call(
        lambda: zipcoll.allreduce(buf, algorithm="ring", comm=comm), iterations, 5, comm))
    coded = slowest(comm, typical_call(
        lambda: zipcoll.allreduce(buf, algorithm="ring", codec="int8", comm=comm), iterations, 5, comm))
    return max(coded - plain, 0.0) / (3 * p - 1)


def with_call_floor(speed: CodecSpeed, overhead: float) -> CodecSpeed:
    """``speed`` with every part's per-call overhead at least ``overhead``."""
    return CodecSpeed(*(Rate(r.bytes_per_s, max(r.overhead, overhead))
                        for r in (speed.encode, speed.decode, speed.decode_add)))


def measure_plans(comm: MPI.Intracomm, topology: Topology, codecs: list[str], sizes: list[int],
                  say) -> dict:
    """{plan: [[bytes, seconds], ...]} of every candidate plan (lossless, and each codec's)."""
    plans = {str(p): p for codec in [None, *codecs] for p in candidate_plans(topology, codec)}
    autocheck.warm_up(list(plans.values()), comm)
    table: dict[str, list] = {name: [] for name in plans}
    for nbytes in sizes:
        result = autocheck.measure_size(nbytes, list(plans.values()), [], PLAN_ROUNDS, comm)
        for name in plans:
            table[name].append((nbytes, result.seconds.get(name, result.screened[name])))
        best = min(table, key=lambda name: table[name][-1][1])
        say(f"plans at {nbytes} B: fastest {best} {table[best][-1][1] * 1e3:.3f} ms")
    return {name: rising(points) for name, points in table.items()}


def rising(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Times made non-decreasing in size: each the least measured at its size or above.

    A larger message never takes less time; a point above a later one was a neighbour's
    job or the scheduler (noise only ever adds time), so the later one bounds it.
    """
    out, least = [], float("inf")
    for nbytes, seconds in sorted(points, reverse=True):
        least = min(least, seconds)
        out.append((nbytes, least))
    return out[::-1]


def calibrate(comm: MPI.Comm, quick: bool = False, codecs: list[str] | None = None,
              log=None, plan_codecs: list[str] | None = None,
              plan_sizes: list[int] | None = None) -> tuple[Profile, dict]:
    """Measure a Profile on ``comm`` (collective); every rank returns the same one.

    Also returns the ring-step times the links were fitted to ({"intra": [[bytes, s]...]}).
    """
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if log and comm.rank == 0 else (lambda text: None)
    iterations = 10 if quick else 50
    topology = Topology.from_comm(comm)
    step_sizes = STEP_SIZES[::2] if quick else STEP_SIZES
    intra, inter = DEFAULT_PROFILE.intra, DEFAULT_PROFILE.inter
    points = {}
    if max(len(n) for n in topology.nodes) > 1:  # rings inside each node
        intra, points["intra"] = measure_link(comm, topology.local_peers(), step_sizes, iterations)
        say(f"intra: alpha {intra.alpha * 1e6:.1f} us, {1 / intra.beta / 1e9:.2f} GB/s")
    if topology.num_nodes > 1:  # rings across nodes, one per local rank (rail), all at once
        inter, points["inter"] = measure_link(comm, topology.same_local_rank(), step_sizes,
                                              iterations, streams=min(len(n) for n in topology.nodes))
        say(f"inter: alpha {inter.alpha * 1e6:.1f} us, {1 / inter.beta / 1e9:.2f} GB/s a stream")
    reduce = measure_reduce(comm, CODEC_SIZES, iterations)
    say(f"reduce: {reduce.bytes_per_s / 1e9:.2f} GB/s + {reduce.overhead * 1e6:.1f} us")
    step, call = measure_overheads(comm, inter if topology.num_nodes > 1 else intra, iterations)
    say(f"zipcoll: {step * 1e6:.1f} us a step, {call * 1e6:.1f} us a call")
    native_sizes = NATIVE_SIZES[::2] if quick else NATIVE_SIZES
    native = measure_native(comm, native_sizes, iterations)
    say("native: " + ", ".join(f"{n} B {s * 1e6:.0f} us" for n, s in native))
    in_place = codec_call_in_place(comm, iterations)
    say(f"a codec call inside a schedule: {in_place * 1e6:.1f} us beyond its work")
    speeds = {}
    for spec in codecs if codecs is not None else CODECS:
        speed = with_call_floor(measure_codec(comm, spec, max(3, iterations // 5)), in_place)
        speeds[spec.partition(":")[0]] = speed
        say(f"{spec}: encode {speed.encode.bytes_per_s / 1e9:.2f} GB/s + {speed.encode.overhead * 1e6:.0f} us, "
            f"decode_add {speed.decode_add.bytes_per_s / 1e9:.2f} GB/s")
    lowrank = measure_lowrank(comm, max(3, iterations // 5), LOWRANK_SIDE // 2 if quick else LOWRANK_SIDE)
    say(f"lowrank: products {lowrank.product.bytes_per_s / 1e9:.2f} GB/s, "
        f"{lowrank.product.flops_per_s / 1e9:.1f} GFLOP/s; elementwise "
        f"{lowrank.elementwise_bytes_per_s / 1e9:.2f} GB/s; orthogonalize "
        f"{lowrank.orthogonalize_bytes_per_s / 1e9:.2f} GB/s + {lowrank.orthogonalize_overhead * 1e6:.0f} us")
    layout = Shape.of(topology).label
    source = (f"zipcoll-bench calibrate on {comm.size} ranks, {layout}, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    defaults = {k: with_call_floor(v, in_place) for k, v in DEFAULT_CODECS.items()}
    plans = {}
    if plan_codecs is not None:
        plans[layout] = measure_plans(comm, topology, plan_codecs, plan_sizes or PLAN_SIZES,
                                      say)
    profile = Profile(intra, inter, reduce, step, call, {**defaults, **speeds},
                      {layout: tuple(native)}, source, plans, lowrank)
    return Profile.from_dict(comm.bcast(profile.to_dict(), root=0)), points


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipcoll-bench calibrate", description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", default="zipcoll-profile.json", help="JSON profile to write")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    p.add_argument("--codec", action="append", help="codecs to time (default: all), repeatable")
    p.add_argument("--plans", nargs="*", metavar="CODEC",
                   help="also time every plan auto may pick: lossless, and those carrying "
                        "each CODEC given (e.g. --plans int8)")
    p.add_argument("--plan-sizes", default="8:64M", help="[MIN:]MAX bytes for --plans, doubling")
    return p


def main(argv: list[str] | None = None) -> int:
    """Calibrate on MPI.COMM_WORLD and write the profile (rank 0)."""
    args = parser().parse_args(argv)
    comm = MPI.COMM_WORLD
    sizes = message_sizes(*parse_range(args.plan_sizes, default_min=8))
    profile, points = calibrate(comm, args.quick, args.codec, log=True, plan_codecs=args.plans,
                                plan_sizes=sizes)
    if comm.rank == 0:
        with open(args.output, "w") as f:  # the profile, and the ring steps behind its links
            json.dump({**profile.to_dict(), "ring_steps": points}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(json.dumps({"output": args.output, "source": profile.source}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

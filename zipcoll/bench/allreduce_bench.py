"""zipcoll-bench allreduce: OSU's latency table for one zipcoll algorithm, beside MPI's own.

    mpiexec -n 2 zipcoll-bench allreduce -m 4M:64M --algorithm ring -f -c
    mpiexec -n 4 python -m zipcoll.bench allreduce -m 1K:16M --algorithm tree --json out.json

At each size the MPI library's Allreduce ("native") and zipcoll's are warmed up, then
timed in turn, ten calls each, on the same buffers, so both see the same machine state
(a shared machine's speed drifts within seconds); speedup = native / zipcoll. Both are
blocking calls, a barrier before each (OSU's osu_allreduce).
Columns OSU lacks: algbw = size / time and busbw = algbw * 2(p-1)/p (nccl-tests), and
with --codec: wire bytes of one encoded message, compression ratio, relative L2 error.
"""
from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

import zipcoll
from zipcoll.bench import timing
from zipcoll.bench.timing import Spread
from zipcoll.collectives.api import start_allreduce

OPS = {name: getattr(MPI, name.upper())
       for name in ("sum", "prod", "max", "min", "land", "lor", "lxor", "band", "bor", "bxor")}
EXACT_OPS = ("max", "min", "land", "lor", "lxor", "band", "bor", "bxor")


def _algorithm(name: str) -> str:
    """An algorithm name zipcoll knows (argparse type)."""
    from zipcoll.collectives.registry import parse

    try:
        parse(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def build_parser() -> argparse.ArgumentParser:
    """The command line: OSU's options (-m -i -x -f -c) plus zipcoll's."""
    p = argparse.ArgumentParser(prog="zipcoll-bench allreduce", description=__doc__.split("\n")[0])
    add_osu_options(p, "sizes in bytes per rank, powers of two from MIN to MAX (e.g. 4:64M)")
    p.add_argument("-a", "--algorithm", default="ring", type=_algorithm,
                   help=f"one of {', '.join(zipcoll.ALGORITHMS)}; two-level ones may name their "
                        "inter-node schedule, e.g. hierarchical:allgather")
    p.add_argument("--codec", default=None, help="codec spec, e.g. int8 or topk:ratio=0.01")
    add_data_options(p, op=True)
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="cap the iterations of a size so it takes about this long")
    p.add_argument("--learn-calls", type=int, default=0, metavar="N",
                   help="algorithm auto: N untimed calls a size before the timed ones (online "
                        "tuning's learning; their time is in the JSON as learning_us)")
    p.add_argument("--json", default=None, metavar="PATH", help="write all rows as JSON")
    return p


def add_osu_options(p: argparse.ArgumentParser, size_help: str) -> None:
    """OSU's -m -i -x -f -c (every zipcoll-bench table takes them)."""
    p.add_argument("-m", "--message-size", default=None, metavar="[MIN:]MAX", help=size_help)
    p.add_argument("-i", "--iterations", type=int, default=None,
                   help="timed iterations per size (default: OSU's 1000 up to 8K, 100 above)")
    p.add_argument("-x", "--warmup", type=int, default=None,
                   help="warm-up iterations per size (default: OSU's 100 up to 8K, 10 above)")
    p.add_argument("-f", "--full", action="store_true", help="also Min, Max latency and iterations")
    p.add_argument("-c", "--validate", action="store_true",
                   help="check zipcoll's result against the MPI library's, per size")


def add_data_options(p: argparse.ArgumentParser, op: bool) -> None:
    """-d, --op (where the collective reduces) and --seed: what the input data is."""
    p.add_argument("-d", "--dtype", default="float32", help="NumPy dtype name (default float32)")
    if op:
        p.add_argument("--op", default="sum", choices=tuple(OPS))
    p.add_argument("--seed", type=int, default=0, help="input data seed (mixed with the rank)")


# -- buffers -----------------------------------------------------------------------
@dataclass
class Buffers:
    """The input and the two result buffers of one size, allocated and touched."""

    send: np.ndarray
    native: np.ndarray
    zipcoll: np.ndarray


def input_data(count: int, dtype: np.dtype, op: str, rank: int, size: int, seed: int) -> np.ndarray:
    """Different data on every rank (seeded by rank), in a range where sums cannot overflow."""
    rng = np.random.default_rng([seed, rank])
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    if dtype.kind in "iu":
        # MPI leaves integer overflow undefined (Open MPI 5 saturates uint8 sums): avoid it
        high = 2 if op == "prod" else max(1, min(100, np.iinfo(dtype).max // size))
        low = 0 if dtype.kind == "u" or op == "prod" else -high
        return rng.integers(low, high, count, endpoint=True).astype(dtype)
    if op == "prod":
        return rng.uniform(0.5, 1.5, count).astype(dtype)
    data = rng.standard_normal(count, dtype=np.float32)
    if dtype.kind == "c":
        data = data + 1j * rng.standard_normal(count, dtype=np.float32)
    return data.astype(dtype)


def make_buffers(count: int, dtype: np.dtype, op: str, comm: MPI.Intracomm, seed: int) -> Buffers:
    """Allocate and write every buffer now, so first-touch page faults fall outside timing."""
    send = input_data(count, dtype, op, comm.Get_rank(), comm.Get_size(), seed)
    return Buffers(send, np.ones_like(send), np.ones_like(send))


# -- one size ----------------------------------------------------------------------
@dataclass
class Check:
    """Validation of one size: ok is None when only reported (no bound to judge by)."""

    ok: bool | None
    rel_error: float | None = None
    bound: float | None = None


@dataclass
class Measured:
    """What every zipcoll-bench table's Row holds first, and the speedup and compression
    ratio it gives (each Row adds wire_bytes and its own fields)."""

    size: int
    count: int
    iterations: int
    warmup: int
    zipcoll: Spread
    native: Spread
    ranks: int

    @property
    def speedup(self) -> float:
        return self.native.avg / self.zipcoll.avg if self.zipcoll.avg else 0.0

    @property
    def ratio(self) -> float | None:
        return self.size / self.wire_bytes if self.wire_bytes else None


@dataclass
class Row(Measured):
    """Everything measured at one message size."""

    wire_bytes: int | None = None
    check: Check | None = None
    plans: dict | None = None  # what the timed calls ran (str(PlanShape) -> calls)
    learning: float | None = None  # seconds of auto's untimed --learn-calls calls

    @property
    def algbw(self) -> float:
        return self.size / self.zipcoll.avg / 1e9 if self.zipcoll.avg else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * 2 * (self.ranks - 1) / self.ranks


class Bench:
    """One benchmark run: the options, the communicator, and the two calls it times."""

    def __init__(self, args: argparse.Namespace, comm: MPI.Intracomm):
        self.args, self.comm = args, comm
        self.dtype = np.dtype(args.dtype)
        self.op = OPS[args.op]
        self.codec = load_codec(args.codec)
        self.kwargs = dict(op=self.op, comm=comm, algorithm=args.algorithm, codec=args.codec,
                           key=None, topology=None)
        self.warm = False  # whether this process has made a call of each kind yet

    def sizes(self) -> list[int]:
        """The message sizes of this run, in bytes (whole elements only)."""
        itemsize = self.dtype.itemsize
        spec = self.args.message_size or f"{itemsize}:1M"
        lo, hi = timing.parse_range(spec, default_min=itemsize)
        return [s for s in timing.message_sizes(lo, hi) if s >= itemsize]

    def measure(self, size: int) -> Row:
        """Time native and zipcoll in turn at one size; validate if asked."""
        count = size // self.dtype.itemsize
        bufs = make_buffers(count, self.dtype, self.args.op, self.comm, self.args.seed)
        native = lambda: self.comm.Allreduce(bufs.send, bufs.native, self.op)  # noqa: E731
        ran: dict[tuple, list] = {}  # (schedule, inner, codecs used) -> [a plan, calls]

        def ours() -> None:  # the blocking call, as OSU times MPI's; it tells the plan it
            call = start_allreduce(bufs.send, bufs.zipcoll, blocking=True, **self.kwargs)
            call.wait()      # ran (auto's may change as it learns)
            plan = call.plan
            seen = ran.setdefault((plan.schedule, plan.inner, plan.codec is None,
                                   plan.intra_codec is None), [plan, 0])
            seen[1] += 1

        iterations, warmup = self.iteration_counts(size, native, ours)
        learning = self.learn(ours)
        ran.clear()
        t_native, t_ours = timing.time_in_turn([native, ours], iterations, warmup, self.comm)
        row = Row(count * self.dtype.itemsize, count, iterations, warmup,
                  timing.across_ranks(t_ours, self.comm), timing.across_ranks(t_native, self.comm),
                  self.comm.Get_size(), self.wire_bytes(count),
                  plans={str(plan.shape): calls for plan, calls in ran.values()},
                  learning=learning)
        if self.args.validate or self.codec is not None:
            row.check = self.validate(bufs, ours)
        return row

    def learn(self, ours: Callable) -> float | None:
        """auto's --learn-calls untimed calls (not cut by --time-budget): the slowest
        rank's seconds for all of them, or None without them."""
        calls = self.args.learn_calls if self.args.algorithm == "auto" else 0
        if calls <= 0:
            return None
        return self.comm.allreduce(calls * timing.time_per_call(ours, calls, 0, self.comm),
                                   op=MPI.MAX)

    def iteration_counts(self, size: int, native: Callable, ours: Callable) -> tuple[int, int]:
        """OSU's counts (or -i/-x), cut to fit --time-budget from one probe call of each."""
        iterations, warmup = timing.iteration_counts(size, self.args.iterations, self.args.warmup)
        if not self.args.time_budget:
            return iterations, warmup
        if not self.warm:  # a process's first calls load kernels and connect: not a probe
            native()
            ours()
            self.warm = True
        probe = timing.time_per_call(native, 1, 0, self.comm) + timing.time_per_call(ours, 1, 0, self.comm)
        calls = int(self.args.time_budget / max(self.comm.allreduce(probe, op=MPI.MAX), 1e-9))
        warmup = min(warmup, calls // 10)
        return max(1, min(iterations, calls - warmup)), warmup

    def wire_bytes(self, count: int) -> int | None:
        """Bytes of one encoded message of `count` items (None without a codec)."""
        return None if self.codec is None else int(self.codec.wire_bytes(count, self.dtype))

    def validate(self, bufs: Buffers, ours: Callable) -> Check:
        """One fresh zipcoll call into a poisoned buffer, checked against native; ranks agree."""
        bufs.zipcoll.fill(0)  # a call that writes nothing cannot pass on the last timed result
        ours()
        check = compare(bufs, self.args.op, self.comm, self.codec)
        if not same_on_all_ranks(bufs.zipcoll, self.comm):
            check.ok = False
        failed = self.comm.allreduce(int(check.ok is False), op=MPI.MAX)
        if failed:
            check.ok = False
        return check


def load_codec(spec: str | None) -> Any:
    """The codec object for --codec (for wire_bytes and error_bound), or None."""
    return None if spec is None else zipcoll.get_codec(spec)


# -- validation --------------------------------------------------------------------
def compare(bufs: Buffers, op: str, comm: MPI.Intracomm, codec: Any) -> Check:
    """zipcoll's result against native's on the same input."""
    ours, exact = bufs.zipcoll, bufs.native
    if op in EXACT_OPS or bufs.send.dtype.kind in "biu":
        return Check(bool(np.array_equal(ours, exact, equal_nan=ours.dtype.kind in "fc")))
    error = np.abs(ours.astype(np.complex128 if ours.dtype.kind == "c" else np.float64) - exact)
    rel = relative_l2(error, exact)
    if codec is not None and not getattr(codec, "lossless", False):
        bound = lossy_bound(codec, bufs.send, exact, comm)
        return Check(None if bound is None else rel <= bound, rel, bound)
    tolerance = reorder_tolerance(bufs.send, exact, op, comm)
    return Check(bool(np.all(error <= tolerance)), rel)


def reorder_tolerance(send: np.ndarray, exact: np.ndarray, op: str, comm: MPI.Intracomm) -> Any:
    """What summing in another order may change: 2 p eps times sum |x| (or |result| for prod)."""
    p = comm.Get_size()
    eps = np.finfo(send.dtype).eps
    if op == "prod":
        return 2 * p * eps * np.abs(exact)
    magnitude = np.empty(send.shape, np.float64)
    comm.Allreduce(np.abs(send).astype(np.float64), magnitude, MPI.SUM)
    return 2 * p * eps * magnitude


def lossy_bound(codec: Any, send: np.ndarray, exact: np.ndarray, comm: MPI.Intracomm) -> float | None:
    """A loose relative L2 bound; None if unbounded.

    p encodes of partial sums no larger than sum |x| (per-hop schedules), plus one encode of
    each rank's own x (allgather: a threshold codec drops each rank's small values, which
    a bound taken at sum |x| alone would miss).
    """
    magnitude = np.empty(send.shape, np.float64)
    comm.Allreduce(np.abs(send).astype(np.float64), magnitude, MPI.SUM)
    try:
        partial_sums = np.asarray(codec.error_bound(magnitude.astype(send.dtype)), np.float64)
        own = np.asarray(codec.error_bound(send), np.float64)
    except (AttributeError, NotImplementedError, TypeError):
        return None
    if not (np.all(np.isfinite(partial_sums)) and np.all(np.isfinite(own))):
        return None
    per_rank = np.empty_like(own)
    comm.Allreduce(own, per_rank, MPI.SUM)
    return relative_l2(comm.Get_size() * partial_sums + per_rank, exact)


def relative_l2(error: np.ndarray, exact: np.ndarray) -> float:
    """||error|| / ||exact||, in float64 (0 when both are 0)."""
    norm = float(np.linalg.norm(exact.astype(np.complex128 if exact.dtype.kind == "c" else np.float64)))
    err = float(np.linalg.norm(error))
    return err / norm if norm else (0.0 if err == 0 else float("inf"))


def same_on_all_ranks(result: np.ndarray, comm: MPI.Intracomm) -> bool:
    """Whether every rank holds the same bits (by CRC-32)."""
    crc = zlib.crc32(memoryview(result).cast("B"))
    return comm.allreduce(crc, op=MPI.MIN) == comm.allreduce(crc, op=MPI.MAX)


# -- output ------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One table column: its title, width, and how a row shows in it."""

    title: str
    width: int
    text: Callable[[Row], str]


def _us(value: float) -> str:
    return f"{value * 1e6:.2f}"


def _check_text(row: Row) -> str:
    if row.check is None or row.check.ok is None:
        return "REPORT" if row.check else "-"
    return "PASS" if row.check.ok else "FAIL"


def _optional(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_columns(full: bool, codec: bool, validate: bool, bound: bool = False) -> list[Column]:
    """OSU's columns (Avg; with -f Min, Max, Iterations), then zipcoll's (`bound`: the
    codec's error bound after Rel Error)."""
    cols = [Column("Avg Latency(us)", 18, lambda r: _us(r.zipcoll.avg))]
    if full:
        cols += [Column("Min Latency(us)", 18, lambda r: _us(r.zipcoll.min)),
                 Column("Max Latency(us)", 18, lambda r: _us(r.zipcoll.max)),
                 Column("Iterations", 12, lambda r: str(r.iterations))]
    cols += [Column("algbw(GB/s)", 13, lambda r: f"{r.algbw:.3f}"),
             Column("busbw(GB/s)", 13, lambda r: f"{r.busbw:.3f}"),
             Column("Native Avg(us)", 18, lambda r: _us(r.native.avg)),
             Column("Speedup", 9, lambda r: f"{r.speedup:.3f}")]
    if codec:
        cols += [Column("Wire(B)", 13, lambda r: str(r.wire_bytes)),
                 Column("Ratio", 8, lambda r: _optional(r.ratio, ".2f")),
                 Column("Rel Error", 11, lambda r: _optional(r.check and r.check.rel_error, ".2e"))]
        if bound:
            cols += [Column("Bound", 11, lambda r: _optional(r.check and r.check.bound, ".2e"))]
    if validate:
        cols += [Column("Validation", 12, _check_text)]
    return cols


def format_header(cols: list[Column]) -> str:
    """OSU's '# Size' line."""
    return "# Size".ljust(10) + "".join(c.title.rjust(c.width) for c in cols)


def format_row(row: Row, cols: list[Column]) -> str:
    """One table line: size left-aligned in 10, the rest right-aligned."""
    return str(row.size).ljust(10) + "".join(c.text(row).rjust(c.width) for c in cols)


def mpi_library() -> str:
    """The MPI library's version, first line."""
    return MPI.Get_library_version().strip().splitlines()[0].split(", package")[0]


def hugepage_advice() -> str:
    """Whether NumPy asks the kernel for huge pages for its arrays ('?' if unknown)."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            getter = getattr(__import__(module, fromlist=["_"]), "_get_madvise_hugepage")
            return "on" if getter() else "off"
        except (ImportError, AttributeError):
            continue
    return "?"


def header_lines(bench: Bench) -> list[str]:
    """OSU's title plus what was run, on what, and how it was timed."""
    a, p = bench.args, bench.comm.Get_size()
    return [
        f"# OSU MPI Allreduce Latency Test (zipcoll-bench allreduce, zipcoll {zipcoll.__version__})",
        f"# zipcoll algorithm: {a.algorithm}, codec: {a.codec or 'none'}, ranks: {p}, "
        f"dtype: {bench.dtype.name}, op: {a.op}",
        f"# MPI: {mpi_library()}; mpi4py {sys.modules['mpi4py'].__version__}; native = MPI's Allreduce",
        f"# Timing: {timing.TIMING_METHOD}; {timing.IN_TURN_METHOD}",
        "# Buffers: send, native recv and zipcoll recv allocated and written before timing "
        f"(NumPy huge-page advice {hugepage_advice()}); size = bytes per rank",
    ] + legend_lines(a.full, a.codec is not None, a.validate)


def legend_lines(full: bool, codec: bool, validate: bool) -> list[str]:
    """What each printed column means."""
    lines = [
        "# Size: bytes each rank contributes; Latency: each rank's mean per call, then "
        "Avg/Min/Max over ranks" + ("; Iterations: timed calls per size" if full else ""),
        "# algbw = size/time, busbw = algbw*2(p-1)/p (GB/s, 1e9 B); Native Avg: MPI's "
        "Allreduce, same buffers, same run; speedup = native/zipcoll",
    ]
    if codec:
        lines += [
            "# Wire(B): bytes of one encoded message of the whole per-rank vector (size bytes), "
            "not bytes sent (schedules send pieces of it per hop); Ratio = size / Wire(B)",
            "# Rel Error: ||zipcoll - native|| / ||native|| (L2, float64, whole result, rank 0)",
        ]
    if validate:
        lines.append(
            "# Validation: the same bits on every rank, and: lossless, each element within "
            "2p*eps*sum|x| of native (integers, MAX/MIN, logical and bit ops: equal); "
            "lossy codec, Rel Error <= the codec's worst-case bound (p encodes of partial "
            "sums plus each rank's own); REPORT: no finite bound, error only reported")
    return lines


def row_record(row: Row) -> dict:
    """One row as JSON: times in microseconds, bandwidths in GB/s."""
    check = row.check
    return {
        "size": row.size, "count": row.count, "iterations": row.iterations, "warmup": row.warmup,
        "avg_us": row.zipcoll.avg * 1e6, "min_us": row.zipcoll.min * 1e6,
        "max_us": row.zipcoll.max * 1e6, "native_avg_us": row.native.avg * 1e6,
        "native_min_us": row.native.min * 1e6, "native_max_us": row.native.max * 1e6,
        "algbw_gbs": row.algbw, "busbw_gbs": row.busbw, "speedup": row.speedup,
        "wire_bytes": row.wire_bytes, "compression_ratio": row.ratio,
        "rel_error": check.rel_error if check else None,
        "error_bound": check.bound if check else None,
        "validation": _check_text(row) if check else None,
        "plans": row.plans,
        "learning_us": None if row.learning is None else row.learning * 1e6,
    }


def write_json(path: str, bench: Bench, argv: list[str], rows: list[Row], hosts: list[str]) -> None:
    """All rows and the run's context, for machines."""
    a = bench.args
    record = {
        "benchmark": "zipcoll-bench allreduce",
        "command": " ".join(["zipcoll-bench", "allreduce", *argv]),
        "ranks": bench.comm.Get_size(), "algorithm": a.algorithm, "codec": a.codec,
        "dtype": bench.dtype.name, "op": a.op, "mpi_library": mpi_library(),
        "mpi4py": sys.modules["mpi4py"].__version__, "zipcoll": zipcoll.__version__,
        "numpy": np.__version__, "hugepage_advice": hugepage_advice(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(), "hosts": sorted(set(hosts)), "machine": timing.machine(),
        "timing": timing.TIMING_METHOD, "rows": [row_record(r) for r in rows],
    }
    with open(path, "w") as out:
        json.dump(record, out, indent=1)
        out.write("\n")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; rank 0 prints. Exit status 1 if any size failed validation."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    comm = MPI.COMM_WORLD
    bench = Bench(args, comm)
    root = comm.Get_rank() == 0
    cols = table_columns(args.full, args.codec is not None, args.validate)
    rows = print_table(bench, header_lines(bench), cols, root)
    hosts = comm.gather(MPI.Get_processor_name())
    if root and args.json:
        write_json(args.json, bench, argv, rows, hosts)
    return validation_status(args.validate, rows, root)


def print_table(bench: Any, header: list[str], cols: list[Column], root: bool) -> list:
    """Measure every size of `bench` (all ranks); rank 0 prints the table as it goes."""
    if root:
        print("\n".join(header + [format_header(cols)]), flush=True)
    rows = []
    for size in bench.sizes():
        rows.append(bench.measure(size))
        if root:
            print(format_row(rows[-1], cols), flush=True)
    return rows


def validation_status(validate: bool, rows: list, root: bool) -> int:
    """With -c: rank 0 prints PASS or FAIL; the exit status is 1 if any size failed."""
    failed = validate and any(r.check is not None and r.check.ok is False for r in rows)
    if root and validate:
        print(f"# Validation: {'FAIL' if failed else 'PASS'}", flush=True)
    return 1 if failed else 0

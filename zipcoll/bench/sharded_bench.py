"""zipcoll-bench reduce-scatter / allgather: OSU's osu_reduce_scatter / osu_allgather tables
for one zipcoll algorithm, beside the MPI library's own collective.

    mpiexec -n 2 zipcoll-bench reduce-scatter -m 1M:64M --algorithm ring --codec int8 -c
    mpiexec -n 4 zipcoll-bench allgather -m 4K:16M --algorithm halving -f --json out.json

Size, as OSU's: reduce-scatter, the bytes of each rank's input (p equal blocks, as
MPI_Reduce_scatter_block); all-gather, the bytes each rank sends. At each size the MPI
library's own (Reduce_scatter_block / Allgather) and zipcoll's are warmed up, then timed
in turn, ten calls each, on the same buffers; speedup = native / zipcoll. busbw as
nccl-tests defines it for these collectives: algbw * (p-1)/p, with algbw = S / time and S the whole vector (reduce-scatter:
the input; all-gather: the output, p x size).
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
from zipcoll.bench.allreduce_bench import (OPS, Check, Measured, _check_text, add_data_options,
                                           add_osu_options, input_data, load_codec, mpi_library,
                                           print_table, relative_l2, table_columns,
                                           validation_status)

KINDS = {"reduce-scatter": "Reduce_scatter_block", "allgather": "Allgather"}


def _algorithm(name: str) -> str:
    """An algorithm name of zipcoll's reduce-scatter / all-gather table (argparse type)."""
    from zipcoll.collectives.sharded import is_sharded_algorithm

    if name != "auto" and not is_sharded_algorithm(name):
        raise argparse.ArgumentTypeError(f"unknown algorithm {name!r}; expected one of "
                                         f"{', '.join(zipcoll.SHARDED_ALGORITHMS)}")
    return name


def build_parser(kind: str) -> argparse.ArgumentParser:
    """OSU's options (-m -i -x -f -c) plus zipcoll's."""
    p = argparse.ArgumentParser(prog=f"zipcoll-bench {kind}", description=__doc__.split("\n")[0])
    add_osu_options(p, "sizes in bytes (see Size above), powers of two from MIN to MAX")
    p.add_argument("-a", "--algorithm", default="ring", type=_algorithm,
                   help=f"one of {', '.join(zipcoll.SHARDED_ALGORITHMS)} "
                        "(hierarchical:halving too)")
    p.add_argument("--codec", default=None, help="codec spec, e.g. int8 or fp16")
    add_data_options(p, op=kind == "reduce-scatter")
    p.add_argument("--json", default=None, metavar="PATH", help="write all rows as JSON")
    return p


@dataclass
class Row(Measured):
    """Everything measured at one size."""

    whole: int  # S of busbw: bytes of the whole vector
    wire_bytes: int | None = None
    check: Check | None = None

    @property
    def algbw(self) -> float:
        return self.whole / self.zipcoll.avg / 1e9 if self.zipcoll.avg else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * (self.ranks - 1) / self.ranks


class Bench:
    """One run: the options, the communicator, the two calls it times at each size."""

    def __init__(self, kind: str, args: argparse.Namespace, comm: MPI.Intracomm):
        self.kind, self.args, self.comm = kind, args, comm
        self.dtype = np.dtype(args.dtype)
        self.op = getattr(args, "op", "sum")
        self.codec = load_codec(args.codec)
        self.p = comm.Get_size()

    def sizes(self) -> list[int]:
        """Sizes in bytes: whole elements, and for reduce-scatter p whole blocks."""
        unit = self.dtype.itemsize * (self.p if self.kind == "reduce-scatter" else 1)
        lo, hi = timing.parse_range(self.args.message_size or f"{unit}:1M", default_min=unit)
        return sorted({s - s % unit for s in timing.message_sizes(lo, hi) if s >= unit})

    def calls(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Callable, Callable]:
        """(input, native's result, zipcoll's result, native call, zipcoll call)."""
        rank = self.comm.Get_rank()
        send = input_data(count, self.dtype, self.op, rank, self.p, self.args.seed)
        out = count // self.p if self.kind == "reduce-scatter" else count * self.p
        native_out, ours_out = np.ones(out, self.dtype), np.ones(out, self.dtype)
        kwargs = dict(comm=self.comm, algorithm=self.args.algorithm, codec=self.args.codec)
        if self.kind == "reduce-scatter":
            op = OPS[self.op]
            native = lambda: self.comm.Reduce_scatter_block(send, native_out, op)  # noqa: E731
            ours = lambda: zipcoll.reduce_scatter(send, ours_out, op=op, **kwargs)  # noqa: E731
        else:
            native = lambda: self.comm.Allgather(send, native_out)  # noqa: E731
            ours = lambda: zipcoll.allgather(send, ours_out, **kwargs)  # noqa: E731
        return send, native_out, ours_out, native, ours

    def measure(self, size: int) -> Row:
        count = size // self.dtype.itemsize
        send, native_out, ours_out, native, ours = self.calls(count)
        iterations, warmup = timing.iteration_counts(size, self.args.iterations, self.args.warmup)
        t_native, t_ours = timing.time_in_turn([native, ours], iterations, warmup, self.comm)
        whole = size if self.kind == "reduce-scatter" else size * self.p
        wire = None if self.codec is None else int(self.codec.wire_bytes(count, self.dtype))
        row = Row(size, count, iterations, warmup, timing.across_ranks(t_ours, self.comm),
                  timing.across_ranks(t_native, self.comm), self.p, whole, wire)
        if self.args.validate or self.codec is not None:
            ours_out.fill(0)  # a call that writes nothing cannot pass on the last result
            ours()
            row.check = self.validate(send, native_out, ours_out)
        return row

    def validate(self, send: np.ndarray, exact: np.ndarray, ours: np.ndarray) -> Check:
        """Against the MPI library's result; ranks agree on the verdict."""
        lossy = self.codec is not None and not getattr(self.codec, "lossless", False)
        if self.kind == "allgather":
            check = self._allgather_check(send, exact, ours, lossy)
        else:
            check = self._reduce_scatter_check(send, exact, ours, lossy)
        if self.comm.allreduce(int(check.ok is False), op=MPI.MAX):
            check.ok = False
        return check

    def _allgather_check(self, send: np.ndarray, exact: np.ndarray, ours: np.ndarray,
                         lossy: bool) -> Check:
        """Lossless: equal. Lossy: each block within the codec's bound of one encode, the
        own block exact, every block decoded alike by every rank but its owner."""
        blocks = ours.reshape(self.p, -1)
        rank = self.comm.Get_rank()
        crcs = [zlib.crc32(memoryview(np.ascontiguousarray(b)).cast("B")) for b in blocks]
        everyone = self.comm.allgather(crcs)
        alike = all(len({row[j] for k, row in enumerate(everyone) if k != j}) <= 1
                    for j in range(self.p))
        if not lossy:
            return Check(bool(np.array_equal(ours, exact)) and alike)
        error = np.abs(ours.astype(np.float64) - exact)
        rel = relative_l2(error, exact)
        bounds = np.concatenate([np.asarray(self.codec.error_bound(b), np.float64)
                                 for b in exact.reshape(self.p, -1)])
        finite = bool(np.all(np.isfinite(bounds)))
        within = bool(np.all(error <= bounds * 1.01 + 1e-30)) if finite else None
        own_exact = bool(np.array_equal(blocks[rank], send))
        ok = None if within is None else within and own_exact and alike
        return Check(ok, rel, relative_l2(bounds, exact) if finite else None)

    def _reduce_scatter_check(self, send: np.ndarray, exact: np.ndarray, ours: np.ndarray,
                              lossy: bool) -> Check:
        """Lossless: integers and exact ops equal, floats within 2p eps sum|x|. Lossy: within
        p encodes of partial sums no larger than sum|x| (a loose bound)."""
        magnitude = np.empty(exact.size, np.float64)
        self.comm.Reduce_scatter_block(np.abs(send).astype(np.float64), magnitude, MPI.SUM)
        if not lossy and (self.op not in ("sum", "prod") or self.dtype.kind in "biu"):
            return Check(bool(np.array_equal(ours, exact)))
        error = np.abs(ours.astype(np.float64) - exact)
        rel = relative_l2(error, exact)
        if not lossy:
            return Check(bool(np.all(error <= 2 * self.p * np.finfo(self.dtype).eps
                                     * magnitude)), rel)
        bound = self.p * np.asarray(self.codec.error_bound(magnitude.astype(self.dtype)),
                                    np.float64)
        if not np.all(np.isfinite(bound)):
            return Check(None, rel)
        return Check(bool(np.all(error <= bound * 1.01 + 1e-30)), rel, relative_l2(bound, exact))


def header_lines(bench: Bench) -> list[str]:
    a, p = bench.args, bench.p
    title = "Reduce_scatter" if bench.kind == "reduce-scatter" else "Allgather"
    return [
        f"# OSU MPI {title} Latency Test (zipcoll-bench {bench.kind}, zipcoll {zipcoll.__version__})",
        f"# zipcoll algorithm: {a.algorithm}, codec: {a.codec or 'none'}, ranks: {p}, "
        f"dtype: {bench.dtype.name}" + (f", op: {bench.op}" if bench.kind == "reduce-scatter"
                                        else ""),
        f"# MPI: {mpi_library()}; native = MPI's {KINDS[bench.kind]}, same buffers, same run",
        f"# Timing: {timing.TIMING_METHOD}; {timing.IN_TURN_METHOD}",
        "# Size: " + ("bytes of each rank's input (p equal blocks)" if bench.kind ==
                      "reduce-scatter" else "bytes each rank sends")
        + "; algbw = S/time, S the whole vector; busbw = algbw*(p-1)/p (nccl-tests)",
    ] + (["# Wire(B): one encoded message of Size bytes; Rel Error: ||zipcoll - native|| / "
          "||native|| (L2, rank 0's result); Bound: the codec's, likewise"]
         if a.codec else [])


def main_for(kind: str, argv: list[str] | None = None) -> int:
    """Run the benchmark; rank 0 prints. Exit status 1 if any size failed validation."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(kind).parse_args(argv)
    comm = MPI.COMM_WORLD
    bench = Bench(kind, args, comm)
    root = comm.Get_rank() == 0
    cols = table_columns(args.full, args.codec is not None, args.validate, bound=True)
    rows = print_table(bench, header_lines(bench), cols, root)
    if root and args.json:
        _write_json(args.json, kind, bench, argv, rows)
    return validation_status(args.validate, rows, root)


def _write_json(path: str, kind: str, bench: Bench, argv: list[str], rows: list[Row]) -> None:
    record: dict[str, Any] = {
        "benchmark": f"zipcoll-bench {kind}", "command": " ".join(["zipcoll-bench", kind, *argv]),
        "ranks": bench.p, "algorithm": bench.args.algorithm, "codec": bench.args.codec,
        "dtype": bench.dtype.name, "mpi_library": mpi_library(), "zipcoll": zipcoll.__version__,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(), "timing": timing.TIMING_METHOD,
        "rows": [{"size": r.size, "avg_us": r.zipcoll.avg * 1e6, "min_us": r.zipcoll.min * 1e6,
                  "max_us": r.zipcoll.max * 1e6, "native_avg_us": r.native.avg * 1e6,
                  "algbw_gbs": r.algbw, "busbw_gbs": r.busbw, "speedup": r.speedup,
                  "wire_bytes": r.wire_bytes, "compression_ratio": r.ratio,
                  "rel_error": r.check.rel_error if r.check else None,
                  "error_bound": r.check.bound if r.check else None,
                  "validation": _check_text(r) if r.check else None,
                  "iterations": r.iterations} for r in rows],
    }
    with open(path, "w") as out:
        json.dump(record, out, indent=1)
        out.write("\n")


def main_reduce_scatter(argv: list[str] | None = None) -> int:
    return main_for("reduce-scatter", argv)


def main_allgather(argv: list[str] | None = None) -> int:
    return main_for("allgather", argv)

"""The parts of benchmarks/gpu_check.sh: the environment, codec throughput on the device,
the all-reduce of device buffers, NCCL's all-reduce on the same buffers, and the table.

    python benchmarks/gpu_check.py env --json env.json
    python benchmarks/gpu_check.py codecs --sizes 64M,256M --json codecs.json
    mpiexec -n 2 python benchmarks/gpu_check.py allreduce --sizes 64M --json allreduce.json
    mpiexec -n 2 python benchmarks/gpu_check.py nccl --sizes 64M --json nccl.json
    python benchmarks/gpu_check.py table DIR [--out table.txt]

Device arrays are Numba's (`numba.cuda`, which zipcoll's CUDA kernels take) for the codecs
and CuPy's for the all-reduce. With NUMBA_ENABLE_CUDASIM=1 the codecs run in Numba's CUDA
simulator on host memory (how CI runs this script, at tiny sizes: the figures then mean
nothing), the all-reduce takes the simulator's arrays (host memory) when CuPy is missing,
and NCCL's row says "skipped: no GPU".

Every case is tried on its own: one that raises becomes a row "failed: <error>" and the
others still run. Each part writes its JSON after every row, so a part that the shell's
timeout ends keeps the rows it made. Ranks share the GPUs round-robin (2 ranks on one GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

CODECS = ["fp16", "bf16", "int8", "int4", "int2", "qsgd", "terngrad", "sign",
          "topk:ratio=0.01", "randomk:ratio=0.01", "threshold:tau=2.5"]
ALLREDUCE_CASES = "native,ring,ring+int8,ring+sign"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
PARTS = ["env", "tests", "codecs", "allreduce", "nccl"]  # the shell's parts, in its order


def nbytes(text: str) -> int:
    """"64M" -> 67108864."""
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def median_seconds(fn, sync, iterations: int) -> float:
    """Median wall time of fn() (one untimed run first), `sync` waiting for the device."""
    fn()
    sync()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def error_text(error: BaseException) -> str:
    """One line naming an exception: what a "failed: ..." row shows."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:300]


class Rows:
    """A part's rows, written to `path` (JSON) after each one, printed as they come."""

    def __init__(self, path: str | None, show: bool = True):
        self.path, self.show, self.rows = path, show, []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.show:
            print(line(row), flush=True)
            if self.path:
                with open(self.path, "w") as out:
                    json.dump(self.rows, out, indent=1)


# -- the environment ----------------------------------------------------------------------

def simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def gpu_count() -> int:
    """GPUs the CUDA driver sees (0 under the simulator, or without a driver)."""
    if simulated():
        return 0
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable driver is no GPU
        return 0


def _nvidia_smi() -> str:
    query = ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
             "--format=csv,noheader"]
    try:
        return "; ".join(subprocess.run(query, capture_output=True, text=True, timeout=20,
                                        check=True).stdout.strip().splitlines())
    except (OSError, subprocess.SubprocessError) as error:
        return f"unavailable ({error_text(error)})"


def _cuda_versions() -> str:
    """The CUDA driver's and runtime's versions, as Numba and CuPy see them."""
    if simulated():
        return "none (CUDA simulator)"
    from numba import cuda
    from numba.cuda.cudadrv.driver import driver

    parts = [f"driver API {'.'.join(map(str, driver.get_version()))}",
             f"runtime {'.'.join(map(str, cuda.runtime.get_version()))} (numba)"]
    try:
        import cupy

        parts.append(f"runtime {cupy.cuda.runtime.runtimeGetVersion()} (cupy)")
    except ImportError:
        pass
    return ", ".join(parts)


def _torch_line() -> str:
    import torch

    text = f"{torch.__version__} (CUDA {torch.version.cuda or 'none'}"
    if torch.cuda.is_available():
        version = torch.cuda.nccl.version()  # a tuple, or one int in older torch
        text += f", NCCL {'.'.join(map(str, version)) if isinstance(version, tuple) else version}"
    return text + ")"


def environment() -> list[tuple[str, str]]:
    """(item, value) of what the check runs on; an item that cannot be read says why."""
    from zipcoll.info import report

    items: list[tuple[str, Callable[[], str]]] = [
        ("nvidia-smi", _nvidia_smi),
        ("CUDA", _cuda_versions),
        ("torch", _torch_line),
    ]
    lines = []
    for item, read in items:
        try:
            lines.append((item, read()))
        except Exception as error:  # noqa: BLE001 - the environment is reported, not checked
            lines.append((item, f"unknown ({error_text(error)})"))
    try:
        lines += [(item, value) for item, value in report()
                  if item not in ("torch", "algorithms", "codecs", "kernel threads")]
    except Exception as error:  # noqa: BLE001
        lines.append(("zipcoll-info", f"failed ({error_text(error)})"))
    return lines


def env(args) -> None:
    rows = Rows(args.json)
    for item, value in environment():
        rows.add({"part": "env", "item": item, "value": value})


# -- device arrays ------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceArrays:
    """How to make device arrays and wait for the device: CuPy's, or Numba's."""

    name: str
    make: Callable[[np.ndarray], Any]
    sync: Callable[[], None]


def numba_arrays() -> DeviceArrays:
    from numba import cuda

    return DeviceArrays("numba" + " (simulator)" * simulated(), cuda.to_device,
                        cuda.synchronize)


def device_arrays() -> DeviceArrays:
    """CuPy's if it imports (waiting for the whole device: zipcoll copies on a stream of
    its own), else Numba's."""
    try:
        import cupy
    except ImportError:
        return numba_arrays()
    return DeviceArrays("cupy", cupy.asarray, cupy.cuda.runtime.deviceSynchronize)


def use_gpu_of(comm) -> int | None:
    """Make this rank's GPU current (local rank modulo the GPUs) for Numba and CuPy; its
    index, or None without a GPU."""
    count = gpu_count()
    if count == 0:
        return None
    from mpi4py import MPI
    from numba import cuda

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    index = local.Get_rank() % count
    local.Free()
    cuda.select_device(index)
    try:
        import cupy

        cupy.cuda.Device(index).use()
    except ImportError:
        pass
    return index


# -- codecs -------------------------------------------------------------------------------

def codecs(args) -> None:
    """encode and decode_add GB/s of each codec against a device-to-device copy."""
    from numba import cuda

    from zipcoll.codecs import get_codec

    rows = Rows(args.json)
    for size in args.sizes:
        try:
            host = np.random.default_rng(0).standard_normal(size // 4).astype(np.float32)
            x, acc, dst = cuda.to_device(host), cuda.to_device(host), cuda.device_array_like(host)
            copy_s = median_seconds(lambda: dst.copy_to_device(x), cuda.synchronize,
                                    args.iterations)
        except Exception as error:  # noqa: BLE001 - the size's row says why
            rows.add({"part": "codecs", "bytes": size, "codec": "copy",
                      "failed": error_text(error)})
            continue
        for spec in args.codec or CODECS:
            row = {"part": "codecs", "bytes": size, "codec": spec}
            try:
                row.update(_codec_figures(get_codec(spec), x, acc, copy_s, size, args.iterations))
            except Exception as error:  # noqa: BLE001
                row["failed"] = error_text(error)
            rows.add(row)


def _codec_figures(codec, x, acc, copy_s: float, size: int, iterations: int) -> dict:
    from numba import cuda

    out = cuda.device_array(codec.wire_bytes(x.size, x.dtype), np.uint8)
    payload = codec.encode(x, out=out)
    encode_s = median_seconds(lambda: codec.encode(x, out=out), cuda.synchronize, iterations)
    add_s = median_seconds(lambda: codec.decode_add(payload, acc), cuda.synchronize,
                           iterations)
    return {"copy_GBps": size / copy_s / 1e9, "encode_GBps": size / encode_s / 1e9,
            "decode_add_GBps": size / add_s / 1e9,
            "encode_vs_copy": copy_s / encode_s, "decode_add_vs_copy": copy_s / add_s}


# -- collectives on device buffers --------------------------------------------------------

# How device data reaches MPI: ZIPCOLL_CUDA_AWARE and the staging chunk size of each mode.
# "whole" stages a lossless message in one chunk (one copy each way, no overlap), to set
# beside "staged" (chunks of the default rule, copies overlapping the all-reduce).
MODES = {"staged": ("0", None), "whole": ("0", "message"), "direct": ("1", None)}


def _set_mode(mode: str, size: int) -> None:
    """The mode's settings (None: the caller's ZIPCOLL_STAGING_CHUNK_BYTES, for "staged")."""
    import zipcoll

    aware, chunk = MODES[mode]
    zipcoll.configure(cuda_aware=aware, staging_chunk_bytes=None if chunk is None else size)


def rank_data(rank: int, size: int) -> np.ndarray:
    """The float32 vector rank `rank` all-reduces (zipcoll's and NCCL's alike)."""
    return np.random.default_rng(rank).standard_normal(size // 4).astype(np.float32)


def expected_sum(ranks: int, size: int) -> np.ndarray:
    return sum(rank_data(r, size).astype(np.float64) for r in range(ranks))


def wrong(result: np.ndarray, expected: np.ndarray) -> str | None:
    """Why a lossless all-reduce's result is wrong, or None (float32 sums: 1e-4 relative)."""
    error = np.max(np.abs(result - expected)) / max(1.0, float(np.max(np.abs(expected))))
    return None if error <= 1e-4 else f"WRONG: max error {error:.2e} of the largest sum"


def measured(comm, call, sync, iterations: int, size: int) -> dict:
    """Seconds (the slowest rank's median) and bus GB/s of `call`, as row fields."""
    from mpi4py import MPI

    comm.Barrier()
    seconds = comm.allreduce(median_seconds(call, sync, iterations), MPI.MAX)
    return {"seconds": seconds,
            "bus_GBps": 2 * (comm.size - 1) / comm.size * size / seconds / 1e9}


def agreed(comm, error: str | None) -> str | None:
    """The first rank's error, on every rank (each case ends on all ranks alike)."""
    return next((e for e in comm.allgather(error) if e), None)


def allreduce(args) -> None:
    """zipcoll.allreduce of device arrays: seconds and bus GB/s, staged (lossless: in
    chunks, and whole) and (if MPI is CUDA-aware) direct, for each algorithm and codec.
    A lossless result is checked against the sum computed on the host."""
    from mpi4py import MPI

    import zipcoll
    from zipcoll.transport import cuda_awareness

    comm = MPI.COMM_WORLD
    use_gpu_of(comm)
    arrays = device_arrays()
    rows = Rows(args.json, show=comm.rank == 0)
    aware, why = cuda_awareness()
    for size in args.sizes:
        base = {"part": "allreduce", "bytes": size, "ranks": comm.size}
        expected = expected_sum(comm.size, size)
        send = arrays.make(rank_data(comm.rank, size))
        recv = arrays.make(np.zeros(size // 4, np.float32))
        for mode in MODES:
            if mode == "direct" and not aware:
                rows.add(dict(base, mode=mode, algorithm="*", codec="*",
                              skipped=f"MPI is not CUDA-aware ({why})"))
                continue
            _set_mode(mode, size)
            for algorithm, codec in args.cases:
                if mode == "whole" and codec is not None:
                    continue  # codecs are staged hop by hop, not in chunks: as "staged"
                row = dict(base, mode=mode, algorithm=algorithm, codec=codec or "-")
                row.update(_allreduce_case(comm, arrays, send, recv, algorithm, codec,
                                           expected, args.iterations, size))
                rows.add(row)
    zipcoll.configure(cuda_aware=None, staging_chunk_bytes=None)
    # reduce-scatter and all-gather on device buffers: a part like this one, once they exist


def _allreduce_case(comm, arrays, send, recv, algorithm, codec, expected, iterations,
                    size) -> dict:
    import zipcoll

    def call():
        zipcoll.allreduce(send, recv, comm=comm, algorithm=algorithm, codec=codec)

    error = None
    try:
        call()
        arrays.sync()
        if codec is None:
            error = wrong(_to_host(recv), expected)
    except Exception as e:  # noqa: BLE001 - the case's row says why
        error = error_text(e)
    error = agreed(comm, error)
    if error:
        return {"failed": error}
    try:
        return measured(comm, call, arrays.sync, iterations, size)
    except Exception as e:  # noqa: BLE001
        return {"failed": error_text(e)}


def _to_host(array) -> np.ndarray:
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    return array.get() if hasattr(array, "get") else np.asarray(array)


# -- NCCL ---------------------------------------------------------------------------------

def nccl_unavailable(comm) -> str | None:
    """Why NCCL's all-reduce cannot run here, or None."""
    gpus = gpu_count()
    if gpus == 0:
        return "no GPU"
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return "torch not installed (pip install torch: a CUDA build)"
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} has no CUDA or no NCCL"
    if gpus < comm.size:  # NCCL refuses two ranks on one GPU ("Duplicate GPU detected")
        return f"NCCL takes one GPU per rank: {gpus} GPU(s) for {comm.size} ranks"
    return None


def nccl(args) -> None:
    """NCCL's all-reduce (torch.distributed, NCCL backend) of the same float32 vectors as
    the all-reduce part: the baseline a GPU user would pick."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = Rows(args.json, show=comm.rank == 0)
    base = {"part": "nccl", "ranks": comm.size, "mode": "device", "algorithm": "nccl",
            "codec": "-"}
    reason = agreed(comm, nccl_unavailable(comm))
    if reason:
        rows.add(dict(base, bytes=args.sizes[0], skipped=reason))
        return
    import torch
    import torch.distributed as dist

    from zipcoll.torch import init_process_group

    try:
        torch.cuda.set_device(use_gpu_of(comm))
        init_process_group(comm, backend="nccl")
    except Exception as error:  # noqa: BLE001
        rows.add(dict(base, bytes=args.sizes[0], failed=error_text(error)))
        return
    for size in args.sizes:
        row = dict(base, bytes=size)
        try:
            tensor = torch.from_numpy(rank_data(comm.rank, size)).cuda()
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
            error = wrong(tensor.cpu().numpy(), expected_sum(comm.size, size))
            # in place: each timed call sums the last one's sums (7 calls: x128, finite)
            row.update({"failed": error} if error else measured(
                comm, lambda: dist.all_reduce(tensor), torch.cuda.synchronize,
                args.iterations, size))
        except Exception as e:  # noqa: BLE001
            row["failed"] = error_text(e)
        rows.add(row)
    dist.destroy_process_group()


# -- the table ----------------------------------------------------------------------------

def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def line(row: dict) -> str:
    """One row of the table: figures, or "skipped: ..." / "failed: ...", or an env item."""
    part = row["part"]
    if part == "env":
        return f"env   {row['item'] + ':':<17} {row['value']}"
    if part == "codecs":
        head = f"codec {row['codec']:<20} {_size(row['bytes']):>8}  "
        figures = (lambda: f"encode {row['encode_GBps']:8.2f} GB/s ({row['encode_vs_copy']:6.1%} "
                   f"of copy)  decode_add {row['decode_add_GBps']:8.2f} GB/s "
                   f"({row['decode_add_vs_copy']:6.1%})  copy {row['copy_GBps']:8.2f} GB/s")
    elif part in ("allreduce", "nccl"):
        head = (f"allreduce {row['algorithm']:<13} {row['codec']:<6} {row['mode']:<6} "
                f"{row['ranks']} ranks {_size(row['bytes']):>8}  ")
        figures = (lambda: f"{row['seconds'] * 1e3:9.2f} ms  bus {row['bus_GBps']:7.2f} GB/s")
    else:  # "part": one that failed as a whole (the shell's record)
        return f"{row['name']} failed: {row['failed']}"
    for outcome in ("skipped", "failed"):
        if outcome in row:
            return head + f"{outcome}: {row[outcome]}"
    return head + figures()


def part_failures(directory: str) -> list[dict]:
    """A row for each part the shell ran that exited non-zero (parts.jsonl), naming the
    timeout or the last line of its log."""
    path = os.path.join(directory, "parts.jsonl")
    rows = []
    for record in map(json.loads, open(path) if os.path.exists(path) else []):
        if record["rc"] == 0:
            continue
        if record["rc"] in (124, 137):
            why = f"timed out after {record['limit']} s"
        else:
            log = os.path.join(directory, record["part"] + ".log")
            last = [text.strip() for text in open(log, errors="replace") if text.strip()] \
                if os.path.exists(log) else []
            why = f"exit {record['rc']}" + (f": {last[-1][:300]}" if last else "")
        rows.append({"part": "part", "name": record["part"], "failed": why})
    return rows


def table(args) -> str:
    rows = []
    for part in PARTS:
        path = os.path.join(args.dir, part + ".json")
        rows += json.load(open(path)) if os.path.exists(path) else []
    lines = ["# zipcoll GPU check: " + (" ".join(sys.argv) if args.command is None
                                         else args.command)]
    lines += [line(row) for row in rows + part_failures(args.dir)]
    lines += _tests_summary(args.dir) + _int8_verdict(rows) + _nccl_verdict(rows)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)
    return text


def _tests_summary(directory: str) -> list[str]:
    log = os.path.join(directory, "tests.log")
    if not os.path.exists(log):
        return []
    summary = [text.strip() for text in open(log, errors="replace")
               if " passed" in text or " failed" in text or " error" in text]
    return [f"tests: {summary[-1] if summary else 'no summary line (see tests.log)'}"]


def _int8_verdict(rows: list[dict]) -> list[str]:
    """The target: int8 encode and decode_add at >= 50% of a device copy at 64 MiB."""
    for row in rows:
        if row["part"] == "codecs" and row["codec"] == "int8" and row["bytes"] == 64 << 20 \
                and "encode_vs_copy" in row:
            low = min(row["encode_vs_copy"], row["decode_add_vs_copy"])
            return [f"target: int8 encode and decode_add >= 50% of a device copy at 64 MiB: "
                    f"{'met' if low >= 0.5 else 'MISSED'} (the lower is {low:.0%})"]
    return ["target: int8 at 64 MiB not measured in this run"]


def _nccl_verdict(rows: list[dict]) -> list[str]:
    """The target: zipcoll's fastest lossless device all-reduce within 1.5x of NCCL's at
    64 MiB."""
    def timed(part, size):
        return [r for r in rows if r["part"] == part and r["bytes"] == size and "seconds" in r]

    size = 64 << 20
    nccl_rows = timed("nccl", size)
    ours = [r for r in timed("allreduce", size) if r["codec"] == "-"]
    if not nccl_rows or not ours:
        return ["target: lossless all-reduce within 1.5x of NCCL at 64 MiB: not measured "
                "in this run (" + ("no NCCL row" if not nccl_rows else "no zipcoll row") + ")"]
    best = min(ours, key=lambda r: r["seconds"])
    ratio = best["seconds"] / nccl_rows[0]["seconds"]
    return [f"target: lossless all-reduce within 1.5x of NCCL at 64 MiB: "
            f"{'met' if ratio <= 1.5 else 'MISSED'} ({best['algorithm']} {best['mode']}: "
            f"{ratio:.2f}x NCCL's time)"]


# -- command line -------------------------------------------------------------------------

def _cases(text: str) -> list[tuple[str, str | None]]:
    """"ring,ring+int8" -> [("ring", None), ("ring", "int8")]."""
    return [(a, c or None) for a, _, c in (item.partition("+") for item in text.split(","))]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="part", required=True)
    sub.add_parser("env").add_argument("--json", help="write the rows here")
    sub.add_parser("gpus", help="print the number of GPUs the CUDA driver sees")
    for name in ("codecs", "allreduce", "nccl"):
        s = sub.add_parser(name)
        s.add_argument("--sizes", type=lambda t: [nbytes(x) for x in t.split(",")],
                       default=[64 << 20])
        s.add_argument("-i", "--iterations", type=int, default=5)
        s.add_argument("--json", help="write the rows here")
    sub.choices["codecs"].add_argument("--codec", action="append")
    sub.choices["allreduce"].add_argument("--cases", type=_cases,
                                          default=_cases(ALLREDUCE_CASES))
    t = sub.add_parser("table")
    t.add_argument("dir", help="the directory of the parts' JSON and logs")
    t.add_argument("--out")
    t.add_argument("--command", help="the command to name in the table's header")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.part == "table":
        print(table(args), end="")
    elif args.part == "gpus":
        print(gpu_count())
    else:
        {"env": env, "codecs": codecs, "allreduce": allreduce, "nccl": nccl}[args.part](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

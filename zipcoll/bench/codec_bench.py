"""zipcoll-bench codecs: encode / decode / decode_add throughput of each codec.

    zipcoll-bench codecs -m 1M:256M
    zipcoll-bench codecs -m 64M:64M --codec int8,int4 --json

Throughput is GB/s of *input* (float elements x itemsize / time). A plain memory copy
of the same bytes (``numpy.copyto``), timed in the same run, is the ceiling each codec
is compared with. Buffers are allocated and touched before timing; each figure is the
median of ``-i`` timed iterations after ``-x`` warm-up ones (at least one, which also
compiles the kernels). Also printed: wire ratio (input bytes / payload bytes) and the
relative error ||decode(encode(x)) - x|| / ||x|| on Gaussian data. ``ef_enc`` is error
feedback's step (``encode_with_residual``: encode x + residual, keep what was lost) as
the codec runs it, ``ef_2pass`` the same step done as encode then decode, for comparison.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from zipcoll.bench import timing

DEFAULT_CODECS = ["none", "fp16", "bf16", "int8", "int4", "int2", "int8:stochastic=true",
                  "qsgd", "terngrad", "sign", "topk:ratio=0.01", "randomk:ratio=0.01",
                  "threshold:tau=2.5"]


def sizes(spec: str) -> list[int]:
    """Powers of two from MIN to MAX of ``"MIN:MAX"`` (bytes)."""
    lo, _, hi = spec.partition(":")
    lo, hi = timing.parse_size(lo), timing.parse_size(hi or lo)
    out, s = [], 1 << max(lo - 1, 0).bit_length()
    while s <= hi:
        out.append(s)
        s <<= 1
    return out or [lo]


def timed(fn, iterations: int, warmup: int) -> float:
    """Median seconds of ``fn()`` over ``iterations`` runs after ``warmup`` ones."""
    for _ in range(max(warmup, 1)):
        fn()
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(codec, x: np.ndarray, iterations: int, warmup: int, copy_s: float) -> dict:
    """One row: throughputs, fraction of the copy, wire ratio and relative error."""
    from zipcoll.codecs import Codec

    n = x.size
    out = np.zeros(codec.wire_bytes(n, x.dtype), np.uint8)  # touched before timing
    payload = codec.encode(x, out=out)
    y = np.zeros_like(x)
    acc = np.zeros_like(x)
    encode_s = timed(lambda: codec.encode(x, out=out), iterations, warmup)
    decode_s = timed(lambda: codec.decode(payload, out=y), iterations, warmup)
    add_s = timed(lambda: codec.decode_add(payload, acc), iterations, warmup)
    residual = np.zeros_like(x)
    fused_s = timed(lambda: codec.encode_with_residual(x, residual, out=out), iterations, warmup)
    two_pass_s = timed(lambda: Codec.encode_with_residual(codec, x, residual, out=out),
                       iterations, warmup)
    codec.decode(payload, out=y)
    finite = np.isfinite(y)
    gbs = lambda s: x.nbytes / s / 1e9  # noqa: E731
    return {
        "config": codec.get_config(), "spec": None, "bytes": x.nbytes, "n": n,
        "encode_GBps": gbs(encode_s), "decode_GBps": gbs(decode_s),
        "decode_add_GBps": gbs(add_s), "memcpy_GBps": gbs(copy_s),
        "ef_encode_GBps": gbs(fused_s), "ef_two_pass_GBps": gbs(two_pass_s),
        "encode_vs_copy": copy_s / encode_s, "decode_add_vs_copy": copy_s / add_s,
        "wire_bytes": int(payload.size), "wire_ratio": x.nbytes / payload.size,
        "rel_error": float(np.linalg.norm((y - x)[finite]) / np.linalg.norm(x))
        if finite.all() else float("nan"),
    }


def parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="zipcoll-bench codecs", description=__doc__.split("\n")[0])
    p.add_argument("-m", "--message-size", default="1M:64M", help="MIN:MAX bytes of input, e.g. 1M:256M")
    p.add_argument("--codec", action="append", help="codec specs, comma-separated or repeated")
    p.add_argument("-i", "--iterations", type=int, default=5, help="timed iterations")
    p.add_argument("-x", "--warmup", type=int, default=1, help="untimed iterations")
    p.add_argument("--dtype", default="float32", choices=["float16", "float32", "float64"])
    p.add_argument("--threads", type=int, help="numba threads (default: all cores)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table (or JSON)."""
    args = parser().parse_args(argv)
    import numba

    from zipcoll.codecs import get_codec

    if args.threads:
        numba.set_num_threads(args.threads)
    specs = [s for group in (args.codec or [",".join(DEFAULT_CODECS)]) for s in _split(group)]
    codecs = [(spec, get_codec(spec)) for spec in specs]
    rows = []
    if not args.json:
        print("# zipcoll codec benchmark: GB/s of input, median of %d iterations" % args.iterations)
        print("# %s" % json.dumps(timing.machine()))
        print(f"{'# Size':>10} {'codec':<22} {'encode':>8} {'decode':>8} {'dec_add':>8} "
              f"{'memcpy':>8} {'enc/cp':>7} {'add/cp':>7} {'ratio':>7} {'rel_err':>9} "
              f"{'ef_enc':>8} {'ef_2pass':>8}")
    for nbytes in sizes(args.message_size):
        x = np.random.default_rng(0).standard_normal(nbytes // np.dtype(args.dtype).itemsize)
        x = x.astype(args.dtype)
        dst = np.zeros_like(x)
        for spec, codec in codecs:
            copy_s = timed(lambda: np.copyto(dst, x), args.iterations, args.warmup)
            row = measure(codec, x, args.iterations, args.warmup, copy_s)
            row["spec"] = spec
            rows.append(row)
            if not args.json:
                print(f"{nbytes:>10} {spec:<22} {row['encode_GBps']:8.2f} {row['decode_GBps']:8.2f} "
                      f"{row['decode_add_GBps']:8.2f} {row['memcpy_GBps']:8.2f} "
                      f"{row['encode_vs_copy']:7.0%} {row['decode_add_vs_copy']:7.0%} "
                      f"{row['wire_ratio']:7.2f} {row['rel_error']:9.2e} "
                      f"{row['ef_encode_GBps']:8.2f} {row['ef_two_pass_GBps']:8.2f}", flush=True)
    if args.json:
        json.dump({"command": "zipcoll-bench codecs " + " ".join(argv or sys.argv[1:]),
                   "machine": timing.machine(), "rows": rows}, sys.stdout, indent=1)
        print()
    return 0


def _split(group: str) -> list[str]:
    """Codec specs of a comma list; a comma inside ``a:b=1,c=2`` belongs to the spec."""
    out: list[str] = []
    for part in group.split(","):
        if out and "=" in part and ":" not in part:
            out[-1] += "," + part
        else:
            out.append(part)
    return [s.strip() for s in out if s.strip()]


if __name__ == "__main__":
    sys.exit(main())

"""Seconds one process spends on every codec's first calls, and how many functions Numba compiled.

    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/compile_all.py   # twice: compiles, then loads

Encode, decode, decode_add and (lossy codecs) encode_with_residual of float32 at 1000
and 2**18 elements (the serial and the parallel kernels) for each codec. A warm cache
compiles nothing ("numba:compile" fires only for a real compilation).
"""
import time

from numba.core import event

compiled = []


class _Compiles(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data)

    def on_end(self, ev):
        pass


event.register("numba:compile", _Compiles())

import numpy as np  # noqa: E402

import zipcoll  # noqa: E402

SPECS = ("bf16", "fp16", "int2", "int4", "int8", "none", "qsgd", "randomk:ratio=0.01", "sign",
         "terngrad", "threshold:tau=1.5", "topk:ratio=0.01")

start = time.perf_counter()
for spec in SPECS:
    codec = zipcoll.get_codec(spec)
    for n in (1000, 1 << 18):
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        p = codec.encode(x)
        codec.decode(p)
        codec.decode_add(p, np.zeros_like(x))
        if not codec.lossless:
            codec.encode_with_residual(x, np.zeros_like(x))
print(f"{len(SPECS)} codecs: {time.perf_counter() - start:.2f} s, {len(compiled)} functions compiled")

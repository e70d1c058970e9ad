"""Test helpers: the buffer kinds zipcoll accepts, per-rank data, and result checks.

After mpi4py's test/arrayimpl.py: `KINDS` is a registry of buffer kinds, each making its
own object from a NumPy array and reading one back, so a test body runs once per kind.
`FakeCUDA` is a host array that exposes only `__cuda_array_interface__` (GPU paths
without a GPU); `DLPackOnly` one that exposes only `__dlpack__` (like a torch tensor).

Per-rank data are deterministic (a seed from dtype, count, rank), so any rank can make
every other rank's part, and small enough that SUM and PROD of integers never overflow.
"""
from __future__ import annotations

import array as pyarray
import hashlib
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from zipcoll.collectives import SCHEDULES
from zipcoll.collectives.ops import BY_NAME

# Every dtype MPI can reduce, and which of them each op takes (MPI-4.1, 6.9.2).
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
COMPLEX = ("complex64", "complex128")
DTYPES = ("bool",) + INTS + FLOATS + COMPLEX
OPS = tuple(BY_NAME)


def dtypes_for(op: str) -> list[str]:
    """The dtypes MPI defines `op` on, from zipcoll's own support table."""
    return [d for d in DTYPES if BY_NAME[op].supports(np.dtype(d))]


OP_DTYPE_CASES = [(op, dtype) for op in OPS for dtype in dtypes_for(op)]

# The algorithms that take every op on every dtype (two-level ones have their own tests).
LOSSLESS = ("auto",) + tuple(name for name, s in SCHEDULES.items() if not s.two_level)


# -- per-rank data ----------------------------------------------------------------------

BITWISE = ("max", "min", "band", "bor", "bxor")  # any bits are fine: nothing can overflow


def rank_data(dtype: Any, count: int, rank: int, op: str = "sum") -> np.ndarray:
    """Rank `rank`'s deterministic contribution to an all-reduce of `op` on `dtype`.

    Integers take values in {-1, 0, 1, 2} (unsigned {0, 1, 2, 3}), so SUM and PROD over
    a few ranks stay far from overflow and logical ops see zeros and non-zeros; for the
    bitwise ops and MAX/MIN they span the whole range. Floats are standard normal.
    """
    dtype = np.dtype(dtype)
    seed = [zlib.crc32(f"{dtype.str}/{op}".encode()), count, rank]
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.random(count) < 0.5
    if dtype.kind in "iu":
        if op in BITWISE:
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        values = [-1, 0, 1, 2] if dtype.kind == "i" else [0, 1, 2, 3]
        return rng.choice(np.array(values, dtype=dtype), count)
    if dtype.kind == "c":
        return (rng.standard_normal(count) + 1j * rng.standard_normal(count)).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def all_rank_data(dtype: Any, count: int, size: int, op: str = "sum") -> list[np.ndarray]:
    """Every rank's contribution, made locally."""
    return [rank_data(dtype, count, r, op) for r in range(size)]


# -- checking results -------------------------------------------------------------------

def mismatch(got: Any, ref: np.ndarray, parts: list[np.ndarray], op: str) -> str | None:
    """Why `got` is not the all-reduce `ref` of `parts`, or None when it is.

    Integers, bools and MAX/MIN must match bit for bit; float SUM/PROD within the error
    of reordering p terms: |got - ref| <= 8 eps p * (sum|x_i| or prod|x_i|), elementwise.
    """
    got = np.asarray(got).reshape(-1)
    if got.dtype != ref.dtype or got.size != ref.size:
        return f"got {got.dtype}[{got.size}], expected {ref.dtype}[{ref.size}]"
    if ref.dtype.kind in "biu" or op not in ("sum", "prod"):
        width = ref.dtype.itemsize
        bad = (got.view(np.uint8).reshape(-1, width) != ref.view(np.uint8).reshape(-1, width))
        bad = bad.any(axis=1)
    else:
        stack = np.abs(np.stack(parts).astype(np.complex128 if ref.dtype.kind == "c"
                                             else np.float64))
        scale = stack.sum(axis=0) if op == "sum" else stack.prod(axis=0)
        eps = np.finfo(ref.dtype).eps
        error = np.abs(got.astype(np.complex128) - ref.astype(np.complex128))
        bad = error > 8 * eps * len(parts) * scale
    if not bad.any():
        return None
    where = np.flatnonzero(bad)
    i = where[0]
    return (f"{where.size} of {ref.size} elements differ, first [{i}]: "
            f"got {got[i]!r}, expected {ref[i]!r}")


def expected(comm, x: np.ndarray, op: Any = "sum") -> np.ndarray:
    """The MPI library's own all-reduce of `x` (op: an MPI.Op or a name such as "sum")."""
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=BY_NAME[op].mpi if isinstance(op, str) else op)
    return out


def digest(arr: Any) -> str:
    """A short hash of an array's bytes (to compare results across ranks in one message)."""
    return hashlib.blake2b(np.ascontiguousarray(np.asarray(arr)).view(np.uint8).data,
                           digest_size=8).hexdigest()


def differing_across_ranks(comm, results: dict[str, Any]) -> list[str]:
    """Labels of the results that are not bit-identical on every rank (one allgather)."""
    mine = {label: digest(value) for label, value in results.items()}
    everyone = comm.allgather(mine)
    return [label for label in mine if len({d.get(label) for d in everyone}) > 1]


# -- buffer kinds -----------------------------------------------------------------------

class DLPackOnly:
    """A host array reachable only through DLPack (no buffer protocol), like a torch tensor."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class FakeCUDA:
    """A host array posing as device memory through `__cuda_array_interface__` only."""

    def __init__(self, array: np.ndarray):
        self._array = array

    @property
    def __cuda_array_interface__(self) -> dict:
        face = self._array.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face["strides"], "version": 3, "stream": None}


_TYPECODES = {np.dtype(c): c for c in "bBhHiIlLqQfd"}


@dataclass(frozen=True)
class Kind:
    """One kind of buffer: how to make it from a NumPy array, and which dtypes it holds."""

    name: str
    make: Callable[[np.ndarray], Any]
    supports: Callable[[np.dtype], bool] = lambda dtype: True

    def __repr__(self) -> str:
        return self.name


def _make_pyarray(a: np.ndarray) -> pyarray.array:
    return pyarray.array(_TYPECODES[a.dtype], a.tobytes())


def view(obj: Any) -> np.ndarray:
    """A NumPy view of a buffer of any kind in KINDS (to read results and compare)."""
    if isinstance(obj, DLPackOnly):
        return np.from_dlpack(obj)
    return np.asarray(memoryview(obj)) if not isinstance(obj, np.ndarray) else obj


KINDS = [
    Kind("numpy", np.array),
    Kind("array.array", _make_pyarray, lambda dtype: dtype in _TYPECODES),
    Kind("bytearray", lambda a: bytearray(a.tobytes()), lambda dtype: dtype == np.uint8),
    Kind("memoryview", lambda a: memoryview(a.copy())),
    Kind("dlpack", lambda a: DLPackOnly(a.copy())),
]


# -- compressed all-reduce: error bounds (tests/mpi/test_compressed.py) -------------------

def window_max(a: np.ndarray, radius: int) -> np.ndarray:
    """out[i] = max(a[i - radius : i + radius + 1]) (zero-padded), in O(n log radius)."""
    a = np.asarray(a, np.float64)
    if a.size == 0 or radius <= 0:
        return a.copy()
    width = 2 * radius + 1
    m = np.concatenate([np.zeros(radius), a, np.zeros(radius)])
    span = 1
    while span * 2 <= width:  # m[i] = max(padded[i : i + 2 * span])
        m = np.maximum(m[:-span], m[span:])
        span *= 2
    return np.maximum(m[:a.size], m[width - span:width - span + a.size])


def topology_of(comm, layout):
    """None (the default), or an emulated layout: "2x2nodes" or "2x2grid" (4 ranks only)."""
    import pytest

    import zipcoll

    if layout is None:
        return None
    if comm.size != 4:
        pytest.skip("2 emulated nodes x 2 ranks / a 2 x 2 grid: 4 ranks only")
    if layout == "2x2nodes":
        return zipcoll.Topology.from_comm(comm, ranks_per_node=2)
    return zipcoll.Topology.from_comm(comm, grid=(2, 2))

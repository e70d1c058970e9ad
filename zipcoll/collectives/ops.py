"""Reduction operations: MPI's predefined ops as NumPy/CuPy ufuncs, and which dtypes each takes.

bfloat16 (`ml_dtypes.bfloat16`, which NumPy sees as kind "V") counts as a float: it takes
the ops floats take. MPI has no bfloat16 type, so zipcoll reduces it in float32 (`dispatch`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from mpi4py import MPI


@dataclass(frozen=True)
class ReduceOp:
    """A predefined MPI op: its name, the ufunc name that applies it, the dtype kinds it takes."""

    name: str
    mpi: MPI.Op
    ufunc: str
    kinds: str  # numpy dtype kinds: b bool, i signed, u unsigned, f float, c complex

    def supports(self, dtype: np.dtype) -> bool:
        return kind_of(dtype) in self.kinds

    def reduce_into(self, acc: Any, other: Any, xp: Any = np, first: Any = None) -> None:
        """acc <- first (op) other, element-wise; `first` defaults to acc itself."""
        getattr(xp, self.ufunc)(acc if first is None else first, other, out=acc)


BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def kind_of(dtype: np.dtype) -> str:
    """NumPy's kind letter of `dtype`, with bfloat16 a float ("f")."""
    return "f" if dtype == BFLOAT16 else dtype.kind


# The kinds follow the MPI standard's table of ops x datatype groups (MPI-4.1, 6.9.2).
_OPS = [
    ReduceOp("sum", MPI.SUM, "add", "iufc"),
    ReduceOp("prod", MPI.PROD, "multiply", "iufc"),
    ReduceOp("max", MPI.MAX, "maximum", "iuf"),
    ReduceOp("min", MPI.MIN, "minimum", "iuf"),
    ReduceOp("land", MPI.LAND, "logical_and", "biu"),
    ReduceOp("lor", MPI.LOR, "logical_or", "biu"),
    ReduceOp("lxor", MPI.LXOR, "logical_xor", "biu"),
    ReduceOp("band", MPI.BAND, "bitwise_and", "iu"),
    ReduceOp("bor", MPI.BOR, "bitwise_or", "iu"),
    ReduceOp("bxor", MPI.BXOR, "bitwise_xor", "iu"),
]
BY_NAME = {op.name: op for op in _OPS}
_BY_HANDLE = {op.mpi.handle: op for op in _OPS}
OP_NAMES = tuple(BY_NAME)


def lookup(op: Any) -> ReduceOp | MPI.Op:
    """A ReduceOp for a predefined op or its name; a user-defined MPI.Op is returned as is."""
    if isinstance(op, str):
        try:
            return BY_NAME[op.lower()]
        except KeyError:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OP_NAMES)}") from None
    if isinstance(op, MPI.Op):
        known = _BY_HANDLE.get(op.handle)  # predefined ops are never freed: their handles stay
        if known is not None:
            return known
        if op == MPI.OP_NULL:
            raise ValueError("op is MPI.OP_NULL")
        return op  # user-defined: only the MPI library can apply it
    raise TypeError(f"op must be an MPI.Op or one of {OP_NAMES}, not {type(op).__name__}")


def op_code(op: ReduceOp | MPI.Op) -> int:
    """A number every rank computes alike for the same op (for the agreement check)."""
    if isinstance(op, ReduceOp):
        return OP_NAMES.index(op.name) + 1
    return 100  # user-defined ops cannot be told apart across processes


def check_supported(op: ReduceOp | MPI.Op, dtype: np.dtype) -> None:
    """TypeError when MPI does not define `op` on `dtype`."""
    if isinstance(op, ReduceOp) and not op.supports(dtype):
        raise TypeError(f"op {op.name!r} is not defined for dtype {dtype} (MPI defines it for "
                        f"{_kinds_text(op.kinds)})")


def _kinds_text(kinds: str) -> str:
    names = {"b": "bool", "i": "signed integers", "u": "unsigned integers", "f": "floats",
             "c": "complex"}
    return ", ".join(names[k] for k in kinds)



def native_agrees(op: ReduceOp, dtype: np.dtype) -> bool:
    """Whether the MPI library's own `op` on `dtype` gives the answer zipcoll's schedules give.

    zipcoll reduces with NumPy's ufuncs: integers wrap (as C does), MAX/MIN propagate
    NaN. Float SUM/PROD always agree (within rounding: the order of a sum differs anyway).
    Open MPI 5's vectorised ops differ on two known cases, ruled out here whatever the CPU
    (so that every rank decides alike): 8- and 16-bit integer SUM saturates from 16 resp.
    8 items up, and float MAX/MIN keep whichever operand comes second when one is NaN.
    Anything else is probed once per process (`_probe`, MPI_Reduce_local, no messages).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "fc" and op.name in ("sum", "prod"):
        return True
    if dtype.kind == "f" and op.name in ("max", "min"):
        return False
    if dtype.kind in "iu" and dtype.itemsize <= 2 and op.name == "sum":
        return False
    return _probe(op.name, dtype.str)


# Lengths that run each part of a vectorised op: 512-, 256- and 128-bit loops, and the
# scalar loop of the items left over.
_PROBE_LENGTHS = (1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257, 1031)


@functools.lru_cache(maxsize=None)
def _probe(name: str, dtype_str: str) -> bool:
    """MPI_Reduce_local of `name` on extreme values (both operand orders, every length of
    `_PROBE_LENGTHS`) against NumPy's ufunc; False where any item differs or MPI refuses.
    Local (no message): every rank probes alike, its own copy of the same library."""
    op, dtype = BY_NAME[name], np.dtype(dtype_str)
    a, b = _probe_values(dtype)
    for n in _PROBE_LENGTHS:
        for first, second in ((a[:n], b[:n]), (b[:n], a[:n])):
            expected = second.copy()
            with np.errstate(all="ignore"):
                getattr(np, op.ufunc)(first, second, out=expected)
            got = second.copy()
            try:
                op.mpi.Reduce_local(first, got)
            except Exception:  # noqa: BLE001 - a dtype MPI cannot reduce: keep it off native
                return False
            if not np.array_equal(got, expected, equal_nan=dtype.kind == "f"):
                return False
    return True


def _probe_values(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays whose items pair extremes with extremes (cycles of coprime lengths)."""
    n = _PROBE_LENGTHS[-1]
    if dtype.kind == "b":
        return np.resize([True, False, True], n), np.resize([True, True, False, False, True], n)
    if dtype.kind == "f":
        info = np.finfo(dtype)
        left = [np.nan, 2.0, -3.0, np.inf, info.max, -np.inf, 1.5]
        right = [1.0, np.nan, np.nan, -np.inf, info.max, 2.5]
    else:
        info = np.iinfo(dtype)
        left = [info.max, info.min, info.max - 1, 1, info.max // 2 + 1, 0, 2]
        right = [info.max, info.min + (info.min < 0), 2, info.max, 3]
        if info.min < 0:
            right += [-1, info.min]
    with np.errstate(over="ignore"):
        return np.resize(np.array(left, dtype), n), np.resize(np.array(right, dtype), n)

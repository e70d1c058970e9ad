"""Reduction operations: MPI's predefined ops as NumPy/CuPy ufuncs, and which dtypes each takes.

bfloat16 (`ml_dtypes.bfloat16`, which NumPy sees as kind "V") counts as a float: it takes
the ops floats take. MPI has no bfloat16 type, so zipcoll reduces it in float32 (`dispatch`).
"""
from __future__ import annotations

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
OP_NAMES = tuple(BY_NAME)


def lookup(op: Any) -> ReduceOp | MPI.Op:
    """A ReduceOp for a predefined op or its name; a user-defined MPI.Op is returned as is."""
    if isinstance(op, str):
        try:
            return BY_NAME[op.lower()]
        except KeyError:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OP_NAMES)}") from None
    if isinstance(op, MPI.Op):
        for known in _OPS:
            if op == known.mpi:
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


"""The agreement check: one small Allreduce before data moves, so no rank waits forever.

Each rank states a signature: first whether it rejected its own arguments, then numbers
every rank must agree on (count, dtype, op, ...), then any extra numbers whose maximum
the caller wants. A rank that rejected its arguments raises the reason; every other rank
raises MismatchError; ranks that disagree all raise MismatchError naming the fields.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll.errors import MismatchError
from zipcoll.transport import Transport


def code(text: str) -> int:
    """A number every process computes alike for the same text."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def check_comm(comm: Any) -> MPI.Intracomm:
    """`comm`, if it is a usable intra-communicator; TypeError otherwise."""
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py Intracomm, not {comm!r}")
    return comm


def agree(t: Transport, signature: list[int], fields: tuple[str, ...],
          error: Exception | None, what: str) -> np.ndarray:
    """Raise on every rank unless all accepted and agree on `fields`; the maxima of the signature.

    `signature[0]` is 1 where this rank rejected its arguments (raising `error`);
    `signature[i]` for 1 <= i < len(fields) must be equal everywhere (`fields[i]` names it).
    """
    lows, highs = t.agree(signature)
    if error is not None:
        raise error
    if highs[0]:
        raise MismatchError(f"another rank rejected its arguments to this {what} "
                            "(it raised the reason); nothing was sent")
    differing = [fields[i] for i in range(1, len(fields)) if lows[i] != highs[i]]
    if differing:
        raise MismatchError(f"ranks disagree on {', '.join(differing)} of this {what}; "
                            "nothing was sent")
    return highs

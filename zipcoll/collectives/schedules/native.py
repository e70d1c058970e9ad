"""The MPI library's own Allreduce: the reference, and the answer for small messages."""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll import transport
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds
from zipcoll.collectives.steps import Lossless
from zipcoll.transport import Transport


def native(t: Transport, buf: Any, enc: Lossless, tag: int, xp: Any = np,
           send: Any = None) -> Steps:
    """MPI's Iallreduce into `buf`, from `send` or in place: one call per chunk of at most
    `transport.max_count()` items (MPI counts are C ints), one after another, in the same
    order on every rank (collectives match by order).

    `enc.op` may be a user-defined MPI.Op: only the MPI library can apply one.
    """
    op = getattr(enc.op, "mpi", enc.op)
    for lo, hi in native_chunks(buf.size):
        source = MPI.IN_PLACE if send is None else send[lo:hi]
        yield [t.iallreduce_native(source, buf[lo:hi], op)]


def native_chunks(count: int) -> list[tuple[int, int]]:
    """The (start, stop) item ranges of `native`'s calls: as few as the count limit allows."""
    return chunk_bounds(count, max(1, -(-count // transport.max_count())))


register(Schedule("native", native, "the MPI library's own Allreduce; small messages",
                  codecs=False, native=True))

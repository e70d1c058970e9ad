"""The MPI library's own Allreduce: the reference, and the answer for small messages."""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll import transport
from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Span, Work
from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps, chunk_bounds
from zipcoll.collectives.schedules.rabenseifner import rabenseifner_cost
from zipcoll.collectives.schedules.recdoubling import recdoubling_cost
from zipcoll.collectives.schedules.ring import ring_cost
from zipcoll.collectives.steps import Lossless
from zipcoll.transport import Transport


def native(t: Transport, buf: Any, enc: Lossless, tag: int, xp: Any = np,
           send: Any = None, blocking: bool = False) -> Steps:
    """MPI's Iallreduce into `buf`, from `send` or in place: one call per chunk of at most
    `transport.max_count()` items (MPI counts are C ints), one after another, in the same
    order on every rank (collectives match by order).

    `enc.op` may be a user-defined MPI.Op: only the MPI library can apply one.
    `blocking`: MPI's Allreduce instead, for a call that blocks anyway with nothing else
    of its thread in flight to advance meanwhile, on every rank (`call.Call`): the two
    forms never mix in one call (MPI matches blocking collectives only with blocking ones).
    """
    op = getattr(enc.op, "mpi", enc.op)
    for lo, hi in native_chunks(buf.size):
        source = MPI.IN_PLACE if send is None else send[lo:hi]
        if blocking:
            t.allreduce_native(source, buf[lo:hi], op)
        else:
            yield [t.iallreduce_native(source, buf[lo:hi], op)]


def native_chunks(count: int) -> tuple[tuple[int, int], ...]:
    """The (start, stop) item ranges of `native`'s calls: as few as the count limit allows."""
    return chunk_bounds(count, max(1, -(-count // transport.max_count())))


def native_cost(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """The MPI library's Allreduce, modelled: the best of the algorithms it picks among
    (Open MPI's tuned / MPICH: recursive doubling, Rabenseifner, ring), run in C: no
    per-step overhead. (Where the profile measured this layout, the planner uses that.)"""
    c_loops = Work(work.profile, 1, "uint8", 0.0)
    return min(recdoubling_cost(n, span, c_loops), rabenseifner_cost(n, span, c_loops),
               ring_cost(n, span, c_loops))


register(Schedule("native", native, "the MPI library's own Allreduce; small messages",
                  codecs=False, native=True, cost=native_cost))

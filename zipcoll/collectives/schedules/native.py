"""The MPI library's own Allreduce: the reference, and the answer for small messages."""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll.collectives.registry import Schedule, register
from zipcoll.collectives.schedule import Steps
from zipcoll.collectives.steps import Lossless
from zipcoll.transport import Transport


def native(t: Transport, buf: Any, enc: Lossless, tag: int, xp: Any = np, send: Any = None,
           blocking: bool = False) -> Steps:
    """MPI's Allreduce (blocking) or Iallreduce (one step) into `buf`, from `send` or in place.

    `enc.op` may be a user-defined MPI.Op: only the MPI library can apply one.
    """
    op = getattr(enc.op, "mpi", enc.op)
    source = MPI.IN_PLACE if send is None else send
    if blocking:
        t.allreduce_native(source, buf, op)
    else:
        yield [t.iallreduce_native(source, buf, op)]


register(Schedule("native", native, "the MPI library's own Allreduce; small messages",
                  codecs=False, native=True))

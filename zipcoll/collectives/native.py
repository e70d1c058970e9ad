"""The MPI library's own Allreduce, as a schedule: the reference, and the small-message answer."""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.schedule import Steps
from zipcoll.transport import Transport


def native_allreduce(t: Transport, buf: Any, op: Any, tag: int, xp: Any = np,
                     send: Any = None, blocking: bool = False) -> Steps:
    """MPI's Allreduce (blocking) or Iallreduce (one step) into `buf`, from `send` or in place."""
    mpi_op = op.mpi if isinstance(op, ReduceOp) else op  # user-defined ops pass through
    source = MPI.IN_PLACE if send is None else send
    if blocking:
        t.allreduce_native(source, buf, mpi_op)
    else:
        yield [t.iallreduce_native(source, buf, mpi_op)]

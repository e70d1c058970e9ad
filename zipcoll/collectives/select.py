"""algorithm="auto": which schedule a call gets.

For now rules over size and topology (a cost model replaces them later). The MPI
library's own Allreduce is the right answer for small messages; past AUTO_LARGE_BYTES
the bandwidth-optimal ring on one node, the hierarchical schedule across nodes. A codec
is used only across nodes: on one node's shared memory, compressing costs more than it
saves. Every rank decides alike from (bytes, topology, codec).
"""
from __future__ import annotations

import os
from typing import Any

from zipcoll.collectives.registry import SCHEDULES, Schedule

AUTO_LARGE_BYTES = int(os.environ.get("ZIPCOLL_AUTO_LARGE_BYTES", 16 << 20))


def choose(nbytes: int, topology: Any, codec: Any) -> tuple[Schedule, Schedule | None, bool]:
    """(schedule, inner schedule, whether to use the codec) for `nbytes` on `topology`."""
    across_nodes = topology.num_nodes > 1 and topology.is_uniform
    if codec is not None and across_nodes:
        return SCHEDULES["hierarchical"], SCHEDULES[default_inner(codec)], True
    if topology.size == 1 or nbytes < AUTO_LARGE_BYTES:
        return SCHEDULES["native"], None, False
    if across_nodes and topology.local_size > 1:
        return SCHEDULES["hierarchical"], SCHEDULES["ring"], False
    return SCHEDULES["ring"], None, False


def default_inner(codec: Any) -> str:
    """The inter-node schedule of a two-level algorithm: ring where the codec allows, else allgather."""
    return "ring" if codec is None or SCHEDULES["ring"].accepts(codec) else "allgather"

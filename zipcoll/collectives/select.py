"""algorithm="auto": which algorithm a call gets.

For now rules over size and topology (a cost model replaces them later). The MPI
library's own Allreduce is the right answer for small messages; past AUTO_LARGE_BYTES
the bandwidth-optimal ring on one node, the hierarchical schedule across nodes. A codec
is used only across nodes: on one node's shared memory, compressing costs more than it
saves. Every rank decides alike from (bytes, topology, codec).
"""
from __future__ import annotations

import os
from typing import Any

AUTO_LARGE_BYTES = int(os.environ.get("ZIPCOLL_AUTO_LARGE_BYTES", 16 << 20))


def choose(nbytes: int, topology: Any, codec: Any) -> tuple[str, bool]:
    """(algorithm, whether to use the codec) for a message of `nbytes` on `topology`."""
    across_nodes = topology.num_nodes > 1 and topology.is_uniform
    if codec is not None and across_nodes:
        return f"hierarchical:{default_inner(codec)}", True
    if topology.size == 1 or nbytes < AUTO_LARGE_BYTES:
        return "native", False
    if across_nodes and topology.local_size > 1:
        return "hierarchical:ring", False
    return "ring", False


def default_inner(codec: Any) -> str:
    """The inter-node schedule of a two-level algorithm: ring, or allgather for any-size payloads."""
    return "ring" if codec is None or codec.fixed_size else "allgather"

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
COMPRESSED = ("ring", "tree", "dbtree", "twophase", "allgather")
# Per-hop schedules preallocate what they receive: only these take any-size payloads.
ANY_SIZE_PAYLOADS = ("allgather",)
PER_HOP = ("ring", "tree", "dbtree")


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


def accepting_schedules(codec: Any) -> list[str]:
    """The compressed schedules that can use `codec`.

    Per-hop schedules preallocate what they receive (fixed-size payloads only), and
    re-encode partial sums at every hop: a rescaling sparsifier (sparse and unbiased,
    e.g. randomk) would multiply its 1/ratio scale into the sum hop after hop.
    """
    rescaling = codec.sparse and codec.unbiased
    return [a for a in COMPRESSED
            if a in ANY_SIZE_PAYLOADS or codec.fixed_size and not (rescaling and a in PER_HOP)]


def default_inner(codec: Any) -> str:
    """The inter-node schedule of a two-level algorithm: ring where the codec allows, else allgather."""
    return "ring" if codec is None or "ring" in accepting_schedules(codec) else "allgather"

"""algorithm="auto": which algorithm a call gets.

For now a size rule (a cost model over the topology replaces it later): the MPI
library's own Allreduce is the right answer for small messages and on one rank; past
AUTO_RING_BYTES the bandwidth-optimal ring. Every rank decides alike from (bytes, size).
"""
from __future__ import annotations

import os

AUTO_RING_BYTES = int(os.environ.get("ZIPCOLL_AUTO_RING_BYTES", 64 << 20))


def choose(nbytes: int, size: int, device: str) -> str:
    """The algorithm "auto" runs for a message of `nbytes` on `size` ranks."""
    if size == 1 or nbytes < AUTO_RING_BYTES:
        return "native"
    return "ring"


def choose_compressed(nbytes: int, size: int, codec) -> str:
    """The schedule "auto" runs with a codec: per-hop ring, or allgather for any-size payloads."""
    return "ring" if codec.fixed_size else "allgather"

"""The two-level all-reduce that `hierarchical` (nodes) and `torus` (grid rows and columns) run.

    level 1 (intra: a node, or a grid row)      ring reduce-scatter: local rank l owns shard l+1
    level 2 (inter: same local rank elsewhere)  all-reduce of the owned shard (any flat schedule)
    level 1 again                               ring allgather of the shards

Only 1/L of the message crosses the slow level per rank (L ranks a node), and all L
ranks of a node use their own inter-node links at once. Each level has its own encoding:
by default only the inter level compresses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from zipcoll.collectives.schedule import Steps, chunk_bounds
from zipcoll.collectives.schedules.ring import allgather, owned_chunk, reduce_scatter
from zipcoll.collectives.steps import Encoding
from zipcoll.transport import Transport

InnerSchedule = Callable[..., Steps]  # (transport, shard, tag, xp, send=None) -> Steps


@dataclass(frozen=True)
class Levels:
    """The transports of the two levels."""

    intra: Transport
    inter: Transport


def two_level(levels: Levels, buf: Any, intra: tuple[Encoding, Encoding], inner: InnerSchedule,
              tag: int, xp: Any = np, send: Any = None) -> Steps:
    """Reduce-scatter in level 1, `inner` all-reduce of the shard in level 2, allgather in level 1.

    `intra`: the encodings of level 1's reduce-scatter and allgather.
    """
    if levels.intra.size == 1:  # a node of one rank: level 2 reads the caller's buffer itself
        yield from inner(levels.inter, buf, tag, xp, send)  # (no copy of the whole message)
        return
    chunks = chunk_bounds(buf.size, levels.intra.size)
    yield from reduce_scatter(levels.intra, buf, chunks, intra[0], tag, xp, send)
    shard = buf[slice(*chunks[owned_chunk(levels.intra)])]
    yield from inner(levels.inter, shard, tag, xp)
    yield from allgather(levels.intra, buf, chunks, intra[1], tag, xp)

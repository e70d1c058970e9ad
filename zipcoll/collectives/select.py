"""algorithm="auto": which schedule a call gets, from the cost model.

`topologies.cost` prices every plan the registry allows (schedule, inner schedule, where
the codec goes) for this size, layout, dtype and op, with a profile that rank 0 read
(`ZIPCOLL_PROFILE`, or the defaults) and shared, and picks the cheapest; decisions are
cached per size bucket. Every rank decides alike: the same profile, and nothing that
depends on the rank goes into the model. `zipcoll.explain` shows the ranking.
"""
from __future__ import annotations

from typing import Any

from zipcoll.collectives.registry import SCHEDULES, Schedule
from zipcoll.topologies.cost import codec_idle


def choose(nbytes: int, topology: Any, codec: Any, dtype: Any, op: str,
           selector: Any, native: bool = True) -> tuple[Schedule, Schedule | None, bool]:
    """(schedule, inner schedule, whether to use the codec) for `nbytes` on `topology`;
    `native`: whether plans may use the MPI library's own op (it gives zipcoll's answer)."""
    if topology.size == 1:
        return SCHEDULES["native"], None, False  # one rank: a copy, no op applied
    shape = selector.choose(nbytes, topology, codec, dtype, op, native)
    decision = _DECISIONS.get((shape, topology.num_nodes, topology.size))
    if decision is None:
        inner = SCHEDULES[shape.inner] if shape.inner else None
        compress = shape.inter_codec is not None and not codec_idle(shape, topology)
        decision = _DECISIONS[shape, topology.num_nodes, topology.size] = (SCHEDULES[shape.algorithm], inner, compress)
    return decision


_DECISIONS: dict = {}  # (PlanShape, nodes, ranks) -> what runs it: auto asks on every call


def default_inner(codec: Any) -> str:
    """The inter-node schedule of a two-level algorithm: ring where the codec allows, else allgather."""
    return "ring" if codec is None or SCHEDULES["ring"].accepts(codec) else "allgather"

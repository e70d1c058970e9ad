"""The plans a reduce-scatter or all-gather may run, and what each costs: the schedules of
`registry.SHARDED`, priced by their own formulas (`cost_rs` / `cost_ag`) over the
layout's spans, in slices as they run (`slicing.sharded_slicing`). `auto` runs the
cheapest (`rank_sharded`); ``zipcoll.explain(nbytes, collective="reduce_scatter")`` shows
them all; `sharded_bounds` prices one alone on the links or on the CPU (the benchmark
suite's bound).

Like `plans.rank_plans`, a pure function of (collective, bytes, topology shape, codec,
dtype, profile): every rank holding the same profile ranks alike.

    >>> from zipcoll.topologies import Topology
    >>> topo = Topology.from_layout(4, 0, ranks_per_node=2)
    >>> seconds, best = rank_sharded("reduce-scatter", 64 << 20, topo, codec="int8")[0]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from zipcoll.codecs import Codec, ErrorFeedback, get_codec
from zipcoll.collectives.planning.model import FREE, Shape, Work, pipelined_time, spans_with
from zipcoll.collectives.planning.plans import PlanShape, flat_span, levels
from zipcoll.collectives.planning.profile import DEFAULT_CODECS, DEFAULT_PROFILE, CodecSpeed, \
    Link, Profile
from zipcoll.collectives.registry import SHARDED, ShardSchedule
from zipcoll.collectives.slicing import sharded_slicing

REDUCE_SCATTER, ALLGATHER = "reduce-scatter", "all-gather"
# what `collective=` takes: the function names and the collectives' own
COLLECTIVES = {"reduce_scatter": REDUCE_SCATTER, "reduce-scatter": REDUCE_SCATTER,
               "allgather": ALLGATHER, "all-gather": ALLGATHER, "all_gather": ALLGATHER}


def collective_kind(name: str) -> str:
    """"reduce-scatter" or "all-gather" of a `collective=` name; ValueError otherwise."""
    kind = COLLECTIVES.get(str(name).lower())
    if kind is None:
        raise ValueError(f"unknown collective {name!r}; expected 'allreduce', "
                         "'reduce_scatter' or 'allgather'")
    return kind


def sharded_plans(kind: str, topology: Any, codec: Codec | None = None,
                  native: bool = True) -> list[tuple[ShardSchedule, ShardSchedule | None]]:
    """(schedule, inner) of every plan `auto` may run, in the registry's order: every flat
    one that can carry `codec` (MPI's own only where `native`), and every two-level one
    over each flat, non-native inner one where the layout has several nodes of several
    ranks and splits."""
    shape = Shape.of(topology)
    flat = [s for s in SHARDED.values() if not s.two_level and (native or not s.native)]
    found = [(s, None) for s in flat if codec is None or s.accepts(codec, kind)]
    if shape.nodes < 2 or shape.per_node < 2:
        return found
    for schedule in SHARDED.values():
        if schedule.two_level and levels(schedule, shape) is not None:
            found += [(schedule, inner) for inner in flat if not inner.native
                      and (codec is None or inner.accepts(codec, kind))]
    return found


def predict_sharded(kind: str, schedule: ShardSchedule, inner: ShardSchedule | None,
                    nbytes: float, topology: Any, profile: Profile,
                    codec: Codec | None = None, dtype: str = "float32") -> float:
    """Predicted seconds of one reduce-scatter / all-gather of `nbytes` (the whole vector)
    with `schedule` (over `inner`, two-level), zipcoll's call overhead included."""
    shape = Shape.of(topology)
    item = np.dtype(dtype)
    work = Work(profile, item.itemsize, item.name, profile.step_overhead)
    fixed = 0.0 if schedule.native else profile.call_overhead
    cost = schedule.cost_rs if kind == REDUCE_SCATTER else schedule.cost_ag
    if schedule.two_level:
        rows, columns = levels(schedule, shape).spans(profile)
        one = lambda n, w: cost(n, spans_with(rows, w), spans_with(columns, w), w, codec,  # noqa: E731
                                inner)
    else:
        span = flat_span(shape, profile)
        one = lambda n, w: cost(n, spans_with(span, w), w, codec)  # noqa: E731
    return fixed + _sliced(schedule, one, nbytes, shape, work, codec)


def _sliced(schedule: ShardSchedule, one: Callable[[float, Work], float], n: float,
            shape: Shape, work: Work, codec: Codec | None) -> float:
    """`one` over the slices the call runs in, several in flight (``model.pipelined_time``)."""
    ratio = 1.0 if codec is None or n == 0 else n / max(1.0, work.wire(codec, n))
    slices = sharded_slicing(schedule, int(n), shape.size, shape.nodes, ratio).slices
    return pipelined_time(one, n, slices, work)


def rank_sharded(kind: str, nbytes: int, topology: Any, profile: Profile | None = None,
                 codec: Any = None, dtype: str = "float32",
                 native: bool = True) -> list[tuple[float, PlanShape]]:
    """(predicted seconds, plan) of every plan of `sharded_plans`, cheapest first; ties go
    to the registry's order (what `auto` runs is the first)."""
    profile = profile or DEFAULT_PROFILE
    if Shape.of(topology).size == 1:  # a copy: MPI's own where its op gives zipcoll's answer
        return [(0.0 if native else profile.call_overhead,
                 PlanShape("native" if native else "ring"))]
    flat = None if codec is None else get_codec(codec)
    if isinstance(flat, ErrorFeedback):  # error feedback: its codec's plans
        flat = flat.codec
    spec = None if flat is None else flat.spec()
    ranked = [(predict_sharded(kind, s, inner, float(nbytes), topology, profile, flat, dtype),
               PlanShape(s.name, None if inner is None else inner.name, None, spec))
              for s, inner in sharded_plans(kind, topology, flat, native)]
    return sorted(ranked, key=lambda item: item[0])  # stable: registry order on ties


def sharded_bounds(kind: str, plan: PlanShape, nbytes: int, topology: Any,
                   link_bytes_per_s: float, codec_speeds: Mapping[str, CodecSpeed],
                   ranks_per_machine: int = 1, dtype: str = "float32") -> tuple[float, float]:
    """(wire, codec): lower bounds on a reduce-scatter / all-gather's time from its plan's
    formula, each alone, as `plans.bounds` gives an all-reduce's: wire, the plan's bytes
    on the inter-node links at `link_bytes_per_s` (0 on one node); codec, its encode and
    decode work at `codec_speeds`, times `ranks_per_machine` ranks sharing the cores."""
    schedule = SHARDED[plan.algorithm]
    inner = SHARDED[plan.inner] if plan.inner else (SHARDED["ring"] if schedule.two_level
                                                    else None)
    codec = None if plan.inter_codec is None else get_codec(plan.inter_codec)
    zero = Link(0.0, 0.0)
    fast = {cid: CodecSpeed(FREE, FREE, FREE) for cid in {**DEFAULT_CODECS, **codec_speeds}}
    wire = 0.0
    if Shape.of(topology).nodes > 1 and link_bytes_per_s > 0:
        wire_only = Profile(zero, Link(0.0, 1.0 / link_bytes_per_s), FREE, 0.0, 0.0, fast, {},
                            "wire bound")
        wire = predict_sharded(kind, schedule, inner, nbytes, topology, wire_only, codec, dtype)
    if codec is None:
        return wire, 0.0
    codec_only = Profile(zero, zero, FREE, 0.0, 0.0, {**fast, **codec_speeds}, {}, "codec bound")
    return wire, ranks_per_machine * predict_sharded(kind, schedule, inner, nbytes, topology,
                                                     codec_only, codec, dtype)

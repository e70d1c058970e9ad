"""Which plans a call may run, and what each costs: the registry's schedules, priced by
their own formulas (`Schedule.cost`) over the layout's spans.

A plan is a `PlanShape`: a schedule, a two-level schedule's inner one, where the codec
goes. A flat schedule is priced by its `cost` on all ranks; a two-level one by the body
it runs (`twolevel`: ring reduce-scatter in level 1, the inner schedule across, ring
allgather) over the two levels its `split` makes of the layout. zipcoll's own schedules
also pay what Python costs: ``step_overhead`` per step, ``call_overhead`` per call, plus
the agreement check (one small native Allreduce).

Everything here is a pure function of (plan, bytes, topology shape, profile): every rank
that holds the same profile ranks the plans alike (see ``explain`` for how the profile
is made the same on every rank).

    >>> from zipcoll.topologies import Topology
    >>> topo = Topology.from_layout(8, 0, ranks_per_node=4)
    >>> plans = rank_plans(64 << 20, topo, DEFAULT_PROFILE, codec="int8")
    >>> seconds, best = plans[0]
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Mapping, NamedTuple

import numpy as np
from mpi4py import MPI

from zipcoll.codecs import Codec, get_codec
from zipcoll.collectives.planning.model import (FREE, Shape, Span, Work, cpu_only, interpolate,
                                                links_only, pipelined_time, spans_with)
from zipcoll.collectives.planning.profile import DEFAULT_CODECS, DEFAULT_PROFILE, CodecSpeed, Link, Profile
from zipcoll.collectives.registry import SCHEDULES, Schedule, accepting, flat
from zipcoll.collectives.slicing import flat_slices, slice_count
from zipcoll.topologies import Topology

FLOAT_DTYPES = ("float16", "float32", "float64")


class PlanShape(NamedTuple):
    """An algorithm with its codec placement: what the model prices and ``auto`` picks.

    ``algorithm``: a schedule's name (flat or two-level); ``inner``: the inter-level
    schedule of a two-level one (else None); ``intra_codec``: level 1's codec
    (two-level only); ``inter_codec``: the flat schedule's codec, or level 2's. Codecs are
    spec strings ("int8", "topk:ratio=0.01"); "none" carries raw values.
    """

    algorithm: str
    inner: str | None = None
    intra_codec: str | None = None
    inter_codec: str | None = None

    @property
    def name(self) -> str:
        """The ``algorithm=`` string: "ring", "hierarchical:ring"."""
        return self.algorithm if self.inner is None else f"{self.algorithm}:{self.inner}"

    def __str__(self) -> str:
        codecs = [c for c in (self.intra_codec, self.inter_codec) if c is not None]
        if self.intra_codec is not None:
            return f"{self.name} + intra {self.intra_codec}, inter {self.inter_codec}"
        return self.name + "".join(f" + {c}" for c in codecs)


def codec_spec(codec: Any) -> str | None:
    """The short spec string of a codec argument (``Codec.spec``), None for no codec.

    >>> codec_spec({"id": "topk", "ratio": 0.01}), codec_spec("int8:block=256")
    ('topk:ratio=0.01', 'int8')
    """
    return None if codec is None else get_codec(codec).spec()


# ------------------------------------------------------------------ plan -> seconds

def flat_span(shape: Shape, profile: Profile) -> Span:
    """All ranks of the layout, as a flat schedule runs over them."""
    return Span(shape.size, shape.per_node if shape.nodes > 1 else shape.size,
                profile.intra, profile.inter)


def native(n: float, shape: Shape, profile: Profile) -> float:
    """The MPI library's Allreduce: measured (log-log interpolation) where the profile has
    this layout, else its schedule's formula."""
    points = profile.native.get(shape.label)
    if points:
        return interpolate(points, n)
    work = Work(profile, 1, "uint8", 0.0)
    return _native_schedule().cost(n, flat_span(shape, profile), work, None)


def _native_schedule() -> Schedule:
    return next(s for s in flat() if s.native)


def _sliced_flat(schedule: Schedule, n: float, shape: Shape, span: Span, work: Work,
                 codec: Codec | None) -> float:
    """A flat schedule in S slices (across nodes, ``slicing.flat_slices``' rule), several in
    flight (``model.pipelined_time``)."""
    ratio = 1.0 if codec is None else n / max(1.0, work.wire(codec, n))
    slices = flat_slices(int(n), shape.size, shape.nodes, ratio)
    return pipelined_time(lambda m, w: schedule.cost(m, spans_with(span, w), w, codec),
                          n, slices, work)


def two_level(n: float, rows: Span, columns: Span, inner: Schedule, work: Work,
              intra_codec: Codec | None, inter_codec: Codec | None) -> float:
    """Level-1 ring reduce-scatter, ``inner`` on 1/L of the data across, level-1 ring allgather.

    zipcoll runs it in S slices (``slice_count``), several in flight: while one slice
    waits on a link, others reduce, encode or use the other link. With a = level 1 and
    b = level 2 of one slice, each split into what keeps a link busy (its bytes) and what
    keeps the CPU busy (reductions, codecs, steps), the pipeline runs at its busiest
    resource once full:
        S slices: a + b + (S - 1) max(a_link, b_link, a_cpu + b_cpu)
        inner native (MPI collectives match by order: one slice at a time): S (a + b)
    Every rank of a node runs level 2 at once: ``columns`` carries that sharing.
    """
    slices = slice_count(int(n))
    s = n / slices
    ring = SCHEDULES["ring"].cost  # level 1 (twolevel.py): the ring's reduce-scatter and allgather

    def levels(w: Work) -> tuple[float, float]:
        a = ring(s, spans_with(rows, w), w, intra_codec)
        b = inner.cost(s / rows.size, spans_with(columns, w), w, inter_codec) if columns.size > 1 else 0.0
        return a, b

    a, b = levels(work)
    if inner.native or slices == 1:
        return slices * (a + b)
    a_link, b_link = levels(links_only(work))
    a_cpu, b_cpu = levels(cpu_only(work))
    return a + b + (slices - 1) * max(a_link, b_link, a_cpu + b_cpu)


# ------------------------------------------------------- the two levels of a layout

@dataclass(frozen=True)
class Levels:
    """A two-level schedule's levels on a layout: (ranks, of them on one node) for
    rank 0's level-1 group (`rows`) and level-2 group (`columns`)."""

    rows: tuple[int, int]
    columns: tuple[int, int]

    def spans(self, profile: Profile) -> tuple[Span, Span]:
        """The levels as spans: every rank of a row runs level 2 at once, each in its own
        column, so a column's links across nodes are shared by a row's ranks."""
        (x, x_local), (y, y_local) = self.rows, self.columns
        return (Span(x, x_local, profile.intra, profile.inter),
                Span(y, y_local, profile.intra, profile.inter.shared(x)))


def levels(schedule: Schedule, topology: Any) -> Levels | None:
    """The levels `schedule.split` makes of the layout's shape; None where it cannot split it.

    On uneven nodes the shape does not say which ranks share a node, so every level is
    priced as if each of its ranks were on a node of its own.
    """
    return _levels(schedule.split, Shape.of(topology))


@functools.lru_cache(maxsize=256)
def _levels(split: Any, shape: Shape) -> Levels | None:
    layout = _layout_of(shape)
    try:
        colors = [split(replace(layout, rank=r)) for r in range(shape.size)]
    except ValueError:
        return None
    row = [r for r in range(shape.size) if colors[r][0] == colors[0][0]]
    column = [r for r in range(shape.size) if colors[r][1] == colors[0][1]]
    return Levels(_group(row, layout, shape), _group(column, layout, shape))


def _group(ranks: list[int], layout: Topology, shape: Shape) -> tuple[int, int]:
    """(ranks, of them on rank 0's node): (k, 1) on uneven nodes."""
    local = sum(1 for r in ranks if layout.node_of[r] == layout.node_of[0]) if shape.uniform else 1
    return len(ranks), local


def _layout_of(shape: Shape) -> Topology:
    """A topology of `shape`: nodes of consecutive ranks, the first node its largest."""
    if shape.uniform:
        return Topology.from_layout(shape.size, 0, ranks_per_node=shape.per_node)
    rest, others = shape.size - shape.per_node, shape.nodes - 1
    sizes = [shape.per_node] + [rest // others + (i < rest % others) for i in range(others)]
    starts = np.cumsum([0] + sizes)
    return Topology.from_layout(shape.size, 0, nodes=[range(a, b) for a, b in zip(starts, starts[1:])])


def codec_idle(plan: PlanShape, topology: Any) -> bool:
    """Whether ``plan`` carries a codec on a level of one rank, which sends nothing (a
    hierarchical plan's inter level on one node): the codec is never applied."""
    schedule = SCHEDULES.get(plan.algorithm)
    if schedule is None or not schedule.two_level:
        return False
    found = levels(schedule, topology)
    if found is None:
        return False
    return (plan.inter_codec is not None and found.columns[0] == 1
            or plan.intra_codec is not None and found.rows[0] == 1)


# ------------------------------------------------------------------------- predict

def predict(plan: PlanShape, nbytes: int, topology: Any, profile: Profile | None = None,
            dtype: str = "float32") -> float:
    """Predicted seconds of one all-reduce of ``nbytes`` with ``plan`` on ``topology``.

    Non-native plans include zipcoll's call overhead and its agreement check (one small
    native Allreduce). A plan the profile measured on this layout (``Profile.plans``,
    float32 SUM) is priced by its measured times, by bytes, whatever the dtype.
    ValueError for a two-level plan whose schedule cannot split this layout.
    """
    profile = profile or DEFAULT_PROFILE
    shape = Shape.of(topology)
    dtype = np.dtype(dtype).name
    n = float(nbytes)
    measured = profile.plans.get(shape.label, {}).get(str(plan))
    if measured:
        return interpolate(measured, n)
    schedule = SCHEDULES[plan.algorithm]
    if schedule.native:
        return native(n, shape, profile)
    if shape.size == 1:
        return profile.call_overhead
    work = Work(profile, np.dtype(dtype).itemsize, dtype, profile.step_overhead)
    intra = _codec(plan.intra_codec)
    inter = _codec(plan.inter_codec)
    fixed = profile.call_overhead + native(64, shape, profile)
    if schedule.two_level:
        found = levels(schedule, shape)
        if found is None:
            raise ValueError(f"{schedule.name} cannot split a layout of {shape.label} ranks")
        rows, columns = found.spans(profile)
        inner = SCHEDULES[plan.inner or "ring"]
        return fixed + two_level(n, rows, columns, inner, work, intra, inter)
    return fixed + _sliced_flat(schedule, n, shape, flat_span(shape, profile), work, inter)


def _codec(spec: str | None) -> Codec | None:
    return None if spec is None else get_codec(spec)


def bounds(plan: PlanShape, nbytes: int, topology: Any, link_bytes_per_s: float,
           codec_speeds: Mapping[str, CodecSpeed], ranks_per_machine: int = 1,
           dtype: str = "float32") -> tuple[float, float]:
    """(wire, codec): lower bounds on a call's time from the plan's formula, each alone.

    wire: the plan's messages on the inter-node links at ``link_bytes_per_s`` (no latency,
    nothing else costs); 0 on one node. codec: its encode and decode work at
    ``codec_speeds`` (by codec id, no per-call cost, links free), times
    ``ranks_per_machine`` ranks whose codecs share the cores the speeds were measured on.
    """
    zero = Link(0.0, 0.0)
    fast = {cid: CodecSpeed(FREE, FREE, FREE) for cid in {**DEFAULT_CODECS, **codec_speeds}}
    codec_only = Profile(zero, zero, FREE, 0.0, 0.0, {**fast, **codec_speeds}, {}, "codec bound")
    lossless = plan.intra_codec is None and plan.inter_codec is None
    wire = 0.0  # one node (or no link rate given): no inter-node link to bound by
    if Shape.of(topology).nodes > 1 and link_bytes_per_s > 0:
        wire_only = Profile(zero, Link(0.0, 1.0 / link_bytes_per_s), FREE, 0.0, 0.0, fast,
                            {}, "wire bound")
        wire = predict(plan, nbytes, topology, wire_only, dtype)
    codec = 0.0 if lossless else ranks_per_machine * predict(plan, nbytes, topology, codec_only, dtype)
    return wire, codec




# ------------------------------------------------------------------ which plans exist

def candidate_plans(topology: Any, codec: Any = None, dtype: str = "float32",
                    op: str = "sum", native: bool = True) -> list[PlanShape]:
    """Every plan a call may run: lossless ones, and with ``codec`` those that may carry it.

    Every registered schedule with a cost, in the registry's order: flat ones, and each
    two-level one over every flat inner one (`two_level_schedules`). Plans with a codec
    (not a lossless one) only for SUM or mean of floats; it goes flat or at the inter level
    (the intra level stays lossless, as ``auto`` does); which schedule carries which codec
    is the registry's rule (`Schedule.accepts`). ``native=False``: no plan uses the
    MPI library's own op (flat, or as the inter level), for a dtype and op on which it
    does not give zipcoll's answer.
    """
    shape = Shape.of(topology)
    if shape.size == 1:
        return [PlanShape(_native_schedule().name)]
    raw = is_sum(op) and np.dtype(dtype).name in FLOAT_DTYPES
    inners = [s.name for s in flat() if s.cost is not None and (native or not s.native)]
    kinds = two_level_schedules(shape)
    plans = [PlanShape(a) for a in inners]
    for kind in kinds:
        plans += [PlanShape(kind, inner) for inner in inners]
    spec = codec_spec(codec)
    if spec is not None and raw and not get_codec(spec).lossless:
        carriers = [name for name in accepting(get_codec(spec)) if SCHEDULES[name].cost is not None]
        plans += [PlanShape(a, None, None, spec) for a in carriers]
        for kind in kinds:
            plans += [PlanShape(kind, a, None, spec) for a in carriers]
    return plans


def is_sum(op: Any) -> bool:
    """Whether ``op`` is SUM or "mean": a name, a zipcoll ReduceOp, or MPI.SUM."""
    if isinstance(op, MPI.Op):
        return op == MPI.SUM
    return str(getattr(op, "name", op)).lower() in ("sum", "mean")


def two_level_schedules(topology: Any) -> list[str]:
    """The two-level schedules worth pricing on this layout, in the registry's order: those
    whose `split` fits it, but not one whose level 1 is a single rank where nodes hold
    several (its inner schedule alone, with the node's fast links unused), nor one whose
    levels are those of one before it (a torus whose rows are the nodes is hierarchical)."""
    shape = Shape.of(topology)
    kept: dict[Levels, str] = {}
    for schedule in SCHEDULES.values():
        if not schedule.two_level:
            continue
        found = levels(schedule, shape)
        if found is None or found in kept or found.rows[0] == 1 and shape.per_node > 1:
            continue
        kept[found] = schedule.name
    return list(kept.values())


def rank_plans(nbytes: int, topology: Any, profile: Profile | None = None, codec: Any = None,
               dtype: str = "float32", op: str = "sum",
               native: bool = True) -> list[tuple[float, PlanShape]]:
    """(predicted seconds, plan) of every candidate plan, cheapest first (``native``: see
    ``candidate_plans``).

    Ties go to the plan that sorts first by name, so every rank orders alike. Plans the
    profile did not measure go after those it measured where it measured others of their
    kind at this size (`unmeasured_behind`).
    """
    profile = profile or DEFAULT_PROFILE
    ranked = [(predict(plan, nbytes, topology, profile, dtype), plan)
              for plan in candidate_plans(topology, codec, dtype, op, native)]
    behind = unmeasured_behind(ranked, nbytes, topology, profile)
    return sorted(ranked, key=lambda item: (item[1] in behind, item[0],
                                            tuple(str(x) for x in item[1])))


def unmeasured_behind(ranked: list[tuple[float, PlanShape]], nbytes: int, topology: Any,
                      profile: Profile) -> set[PlanShape]:
    """The plans of `ranked` that rank after every measured one: where the profile measured
    plans of a kind (lossless, or carrying a codec) on this layout within 2x of `nbytes`,
    those of that kind it did not measure there.

    A measured profile comes from a calibration run (every plan) or from a job's online
    tuning (the plans it tried: the model's best few; the rest it ranked worse). The
    model's price of a plan not measured may describe another network (the defaults: 10
    Gbit/s): beside measured times it would win by being unmeasured, where the job that
    measured chose among what it measured."""
    table = profile.plans.get(Shape.of(topology).label)
    if not table:
        return set()
    near = {plan for _, plan in ranked if measured_near(table, plan, nbytes)}
    kinds = {_coded(plan) for plan in near}
    return {plan for _, plan in ranked if plan not in near and _coded(plan) in kinds}


def measured_near(table: Mapping[str, Any], plan: PlanShape, nbytes: int) -> bool:
    """Whether a layout's measured plans (``Profile.plans[layout]``) hold `plan` at a size
    within 2x of `nbytes` (a size bucket's calls are within 2x of its middle)."""
    return any(nbytes / 2 <= size <= 2 * nbytes for size, _ in table.get(str(plan), ()))


def _coded(plan: PlanShape) -> bool:
    return plan.inter_codec is not None or plan.intra_codec is not None

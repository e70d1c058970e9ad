"""How a call is cut into slices run side by side: the rule the dispatch runs and the
cost model prices (`slice_count`, `flat_slices`), in one place."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zipcoll import settings
from zipcoll.collectives.registry import SCHEDULES
from zipcoll.transport import TAGS_PER_CALL

# Calls run in slices of about ZIPCOLL_SLICE_BYTES, at most ZIPCOLL_PIPELINE_WINDOW at once
# (zipcoll.settings; the rule is in `slicing_of`). A flat schedule sends 1/p of a slice at a
# time (ring, two-phase), so its slice grows with p beyond 8 ranks: each message stays at
# least a slice / 8.
# Bytes of slices in flight at once: more overflows a slow link's queue, and the
# retransmissions cost more than the overlap gains.
IN_FLIGHT_BYTES = 16 << 20


@dataclass(frozen=True)
class Slicing:
    """How a call is cut into slices run side by side: `slices` of them, `window` in flight."""

    slices: int = 1
    window: int = 1


def slice_count(nbytes: int, slice_bytes: int | None = None) -> int:
    """Slices of about `slice_bytes` (default ZIPCOLL_SLICE_BYTES), as many as the tags of a
    call's block allow."""
    size = settings.get().slice_bytes if slice_bytes is None else slice_bytes
    most = TAGS_PER_CALL // max(s.tags for s in SCHEDULES.values())
    return max(1, min(-(-nbytes // size), most))


def flat_slice_bytes(ranks: int, ratio: float = 1.0) -> int:
    """A flat schedule's slice: ZIPCOLL_SLICE_BYTES, or more where each message of a slice
    would carry under a slice / 8 on the wire (ring and two-phase send 1/p of a slice a
    message, and a codec `ratio` times fewer bytes). Overlap hides at most a slice's wire
    time, and every slice costs its steps and its codec calls (top-k's select, thread starts)."""
    size = settings.get().slice_bytes
    return max(size, int(ranks * ratio * size) // 8)


def flat_slices(nbytes: int, ranks: int, nodes: int, ratio: float = 1.0) -> int:
    """How many slices a flat (not native) call runs in: across nodes, slices of
    `flat_slice_bytes`, from two of them up; one on one node (see `slicing_of`)."""
    size = flat_slice_bytes(ranks, ratio)
    if nodes < 2 or nbytes < 2 * size:
        return 1
    return slice_count(nbytes, size)


def _ratio(plan: Any, nbytes: int) -> float:
    """How many times fewer bytes the flat codec puts on the wire (1 without one)."""
    if plan.codec is None or nbytes == 0:
        return 1.0
    return nbytes / max(1, plan.codec.wire_bytes(plan.count, plan.work_dtype.name))


def slicing_of(plan: Any) -> Slicing:
    """How a call is cut into slices, and how many run at once.

    While one slice waits on a link, the next encodes, reduces or uses the other link.

    - MPI's own collective (flat "native"): one call. MPI's collectives match by the order
      they start in, which slices in flight would not keep alike on every rank.
    - two-level: slices of about ZIPCOLL_SLICE_BYTES; one at a time over a native inner level.
    - flat, across nodes: slices of about `flat_slice_bytes(p, codec ratio)`, from two of
      them up (a smaller call has too little wire time to hide a second slice's steps behind).
    - flat, on one node: one slice. Its "link" is copies the same cores make, in the same
      MPI calls that would have to overlap them: nothing is idle to fill.

    In flight: at most ZIPCOLL_PIPELINE_WINDOW slices, and IN_FLIGHT_BYTES of their wire bytes.
    """
    schedule, chosen = plan.schedule, settings.get()
    nbytes = plan.count * plan.work_dtype.itemsize
    if schedule.native:
        return Slicing()
    if schedule.two_level:
        slices = slice_count(nbytes)
        if plan.inner.native:
            return Slicing(slices, 1)
        wire = nbytes // slices
    else:
        if plan.topology.num_nodes < 2 or nbytes < 2 * chosen.slice_bytes:
            return Slicing()  # the common small call: no codec sizes asked
        ratio = _ratio(plan, nbytes)
        slices = flat_slices(nbytes, plan.topology.size, plan.topology.num_nodes, ratio)
        if slices == 1:
            return Slicing()
        wire = int(nbytes / ratio / slices)
    return _in_flight(slices, wire)


def sharded_slicing(schedule: Any, nbytes: int, ranks: int, nodes: int,
                    ratio: float = 1.0) -> Slicing:
    """How a reduce-scatter / all-gather of `nbytes` (the whole vector) is cut into slices,
    slice i taking part i of every rank's block; the rule of `slicing_of`, per schedule:

    - MPI's own, or a schedule whose steps need the blocks side by side (halving's spans
      of several blocks; `ShardSchedule.sliced` false): one slice.
    - two-level: slices of about ZIPCOLL_SLICE_BYTES.
    - flat, across nodes: `flat_slices` (one on one node).

    In flight: at most ZIPCOLL_PIPELINE_WINDOW slices, and IN_FLIGHT_BYTES of their wire bytes.
    """
    if schedule.native or not schedule.sliced:
        return Slicing()
    if schedule.two_level:
        slices = slice_count(nbytes)
        wire = nbytes // slices
    else:
        slices = flat_slices(nbytes, ranks, nodes, ratio)
        wire = int(nbytes / ratio / slices)
    return Slicing() if slices == 1 else _in_flight(slices, wire)


def _in_flight(slices: int, wire: int) -> Slicing:
    """`slices` slices of `wire` bytes on the wire each: at most ZIPCOLL_PIPELINE_WINDOW of
    them at once, and IN_FLIGHT_BYTES of their wire bytes."""
    in_flight = IN_FLIGHT_BYTES // max(1, wire)
    return Slicing(slices, max(1, min(settings.get().pipeline_window, in_flight)))

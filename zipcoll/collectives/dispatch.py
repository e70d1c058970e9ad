"""A Plan -> the steps that carry it out: encodings per level, slices, staging of GPU data."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from zipcoll import buffers
from zipcoll.buffers import CUDA, HOST, Buffer
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.plan import Plan
from zipcoll.collectives.schedule import Steps, chunk_bounds, pipelined
from zipcoll.collectives.steps import Compressed, Encoding, Lossless
from zipcoll.collectives.twolevel import Levels, two_level
from zipcoll.codecs import Codec
from zipcoll.transport import Transport, cuda_aware


def steps_for(t: Transport, plan: Plan, tag: int, blocking: bool) -> Steps:
    """The steps of `plan`, with tags from `tag` on; device data goes through host memory
    if MPI cannot read it. `blocking`: MPI's own collectives may block (nothing else is in
    flight on the communicator)."""
    send = plan.send.array if plan.send is not None else None
    if plan.recv.device != CUDA or buffers.handed_to_mpi(plan.recv):
        return _steps_on(t, plan, send, plan.recv.array, np, tag, blocking)
    buffers.synchronize(plan.recv)
    if cuda_aware():
        return _steps_on(t, plan, send, plan.recv.array, buffers.cupy(), tag, blocking)
    return _staged(t, plan, tag, blocking)


def _steps_on(t: Transport, plan: Plan, send: Any, recv: Any, xp: Any, tag: int,
              blocking: bool) -> Steps:
    recv = recv[: plan.count]
    schedule = plan.schedule
    if schedule.native:
        steps = schedule.run(t, recv, Lossless(plan.op, recv.dtype, xp), tag, xp, send=send,
                             blocking=blocking)
    elif schedule.two_level:
        steps = _sliced(plan, recv, send, tag, _two_level(t, plan, tag, xp, blocking))
    else:
        steps = _sliced(plan, recv, send, tag, _flat(t, plan, tag, xp))
    return _scaled(steps, recv, t.size) if plan.mean else steps


# One slice of a call: (buf, send, first tag, encode-site scope) -> its steps.
SliceRun = Callable[[Any, Any, int, str], Steps]


def _sliced(plan: Plan, recv: Any, send: Any, tag: int, one: SliceRun) -> Steps:
    """`one` over each slice of `recv` (`plan.slicing`), `plan.slicing.window` in flight.

    Each slice takes its own tags (the schedule's `tags` of them, from `tag` on), so slices
    in flight never match each other's messages, and its own encode sites ("slice3/..."),
    so stochastic seeds and error-feedback residuals are per slice. Unsliced: one run.
    """
    bounds = chunk_bounds(recv.size, plan.slicing.slices)
    if len(bounds) == 1:
        return one(recv, send, tag, "")
    tags = (plan.inner or plan.schedule).tags
    runs = (one(recv[lo:hi], None if send is None else send[lo:hi], tag + tags * i,
                f"slice{i}/") for i, (lo, hi) in enumerate(bounds))
    return pipelined(runs, plan.slicing.window)


def _flat(t: Transport, plan: Plan, tag: int, xp: Any) -> SliceRun:
    """A flat schedule's run of one slice, over t in ring order."""
    ordered = _in_ring_order(t, plan)

    def one(buf: Any, send: Any, slice_tag: int, scope: str) -> Steps:
        enc = _encoding(plan, plan.codec, "flat", t.rank, tag, t.size, xp, scope)
        return plan.schedule.run(ordered, buf, enc, slice_tag, xp, send=send)

    return one


def _in_ring_order(t: Transport, plan: Plan) -> Transport:
    """t, renumbered so that each node's ranks are neighbours (when they are not already)."""
    return t if plan.topology.ring_is_rank_order else t.reordered(plan.topology.ring_order())


def _layout(plan: Plan) -> tuple:
    """What names the two levels of a two-level plan (the same on every rank)."""
    return (plan.schedule.name, plan.topology.node_of, plan.topology.grid)


def splits_communicator(t: Transport, plan: Plan) -> bool:
    """Whether the steps of `plan` would first split t's communicator (collective, blocking)."""
    if plan.schedule.native:
        return False
    if plan.schedule.two_level:
        return not t.has_split(_layout(plan))
    topology = plan.topology
    return not topology.ring_is_rank_order and not t.has_reordered(topology.ring_order())


def _two_level(t: Transport, plan: Plan, tag: int, xp: Any, blocking: bool) -> SliceRun:
    """The two-level schedule's run of one slice."""
    levels = Levels(*t.split(_layout(plan), plan.schedule.split(plan.topology)))
    inner = plan.inner
    extra = {"blocking": blocking} if inner.native else {}

    def one(buf: Any, send: Any, slice_tag: int, scope: str) -> Steps:
        # the allgather's seeds are alike on every node: the same bytes decode alike
        intra = (_encoding(plan, plan.intra_codec, "intra-rs", t.rank, tag, t.size, xp, scope),
                 _encoding(plan, plan.intra_codec, "intra-ag", levels.intra.rank, tag, t.size,
                           xp, scope))
        inter = _encoding(plan, plan.codec, "inter", t.rank, tag, t.size, xp, scope)

        def across(t2: Transport, shard: Any, tag2: int, xp2: Any) -> Steps:
            return inner.run(t2, shard, inter, tag2, xp2, **extra)

        return two_level(levels, buf, intra, across, slice_tag, xp, send)

    return one


def _encoding(plan: Plan, codec: Codec | None, level: str, rank: int, call: int, size: int,
              xp: Any, scope: str = "") -> Encoding:
    """Lossless(op) without a codec; else the codec at one level of one call, error
    feedback under (key, level), its encode sites under `scope`."""
    if codec is None:
        return Lossless(plan.op, plan.recv.dtype, xp)
    key = None if plan.key is None else (plan.key, level)
    context = (plan.name, plan.count, plan.recv.dtype.str, size, level)
    encoder = Encoder(codec, rank=rank, call=call, key=key, context=context, prefix=scope)
    return Compressed(encoder, plan.recv.dtype)


def _scaled(steps: Steps, arr: Any, size: int) -> Steps:
    """Run `steps`, then divide the sum by the number of ranks (op="mean")."""
    yield from steps
    arr /= size


def _staged(t: Transport, plan: Plan, tag: int, blocking: bool) -> Steps:
    """Device data through host memory, for an MPI that cannot read GPU memory."""
    device = plan.recv.array[: plan.count] if plan.send is None else plan.send.array
    host = buffers.cupy().asnumpy(device)
    host_plan = Plan(None, Buffer(host, HOST, host, host.shape), host, plan.op, plan.schedule,
                     plan.inner, plan.codec, plan.intra_codec, plan.slicing, plan.key, plan.mean,
                     plan.topology)
    yield from _steps_on(t, host_plan, None, host, np, tag, blocking)
    plan.recv.array[: plan.count].set(host)

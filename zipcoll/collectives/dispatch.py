"""A Plan -> the steps that carry it out: encodings per level, slices, staging of GPU data,
bfloat16 through float32."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from zipcoll import buffers, devices
from zipcoll.buffers import HOST, Buffer
from zipcoll.collectives import staging
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.plan import Plan
from zipcoll.collectives.registry import SCHEDULES
from zipcoll.collectives.slicing import slicing_of
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in, pipelined
from zipcoll.collectives.steps import Compressed, Encoding, Lossless
from zipcoll.collectives.twolevel import Levels, two_level
from zipcoll.codecs import Codec
from zipcoll.codecs.base import cpu_kernels
from zipcoll.transport import Transport, cuda_aware


def steps_for(t: Transport, plan: Plan, tag: int, may_block: bool = False) -> Steps:
    """The steps of `plan`, with tags from `tag` on; device data goes through host memory
    if MPI cannot read it. `may_block`: the call may run MPI's blocking Allreduce (every
    rank agreed that nothing else of its thread is in flight: `call.Call`)."""
    if plan.work_dtype != plan.recv.dtype:
        return _widened(t, plan, tag, may_block)
    send = plan.send.array if plan.send is not None else None
    recv = plan.recv
    if recv.device == HOST:
        return _steps_on(t, plan, send, recv.array, np, tag, may_block=may_block)
    buffers.synchronize(recv)  # the producer's stream: before MPI or a copy reads the memory
    device = devices.device_of(recv)
    if not devices.needs_staging(recv, cuda_aware()):  # MPI reads the device memory itself
        return _steps_on(t, plan, send, recv.array, device.xp or np, tag, may_block=may_block)
    if plan.codec is None and plan.intra_codec is None:
        return _staged(t, plan, device, tag)
    # the codec encodes on the device; only packed bytes cross to the host
    return _steps_on(t, plan, send, recv.array, devices.PINNED, tag,
                     stage=staging.Stage(device, t))


def _widened(t: Transport, plan: Plan, tag: int, may_block: bool) -> Steps:
    """bfloat16: the plan's schedule on a float32 copy, rounded once into the result.

    Partial sums stay float32 on the wire and in every accumulator (as NCCL reduces
    bfloat16 since 2.27), so a lossless SUM is the float32 sum rounded once to nearest
    even, and MAX/MIN are exact; a codec encodes the float32 partial sums. The float32
    result is alike on every rank, and so is its rounding. MPI has no bfloat16 type, so
    `native` is MPI's own Allreduce of the float32 copy. Wire: 4 bytes an element
    lossless (twice bfloat16's), a codec's payload of float32 input otherwise.
    """
    source = plan.recv.array if plan.send is None else plan.send.array
    work = np.empty(plan.count, plan.work_dtype)
    inner = dataclasses.replace(plan, send=None, recv=Buffer(work, HOST, work, work.shape),
                                recvbuf=work)

    def steps() -> Steps:
        widen_bfloat16(source[: plan.count], work)  # when the call starts: nothing read sooner
        yield from steps_for(t, inner, tag, may_block)
        round_to_bfloat16(work, plan.recv.array[: plan.count])

    return steps()


def widen_bfloat16(source: np.ndarray, out: np.ndarray) -> None:
    """float32 `out` <- bfloat16 `source`, exactly: its bits are the top half of float32's."""
    np.left_shift(source.view(np.uint16), 16, out=out.view(np.uint32), dtype=np.uint32)


def round_to_bfloat16(source: np.ndarray, out: np.ndarray) -> None:
    """bfloat16 `out` <- float32 `source`, rounded to nearest even (NaN stays NaN)."""
    cpu_kernels().bf16_encode(source.view(np.uint32), out.view(np.uint16))


def _steps_on(t: Transport, plan: Plan, send: Any, recv: Any, xp: Any, tag: int,
              stage: staging.Stage | None = None, may_block: bool = False) -> Steps:
    """The schedule's steps on `recv` (and `send`), scratch from `xp`; `stage` wraps each
    encoding (device data staged through host memory); `may_block`: as `steps_for`."""
    if recv.size != plan.count:
        recv = recv[: plan.count]
    schedule = plan.schedule
    if schedule.native:
        steps = schedule.run(t, recv, Lossless(plan.op, recv.dtype, xp), tag, xp, send=send,
                             blocking=may_block)
    elif schedule.two_level:
        steps = _sliced(plan, recv, send, tag, _two_level(t, plan, tag, xp, stage))
    else:
        steps = _sliced(plan, recv, send, tag, _flat(t, plan, tag, xp, stage))
    return _scaled(steps, recv, t.size) if plan.mean else steps


# One slice of a call: (buf, send, first tag, encode-site scope) -> its steps.
SliceRun = Callable[[Any, Any, int, str], Steps]


def _sliced(plan: Plan, recv: Any, send: Any, tag: int, one: SliceRun) -> Steps:
    """`one` over each slice of `recv` (`plan.slicing`), `plan.slicing.window` in flight.

    Each slice takes its own tags (the schedule's `tags` of them, from `tag` on), so slices
    in flight never match each other's messages, and its own encode sites ("slice3/..."),
    so stochastic seeds and error-feedback residuals are per slice. Unsliced: one run.
    """
    if plan.slicing.slices == 1:
        return one(recv, send, tag, "")
    bounds = chunk_bounds(recv.size, plan.slicing.slices)
    tags = (plan.inner or plan.schedule).tags
    runs = (one(recv[lo:hi], None if send is None else send[lo:hi], tag + tags * i,
                f"slice{i}/") for i, (lo, hi) in enumerate(bounds))
    return pipelined(runs, plan.slicing.window)


def _flat(t: Transport, plan: Plan, tag: int, xp: Any,
          stage: staging.Stage | None = None) -> SliceRun:
    """A flat schedule's run of one slice, over t in ring order."""
    ordered = _in_ring_order(t, plan)

    def one(buf: Any, send: Any, slice_tag: int, scope: str) -> Steps:
        enc = _encoding(plan, plan.codec, "flat", t.rank, tag, t.size, xp, scope, stage)
        return plan.schedule.run(ordered, buf, enc, slice_tag, xp, send=send)

    return one


def _in_ring_order(t: Transport, plan: Plan) -> Transport:
    """t, renumbered so that each node's ranks are neighbours (when they are not already)."""
    topology = plan.topology
    return t if topology.ring_is_rank_order else t.reordered(topology.ring_key,
                                                             topology.ring_key.value)


def _layout(plan: Plan) -> tuple:
    """What names the two levels of a two-level plan (the same on every rank)."""
    return (plan.schedule.name, plan.topology.layout_key)


def split_keys(plan: Plan) -> list:
    """What names each sub-communicator the steps of `plan` need (the same on every rank)."""
    if plan.schedule.native:
        return []
    if plan.schedule.two_level:
        return [_layout(plan)]
    topology = plan.topology
    return [] if topology.ring_is_rank_order else [("order", topology.ring_key)]


def splits_communicator(t: Transport, plan: Plan) -> bool:
    """Whether the steps of `plan` would first split t's communicator (collective, blocking)."""
    if plan.schedule.native:
        return False
    if plan.schedule.two_level:
        return not t.has_split(_layout(plan))
    topology = plan.topology
    return not topology.ring_is_rank_order and not t.has_reordered(topology.ring_key)


def uses_collectives(t: Transport, plan: Plan) -> bool:
    """Whether the steps of `plan` call MPI's own collectives on t (or its sub-communicators),
    which match by the order they are posted in, or split t first (blocking, collective)."""
    return (plan.schedule.native or plan.inner is not None and plan.inner.native
            or splits_communicator(t, plan))


def shape_uses_collectives(t: Transport, topology: Any, shape: Any) -> bool:
    """`uses_collectives` of a plan running `shape` (a `planning.PlanShape`) on `topology`."""
    schedule = SCHEDULES[shape.algorithm]
    if schedule.native or shape.inner is not None and SCHEDULES[shape.inner].native:
        return True
    if schedule.two_level:
        return not t.has_split((schedule.name, topology.layout_key))
    return not topology.ring_is_rank_order and not t.has_reordered(topology.ring_key)


def _two_level(t: Transport, plan: Plan, tag: int, xp: Any,
               stage: staging.Stage | None = None) -> SliceRun:
    """The two-level schedule's run of one slice."""
    levels = Levels(*t.split(_layout(plan), plan.schedule.split(plan.topology)))
    inner = plan.inner

    def one(buf: Any, send: Any, slice_tag: int, scope: str) -> Steps:
        # the allgather's seeds are alike on every node: the same bytes decode alike
        intra = (_encoding(plan, plan.intra_codec, "intra-rs", t.rank, tag, t.size, xp, scope,
                           stage),
                 _encoding(plan, plan.intra_codec, "intra-ag", levels.intra.rank, tag, t.size,
                           xp, scope, stage))
        inter = _encoding(plan, plan.codec, "inter", t.rank, tag, t.size, xp, scope, stage)

        def across(t2: Transport, shard: Any, tag2: int, xp2: Any, send2: Any = None) -> Steps:
            if stage is not None and not inner.codecs:  # MPI would read the shard itself
                copy_in(shard, send2)
                return stage.on_host(t2, shard, lambda host: inner.run(
                    t2, host, Lossless(plan.op, plan.recv.dtype), tag2, np))
            return inner.run(t2, shard, inter, tag2, xp2, send=send2)

        return two_level(levels, buf, intra, across, slice_tag, xp, send)

    return one


def _encoding(plan: Plan, codec: Codec | None, level: str, rank: int, call: int, size: int,
              xp: Any, scope: str = "", stage: staging.Stage | None = None) -> Encoding:
    """Lossless(op) without a codec; else the codec at one level of one call, error
    feedback under (key, level), its encode sites under `scope`; wrapped by `stage`."""
    if codec is None:
        enc = Lossless(plan.op, plan.recv.dtype, xp)
    else:
        key = None if plan.key is None else (plan.key, level)
        context = (plan.name, plan.count, plan.recv.dtype.str, size, level)
        encoder = Encoder(codec, rank=rank, call=call, key=key, context=context, prefix=scope)
        enc = Compressed(encoder, plan.recv.dtype)
    return enc if stage is None else stage(enc)


def _scaled(steps: Steps, arr: Any, size: int) -> Steps:
    """Run `steps`, then divide the sum by the number of ranks (op="mean")."""
    yield from steps
    arr /= size


def _staged(t: Transport, plan: Plan, device: devices.Device, tag: int) -> Steps:
    """Lossless device data through pinned host memory, in chunks (`staging.through_pinned`),
    each chunk all-reduced on the host by the plan's own schedule."""
    count = plan.count
    target = device.view(plan.recv.array[:count])
    source = target if plan.send is None else device.view(plan.send.array)

    def reduce_chunk(host: np.ndarray) -> Steps:
        chunk = dataclasses.replace(plan, send=None, recv=Buffer(host, HOST, host, host.shape),
                                    recvbuf=host)
        chunk.slicing = slicing_of(chunk)  # slices sized to the chunk
        return _steps_on(t, chunk, None, host, np, tag)

    return staging.through_pinned(t, source, target, reduce_chunk)

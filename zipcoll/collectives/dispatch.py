"""A Plan -> the steps that carry it out: which schedule, which encoders, staging of GPU data."""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from zipcoll import buffers
from zipcoll.buffers import CUDA, HOST, Buffer
from zipcoll.collectives.allgather import allgather_allreduce_compressed
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.hierarchical import KINDS, make_levels, two_level_allreduce
from zipcoll.collectives.native import native_allreduce
from zipcoll.collectives.plan import Plan
from zipcoll.collectives.recursive import rabenseifner_allreduce
from zipcoll.collectives.ring import ring_allreduce, ring_allreduce_compressed
from zipcoll.collectives.schedule import Steps, chunk_bounds, copy_in, pipelined
from zipcoll.collectives.tree import (dbtree_allreduce, dbtree_allreduce_compressed,
                                      tree_allreduce, tree_allreduce_compressed)
from zipcoll.collectives.twophase import twophase_allreduce_compressed
from zipcoll.codecs import Codec
from zipcoll.transport import TAGS_PER_CALL, Transport, cuda_aware

# Two-level schedules run in slices of about this many bytes, this many at once.
SLICE_BYTES = int(os.environ.get("ZIPCOLL_SLICE_BYTES", 2 << 20))
PIPELINE_WINDOW = int(os.environ.get("ZIPCOLL_PIPELINE_WINDOW", 8))

# (t, buf, op, tag, xp, send=None): any predefined op, in place on buf or from send.
LOSSLESS: dict[str, Callable[..., Steps]] = {
    "native": native_allreduce,
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "dbtree": dbtree_allreduce,
    "rabenseifner": rabenseifner_allreduce,
}
# (t, buf, encoder, tag, xp): SUM in place on buf, compressing with the encoder's codec.
COMPRESSED: dict[str, Callable[..., Steps]] = {
    "ring": ring_allreduce_compressed,
    "tree": tree_allreduce_compressed,
    "dbtree": dbtree_allreduce_compressed,
    "twophase": twophase_allreduce_compressed,
    "allgather": allgather_allreduce_compressed,
}


def steps_for(t: Transport, plan: Plan, blocking: bool) -> Steps:
    """The steps of `plan`; device data goes through host memory if MPI cannot read it."""
    send = plan.send.array if plan.send is not None else None
    if plan.recv.device != CUDA:
        return _steps_on(t, plan, send, plan.recv.array, np, blocking)
    buffers.synchronize(plan.recv)
    if cuda_aware():
        return _steps_on(t, plan, send, plan.recv.array, buffers.cupy(), blocking)
    return _staged(t, plan, blocking)


def _steps_on(t: Transport, plan: Plan, send: Any, recv: Any, xp: Any, blocking: bool) -> Steps:
    recv = recv[: plan.count]
    tag = t.next_tag()
    if plan.algorithm == "native":
        steps = native_allreduce(t, recv, plan.op, tag, xp, send=send, blocking=blocking)
    elif plan.kind in KINDS:
        steps = _two_level(t, plan, send, recv, tag, xp, blocking)
    elif plan.codec is None:
        steps = LOSSLESS[plan.algorithm](t, recv, plan.op, tag, xp, send=send)
    else:
        copy_in(recv, send)
        encoder = _encoder(plan, plan.codec, "flat", t.rank, tag, t.size)
        steps = COMPRESSED[plan.algorithm](t, recv, encoder, tag, xp)
    return _scaled(steps, recv, t.size) if plan.mean else steps


def _two_level(t: Transport, plan: Plan, send: Any, recv: Any, tag: int, xp: Any,
               blocking: bool) -> Steps:
    """The two-level schedule over slices of the message, a few in flight at once.

    While one slice waits on the slow link, the next reduces in shared memory or encodes.
    """
    levels = make_levels(t, plan.kind, plan.topology)
    inter = plan.codec and _encoder(plan, plan.codec, "inter", t.rank, tag, t.size)
    intra = None
    if plan.intra_codec is not None:  # seeds of the allgather's encodes are alike on every node
        intra = (_encoder(plan, plan.intra_codec, "intra-rs", t.rank, tag, t.size),
                 _encoder(plan, plan.intra_codec, "intra-ag", levels.intra.rank, tag, t.size))
    slices = chunk_bounds(recv.size, _slice_count(recv.nbytes))

    def one(index: int, lo: int, hi: int) -> Steps:
        scope = f"slice{index}/"
        inner = _inner_schedule(plan, inter and inter.scoped(scope), blocking)
        encoders = intra and tuple(e.scoped(scope) for e in intra)
        return two_level_allreduce(levels, recv[lo:hi], plan.op, inner, tag + 2 * index, xp,
                                   None if send is None else send[lo:hi], encoders)

    # MPI's own collectives match by the order they start in: one slice at a time for them
    window = 1 if plan.inner == "native" else _window(recv.nbytes // len(slices))
    return pipelined((one(i, lo, hi) for i, (lo, hi) in enumerate(slices)), window)


def _window(slice_bytes: int) -> int:
    """Slices in flight: PIPELINE_WINDOW, but no more than 16 MiB of them.

    More overflows the shaped link's queue: at 4 nodes x 1 rank, 1 Gbit/s, 8 slices of
    4 MiB took 6 s for 128 MiB against 0.26 s for 64 MiB in 2 MiB slices.
    """
    return max(1, min(PIPELINE_WINDOW, (16 << 20) // max(1, slice_bytes)))


def _slice_count(nbytes: int) -> int:
    """Slices of about SLICE_BYTES, each with two tags of the call's TAGS_PER_CALL."""
    return max(1, min(-(-nbytes // SLICE_BYTES), TAGS_PER_CALL // 2))


def _inner_schedule(plan: Plan, encoder: Encoder | None, blocking: bool) -> Callable[..., Steps]:
    """Level 2 of a two-level plan, as a function of (transport, shard, tag, xp)."""
    if encoder is not None:
        return lambda t, shard, tag, xp: COMPRESSED[plan.inner](t, shard, encoder, tag, xp)
    if plan.inner == "native":
        return lambda t, shard, tag, xp: native_allreduce(t, shard, plan.op, tag, xp,
                                                          blocking=blocking)
    return lambda t, shard, tag, xp: LOSSLESS[plan.inner](t, shard, plan.op, tag, xp)


def _encoder(plan: Plan, codec: Codec, level: str, rank: int, call: int, size: int) -> Encoder:
    """An Encoder for one level of one call; error feedback under (key, level)."""
    key = None if plan.key is None else (plan.key, level)
    context = (plan.algorithm, plan.count, plan.recv.dtype.str, size, level)
    return Encoder(codec, rank=rank, call=call, key=key, context=context)


def _scaled(steps: Steps, arr: Any, size: int) -> Steps:
    """Run `steps`, then divide the sum by the number of ranks (op="mean")."""
    yield from steps
    arr /= size


def _staged(t: Transport, plan: Plan, blocking: bool) -> Steps:
    """Device data through host memory, for an MPI that cannot read GPU memory."""
    device = plan.recv.array[: plan.count] if plan.send is None else plan.send.array
    host = buffers.cupy().asnumpy(device)
    host_plan = Plan(None, Buffer(host, HOST, host, host.shape), plan.op, plan.algorithm, host,
                     plan.codec, plan.intra_codec, plan.key, plan.mean, plan.topology)
    yield from _steps_on(t, host_plan, None, host, np, blocking)
    plan.recv.array[: plan.count].set(host)

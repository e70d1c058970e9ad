"""Argument checks: the caller's arguments -> a typed `Plan` of one all-reduce, or TypeError/ValueError.

The algorithm name is parsed here, once, into registry entries (`registry.parse`);
"auto" is resolved here too. Nothing downstream reads algorithm strings. Nothing here
sends a message or writes a caller's buffer; every rank can run it alone.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import weakref
from dataclasses import dataclass
from typing import Any, Hashable, Mapping

import numpy as np
from mpi4py import MPI

from zipcoll import buffers, settings
from zipcoll.buffers import Buffer
from zipcoll.collectives import encoding, registry
from zipcoll.collectives.planning.plans import PlanShape, codec_idle, codec_spec
from zipcoll.collectives.planning.selector import Selector, default_inner, schedules_for
from zipcoll.collectives.planning.tuning import key_of
from zipcoll.collectives.ops import (BFLOAT16, BY_NAME, ReduceOp, check_supported, kind_of,
                                     lookup, native_agrees)
from zipcoll.collectives.registry import SCHEDULES, Schedule
from zipcoll.collectives.slicing import Slicing, slicing_of
from zipcoll.codecs import Codec, ErrorFeedback, get_codec
from zipcoll.topologies import Topology

FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BFLOAT16)
# bfloat16 calls run on a float32 copy (accumulated in float32, rounded once at the end):
# the schedules, the codecs and the cost model see that dtype (`Plan.work_dtype`).
WORK_DTYPES = {BFLOAT16: np.dtype(np.float32)}

@dataclass
class Plan:
    """One validated all-reduce: what to reduce, where the result goes, and how."""

    send: Buffer | None  # None: in place
    recv: Buffer
    recvbuf: Any  # the caller's recvbuf, or None: a new result is returned
    op: ReduceOp | MPI.Op
    schedule: Schedule  # a flat schedule, or a two-level one
    inner: Schedule | None = None  # a two-level schedule's inter level
    codec: Codec | None = None  # the flat codec, or the inter level's
    intra_codec: Codec | None = None  # a two-level schedule's level 1
    slicing: Slicing = Slicing()
    key: Hashable = None
    mean: bool = False  # divide the sum by the number of ranks
    topology: Topology | None = None
    reason: str = ""  # why the schedule differs from the one asked for, if it must
    # auto sent lossless although a codec was passed: (codec, bytes, op, native) as priced
    dropped: tuple | None = None
    # auto's plan: (bytes, op, native, level-1 codec, flat codec, tuning kind) it was
    # priced with (the codecs the caller allowed; `planning.tuning.key_of`); None where
    # the caller named the algorithm
    auto: tuple | None = None
    # what is worked out from the plan alone, once per cached plan: its copies for other
    # buffers share it (`_with_buffers`); a plan changed by `dataclasses.replace` starts
    # its own
    memo: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def count(self) -> int:
        return self.recv.count if self.send is None else self.send.count

    @property
    def work_dtype(self) -> np.dtype:
        """The dtype the schedule runs on: the buffers' own, float32 for bfloat16."""
        return WORK_DTYPES.get(self.recv.dtype, self.recv.dtype)

    @property
    def name(self) -> str:
        """The resolved algorithm, as a user would write it: "ring", "hierarchical:tree"."""
        return self.schedule.name + (f":{self.inner.name}" if self.inner else "")

    @property
    def shape(self) -> PlanShape:
        """The plan as the cost model names it (``str``: "hierarchical:ring + int8")."""
        return PlanShape(self.schedule.name, self.inner.name if self.inner else None,
                         codec_spec(self.intra_codec), codec_spec(self.codec))

    def outcome(self) -> Any:
        """What allreduce returns once the steps are done: recvbuf, or the caller's kind of array."""
        if self.recvbuf is not None:
            return self.recvbuf
        return buffers.result_like(self.send, self.recv.array)


def make_plan(sendbuf: Any, recvbuf: Any, op: Any, algorithm: str, codec: Any, key: Hashable,
              topology: Topology, selector: Selector | None = None,
              cache: dict | None = None) -> Plan:
    """All local checks of one call; raises TypeError/ValueError, touching nothing.

    `selector` (the communicator's `planning.Selector`) decides "auto". `cache` (the
    communicator's, kept between calls): plans already checked, by the arguments that
    decide them (`_cache_key`); a call like an earlier one checks only its buffers."""
    send, recv = _buffers(sendbuf, recvbuf)
    found = None if cache is None else _cache_key(send, recv, op, algorithm, codec, key,
                                                  topology)
    if found is not None and settings.get() is not cache.get(_SETTINGS):
        _emptied(cache)  # settings changed (slice sizes, ...): every plan is checked anew
    try:
        template = None if found is None else cache.get(found)
    except TypeError:  # an unhashable key: not cached (the checks below raise its error)
        found = template = None
    if template is not None:
        if recv is None:
            recv = _new_result(send)
        else:
            _check_matching(send, recv)
        return _with_buffers(template, send, recv, recvbuf)
    plan = _checked(send, recv, recvbuf, op, algorithm, codec, key, topology, selector)
    if found is not None and _stateless(codec):
        if len(cache) > _CACHED_PLANS:
            _emptied(cache)
        cache[found] = _with_buffers(plan, None, None, None)  # holds none of the caller's
    return plan


_SETTINGS = "settings"  # a plan cache's entry: the settings its plans were made under
_CACHED_PLANS = 64


def _emptied(cache: dict) -> None:
    """Drop every cached plan; those made from now on are under the settings in force."""
    cache.clear()
    cache[_SETTINGS] = settings.get()


def _cache_key(send: Buffer | None, recv: Buffer | None, op: Any, algorithm: str, codec: Any,
               key: Hashable, topology: Topology) -> tuple | None:
    """What decides a call's plan besides its buffers' memory: None where it cannot be
    cached (a user-defined op, a codec object or per-level spec); one holding an unhashable
    argument is found out at the look-up."""
    if not (codec is None or isinstance(codec, str)) or not isinstance(algorithm, str):
        return None
    if isinstance(op, str):
        op_key = op.lower()
    elif isinstance(op, MPI.Op):
        try:
            known = lookup(op)
        except ValueError:
            return None
        if not isinstance(known, ReduceOp):
            return None
        op_key = known.name
    else:
        return None
    source = send if send is not None else recv
    if source is None:
        return None
    return (algorithm, op_key, codec, key, topology, send is None, recv is None,
            source.dtype, source.device, type(source.array), source.count)


def _stateless(codec: Any) -> bool:
    """Whether a codec argument gives the same codec object every call (so a cached plan
    may hold it): none, or a spec of a codec without state (`_codec`)."""
    if codec is None:
        return True
    parsed = _parsed(codec)
    return not (parsed.stochastic or isinstance(parsed, ErrorFeedback))


def _with_buffers(plan: Plan, send: Buffer | None, recv: Buffer | None, recvbuf: Any) -> Plan:
    """`plan` with other buffers (a shallow copy: the rest is shared, and never changed)."""
    new = object.__new__(Plan)
    new.__dict__.update(plan.__dict__)
    new.send, new.recv, new.recvbuf = send, recv, recvbuf
    return new


def _checked(send: Buffer | None, recv: Buffer | None, recvbuf: Any, op: Any, algorithm: str,
             codec: Any, key: Hashable, topology: Topology, selector: Selector | None) -> Plan:
    """make_plan's checks past the buffers' own, and the plan."""
    schedule, inner = registry.parse(algorithm)
    mean = isinstance(op, str) and op.lower() == "mean"
    reduce_op = BY_NAME["sum"] if mean else lookup(op)
    source = send if send is not None else recv
    to_mpi = buffers.handed_to_mpi(source)
    check_supported(reduce_op, source.dtype)
    if mean and kind_of(source.dtype) not in "fc":
        raise TypeError(f"op 'mean' needs a float or complex dtype, not {source.dtype}")
    intra_codec, flat_codec, key = _codecs(codec, schedule, inner, key)
    _check_key(key)
    if flat_codec is not None or intra_codec is not None:
        _check_compressible(reduce_op, source.dtype, flat_codec or intra_codec)
    if schedule is not None and schedule.two_level:
        schedule.split(topology)  # ValueError where the layout does not fit
    if to_mpi:
        _check_mpi_can_do_it(flat_codec or intra_codec, mean)
    if recv is None:
        recv = _new_result(send)
    else:
        _check_matching(send, recv)
    plan = Plan(send, recv, recvbuf, reduce_op, schedule or SCHEDULES["native"], inner,
                flat_codec, intra_codec, key=key, mean=mean, topology=topology)
    if to_mpi:
        plan.schedule, plan.inner = SCHEDULES["native"], None
        plan.reason = ("GPU buffers without CuPy: the MPI library's own Allreduce, "
                       "as mpi4py would call it")
    elif not isinstance(reduce_op, ReduceOp):
        _check_mpi_has_type(source.dtype)
        plan.schedule, plan.inner = SCHEDULES["native"], None  # only MPI can apply a user op
    elif schedule is None:
        _choose(plan, source.count * plan.work_dtype.itemsize, selector)
    elif schedule.two_level and inner is None:
        plan.inner = SCHEDULES[default_inner(flat_codec)]
    plan.slicing = slicing_of(plan)
    return plan


def _check_key(key: Hashable) -> None:
    """The error-feedback key names residuals in a dict: it must hash (checked before the
    agreement, so every rank learns of it)."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable (a str, int or tuple), not "
                        f"{type(key).__name__}") from None


def _buffers(sendbuf: Any, recvbuf: Any) -> tuple[Buffer | None, Buffer | None]:
    if sendbuf is MPI.IN_PLACE and recvbuf is None:
        raise ValueError("sendbuf is MPI.IN_PLACE but no recvbuf was given")
    send = None if sendbuf is MPI.IN_PLACE else buffers.as_array(sendbuf)
    recv = None if recvbuf is None else buffers.as_array(recvbuf, writable=True)
    return send, recv


def _check_mpi_has_type(dtype: np.dtype) -> None:
    """A user-defined op runs in the MPI library, which has no bfloat16 type."""
    if dtype == BFLOAT16:
        raise TypeError("a user-defined MPI.Op cannot reduce bfloat16 (MPI has no bfloat16 "
                        "type); use a predefined op, or pass float32")


def _check_mpi_can_do_it(codec: Codec | None, mean: bool) -> None:
    """GPU buffers without CuPy: only a lossless reduction MPI applies on its own. A drop-in
    is never worse than the call it replaces, so every lossless algorithm comes here."""
    if codec is not None:
        raise buffers.DeviceComputeError(f"codec {codec.codec_id!r}")
    if mean:
        raise buffers.DeviceComputeError("op 'mean'")


def _codecs(spec: Any, schedule: Schedule | None, inner: Schedule | None,
            key: Hashable) -> tuple[Codec | None, Codec | None, Hashable]:
    """(level-1 codec, flat or level-2 codec, feedback key) of a `codec=` argument, checked
    against the schedule."""
    levels = isinstance(spec, Mapping) and "id" not in spec
    two_level = schedule is None or schedule.two_level  # "auto" may pick a two-level one
    if levels and not two_level:
        raise ValueError(f"a codec per level ({sorted(spec)}) needs a two-level algorithm "
                         f"({', '.join(s.name for s in SCHEDULES.values() if s.two_level)}), "
                         f"not {schedule.name!r}")
    if levels and set(spec) - {"intra", "inter"}:
        raise ValueError(f"codec levels are 'intra' and 'inter', got {sorted(spec)}")
    intra = _codec(spec.get("intra")) if levels else None
    flat = _codec(spec.get("inter") if levels else spec)
    given = [spec.get("intra"), spec.get("inter")] if levels else [spec]
    intra, flat, key = _feedback_as_key(intra, flat, key, given)
    if flat is not None and schedule is not None and not schedule.two_level:
        _check_schedule(schedule, flat)
    if flat is not None and inner is not None:
        _check_schedule(inner, flat)
    if intra is not None:
        _check_schedule(SCHEDULES["ring"], intra)  # level 1 is a per-hop ring
    return intra, flat, key


def _codec(spec: Any) -> Codec | None:
    """The codec of a spec; a string naming a codec without state is parsed once."""
    if isinstance(spec, str):
        codec = _parsed(spec)
        if not (codec.stochastic or isinstance(codec, ErrorFeedback)):
            return codec  # stateless: one object serves every call
    return None if spec is None else get_codec(spec)


@functools.lru_cache(maxsize=64)
def _parsed(spec: str) -> Codec:
    return get_codec(spec)


def _feedback_as_key(intra: Codec | None, flat: Codec | None, key: Hashable,
                     given: list) -> tuple[Codec | None, Codec | None, Hashable]:
    """An ErrorFeedback codec means error feedback: its inner codec, with residuals kept per
    encode site under `key`; without one, under the ErrorFeedback object the caller passed
    (freed with it), or under a spec's config (a spec such as "feedback:sign" parses to a
    new object every call: the same spec must find the same residuals, and a key per call
    would hold a message-sized residual for every call until it idles out)."""
    wrapped = [c for c in (intra, flat) if isinstance(c, ErrorFeedback)]
    if not wrapped:
        return intra, flat, key
    unwrap = (lambda c: c.codec if isinstance(c, ErrorFeedback) else c)
    if key is None:
        key = _object_key(wrapped[0]) if any(wrapped[0] is g for g in given) else \
            ("feedback", json.dumps(wrapped[0].get_config(), sort_keys=True, default=str))
    return unwrap(intra), unwrap(flat), key


def _object_key(codec: ErrorFeedback) -> Hashable:
    """("feedback", id) for a caller's ErrorFeedback object; its residuals go when it does."""
    key = ("feedback", encoding.Identity(id(codec)))
    if id(codec) not in _WATCHED:
        _WATCHED.add(id(codec))
        weakref.finalize(codec, _forget, key)
        encoding.FEEDBACK.adopt(key, codec)  # its own residuals: its reset/keys/nbytes see them
    return key


_WATCHED: set[int] = set()


def _forget(key: tuple) -> None:
    _WATCHED.discard(key[1])
    encoding.FEEDBACK.forget_later(key)


def _check_schedule(schedule: Schedule, codec: Codec) -> None:
    if not schedule.accepts(codec):
        accepting = registry.accepting(codec)
        raise ValueError(f"algorithm {schedule.name!r} cannot use codec {codec.codec_id!r}; "
                         f"algorithms that can: {', '.join(accepting)} (and hierarchical:X, "
                         f"torus:X for those X)")


def _check_compressible(op: ReduceOp | MPI.Op | None, dtype: np.dtype, codec: Codec,
                        collective: str = "all-reduce") -> None:
    """A codec compresses floats reduced by SUM (or mean); `op` None: `collective` reduces
    nothing (an all-gather), only the dtype counts."""
    if op is not None and op != BY_NAME["sum"]:
        name = op.name if isinstance(op, ReduceOp) else "a user-defined op"
        raise ValueError(f"compressed {collective} supports op SUM and 'mean', not {name}; "
                         "use codec=None for other ops")
    if dtype not in FLOATS:
        raise TypeError(f"codec {codec.codec_id!r} compresses float16/32/64 and bfloat16, "
                        f"not {dtype}")


def _new_result(send: Buffer) -> Buffer:
    array = buffers.empty_like(send)
    return Buffer(array, send.device, array, send.shape)


def _check_matching(send: Buffer | None, recv: Buffer) -> None:
    if send is None:
        return
    if send.dtype != recv.dtype:
        raise TypeError(f"sendbuf has dtype {send.dtype} but recvbuf has {recv.dtype}")
    if send.device != recv.device:
        raise TypeError(f"sendbuf is on {send.device} but recvbuf is on {recv.device}")
    if recv.count < send.count:
        raise ValueError(f"recvbuf holds {recv.count} items, fewer than the {send.count} sent")
    _check_disjoint(send, recv)


def _check_disjoint(send: Buffer, recv: Buffer) -> None:
    """ValueError where sendbuf and the recvbuf items written share memory (as Open MPI's
    MPI_ERR_BUFFER): the schedules write partial results into recvbuf while they still
    read sendbuf, so aliased buffers would give wrong sums that differ across ranks."""
    if send.count == 0:
        return
    written = recv.array if recv.count == send.count else recv.array[:send.count]
    if (type(send.array) is np.ndarray and type(written) is np.ndarray
            and not np.may_share_memory(send.array, written)):
        return  # host arrays whose memory bounds do not meet (one C call)
    send_start, send_end = buffers.byte_range(send)
    recv_start, recv_end = buffers.byte_range(recv, send.count)
    if send_start < recv_end and recv_start < send_end:
        how = "are the same memory" if (send_start, send_end) == (recv_start, recv_end) \
            else "overlap"
        raise ValueError(f"sendbuf and recvbuf {how} (bytes {send_start:#x}..{send_end:#x} "
                         f"and {recv_start:#x}..{recv_end:#x}); to reduce in place pass "
                         "MPI.IN_PLACE as sendbuf and the buffer as recvbuf")


SUM = BY_NAME["sum"]


def _choose(plan: Plan, nbytes: int, selector: Selector) -> None:
    """algorithm="auto": the schedule for this size and layout; codecs only where they pay.

    The MPI library's own op (flat `native`, or a two-level plan's native inter level)
    only where it gives zipcoll's answer (`ops.native_agrees`: Open MPI saturates 8- and
    16-bit integer sums where zipcoll wraps, and drops NaN in float MAX/MIN), so that
    auto's answer never depends on the size.
    """
    op = "sum" if plan.op is SUM else plan.op.name
    native = native_agrees(plan.op, plan.work_dtype)  # bfloat16 reduces as float32
    plan.auto = (nbytes, op, native, plan.intra_codec, plan.codec,
                 key_of(nbytes, plan.work_dtype, op, plan.codec, plan.topology, native))
    plan.schedule, plan.inner, compress = schedules_for(nbytes, plan.topology, plan.codec,
                                                        plan.work_dtype, op, selector, native)
    if not compress:
        if plan.topology.size > 1 and (plan.codec is not None or plan.intra_codec is not None):
            plan.dropped = (plan.codec or plan.intra_codec, nbytes, op, native)
        plan.codec = plan.intra_codec = None


def with_shape(plan: Plan, shape: PlanShape) -> Plan:
    """auto's `plan` running `shape` instead (online tuning: one of the plans the model
    ranked for the same arguments); its codecs only those the caller allowed. Made once
    per cached plan and shape (kept without the caller's buffers), then given this call's."""
    made = plan.memo.get(("shaped", shape))
    if made is None:
        made = plan.memo[("shaped", shape)] = _with_buffers(_shaped(plan, shape), None, None, None)
    return _with_buffers(made, plan.send, plan.recv, plan.recvbuf)


def _shaped(plan: Plan, shape: PlanShape) -> Plan:
    nbytes, op, native, intra_codec, codec, _ = plan.auto
    new = dataclasses.replace(plan, schedule=SCHEDULES[shape.algorithm],
                              inner=SCHEDULES[shape.inner] if shape.inner else None,
                              codec=codec, intra_codec=intra_codec, dropped=None)
    compress = shape.inter_codec is not None and not codec_idle(shape, plan.topology)
    if not compress:
        if plan.topology.size > 1 and (codec is not None or intra_codec is not None):
            new.dropped = (codec or intra_codec, nbytes, op, native)
        new.codec = new.intra_codec = None
    new.slicing = slicing_of(new)
    return new

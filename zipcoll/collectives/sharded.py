"""reduce_scatter / allgather (and ireduce_scatter / iallgather): the collectives of sharded
training, and `ShardedMethods`, the drop-ins `zipcoll.Intracomm` takes from here.

The same call as an all-reduce (`call.start`): a number and a tag block in start order,
the local checks (`make_shard_plan`), the agreement check with the counts in it, a turn
for MPI's own collectives, then the schedule, in the thread's progress engine. Schedules
come from `registry.SHARDED` (schedules/sharded/: ring, halving, native), each with its
reduce-scatter, its all-gather and their costs; `algorithm="auto"` takes the cheapest.

    rank r's block:  sendbuf[sum(counts[:r]) : sum(counts[:r + 1])]   (reduce-scatter's result,
                     all-gather's input); counts=None: equal blocks

Reduce-scatter works on a private copy of the whole vector (its partial sums), so the
caller's buffers are only written once the result is known: in place (MPI.IN_PLACE), the
input is the receive buffer, the result its first counts[r] items and the rest stays.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np
from mpi4py import MPI

from zipcoll import buffers, settings, transport
from zipcoll.buffers import CUDA, Buffer
from zipcoll.codecs import Codec
from zipcoll.collectives.agreement import code, layout_text
from zipcoll.collectives.call import Call, start
from zipcoll.collectives.context import Context, context_for
from zipcoll.collectives.dispatch import round_to_bfloat16, widen_bfloat16
from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.ops import BFLOAT16, BY_NAME, ReduceOp, check_supported, kind_of, \
    lookup, native_agrees, op_code
from zipcoll.collectives.plan import _check_compressible, _check_key, _codec, _feedback_as_key
from zipcoll.collectives.planning.sharded import (ALLGATHER, REDUCE_SCATTER, predict_sharded,
                                                  sharded_plans)
from zipcoll.collectives.progress import Request, check_threads
from zipcoll.collectives.registry import SHARDED, ShardSchedule
from zipcoll.collectives.schedule import Steps, pipelined
from zipcoll.collectives.schedules.sharded.hierarchical import rank_grid
from zipcoll.collectives.slicing import sharded_slicing
from zipcoll.collectives.steps import Compressed, Encoding, Lossless
from zipcoll.collectives.twolevel import Levels
from zipcoll.failures import abort_on_error
from zipcoll.topologies import Topology

SUM = BY_NAME["sum"]


def reduce_scatter(sendbuf: Any, recvbuf: Any = None, *, counts: Sequence[int] | None = None,
                   op: Any = "sum", algorithm: str = "auto", codec: Any = None,
                   key: Hashable = None, comm: MPI.Intracomm = MPI.COMM_WORLD,
                   topology: Topology | None = None) -> Any:
    """Reduce every rank's `sendbuf` and give rank r block r: `recvbuf` if given, else a new
    1-D array of the caller's kind.

    `counts`: block sizes, one a rank (their sum is sendbuf's size), as MPI_Reduce_scatter;
    None: p equal blocks (MPI_Reduce_scatter_block). `sendbuf=MPI.IN_PLACE`: `recvbuf`
    holds the input, the result goes to its first counts[r] items. `op`: an MPI.Op, a
    name ("sum", "max", ...), or "mean". `codec` (SUM and mean): compress every hop;
    `key`: error feedback across calls. `algorithm`: "auto" or a name of
    `zipcoll.collectives.SHARDED`.

    >>> shard = zipcoll.reduce_scatter(grads, codec="int8", key="grads")   # doctest: +SKIP
    """
    return _start(REDUCE_SCATTER, sendbuf, recvbuf, counts, op, comm, algorithm, codec, key,
                  topology, True).wait()


def ireduce_scatter(sendbuf: Any, recvbuf: Any = None, *, counts: Sequence[int] | None = None,
                    op: Any = "sum", algorithm: str = "auto", codec: Any = None,
                    key: Hashable = None, comm: MPI.Intracomm = MPI.COMM_WORLD,
                    topology: Topology | None = None) -> Request:
    """Start a reduce-scatter (arguments as `reduce_scatter`); its Request."""
    return _start(REDUCE_SCATTER, sendbuf, recvbuf, counts, op, comm, algorithm, codec, key,
                  topology, False)


def allgather(sendbuf: Any, recvbuf: Any = None, *, counts: Sequence[int] | None = None,
              algorithm: str = "auto", codec: Any = None, key: Hashable = None,
              comm: MPI.Intracomm = MPI.COMM_WORLD, topology: Topology | None = None) -> Any:
    """Every rank's `sendbuf`, in rank order, on every rank: `recvbuf` if given, else a new
    1-D array of the caller's kind.

    `counts`: each rank's size, as MPI_Allgatherv (counts[r] is sendbuf's); None: every
    rank sends as many. `sendbuf=MPI.IN_PLACE`: rank r's block is in `recvbuf` already.
    `codec`: each block encoded once by its owner, decoded alike by every other rank
    (any codec: variable-size ones go through MPI's own Allgatherv); the owner keeps its
    own block exact. `key`: error feedback across calls.
    """
    return _start(ALLGATHER, sendbuf, recvbuf, counts, "sum", comm, algorithm, codec, key,
                  topology, True).wait()


def iallgather(sendbuf: Any, recvbuf: Any = None, *, counts: Sequence[int] | None = None,
               algorithm: str = "auto", codec: Any = None, key: Hashable = None,
               comm: MPI.Intracomm = MPI.COMM_WORLD,
               topology: Topology | None = None) -> Request:
    """Start an all-gather (arguments as `allgather`); its Request."""
    return _start(ALLGATHER, sendbuf, recvbuf, counts, "sum", comm, algorithm, codec, key,
                  topology, False)


# -- the plan: every local check -------------------------------------------------------

@dataclass
class ShardPlan:
    """One validated reduce-scatter or all-gather."""

    kind: str
    send: Buffer | None  # None: in place
    recv: Buffer
    recvbuf: Any  # the caller's, or None: `recv` is new and returned
    counts: list[int]
    rank: int
    op: ReduceOp | MPI.Op
    schedule: ShardSchedule
    codec: Codec | None = None
    key: Hashable = None
    mean: bool = False
    topology: Topology | None = None
    inner: ShardSchedule | None = None  # a two-level schedule's schedule across nodes

    @property
    def name(self) -> str:
        """The resolved algorithm, as a user would write it: "ring", "hierarchical:halving"."""
        return self.schedule.name + (f":{self.inner.name}" if self.inner else "")

    @property
    def blocks(self) -> list[tuple[int, int]]:
        return _blocks(tuple(self.counts))

    @property
    def total(self) -> int:
        return sum(self.counts)

    @property
    def dtype(self) -> np.dtype:
        return (self.send or self.recv).dtype

    @property
    def work_dtype(self) -> np.dtype:
        """What the schedule computes in: float32 for bfloat16 (MPI has no bfloat16)."""
        return np.dtype(np.float32) if self.dtype == BFLOAT16 else self.dtype

    @property
    def result_count(self) -> int:
        return self.counts[self.rank] if self.kind == REDUCE_SCATTER else self.total

    def outcome(self) -> Any:
        if self.recvbuf is not None:
            return self.recvbuf
        send = self.send
        shaped = Buffer(send.array, send.device, send.source, (self.result_count,))
        return buffers.result_like(shaped, self.recv.array)


@functools.lru_cache(maxsize=256)
def _blocks(counts: tuple) -> list[tuple[int, int]]:
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
    return list(zip(starts[:-1], starts[1:]))


def make_shard_plan(kind: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any,
                    algorithm: str, codec: Any, key: Hashable, topology: Topology,
                    ctx: Context) -> ShardPlan:
    """All local checks of one call; raises TypeError/ValueError, touching nothing."""
    size, rank = ctx.transport.size, ctx.transport.rank
    schedule, inner = _parse(algorithm)
    mean = kind == REDUCE_SCATTER and isinstance(op, str) and op.lower() == "mean"
    reduce_op = SUM if mean else lookup(op)
    if sendbuf is MPI.IN_PLACE and recvbuf is None:
        raise ValueError("sendbuf is MPI.IN_PLACE but no recvbuf was given")
    send = None if sendbuf is MPI.IN_PLACE else buffers.as_array(sendbuf)
    recv = None if recvbuf is None else buffers.as_array(recvbuf, writable=True)
    source = send if send is not None else recv
    dtype = source.dtype
    if kind == REDUCE_SCATTER:
        check_supported(reduce_op, dtype)
        if mean and kind_of(dtype) not in "fc":
            raise TypeError(f"op 'mean' needs a float or complex dtype, not {dtype}")
    blocks = _counts(kind, counts, send, recv, size, rank)
    flat = _codec(codec)
    _, flat, key = _feedback_as_key(None, flat, key, [codec])
    _check_key(key)
    if flat is not None:
        reduced = reduce_op if kind == REDUCE_SCATTER else None  # all-gather: dtype only
        _check_compressible(reduced, dtype, flat, kind)
    to_mpi = buffers.handed_to_mpi(source)
    if to_mpi and (flat is not None or mean):
        raise buffers.DeviceComputeError(f"codec {flat.codec_id!r}" if flat else "op 'mean'")
    if source.device == CUDA and not to_mpi:
        raise TypeError(f"{kind} of CuPy arrays is not supported yet; pass host arrays")
    recv = _checked_recv(kind, send, recv, blocks, rank)
    plan = ShardPlan(kind, send, recv, recvbuf, blocks, rank, reduce_op, schedule,
                     flat, key, mean, topology, inner)
    _choose(plan, schedule, to_mpi, size, ctx)
    return plan


def _choose(plan: ShardPlan, schedule: ShardSchedule | None, to_mpi: bool, size: int,
            ctx: Context) -> None:
    """The plan's schedule: MPI's own where only MPI can run it (device memory zipcoll
    cannot compute on, a user-defined op), auto's, or the one asked for, checked."""
    if to_mpi or not isinstance(plan.op, ReduceOp):
        if plan.dtype == BFLOAT16:
            raise TypeError("MPI has no bfloat16 type: a user-defined MPI.Op or GPU memory "
                            "without CuPy cannot take bfloat16 here; pass float32")
        plan.schedule, plan.inner = SHARDED["native"], None
        return
    if schedule is None:
        plan.schedule, plan.inner = _auto(plan, size, ctx)
        return
    if schedule.two_level:
        schedule.split(plan.topology)  # ValueError where the layout does not fit
        plan.inner = plan.inner or SHARDED["ring"]
    carrier = plan.inner or schedule
    if plan.codec is not None and not carrier.accepts(plan.codec, plan.kind):
        takers = [s.name for s in SHARDED.values() if s.accepts(plan.codec, plan.kind)]
        raise ValueError(f"algorithm {plan.name!r} cannot carry codec "
                         f"{plan.codec.codec_id!r} in a {plan.kind}; algorithms that can: "
                         f"{', '.join(takers) or 'none'}")
    if schedule.native and plan.kind == REDUCE_SCATTER and plan.dtype == BFLOAT16:
        raise TypeError("the MPI library's own reduce-scatter has no bfloat16 type; "
                        "use another algorithm (or 'auto')")


def _parse(algorithm: Any) -> tuple[ShardSchedule | None, ShardSchedule | None]:
    """(schedule, inner) of a name: "ring", "hierarchical", "hierarchical:halving"; "auto":
    (None, None)."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, not {type(algorithm).__name__}")
    if algorithm == "auto":
        return None, None
    name, _, inner_name = algorithm.partition(":")
    schedule = SHARDED.get(name)
    inner = SHARDED.get(inner_name) if inner_name else None
    if schedule is None or inner_name and not (
            schedule.two_level and inner is not None and not inner.two_level
            and not inner.native):
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of "
                         f"{', '.join(algorithms())} (two-level ones also as "
                         f"'hierarchical:halving')")
    return schedule, inner


def algorithms() -> tuple[str, ...]:
    """Every name `algorithm=` of reduce_scatter / allgather takes: "auto", then the table's."""
    return ("auto",) + tuple(SHARDED)


def is_sharded_algorithm(algorithm: Any) -> bool:
    """Whether `algorithm` names a reduce-scatter / all-gather schedule."""
    try:
        return _parse(algorithm) != (None, None)
    except (TypeError, ValueError):
        return False


def _counts(kind: str, counts: Any, send: Buffer | None, recv: Buffer | None, size: int,
            rank: int) -> list[int]:
    """Every rank's block size, from `counts` or from the buffers (equal blocks)."""
    if counts is not None:
        given = list(counts) if isinstance(counts, (list, tuple, np.ndarray)) else None
        if given is None or len(given) != size or not all(
                isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_))
                and c >= 0 for c in given):
            raise ValueError(f"counts must be {size} ints >= 0 (one a rank), got {counts!r}")
        given = [int(c) for c in given]
        held = sum(given) if kind == REDUCE_SCATTER else given[rank]
        if send is not None and send.count != held:
            what = "sum(counts)" if kind == REDUCE_SCATTER else f"counts[{rank}]"
            raise ValueError(f"sendbuf holds {send.count} items but {what} is {held}")
        return given
    if kind == ALLGATHER and send is not None:
        return [send.count] * size
    whole = send if send is not None else recv
    if whole.count % size:
        where = "sendbuf" if send is not None else "recvbuf (in place)"
        raise ValueError(f"{where} holds {whole.count} items, not a multiple of the {size} "
                         f"ranks; pass counts= for blocks of other sizes")
    return [whole.count // size] * size


def _checked_recv(kind: str, send: Buffer | None, recv: Buffer | None, counts: list[int],
                  rank: int) -> Buffer:
    """The receive buffer: the caller's, checked, or a new one."""
    needed = counts[rank] if kind == REDUCE_SCATTER else sum(counts)
    if send is None:  # in place: recvbuf holds the input as well
        held = sum(counts)
        if recv.count < held:
            raise ValueError(f"recvbuf holds {recv.count} items, fewer than the {held} of "
                             "sum(counts) (in place it holds every block)")
        return recv
    if recv is None:
        if buffers.handed_to_mpi(send):
            raise buffers.DeviceComputeError("a new result array (no recvbuf)")
        array = np.empty(needed, send.dtype)
        return Buffer(array, send.device, array, (needed,))
    if send.dtype != recv.dtype:
        raise TypeError(f"sendbuf has dtype {send.dtype} but recvbuf has {recv.dtype}")
    if send.device != recv.device:
        raise TypeError(f"sendbuf is on {send.device} but recvbuf is on {recv.device}")
    if recv.count < needed:
        raise ValueError(f"recvbuf holds {recv.count} items, fewer than the {needed} it receives")
    if send.count and needed:
        send_start, send_end = buffers.byte_range(send)
        recv_start, recv_end = buffers.byte_range(recv, needed)
        if send_start < recv_end and recv_start < send_end:
            raise ValueError("sendbuf and recvbuf share memory; for a call in place pass "
                             "MPI.IN_PLACE as sendbuf and the buffer as recvbuf")
    return recv


def _auto(plan: ShardPlan, size: int, ctx: Context) -> tuple[ShardSchedule, ShardSchedule | None]:
    """algorithm="auto": (schedule, inner) of the least cost by the schedules' own formulas
    in slices as they run (`planning.sharded`, what ``zipcoll.explain(...,
    collective=...)`` ranks): every flat one, and every two-level one over each flat inner
    one where the layout splits (the MPI library's own only where its op gives zipcoll's
    answer, so the answer never depends on the size)."""
    native_ok = (plan.kind == ALLGATHER or plan.dtype != BFLOAT16
                 and native_agrees(plan.op, plan.work_dtype))
    if size == 1:  # a copy
        return SHARDED["native" if native_ok else "ring"], None
    dtype = plan.work_dtype.name
    n = float(plan.total * plan.work_dtype.itemsize)
    profile = ctx.selector.profile
    priced = [(predict_sharded(plan.kind, schedule, inner, n, plan.topology, profile,
                               plan.codec, dtype), schedule, inner)
              for schedule, inner in sharded_plans(plan.kind, plan.topology, plan.codec,
                                                   native_ok)]
    if not priced:
        raise ValueError(f"no {plan.kind} schedule can carry codec {plan.codec.codec_id!r}")
    _, schedule, inner = min(priced, key=lambda row: row[0])
    return schedule, inner


# -- the agreement: what every rank must share ------------------------------------------

# As many fields as the all-reduce's: agreements on one communicator have one length
_FIELDS = ("", "collective and counts", "dtype", "op", "algorithm", "resolved algorithm",
           "codec", "layout")


def _signature(plan: ShardPlan | None, algorithm: str) -> list[int]:
    if plan is None:
        return [1] + [0] * (len(_FIELDS) - 1)
    return [0, _counts_code(plan), _code(plan.dtype.str), op_code(plan.op) * 2 + plan.mean,
            _code(str(algorithm)), _code(plan.name), _code(_codec_text(plan.codec)),
            _code(layout_text(plan.topology))]


def _shown(plan: ShardPlan | None, algorithm: str) -> list[str]:
    if plan is None:
        return ["rejected"] * len(_FIELDS)
    op = getattr(plan.op, "name", "user-defined") + (" (mean)" if plan.mean else "")
    return ["", _what(plan), plan.dtype.name, op, str(algorithm), plan.name,
            _codec_text(plan.codec), layout_text(plan.topology)]


def _what(plan: ShardPlan) -> str:
    return f"{plan.kind} of counts {plan.counts}"


def _counts_code(plan: ShardPlan) -> int:
    """A number for the collective and its counts, alike on every process: the hash of a
    tuple of ints is (Python randomizes the hashes of text, not of numbers), and it is
    some ten times cheaper than the text of a thousand counts."""
    return (_code(plan.kind) ^ hash(tuple(plan.counts))) & 0x7FFFFFFF


def _codec_text(codec: Codec | None) -> str:
    return "null" if codec is None else json.dumps(codec.get_config(), sort_keys=True,
                                                   default=str)


_code = functools.lru_cache(maxsize=1024)(code)


# -- the steps ----------------------------------------------------------------------------

def _steps(t: transport.Transport, plan: ShardPlan, tag: int) -> Steps:
    if plan.schedule.native and (plan.kind == REDUCE_SCATTER
                                 or buffers.handed_to_mpi(plan.send or plan.recv)):
        return _native(t, plan, tag)
    if plan.kind == REDUCE_SCATTER:
        return _reduce_scatter(t, plan, tag)
    return _allgather(t, plan, tag)


def _encoding(plan: ShardPlan, rank: int, tag: int, size: int, lossless: bool = False,
              scope: str = "", own_exact: bool = False) -> Encoding:
    """Lossless(op) without a codec (or where `lossless`: a two-level schedule's node level);
    else the codec, error feedback under (key, "rs" or "ag"), its encode sites under
    `scope` (a slice's); `own_exact`: an all-gather whose owner keeps its block exact."""
    if plan.codec is None or lossless:
        return Lossless(plan.op, plan.work_dtype)
    level = "rs" if plan.kind == REDUCE_SCATTER else "ag"
    key = None if plan.key is None else (plan.key, level)
    context = (plan.kind, plan.name, tuple(plan.counts), plan.work_dtype.str, size)
    encoder = Encoder(plan.codec, rank=rank, call=tag, key=key, context=context, prefix=scope)
    return (OwnExact if own_exact else Compressed)(encoder, plan.work_dtype)


class OwnExact(Compressed):
    """A flat all-gather's encoding: the owner encodes its block once and keeps it as it
    is (every other rank decodes the same bytes), so nothing is copied aside and back."""

    def settle(self, chunk: Any, site: str, slot: Any) -> Any:
        return self.encoder.encode(chunk, site, out=slot)


def _reduce_scatter(t: transport.Transport, plan: ShardPlan, tag: int) -> Steps:
    """The schedule on a private copy (partial sums live there, in scratch kept between
    calls), each slice's part of the own block out as soon as that slice is done (in
    place: once every slice is, as the input is read until then)."""
    source = (plan.send or plan.recv).array[:plan.total]
    scratch = t.borrow(plan.total, plan.work_dtype)
    work = scratch.array
    if plan.dtype == BFLOAT16:
        widen_bfloat16(source, work)
        source = None
    start = plan.blocks[t.rank][0]
    out = plan.recv.array

    def done(lo: int, hi: int) -> None:
        result = work[lo:hi]
        if plan.mean:
            result /= t.size
        if plan.dtype == BFLOAT16:
            round_to_bfloat16(result, out[lo - start:hi - start])
        else:
            out[lo - start:hi - start] = result

    try:
        if plan.send is None and source is not None:
            yield from _run(t, plan, work, tag, source)
            done(*plan.blocks[t.rank])
        else:
            yield from _run(t, plan, work, tag, source, after=done)
    finally:
        t.give_back(scratch)


def _allgather(t: transport.Transport, plan: ShardPlan, tag: int) -> Steps:
    """The schedule on the receive buffer, each slice's part of this rank's block copied
    in as that slice starts. bfloat16 with a codec: on a float32 copy (what the codecs
    take), rounded once at the end."""
    buf = plan.recv.array[:plan.total]
    start = plan.blocks[t.rank][0]
    sent = None if plan.send is None else plan.send.array[:plan.counts[t.rank]]
    if plan.dtype == BFLOAT16 and plan.codec is not None:
        work = np.empty(plan.total, np.float32)
        mine = slice(*plan.blocks[t.rank])
        widen_bfloat16(buf[mine] if sent is None else sent, work[mine])
        yield from _gathered(t, plan, work, tag)
        round_to_bfloat16(work, buf)  # exact for the own block: it came from bfloat16
        return
    if plan.dtype == BFLOAT16:  # lossless: its bits (MPI has no bfloat16 type)
        buf = buf.view(np.uint16)
        sent = None if sent is None else sent.view(np.uint16)

    def copy_in(lo: int, hi: int) -> None:
        buf[lo:hi] = sent[lo - start:hi - start]

    yield from _gathered(t, plan, buf, tag, None if sent is None else copy_in)


def _gathered(t: transport.Transport, plan: ShardPlan, buf: Any, tag: int,
              before: Callable | None = None) -> Steps:
    """The plan's all-gather on `buf` (`before` puts each slice's part of the own block in
    place); with a codec the owner keeps that block exact, the others hold its decoding,
    alike on every rank: flat schedules and MPI's own never decode it, a two-level one
    decodes it for the node and puts it back."""
    if plan.schedule.native:
        if before is not None:
            before(*plan.blocks[t.rank])
        enc = None if plan.codec is None else _encoding(plan, t.rank, tag, t.size)
        yield from plan.schedule.allgather(t, MPI.IN_PLACE, buf, plan.counts, enc, np)
        return
    if plan.codec is None or not plan.schedule.two_level:
        yield from _run(t, plan, buf, tag, before=before)
        return
    kept: dict = {}

    def keep(lo: int, hi: int) -> None:
        if before is not None:
            before(lo, hi)
        kept[lo] = buf[lo:hi].copy()

    def put_back(lo: int, hi: int) -> None:
        buf[lo:hi] = kept.pop(lo)

    yield from _run(t, plan, buf, tag, before=keep, after=put_back)


def _run(t: transport.Transport, plan: ShardPlan, buf: Any, tag: int, send: Any = None,
         before: Callable | None = None, after: Callable | None = None) -> Steps:
    """The plan's schedule on `buf` (flat: over t; two-level: over t's levels), in slices
    side by side (`slicing.sharded_slicing`): slice i runs on part i of every block, with
    tag + i and encode sites of its own ("slice3/..."), so slices in flight never match
    each other's messages and error feedback keeps a residual per slice. `before` and
    `after` get (lo, hi), the slice's part of this rank's block, around its steps."""
    nbytes = plan.total * plan.work_dtype.itemsize
    ratio = 1.0
    if plan.codec is not None and nbytes:
        ratio = nbytes / max(1, plan.codec.wire_bytes(plan.total, plan.work_dtype.name))
    cut = sharded_slicing(plan.schedule, nbytes, t.size, plan.topology.num_nodes, ratio)
    if cut.slices == 1:
        return _slice_steps(t, plan, buf, tag, tag, plan.blocks, "", send, before, after)
    runs = (_slice_steps(t, plan, buf, tag, tag + i, part, f"slice{i}/", send, before, after)
            for i, part in enumerate(_parts(plan.blocks, cut.slices, _group(plan.codec))))
    return pipelined(runs, cut.window)


def _parts(blocks: list, slices: int, align: int = 1) -> list[list[tuple[int, int]]]:
    """Each slice's blocks: part i of every block, cut at multiples of `align` items from
    the block's start (a block codec's groups: each is encoded as the unsliced call
    would, so its error bound is the codec's on the whole block)."""
    def cuts(n: int) -> list[int]:
        return [min(n, -(-(n * i // slices) // align) * align) for i in range(slices + 1)]

    edges = [cuts(hi - lo) for lo, hi in blocks]
    return [[(lo + e[i], lo + e[i + 1]) for (lo, _), e in zip(blocks, edges)]
            for i in range(slices)]


def _group(codec: Codec | None) -> int:
    """Items a codec encodes together (its `block`; 1 for element-wise ones)."""
    block = getattr(codec, "block", None)
    return block if isinstance(block, int) and block > 0 else 1


def _slice_steps(t: transport.Transport, plan: ShardPlan, buf: Any, call_tag: int, tag: int,
                 blocks: list, scope: str, send: Any, before: Callable | None,
                 after: Callable | None) -> Steps:
    """One slice: the schedule over `blocks` of `buf`, with `tag`."""
    rs, schedule = plan.kind == REDUCE_SCATTER, plan.schedule
    if before is not None:
        before(*blocks[t.rank])
    if rs or plan.dtype != BFLOAT16 or plan.codec is not None:
        flat_gather = not rs and not schedule.two_level
        enc: Encoding = _encoding(plan, t.rank, call_tag, t.size, scope=scope,
                                  own_exact=flat_gather)
    else:
        enc = Lossless(BY_NAME["bor"], np.uint16)  # bfloat16 gathered as its bits
    if not schedule.two_level:
        run = schedule.reduce_scatter if rs else schedule.allgather
        yield from (run(t, buf, blocks, enc, tag, np, send=send) if rs
                    else run(t, buf, blocks, enc, tag, np))
    else:
        levels = Levels(*t.split(_layout(plan), schedule.split(plan.topology)))
        encs = (_encoding(plan, t.rank, call_tag, t.size, lossless=True) if enc.lossy
                else enc, enc)
        grid = rank_grid(tuple(tuple(node) for node in plan.topology.nodes))
        if rs:
            yield from schedule.reduce_scatter(levels, buf, blocks, encs, tag, np, send=send,
                                               inner=plan.inner, grid=grid)
        else:
            yield from schedule.allgather(levels, buf, blocks, encs, tag, np,
                                          inner=plan.inner, grid=grid)
    if after is not None:
        after(*blocks[t.rank])


def _layout(plan: ShardPlan) -> tuple:
    """What names a two-level plan's levels (the same on every rank; the all-reduce's
    hierarchical levels are the same communicators)."""
    return ("hierarchical", plan.topology.layout_key)


def _collective(t: transport.Transport, plan: ShardPlan) -> bool:
    """Whether the plan's steps call MPI's collectives or split t first (blocking)."""
    return plan.schedule.native or plan.schedule.two_level and not t.has_split(_layout(plan))


def _native(t: transport.Transport, plan: ShardPlan, tag: int) -> Steps:
    """MPI's own collective on the caller's buffers (as mpi4py would hand them over): every
    reduce-scatter it runs, and all-gathers of device memory zipcoll cannot compute on."""
    send = MPI.IN_PLACE if plan.send is None else plan.send.array[:_sent(plan)]
    if plan.kind == REDUCE_SCATTER:
        recv = plan.recv.array[:plan.total if plan.send is None else plan.counts[t.rank]]
        yield from plan.schedule.reduce_scatter(t, send, recv, plan.counts, plan.op)
        if plan.mean:
            recv[:plan.counts[t.rank]] /= t.size
        return
    # device memory only MPI reads: lossless, its own dtypes (bfloat16 stays on the host)
    yield from plan.schedule.allgather(t, send, plan.recv.array[:plan.total], plan.counts,
                                       None, np)


def _sent(plan: ShardPlan) -> int:
    return plan.total if plan.kind == REDUCE_SCATTER else plan.counts[plan.rank]


# -- the call -----------------------------------------------------------------------------

def _start(kind: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any, comm: MPI.Intracomm,
           algorithm: str, codec: Any, key: Hashable, topology: Topology | None,
           blocking: bool) -> Request:
    """One call through `call.start`: nothing here waits for another rank."""
    check_threads()
    ctx = context_for(comm)
    abort_on_error.install()

    def prepare() -> ShardPlan:
        return make_shard_plan(kind, sendbuf, recvbuf, counts, op, algorithm, codec, key,
                               ctx.layout(topology), ctx)

    return start(Call(ctx, kind, _FIELDS, prepare,
                      lambda plan: _signature(plan, algorithm),
                      lambda plan: _shown(plan, algorithm),
                      lambda plan: _collective(ctx.transport, plan),
                      lambda plan: plan.schedule.two_level and ctx.first_use([_layout(plan)]),
                      lambda plan, tag, _, __: _steps(ctx.transport, plan, tag),
                      lambda plan: plan.outcome(), settings.get().check), blocking)


# -- mpi4py's argument forms: the drop-ins of zipcoll.Intracomm ----------------------------

def _in_place(sendbuf: Any) -> Any:
    """mpi4py reads None as MPI.IN_PLACE for these collectives."""
    return MPI.IN_PLACE if sendbuf is None else sendbuf


def _vector_spec(recvbuf: Any) -> tuple[Any, list[int] | None]:
    """(buffer spec, counts) of mpi4py's [buf, counts], [buf, (counts, displs)],
    [buf, counts, displs], [buf, counts, displs, type] or [buf, (counts, displs), type];
    displacements other than the blocks' own (contiguous, in rank order) are refused."""
    if not isinstance(recvbuf, (list, tuple)) or len(recvbuf) < 2:
        return recvbuf, None
    items = list(recvbuf)
    datatype = items.pop() if isinstance(items[-1], MPI.Datatype) else None
    buf, rest = items[0], items[1:]
    if len(rest) == 1 and isinstance(rest[0], tuple) and len(rest[0]) == 2 and \
            not isinstance(rest[0][0], (int, np.integer)):
        rest = list(rest[0])
    counts = None if not rest or rest[0] is None else [int(c) for c in rest[0]]
    displs = rest[1] if len(rest) > 1 else None
    if counts is not None and displs is not None:
        expected = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(int).tolist()
        if [int(d) for d in displs] != expected:
            raise ValueError(f"displacements {list(displs)} are not the blocks' own "
                             f"({expected}); zipcoll gathers blocks contiguously in rank order")
    return (buf if datatype is None else [buf, datatype]), counts


class ShardedMethods:
    """MPI.Intracomm's reduce-scatter and all-gather, as zipcoll's (with the communicator's
    `algorithm` and `codec` where they fit: "auto" and no codec otherwise)."""

    algorithm: str
    codec: Any

    def _sharded_args(self) -> dict:
        """An all-reduce's algorithm or per-level codec means nothing here: "auto", none."""
        algorithm = self.algorithm if is_sharded_algorithm(self.algorithm) else "auto"
        codec = self.codec
        if isinstance(codec, dict) and "id" not in codec:
            codec = None
        return {"comm": self, "algorithm": algorithm, "codec": codec}

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:
        """Like MPI.Intracomm.Reduce_scatter_block."""
        reduce_scatter(_in_place(sendbuf), recvbuf, op=op, **self._sharded_args())

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any,
                              op: MPI.Op = MPI.SUM) -> Request:
        """Like MPI.Intracomm.Ireduce_scatter_block; returns a zipcoll.Request."""
        return ireduce_scatter(_in_place(sendbuf), recvbuf, op=op, **self._sharded_args())

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Sequence[int] | None = None,
                       op: MPI.Op = MPI.SUM) -> None:
        """Like MPI.Intracomm.Reduce_scatter (recvcounts None: gathered from the receive
        buffers' sizes, blocking, as mpi4py does)."""
        sendbuf = _in_place(sendbuf)
        reduce_scatter(sendbuf, recvbuf, counts=self._recvcounts(sendbuf, recvbuf, recvcounts),
                       op=op, **self._sharded_args())

    def Ireduce_scatter(self, sendbuf: Any, recvbuf: Any,
                        recvcounts: Sequence[int] | None = None,
                        op: MPI.Op = MPI.SUM) -> Request:
        """Like MPI.Intracomm.Ireduce_scatter; returns a zipcoll.Request."""
        sendbuf = _in_place(sendbuf)
        return ireduce_scatter(sendbuf, recvbuf,
                               counts=self._recvcounts(sendbuf, recvbuf, recvcounts), op=op,
                               **self._sharded_args())

    def _recvcounts(self, sendbuf: Any, recvbuf: Any, recvcounts: Any) -> Any:
        if recvcounts is not None:
            return recvcounts
        if sendbuf is MPI.IN_PLACE:
            raise ValueError("Reduce_scatter in place needs recvcounts")
        return transport.allgather_objects(self, buffers.as_array(recvbuf).count)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Like MPI.Intracomm.Allgather."""
        allgather(_in_place(sendbuf), recvbuf, **self._sharded_args())

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Like MPI.Intracomm.Iallgather; returns a zipcoll.Request."""
        return iallgather(_in_place(sendbuf), recvbuf, **self._sharded_args())

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Like MPI.Intracomm.Allgatherv (blocks contiguous in rank order)."""
        buf, counts = _vector_spec(recvbuf)
        allgather(_in_place(sendbuf), buf, counts=counts, **self._sharded_args())

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Like MPI.Intracomm.Iallgatherv; returns a zipcoll.Request."""
        buf, counts = _vector_spec(recvbuf)
        return iallgather(_in_place(sendbuf), buf, counts=counts, **self._sharded_args())


__all__ = ["ShardedMethods", "algorithms", "allgather", "is_sharded_algorithm", "iallgather", "ireduce_scatter", "reduce_scatter"]

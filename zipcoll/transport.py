"""Moving arrays between ranks: the only module that calls mpi4py's communication functions.

Every zipcoll call runs on a private duplicate of the caller's communicator, made once
per communicator, cached as an MPI attribute and freed with it, so that library
messages can never match the caller's own.

Lifetime: the attribute's delete callback (run inside the caller's `Comm.Free`, or by
MPI_Finalize) makes no MPI call: it retires the transport, and the private duplicate
and its sub-communicators are freed at the start of a later zipcoll call, once no call
in flight holds the transport (MPI lets a caller free a communicator with calls still
in flight on it). So MPI is never entered from a callback or a garbage-collector run.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
from collections import deque
import gc
import threading
import weakref
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from zipcoll import settings

# Each call gets a block of TAGS_PER_CALL consecutive tags, for its slices and for
# sub-schedules that run side by side; blocks are used in turn up to the MPI's MPI_TAG_UB
# (ZIPCOLL_TAG_BLOCKS lowers the count, to test the wrap), and a block still held by a
# call in flight is never handed out again.
TAGS_PER_CALL = 256
# Host scratch of up to _HEAP_BYTES is not pooled: the allocator's heap hands the same
# warm memory back at once, cheaper than the pool's bookkeeping (only larger buffers come
# from fresh pages, whose first touch costs more than the call).
_HEAP_BYTES = 64 << 10
# Agreements kept for reuse per transport and vector length, at most (one a call waited
# at once; more serve calls in flight side by side).
_SPARE_AGREEMENTS = 8
# Scratch kept between calls, one pool for the whole process (every transport, every
# kind of memory): buffers given back during the last _SCRATCH_IDLE_CALLS calls of the
# process, the most recent first, up to ZIPCOLL_SCRATCH_BYTES in all; beyond that only the
# latest buffer of each kind of memory, whatever its size (a call that repeats finds it again).
_SCRATCH_IDLE_CALLS = 32
# The most items one MPI call may name: MPI-3 counts and displacements are C ints (MPI-4's
# large-count "_c" functions are not in every library: Open MPI 5.0 has none). Larger
# messages go as one derived datatype of whole blocks (point to point, broadcast,
# gathers: `bytes_type`), or in chunks (the library's own all-reduce, whose predefined ops
# take predefined datatypes only). ZIPCOLL_MAX_COUNT lowers it, to run those paths on
# small messages (`max_count()`, read on every call: zipcoll.configure may change it).


def max_count() -> int:
    """The most items one MPI call may name (ZIPCOLL_MAX_COUNT, else 2**31 - 1)."""
    return settings.get().max_count


class Transport:
    """Point-to-point moves, native collectives and scratch memory on a private communicator."""

    def __init__(self, comm: MPI.Comm, agree_comm: MPI.Comm | None = None,
                 duplicating: list | None = None, parent: MPI.Comm | None = None,
                 family: list | None = None):
        self.comm = comm
        # agreements go on a communicator of their own: they are posted at the start of each
        # call, in start order, while the schedules' own collectives are posted later
        self.agree_comm = comm if agree_comm is None else agree_comm
        # the Idup requests of both, until the first call has seen them complete
        self.duplicating: list = duplicating or []
        known = comm if parent is None else parent  # a duplicate in progress cannot be asked
        self.rank = known.Get_rank()
        self.size = known.Get_size()
        self._calls = 0
        self._tag_blocks = _tag_blocks(comm)
        self._held_tags: dict[int, deque] = {}  # tag block -> tickets of its calls, oldest first
        self._subs: dict[Any, tuple["Transport", ...]] = {}
        self._spare_agreements: dict[int, list[Agreement]] = {}  # by length, done with
        self._abandoned_agreements: list[Agreement] = []
        # (weakref, communicator) of this transport and of every one split from it: what
        # `retire` frees once none of them is referenced any more (none is in flight)
        self._family: list = [] if family is None else family
        self._family.append((weakref.ref(self), comm))
        if self.agree_comm is not comm:
            self._family.append((weakref.ref(self), self.agree_comm))

    def duplicated(self) -> None:
        """The duplicates are complete (the caller saw their requests complete)."""
        self.duplicating = []

    def next_tag(self) -> int:
        """The first of TAGS_PER_CALL tags of the next call (every rank counts calls alike).

        The call holds the block from now (`hold_tag`) until it ends (`release_tag`), and
        runs only while it is the block's oldest holder (`tag_turn`): a block that wraps
        onto calls still in flight goes to them in start order, as on every other rank.
        """
        self._calls += 1
        SCRATCH.tick()
        return (self._calls % self._tag_blocks) * TAGS_PER_CALL

    def hold_tag(self, tag: int) -> object:
        """Queue a new call for tag block `tag`; its ticket."""
        ticket = object()
        holders = self._held_tags.get(tag)
        if holders is None:
            self._held_tags[tag] = deque((ticket,))
        else:
            holders.append(ticket)
        return ticket

    def tag_turn(self, tag: int, ticket: object) -> bool:
        """Whether the call of `ticket` is the oldest holding block `tag`."""
        return self._held_tags[tag][0] is ticket

    def release_tag(self, tag: int, ticket: object) -> None:
        holders = self._held_tags[tag]
        holders.remove(ticket)
        if not holders:
            del self._held_tags[tag]

    # -- point to point ------------------------------------------------------------
    def isend(self, arr: Any, dest: int, tag: int) -> MPI.Request:
        """Start sending the bytes of a contiguous array (any number of them)."""
        # the common case first: a host array within one call's count, no context manager
        if type(arr) is np.ndarray and arr.nbytes <= settings.get().max_count:
            return self.comm.Isend([arr, MPI.BYTE], dest, tag)
        with _as_bytes(arr) as spec:
            return self.comm.Isend(spec, dest, tag)

    def irecv(self, arr: Any, source: int, tag: int) -> MPI.Request:
        """Start receiving into the bytes of a contiguous array (any number of them)."""
        if type(arr) is np.ndarray and arr.nbytes <= settings.get().max_count:
            return self.comm.Irecv([arr, MPI.BYTE], source, tag)
        with _as_bytes(arr) as spec:
            return self.comm.Irecv(spec, source, tag)

    def exchange(self, send: Any, dest: int, recv: Any, source: int, tag: int) -> list:
        """Send to one peer while receiving from another (both started, none waited)."""
        return [self.irecv(recv, source, tag), self.isend(send, dest, tag)]

    def exchange_with_all(self, send: Any, recvs: list, tag: int) -> list:
        """Send `send` to every other rank and receive recvs[j] from each rank j (all started).

        Point to point, so it matches by tag whatever order concurrent schedules start in.
        """
        peers = [j for j in range(self.size) if j != self.rank]
        return ([self.irecv(recvs[j], j, tag) for j in peers]
                + [self.isend(send, j, tag) for j in peers])

    def exchange_shown(self, send: Any, recvs: list, turn: int) -> list:
        """`exchange_with_all` on the agreements' communicator (a mismatch's descriptions)."""
        peers = [j for j in range(self.size) if j != self.rank]
        tag = turn % (_tag_upper_bound() + 1)
        return ([self.agree_comm.Irecv([recvs[j], MPI.BYTE], j, tag) for j in peers]
                + [self.agree_comm.Isend([send, MPI.BYTE], j, tag) for j in peers])

    # -- collectives the schedules lean on ----------------------------------------
    def iallreduce_native(self, send: Any, recv: Any, op: MPI.Op) -> MPI.Request:
        """The MPI library's own Iallreduce (typed by mpi4py from the dtype, so MPI applies
        `op`), of at most max_count() items: the caller chunks larger ones."""
        return self.comm.Iallreduce(send, recv, op)

    def allreduce_native(self, send: Any, recv: Any, op: MPI.Op) -> None:
        """`iallreduce_native`, blocking: MPI's Allreduce."""
        self.comm.Allreduce(send, recv, op)

    def ireduce_scatter_native(self, send: Any, recv: Any, counts: list[int],
                               op: MPI.Op) -> MPI.Request:
        """The MPI library's own Ireduce_scatter (typed by mpi4py, so MPI applies `op`):
        `send` (or MPI.IN_PLACE: `recv` holds every block) -> `recv`, counts[i] to rank i."""
        return self.comm.Ireduce_scatter(send, recv, [int(c) for c in counts], op)

    def iallgatherv_native(self, send: Any, recv: Any, counts: list[int]) -> MPI.Request:
        """The MPI library's own Iallgatherv of typed items (`send` may be MPI.IN_PLACE),
        counts[i] from rank i, in rank order, contiguous in `recv`."""
        counts = [int(c) for c in counts]
        displacements = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(int).tolist()
        return self.comm.Iallgatherv(send, [recv, (counts, displacements)])

    def iallgatherv(self, send: Any, recv: Any, counts: list[int]) -> MPI.Request:
        """Start gathering every rank's bytes (counts[i] from rank i) into `recv`, in rank order."""
        counts = [int(c) for c in counts]
        displacements = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(int).tolist()
        if max(counts + displacements) > max_count():
            return self._iallgatherv_placed(send, recv, counts, displacements)
        return self.comm.Iallgatherv([send, MPI.BYTE], [recv, (counts, displacements), MPI.BYTE])

    def _iallgatherv_placed(self, send: Any, recv: Any, counts: list[int],
                            displacements: list[int]) -> MPI.Request:
        """Iallgatherv past max_count() bytes: an Ialltoallw (my bytes to every rank) whose
        receive datatypes hold each rank's size and offset (offsets are MPI_Aint: 64-bit)."""
        p = self.size
        types = [bytes_type(counts[self.rank])] + [bytes_type(n, at)
                                                   for n, at in zip(counts, displacements)]
        try:
            return self.comm.Ialltoallw([send, [1] * p, [0] * p, [types[0]] * p],
                                        [recv, [1] * p, [0] * p, types[1:]])
        finally:
            for datatype in types:  # MPI keeps them while the call is pending
                datatype.Free()

    def ibcast(self, arr: Any, root: int) -> MPI.Request:
        """Start broadcasting the bytes of a contiguous array from `root` to every rank."""
        with _as_bytes(arr) as spec:
            return self.comm.Ibcast(spec, root)

    def iallgather_count(self, mine: Any, counts: Any) -> MPI.Request:
        """Start gathering every rank's count (`mine`, one int64 the caller keeps alive until
        the request is done: MPI reads it meanwhile) into int64 `counts`, in rank order."""
        return self.comm.Iallgather(mine, counts)

    def iagree(self, values: list[int]) -> "Agreement":
        """The element-wise min and max of a small integer vector over all ranks, started
        (one Iallreduce); read it once its request is done, then hand it to `agreed`."""
        spare = self._spare_agreements.get(len(values))
        agreement = spare.pop() if spare else Agreement(len(values))
        agreement.start(self.agree_comm, values)
        return agreement

    def agreed(self, agreement: "Agreement") -> None:
        """An agreement its caller is done with: its buffers serve a later one once MPI is
        done with them; one still in flight (its call closed while waiting for it: an
        error, an interrupt) is kept, so that MPI never writes into freed memory."""
        if agreement.request == MPI.REQUEST_NULL:  # complete
            spare = self._spare_agreements.setdefault(agreement.length, [])
            if len(spare) < _SPARE_AGREEMENTS:  # a burst of calls in flight keeps no more
                spare.append(agreement)
        else:
            self._abandoned_agreements.append(agreement)

    # -- scratch memory (process-wide: see ScratchPool) ------------------------------
    def borrow(self, count: int, dtype: Any, xp: Any = np) -> Any:
        """A scratch array of `count` items, reused across calls (first touch is costly)."""
        return SCRATCH.borrow(count, dtype, xp)

    def give_back(self, scratch: "_ScratchView", xp: Any = np) -> None:
        """Return a borrowed scratch array to the process's pool."""
        SCRATCH.give_back(scratch, xp)

    def scratch_bytes(self) -> int:
        """Bytes of scratch the process holds between calls (every transport, every device)."""
        return SCRATCH.held()

    def split(self, layout: Any, colors: tuple[int, ...]) -> tuple["Transport", ...]:
        """Transports over sub-communicators, one per color of this rank (rank order kept).

        Collective the first time `layout` (a value every rank computes alike, naming the
        whole layout, not just this rank's colors) is used, then cached.
        """
        if layout not in self._subs:
            self._subs[layout] = tuple(Transport(self.comm.Split(color, key=self.rank),
                                                 family=self._family) for color in colors)
        return self._subs[layout]

    def has_split(self, layout: Any) -> bool:
        """Whether `split(layout, ...)` is cached (so not collective)."""
        return layout in self._subs

    def reordered(self, name: Any, order: Sequence[int]) -> "Transport":
        """A transport whose rank i is rank order[i] of this one (collective once, cached).

        `name`: a key naming `order` (the same on every rank), as `split`'s layout.
        """
        key = ("order", name)
        if key not in self._subs:
            self._subs[key] = (Transport(self.comm.Split(0, key=list(order).index(self.rank)),
                                         family=self._family),)
        return self._subs[key][0]

    def has_reordered(self, name: Any) -> bool:
        """Whether `reordered(name, ...)` is cached (so not collective)."""
        return ("order", name) in self._subs

    def allgather_object(self, obj: Any) -> list:
        """Every rank's `obj` (small, picklable), in rank order (collective, blocking)."""
        return self.comm.allgather(obj)

    def retire(self) -> None:
        """Free this transport's communicators (and its sub-transports') later, at the start
        of a zipcoll call once none of them is referenced: makes no MPI call itself."""
        with _RETIRED_LOCK:
            _RETIRED.append(self._family)


def _nbytes(arr: Any) -> int:
    if type(arr) is np.ndarray:
        return arr.nbytes
    return int(arr.size) * np.dtype(arr.dtype).itemsize


@contextlib.contextmanager
def _as_bytes(arr: Any):
    """mpi4py's spec of arr's bytes: [arr, MPI.BYTE] up to max_count() of them, else
    [arr, 1, T] with T a datatype of them all, freed once the call naming it has started
    (MPI keeps a datatype that pending communication uses)."""
    nbytes = _nbytes(arr)
    if nbytes <= max_count():
        yield [arr, MPI.BYTE]
        return
    datatype = bytes_type(nbytes)
    try:
        yield [arr, 1, datatype]
    finally:
        datatype.Free()


def bytes_type(nbytes: int, offset: int = 0) -> MPI.Datatype:
    """A committed datatype of `nbytes` contiguous bytes starting `offset` bytes in, in
    which no count exceeds max_count() (the caller frees it)."""
    datatype = _bytes_type(nbytes)
    if offset:
        placed = MPI.Datatype.Create_struct([1], [offset], [datatype])
        datatype.Free()
        datatype = placed
    return datatype.Commit()


def _bytes_type(nbytes: int) -> MPI.Datatype:
    """Up to max_count() bytes: contiguous; more: `whole` blocks of ceil(nbytes / max_count())
    bytes (each such a type again), then the rest (likewise)."""
    if nbytes <= max_count():
        return MPI.BYTE.Create_contiguous(nbytes)
    block = -(-nbytes // max_count())
    whole, rest = divmod(nbytes, block)
    parts = [_bytes_type(block)] + ([_bytes_type(rest)] if rest else [])
    try:
        return MPI.Datatype.Create_struct([whole, 1][:len(parts)], [0, whole * block][:len(parts)],
                                          parts)
    finally:
        for part in parts:  # the struct keeps what it needs of them
            part.Free()


class Agreement:
    """An element-wise min and max of small integer vectors over all ranks, in flight.

    It holds both buffers: mpi4py keeps no reference to a non-blocking collective's
    buffers, and MPI reads and writes them until the request is done. Its transport
    reuses it once read (`Transport.agreed`): the vector of a call like the last one is
    already in place (a call's agreement is built anew only where its numbers changed).
    """

    def __init__(self, length: int):
        self.length = length
        self._local = np.empty(2 * length, np.int64)
        self._values, self._negated = self._local[:length], self._local[length:]
        self._out = np.empty_like(self._local)
        self._last: list[int] | None = None
        self.request = MPI.REQUEST_NULL

    def start(self, comm: MPI.Comm, values: list[int]) -> None:
        if values != self._last:
            self._values[:] = values
            np.negative(self._values, out=self._negated)  # the minimum of -v: minus the maximum
            self._last = list(values)
        self.request = comm.Iallreduce(self._local, self._out, MPI.MIN)

    def read(self) -> tuple[list[int], list[int]]:
        """(minima, maxima) of the vectors, once the request is done."""
        out = self._out.tolist()  # one conversion: the vector is short, Python negates it
        return out[: self.length], [-v for v in out[self.length:]]


class _ScratchView:
    """A borrowed raw buffer and the typed view a schedule uses."""

    __slots__ = ("raw", "array", "pooled")

    def __init__(self, raw: Any, count: int, dtype: np.dtype, pooled: bool = True):
        self.raw = raw
        self.array = raw[: count * dtype.itemsize].view(dtype)
        self.pooled = pooled  # given back to the pool (else left to the allocator)


class ScratchPool:
    """Scratch buffers kept between calls for every transport of the process.

    One pool, so that one budget (ZIPCOLL_SCRATCH_BYTES) holds whatever the number of
    communicators, and a buffer left by a call on one communicator serves the next call
    of that size on any other. Its clock counts the calls of the whole process: a buffer
    not given back during the last _SCRATCH_IDLE_CALLS calls is dropped, so a
    communicator no longer used keeps nothing. A lock guards it: threads may run calls
    on different communicators at once. Host buffers of up to _HEAP_BYTES bypass it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[Any, int]]] = {}  # kind -> [(raw, clock at return)]
        self._latest: dict[str, Any] = {}  # kind -> raw buffer given back last
        self._clock = 0
        self._oldest: int | None = None  # clock of the oldest idle buffer (None: none)
        self._idle_bytes = 0  # of every idle buffer, the latest ones included

    def tick(self) -> None:
        """A call starts: buffers idle since too many calls are dropped."""
        with self._lock:
            self._clock += 1
            if self._oldest is not None and self._oldest < self._clock - _SCRATCH_IDLE_CALLS:
                self._trim()

    def borrow(self, count: int, dtype: Any, xp: Any = np) -> _ScratchView:
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        if xp is np and nbytes <= _HEAP_BYTES:
            return _ScratchView(np.empty(max(nbytes, 8), np.uint8), count, dtype, pooled=False)
        kind = _memory_kind(xp)
        # not much larger than needed, so that a large buffer left idle can be dropped
        largest = max(4 * nbytes, 1 << 20)
        with self._lock:
            idle = self._idle.get(kind)
            best = -1
            if idle:
                for i, (raw, _) in enumerate(idle):  # the smallest that fits
                    if nbytes <= raw.size <= largest and (best < 0 or raw.size < idle[best][0].size):
                        best = i
            raw = None
            if best >= 0:
                raw = idle.pop(best)[0]
                self._idle_bytes -= raw.size
                if self._latest.get(kind) is raw:
                    del self._latest[kind]
        if raw is None:
            raw = xp.empty(max(nbytes, 8), dtype=np.uint8)
        return _ScratchView(raw, count, dtype)

    def give_back(self, scratch: _ScratchView, xp: Any = np) -> None:
        if not scratch.pooled:
            return
        kind = _memory_kind(xp)
        with self._lock:
            self._idle.setdefault(kind, []).append((scratch.raw, self._clock))
            self._latest[kind] = scratch.raw
            self._idle_bytes += scratch.raw.size
            if self._oldest is None:
                self._oldest = self._clock
            if self._idle_bytes > settings.get().scratch_bytes:  # else all fits: keep all
                self._trim()

    def held(self) -> int:
        """Bytes of idle scratch (every kind of memory)."""
        with self._lock:
            return sum(raw.size for idle in self._idle.values() for raw, _ in idle)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()
            self._latest.clear()
            self._oldest = None
            self._idle_bytes = 0

    def _trim(self) -> None:
        """Keep the buffers given back recently, newest first, up to the budget (and the
        latest of each kind whatever its size); drop the others (under the lock)."""
        recent = [(used, kind, raw) for kind, idle in self._idle.items() for raw, used in idle
                  if used >= self._clock - _SCRATCH_IDLE_CALLS]
        recent.sort(key=lambda entry: -entry[0])  # stable: most recently given back first
        kept: dict[str, list[tuple[Any, int]]] = {}
        total = 0
        for used, kind, raw in recent:
            latest = self._latest.get(kind) is raw
            if latest or total + raw.size <= settings.get().scratch_bytes:
                kept.setdefault(kind, []).append((raw, used))
                total += 0 if latest else raw.size
        self._idle = kept
        self._latest = {k: raw for k, raw in self._latest.items()
                        if any(r is raw for r, _ in kept.get(k, ()))}
        self._oldest = min((used for idle in kept.values() for _, used in idle), default=None)
        self._idle_bytes = sum(raw.size for idle in kept.values() for raw, _ in idle)


def _memory_kind(xp: Any) -> str:
    """The pool a namespace's buffers go to: its name, and the current device for CuPy
    (a buffer of one GPU must not serve a call on another)."""
    if xp is np:  # every host call: no look-up of a `cuda` attribute NumPy lacks
        return "numpy"
    device = getattr(getattr(xp, "cuda", None), "get_device_id", None)
    return xp.__name__ if device is None else f"{xp.__name__}:{device()}"


SCRATCH = ScratchPool()


def scratch_held() -> int:
    """Bytes of scratch this process keeps between calls (every communicator and device)."""
    return SCRATCH.held()


# -- lifetime: a transport per caller's communicator, freed with it ------------------------

class Attachment:
    """What zipcoll keeps on a caller's communicator, as one MPI attribute: its transport,
    and whatever the layers above keep with it (`context`); deleted with the communicator."""

    __slots__ = ("transport", "context", "__weakref__")

    def __init__(self, transport: Transport):
        self.transport = transport
        self.context: Any = None


_keyval = None
_KEYVAL_LOCK = threading.Lock()
# families of transports whose communicator was freed, to free at a safe point
_RETIRED: list[list] = []
_COLLECTED: set[int] = set()  # families free_retired already ran the garbage collector for
_RETIRED_LOCK = threading.Lock()


def attachment_for(comm: MPI.Comm) -> Attachment:
    """The Attachment of `comm`: made (collectively: a Dup) on first use, deleted with `comm`.

    Frees the communicators of retired transports first (see `free_retired`).
    """
    global _keyval
    if _RETIRED:
        free_retired()
    if _keyval is None:
        with _KEYVAL_LOCK:
            if _keyval is None:
                _keyval = MPI.Comm.Create_keyval(delete_fn=_delete_attachment)
    held = comm.Get_attr(_keyval)
    if held is None:
        # Dup() keeps the caller's class: a zipcoll.Intracomm's Allreduce would recurse.
        # Idup: a first call on `comm` must not wait for the other ranks to start it.
        plain = MPI.Intracomm(comm) if isinstance(comm, MPI.Intracomm) else MPI.Comm(comm)
        (private, first), (agreeing, second) = plain.Idup(), plain.Idup()
        held = Attachment(Transport(private, agreeing, [first, second], parent=plain))
        comm.Set_attr(_keyval, held)
    return held


def transport_for(comm: MPI.Comm) -> Transport:
    """The Transport of `comm`: made (collectively) on first use, freed with `comm`."""
    return attachment_for(comm).transport


def _delete_attachment(comm: MPI.Comm, keyval: int, held: Attachment) -> None:
    """The attribute's delete callback: it frees nothing itself (see the module's docstring).

    One wait: the private duplicates' MPI_Comm_idup, if still in flight, completes first
    (Open MPI crashes freeing a communicator under its own Idup). Every rank posted it
    when it started its first call here, before its own MPI_Comm_free, so this returns.
    """
    if held.transport is not None:
        if held.transport.duplicating:
            MPI.Request.Waitall(held.transport.duplicating)
        held.transport.retire()
    held.transport, held.context = None, None  # whoever still holds `held` holds no context


def free_retired() -> int:
    """Free the communicators of retired transports none of whose family is referenced any
    more (no call in flight holds one); the number of transports freed.

    Called at the start of every zipcoll call, on its thread: never from MPI's callbacks
    nor from a garbage-collector run. MPI_Comm_free is collective but does not
    synchronise (Open MPI, MPICH), so ranks may free at different calls.
    """
    kept, done = [], []
    with _RETIRED_LOCK:
        held = [f for f in _RETIRED if id(f) not in _COLLECTED and any(r() for r, _ in f)]
    if held:  # a finished call's objects may wait in a reference cycle: collect once a family
        gc.collect()
        _COLLECTED.update(id(f) for f in held)
    with _RETIRED_LOCK:
        for family in _RETIRED:
            (done if all(ref() is None for ref, _ in family) else kept).append(family)
        _RETIRED[:] = kept
    freed = 0
    for family in done:
        for _, comm in reversed(family):  # sub-communicators first
            if not MPI.Is_finalized() and comm != MPI.COMM_NULL:
                comm.Free()
            freed += 1
    return freed


def retired_count() -> int:
    """Transports retired whose communicators are not freed yet (a call holds them)."""
    with _RETIRED_LOCK:
        return sum(len(family) for family in _RETIRED)


def _tag_upper_bound() -> int:
    return MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767  # predefined on COMM_WORLD


def _tag_blocks(comm: MPI.Comm) -> int:
    """How many tag blocks this communicator's MPI offers (and ZIPCOLL_TAG_BLOCKS allows)."""
    blocks = (_tag_upper_bound() + 1) // TAGS_PER_CALL
    limit = settings.get().tag_blocks
    return blocks if limit is None else max(2, min(blocks, limit))


def allgather_objects(comm: MPI.Comm, obj: Any) -> list:
    """Every rank's `obj` (small, picklable), in rank order (collective, blocking)."""
    return comm.allgather(obj)


def bcast_object(comm: MPI.Comm, obj: Any, root: int = 0) -> Any:
    """`root`'s `obj` (small, picklable) on every rank (collective, blocking)."""
    return comm.bcast(obj, root=root)


def gather_placement(comm: MPI.Comm, extra: Any) -> list[tuple]:
    """Every rank's (lowest rank of its shared-memory domain, *extra), in rank order (collective)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        leader = node.bcast(comm.Get_rank(), root=0)  # key=rank: the domain's lowest rank
    finally:
        node.Free()
    return comm.allgather((leader, *extra))


def cuda_aware() -> bool:
    """Whether MPI can read GPU memory (see `cuda_awareness`)."""
    return cuda_awareness()[0]


def cuda_awareness() -> tuple[bool, str]:
    """Whether MPI can read GPU memory, and who said so.

    The setting ZIPCOLL_CUDA_AWARE (zipcoll.settings) decides; unset, the loaded MPI
    library's `MPIX_Query_cuda_support()` (Open MPI, MPICH), asked once; a library without
    it is taken as not CUDA-aware (device data is then staged through host memory, which
    is always safe).
    """
    forced = settings.get().cuda_aware
    if forced is not None:
        return forced, f"ZIPCOLL_CUDA_AWARE={int(forced)}"
    return _queried_cuda_support()


@functools.lru_cache(maxsize=1)
def _queried_cuda_support() -> tuple[bool, str]:
    """The MPI library's own answer (it cannot change while the process runs)."""
    query = _mpi_symbol("MPIX_Query_cuda_support")
    if query is None:
        return False, "the MPI library has no MPIX_Query_cuda_support"
    query.restype = ctypes.c_int
    answer = int(query())
    return bool(answer), f"MPIX_Query_cuda_support() = {answer}"


def _mpi_symbol(name: str):
    """A function exported by the loaded MPI library, or None."""
    for path in _loaded_mpi_libraries():
        try:
            return getattr(ctypes.CDLL(path), name)
        except (OSError, AttributeError):
            continue
    return None


def _loaded_mpi_libraries() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi" in line}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))

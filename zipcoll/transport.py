"""Moving arrays between ranks: the only module that calls mpi4py's communication functions.

Every zipcoll call runs on a private duplicate of the caller's communicator, made once
per communicator, cached as an MPI attribute and freed with it, so that library
messages can never match the caller's own.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Any

import numpy as np
from mpi4py import MPI

# Each call gets a block of TAGS_PER_CALL consecutive tags, for its slices and for
# sub-schedules that run side by side; blocks are used in turn up to the MPI's MPI_TAG_UB
# (ZIPCOLL_TAG_BLOCKS lowers the count, to test the wrap), and a block still held by a
# call in flight is never handed out again.
TAGS_PER_CALL = 256
# Scratch kept between calls, per device: buffers used in the last _SCRATCH_IDLE_CALLS
# calls, the latest always and the others up to SCRATCH_BYTES in all.
SCRATCH_BYTES = int(os.environ.get("ZIPCOLL_SCRATCH_BYTES", 64 << 20))
_SCRATCH_IDLE_CALLS = 32
# The most items one MPI call may name: MPI-3 counts and displacements are C ints (MPI-4's
# large-count "_c" functions are not in every library: Open MPI 5.0 has none). Larger
# messages go as one derived datatype of whole blocks (point to point, broadcast,
# gathers: `bytes_type`), or in chunks (the library's own all-reduce, whose predefined ops
# take predefined datatypes only). ZIPCOLL_MAX_COUNT lowers it, to run those paths on
# small messages; read on every call, so a test may also set this module attribute.
MAX_COUNT = max(2, int(os.environ.get("ZIPCOLL_MAX_COUNT", 2**31 - 1)))


class Transport:
    """Point-to-point moves, native collectives and scratch memory on a private communicator."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._calls = 0
        self._tag_blocks = _tag_blocks(comm)
        self._held_tags: set[int] = set()
        self._scratch: dict[str, list[Any]] = {}
        self._subs: dict[Any, tuple["Transport", ...]] = {}

    def next_tag(self) -> int:
        """The first of TAGS_PER_CALL tags of the next call (every rank counts calls alike).

        The caller waits while `tag_held(tag)`, then holds it until the call ends.
        """
        self._calls += 1
        return (self._calls % self._tag_blocks) * TAGS_PER_CALL

    def tag_held(self, tag: int) -> bool:
        """Whether a call in flight still holds the block starting at `tag`."""
        return tag in self._held_tags

    def holding_tag(self, tag: int, steps: Any) -> Any:
        """`steps`, holding the tag block from now until they end (or are dropped)."""
        self._held_tags.add(tag)
        try:
            yield from steps
        finally:
            self._held_tags.discard(tag)

    # -- point to point ------------------------------------------------------------
    def isend(self, arr: Any, dest: int, tag: int) -> MPI.Request:
        """Start sending the bytes of a contiguous array (any number of them)."""
        with _as_bytes(arr) as spec:
            return self.comm.Isend(spec, dest, tag)

    def irecv(self, arr: Any, source: int, tag: int) -> MPI.Request:
        """Start receiving into the bytes of a contiguous array (any number of them)."""
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

    # -- collectives the schedules lean on ----------------------------------------
    def iallreduce_native(self, send: Any, recv: Any, op: MPI.Op) -> MPI.Request:
        """The MPI library's own Iallreduce (typed by mpi4py from the dtype, so MPI applies
        `op`), of at most MAX_COUNT items: the caller chunks larger ones."""
        return self.comm.Iallreduce(send, recv, op)

    def iallgatherv(self, send: Any, recv: Any, counts: list[int]) -> MPI.Request:
        """Start gathering every rank's bytes (counts[i] from rank i) into `recv`, in rank order."""
        counts = [int(c) for c in counts]
        displacements = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(int).tolist()
        if max(counts + displacements) > MAX_COUNT:
            return self._iallgatherv_placed(send, recv, counts, displacements)
        return self.comm.Iallgatherv([send, MPI.BYTE], [recv, (counts, displacements), MPI.BYTE])

    def _iallgatherv_placed(self, send: Any, recv: Any, counts: list[int],
                            displacements: list[int]) -> MPI.Request:
        """Iallgatherv past MAX_COUNT bytes: an Ialltoallw (my bytes to every rank) whose
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

    def agree(self, values: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Element-wise min and max of a small integer vector over all ranks, in one Allreduce."""
        local = np.array(list(values) + [-v for v in values], dtype=np.int64)
        out = np.empty_like(local)
        self.comm.Allreduce(local, out, MPI.MIN)
        n = len(values)
        return out[:n], -out[n:]

    def iagree(self, values: list[int]) -> "Agreement":
        """`agree` started, not waited (one Iallreduce); read it once its request is done."""
        return Agreement(self.comm, values)

    # -- scratch memory ------------------------------------------------------------
    def borrow(self, count: int, dtype: Any, xp: Any = np) -> Any:
        """A scratch array of `count` items, reused across calls (first touch is costly)."""
        nbytes = count * np.dtype(dtype).itemsize
        pool = self._scratch.setdefault(xp.__name__, [])
        # not much larger than needed, so that a large buffer left idle can be dropped
        fitting = [i for i, (raw, _) in enumerate(pool)
                   if nbytes <= raw.size <= max(4 * nbytes, 1 << 20)]
        if fitting:
            raw = pool.pop(min(fitting, key=lambda i: pool[i][0].size))[0]
        else:
            raw = xp.empty(max(nbytes, 8), dtype=np.uint8)
        return _ScratchView(raw, count, dtype)

    def give_back(self, scratch: "_ScratchView", xp: Any = np) -> None:
        """Return a borrowed scratch array to the pool, which then drops what it should not keep."""
        pool = self._scratch.setdefault(xp.__name__, [])
        pool.append((scratch.raw, self._calls))
        recent = [(raw, used) for raw, used in pool if used >= self._calls - _SCRATCH_IDLE_CALLS]
        recent.sort(key=lambda entry: -entry[1])  # most recently used first
        kept, total = [], 0
        for raw, used in recent:  # the latest is kept whatever its size: calls repeat
            if not kept or total + raw.size <= SCRATCH_BYTES:
                kept.append((raw, used))
                total += raw.size
        pool[:] = kept

    def scratch_bytes(self) -> int:
        """Bytes of scratch held between calls (every device)."""
        return sum(raw.size for pool in self._scratch.values() for raw, _ in pool)

    def split(self, layout: Any, colors: tuple[int, ...]) -> tuple["Transport", ...]:
        """Transports over sub-communicators, one per color of this rank (rank order kept).

        Collective the first time `layout` (a value every rank computes alike, naming the
        whole layout, not just this rank's colors) is used, then cached.
        """
        if layout not in self._subs:
            self._subs[layout] = tuple(Transport(self.comm.Split(color, key=self.rank))
                                       for color in colors)
        return self._subs[layout]

    def has_split(self, layout: Any) -> bool:
        """Whether `split(layout, ...)` is cached (so not collective)."""
        return layout in self._subs

    def reordered(self, order: list[int]) -> "Transport":
        """A transport whose rank i is rank order[i] of this one (collective once, cached)."""
        key = ("order", tuple(order))
        if key not in self._subs:
            self._subs[key] = (Transport(self.comm.Split(0, key=order.index(self.rank))),)
        return self._subs[key][0]

    def has_reordered(self, order: list[int]) -> bool:
        """Whether `reordered(order)` is cached (so not collective)."""
        return ("order", tuple(order)) in self._subs

    def allgather_object(self, obj: Any) -> list:
        """Every rank's `obj` (small, picklable), in rank order (collective, blocking)."""
        return self.comm.allgather(obj)

    def free(self) -> None:
        """Free the private communicator and its sub-communicators (no-op after Finalize)."""
        self._scratch.clear()
        subs = [sub for group in self._subs.values() for sub in group]
        self._subs.clear()
        for sub in subs:
            sub.free()
        if not MPI.Is_finalized() and self.comm != MPI.COMM_NULL:
            self.comm.Free()


def _nbytes(arr: Any) -> int:
    return int(arr.size) * np.dtype(arr.dtype).itemsize


@contextlib.contextmanager
def _as_bytes(arr: Any):
    """mpi4py's spec of arr's bytes: [arr, MPI.BYTE] up to MAX_COUNT of them, else
    [arr, 1, T] with T a datatype of them all, freed once the call naming it has started
    (MPI keeps a datatype that pending communication uses)."""
    nbytes = _nbytes(arr)
    if nbytes <= MAX_COUNT:
        yield [arr, MPI.BYTE]
        return
    datatype = bytes_type(nbytes)
    try:
        yield [arr, 1, datatype]
    finally:
        datatype.Free()


def bytes_type(nbytes: int, offset: int = 0) -> MPI.Datatype:
    """A committed datatype of `nbytes` contiguous bytes starting `offset` bytes in, in
    which no count exceeds MAX_COUNT (the caller frees it)."""
    datatype = _bytes_type(nbytes)
    if offset:
        placed = MPI.Datatype.Create_struct([1], [offset], [datatype])
        datatype.Free()
        datatype = placed
    return datatype.Commit()


def _bytes_type(nbytes: int) -> MPI.Datatype:
    """Up to MAX_COUNT bytes: contiguous; more: `whole` blocks of ceil(nbytes / MAX_COUNT)
    bytes (each such a type again), then the rest (likewise)."""
    if nbytes <= MAX_COUNT:
        return MPI.BYTE.Create_contiguous(nbytes)
    block = -(-nbytes // MAX_COUNT)
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
    buffers, and MPI reads and writes them until the request is done.
    """

    def __init__(self, comm: MPI.Comm, values: list[int]):
        self._n = len(values)
        self._local = np.array(list(values) + [-v for v in values], dtype=np.int64)
        self._out = np.empty_like(self._local)
        self.request = comm.Iallreduce(self._local, self._out, MPI.MIN)

    def lows(self) -> np.ndarray:
        return self._out[: self._n]

    def highs(self) -> np.ndarray:
        return -self._out[self._n:]


class _ScratchView:
    """A borrowed raw buffer and the typed view a schedule uses."""

    def __init__(self, raw: Any, count: int, dtype: Any):
        self.raw = raw
        self.array = raw[: count * np.dtype(dtype).itemsize].view(dtype)


_keyval = None


def transport_for(comm: MPI.Comm) -> Transport:
    """The Transport of `comm`: made (collectively) on first use, freed with `comm`."""
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_delete_transport)
    transport = comm.Get_attr(_keyval)
    if transport is None:
        # Dup() keeps the caller's class: a zipcoll.Intracomm's Allreduce would recurse
        plain = MPI.Intracomm(comm) if isinstance(comm, MPI.Intracomm) else MPI.Comm(comm)
        transport = Transport(plain.Dup())
        comm.Set_attr(_keyval, transport)
    return transport


def _delete_transport(comm: MPI.Comm, keyval: int, transport: Transport) -> None:
    transport.free()


def _tag_blocks(comm: MPI.Comm) -> int:
    """How many tag blocks this communicator's MPI offers (and ZIPCOLL_TAG_BLOCKS allows)."""
    upper = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767  # predefined on COMM_WORLD
    blocks = (upper + 1) // TAGS_PER_CALL
    limit = os.environ.get("ZIPCOLL_TAG_BLOCKS")
    return max(2, min(blocks, int(limit))) if limit else blocks


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


_CUDA_AWARE_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False,
                      "no": False}


def cuda_awareness() -> tuple[bool, str]:
    """Whether MPI can read GPU memory, and who said so.

    ZIPCOLL_CUDA_AWARE=1/0 (true/false, yes/no) decides, read on every call so that a
    job can switch; else the loaded MPI library's `MPIX_Query_cuda_support()` (Open MPI,
    MPICH), asked once; a library without it is taken as not CUDA-aware (device data is
    then staged through host memory, which is always safe).
    """
    forced = os.environ.get("ZIPCOLL_CUDA_AWARE")
    if forced is not None and forced.strip():
        value = _CUDA_AWARE_VALUES.get(forced.strip().lower())
        if value is None:
            raise ValueError(f"ZIPCOLL_CUDA_AWARE={forced!r}: expected 1 or 0 "
                             "(true/false, yes/no), or unset to ask the MPI library")
        return value, f"ZIPCOLL_CUDA_AWARE={forced.strip()}"
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

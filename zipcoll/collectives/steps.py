"""Step primitives: what every schedule is written with, and how a chunk travels.

A schedule moves *chunks* (contiguous slices of the caller's flat array). How a chunk
travels is its *encoding*, a parameter of every step, so one loop serves both:

- `Lossless(op)`: the chunk's raw values go on the wire (MPI reads the chunk where it
  is, no copy); a receiver applies the op.
- `Compressed(encoder)`: a codec payload goes on the wire; a receiver decodes and adds
  (`decode_add`), and re-encodes the partial sum where it passes it on.

The steps, after NCCL's send / recvReduceSend / recvCopySend (each is a generator:
it yields the requests it posted, then does the local work once they are done):

    send_recv_reduce   send a packed chunk, receive a peer's, reduce it into a chunk
    send_recv_copy     forward final bytes unchanged, receive final bytes into a chunk
    on_power_of_two    fold ranks in pairs onto a power of two, run a part there, unfold (MPICH)

plus the encoding's own local steps: `pack` (what to send of a chunk), `reduce`
(acc <- acc op received), `settle` (the owner's final value: encoded once, kept as the
others will decode it, so every rank ends with the same bits), `landing` and `unpack`
(where final bytes arrive, and how they become values).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from zipcoll.collectives.encoding import Encoder
from zipcoll.collectives.ops import ReduceOp
from zipcoll.collectives.schedule import Steps, copy_in
from zipcoll.topologies.trees import pof2_fold
from zipcoll.transport import Transport


class Encoding(Protocol):
    """What every step asks of a chunk's encoding: how it goes out (`pack`), where it comes
    in (`inbox`, `landing`), how it is combined (`reduce`, `settle`, `unpack`). `Lossless`,
    `Compressed` and `staging.Staged` implement it (the table in docs/architecture.md)."""

    lossy: bool
    fixed_size: bool  # every payload of n elements is wire_bytes(n) long
    # the wire holds a chunk's own values, in memory MPI reads and writes: a peer's chunk
    # may be received where it is reduced, when that memory's old values are no operand
    lands_in_place: bool

    def wire_bytes(self, n: int) -> int:
        """Bytes on the wire for a chunk of n elements (the most, for variable-size codecs)."""
        ...

    def pack(self, chunk: Any, site: str, slot: Any) -> Any:
        """What to send of `chunk` (encoded at `site` into `slot`, or the chunk itself)."""
        ...

    def inbox(self, slot: Any, n: int) -> Any:
        """Where a packed chunk of n elements is received, in `slot`."""
        ...

    def reduce(self, wire: Any, acc: Any, first: Any = None, received_first: bool = False) -> None:
        """acc <- (first, default acc) combined with what was received."""
        ...

    def settle(self, chunk: Any, site: str, slot: Any) -> Any:
        """The final value of an owned chunk, as it is sent on."""
        ...

    def landing(self, chunk: Any, slot: Any) -> Any:
        """Where final bytes of `chunk` arrive."""
        ...

    def unpack(self, wire: Any, chunk: Any) -> None:
        """Final bytes -> values of `chunk`."""
        ...

    def forward_bytes(self, n: int) -> int:
        """Scratch bytes needed to forward final bytes of n elements."""
        ...


class Lossless(Encoding):
    """Chunks travel as raw values; receivers apply `op`."""

    lossy = False
    fixed_size = True
    lands_in_place = True

    def __init__(self, op: ReduceOp, dtype: Any, xp: Any = np):
        self.op = op
        self.dtype = np.dtype(dtype)
        self.xp = xp

    def wire_bytes(self, n: int) -> int:
        """Bytes on the wire for a chunk of n elements."""
        return n * self.dtype.itemsize

    def pack(self, chunk: Any, site: str, slot: Any) -> Any:
        """What to send of `chunk`: the chunk itself (MPI reads it in place)."""
        return chunk

    def inbox(self, slot: Any, n: int) -> Any:
        """Where a packed chunk of n elements is received: `slot` (bytes) viewed typed."""
        return slot[: self.wire_bytes(n)].view(self.dtype)

    def reduce(self, wire: Any, acc: Any, first: Any = None, received_first: bool = False) -> None:
        """acc <- (first, default acc) op received; received op acc if `received_first`
        (operands in a fixed order across ranks: complex products are not commutative bit for bit)."""
        if received_first:
            self.op.reduce_into(acc, acc if first is None else first, self.xp, first=wire)
        else:
            self.op.reduce_into(acc, wire, self.xp, first=first)

    def settle(self, chunk: Any, site: str, slot: Any) -> Any:
        """The final value of an owned chunk, as sent: the chunk itself."""
        return chunk

    def landing(self, chunk: Any, slot: Any) -> Any:
        """Where final bytes of `chunk` arrive: in the chunk itself."""
        return chunk

    def unpack(self, wire: Any, chunk: Any) -> None:
        """Final bytes -> values of `chunk` (already there when they landed in place)."""
        if wire is not chunk:
            chunk[...] = wire

    def forward_bytes(self, n: int) -> int:
        """Scratch bytes needed to forward final bytes of n elements (none: they land in place)."""
        return 0


class Compressed(Encoding):
    """Chunks travel as codec payloads; partial sums are re-encoded where passed on."""

    lossy = True
    lands_in_place = False

    def __init__(self, encoder: Encoder, dtype: Any):
        self.encoder = encoder
        self.dtype = np.dtype(dtype)

    @property
    def fixed_size(self) -> bool:
        return self.encoder.codec.fixed_size

    def wire_bytes(self, n: int) -> int:
        """Payload bytes for n elements (the most, for a variable-size codec)."""
        return self.encoder.wire_bytes(n, self.dtype)

    def pack(self, chunk: Any, site: str, slot: Any) -> Any:
        """The payload of `chunk`, encoded at `site` into `slot`."""
        return self.encoder.encode(chunk, site, out=slot)

    def inbox(self, slot: Any, n: int) -> Any:
        """Where the payload of a chunk of n elements is received."""
        return slot[: self.wire_bytes(n)]

    def reduce(self, wire: Any, acc: Any, first: Any = None, received_first: bool = False) -> None:
        """acc <- (first, default acc) + decode(payload) (in either order: real sums commute)."""
        if first is not None and first is not acc:
            acc[...] = first
        self.encoder.decode_add(wire, acc)

    def settle(self, chunk: Any, site: str, slot: Any) -> Any:
        """Encode an owned chunk once and keep its decoding: what every other rank will get."""
        payload = self.encoder.encode(chunk, site, out=slot)
        self.encoder.decode(payload, chunk)
        return payload

    def landing(self, chunk: Any, slot: Any) -> Any:
        """Where the payload of `chunk`'s final value arrives."""
        return slot[: self.wire_bytes(chunk.size)]

    def unpack(self, wire: Any, chunk: Any) -> None:
        """chunk <- decode(payload)."""
        self.encoder.decode(wire, chunk)

    def forward_bytes(self, n: int) -> int:
        """Scratch bytes needed to forward a payload of n elements."""
        return self.wire_bytes(n)


class Slots:
    """`count` scratch byte slots of `nbytes` each (8-aligned, so they can be viewed typed)."""

    def __init__(self, t: Transport, count: int, nbytes: int, xp: Any):
        self._t, self._xp = t, xp
        if nbytes <= 0:  # nothing to hold (lossless data lands in place): borrow nothing
            self._space = None
            self.slots = [_NO_BYTES if xp is np else xp.empty(0, np.uint8)] * count
            return
        size = (nbytes + 7) & ~7
        self._space = t.borrow(size * count, np.uint8, xp)
        self.slots = [self._space.array[i * size:(i + 1) * size] for i in range(count)]

    def __getitem__(self, i: int) -> Any:
        return self.slots[i]

    def give_back(self) -> None:
        if self._space is not None:
            self._t.give_back(self._space, self._xp)


_NO_BYTES = np.empty(0, np.uint8)


def reduce_in_rank_order(enc: Encoding, packed: list, buf: Any) -> None:
    """buf <- every rank's packed vector (`packed[j]`: rank j's), combined in rank order:
    rank 0's unpacked, the others reduced into it; the same bits on every rank."""
    for j, wire in enumerate(packed):
        if j == 0:
            enc.unpack(wire, buf)
        else:
            enc.reduce(wire, buf)


def send_recv_reduce(t: Transport, enc: Encoding, outgoing: Any, dest: int, acc: Any,
                     source: int, tag: int, slot: Any, first: Any = None,
                     received_first: bool = False) -> Steps:
    """Send `outgoing` (packed) to `dest`; receive a packed chunk from `source` into
    `slot` and reduce it into `acc` (acc <- first op received, or received op first).

    Given a `first` (not `acc`), an encoding that lands in place receives into `acc`
    itself: its old values are no operand, so no scratch is written or read (`slot` may
    then be empty); `outgoing` is then never `acc`.
    """
    in_place = first is not None and first is not acc and enc.lands_in_place
    incoming = acc if in_place else enc.inbox(slot, acc.size)
    yield t.exchange(outgoing, dest, incoming, source, tag)
    enc.reduce(incoming, acc, first, received_first)


def send_recv_copy(t: Transport, enc: Encoding, outgoing: Any, dest: int, chunk: Any,
                   source: int, tag: int, slot: Any) -> Steps:
    """Send final bytes `outgoing` to `dest` unchanged; receive `chunk`'s final bytes from
    `source`. Returns the received bytes, to forward in turn."""
    incoming = enc.landing(chunk, slot)
    yield t.exchange(outgoing, dest, incoming, source, tag)
    enc.unpack(incoming, chunk)
    return incoming


def on_power_of_two(t: Transport, buf: Any, enc: Encoding, tag: int, xp: Any, send: Any,
                    name: str, part: Callable[[int, int, Any], Steps]) -> Steps:
    """All-reduce `buf` in place by `part(new_rank, pof2, slot)`, which runs on pof2 ranks.

    Folding makes any number of ranks a power of two (MPICH's `pof2_fold`); `slot` is
    scratch for one packed copy of `buf`.
    """
    copy_in(buf, send)
    if t.size == 1:
        return
    slots = Slots(t, 1, enc.wire_bytes(buf.size), xp)
    try:
        yield from fold(t, enc, buf, tag, slots[0], f"{name}/fold")
        folding = pof2_fold(t.rank, t.size)
        if folding.new_rank is not None:
            yield from part(folding.new_rank, folding.pof2, slots[0])
        yield from unfold(t, buf, tag)
    finally:
        slots.give_back()


def fold(t: Transport, enc: Encoding, buf: Any, tag: int, slot: Any, site: str) -> Steps:
    """Fold onto a power of two: among the first 2*(p - pof2) ranks, each even rank hands
    its vector to the odd one above and sits out (`unfold` gives it the result)."""
    folding = pof2_fold(t.rank, t.size)
    if folding.partner is None:
        return
    if folding.new_rank is None:
        yield [t.isend(enc.pack(buf, site, slot), folding.partner, tag)]
    else:
        incoming = enc.inbox(slot, buf.size)
        yield [t.irecv(incoming, folding.partner, tag)]
        enc.reduce(incoming, buf)


def unfold(t: Transport, buf: Any, tag: int) -> Steps:
    """Hand the result back to the ranks that `fold` set aside (raw values)."""
    folding = pof2_fold(t.rank, t.size)
    if folding.partner is None:
        return
    if folding.new_rank is None:
        yield [t.irecv(buf, folding.partner, tag)]
    else:
        yield [t.isend(buf, folding.partner, tag)]

"""GPU data through pinned host memory, for an MPI library that cannot read GPU memory.

Lossless plans (`through_pinned`): the message moves in chunks. The copy of chunk i+1 to
the host runs (on zipcoll's stream) while chunk i is all-reduced on the host, and the
copy of chunk i back to the device while chunk i+1 is; MPI touches a chunk only once
its copy has completed (an event per chunk). Each chunk runs the plan's own schedule, so

    staged(x) == [schedule(chunk) for chunk in chunks(x)]    bit for bit.

Integers, MAX/MIN and the logical ops are then bit-identical to the unstaged call; a float
sum of a message longer than one chunk may differ from the unstaged call in its last bits
(each element's p terms are added in an order that depends on where the element falls in
the schedule's own chunks, as between two schedules), and is identical on every rank.

The chunk rule: chunks of at most ZIPCOLL_STAGING_CHUNK_BYTES (4 MiB), as near equal as
whole elements allow, through ZIPCOLL_STAGING_IN_FLIGHT pinned buffers (2: enough for the
overlap, one chunk reduced, the next copying). A message of one chunk or less is staged whole: one copy each way, no extra
call. The default of 4 MiB weighs the first copy in and the last copy out, which nothing
hides (about 0.2-0.4 ms at PCIe's 12-25 GB/s), against what every chunk adds: a
schedule's start-up in Python and its latency terms. It is a reasoned default, not a
measured one: benchmarks/gpu_check.sh times chunked ("staged") against whole ("whole")
staging on a GPU.

Compressed plans (`Staged`): the codec runs on the device, in the plan's own schedule,
hop by hop; only the packed bytes (payloads, or raw chunks of a lossless level) cross to
pinned host memory for MPI, and received bytes cross back to be reduced or decoded on the
device.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np

from zipcoll import devices, settings
from zipcoll.collectives.schedule import Steps, chunk_bounds
from zipcoll.collectives.steps import Compressed, Encoding, Lossless
from zipcoll.devices import PINNED, Device
from zipcoll.transport import Transport


def chunk_bytes() -> int:
    """Bytes a staged chunk holds at most (ZIPCOLL_STAGING_CHUNK_BYTES, else 4 MiB)."""
    return settings.get().staging_chunk_bytes


def in_flight() -> int:
    """Pinned chunk buffers in use at once (ZIPCOLL_STAGING_IN_FLIGHT, else 2)."""
    return settings.get().staging_in_flight


def staging_chunks(count: int, itemsize: int,
                   most_bytes: int | None = None) -> tuple[tuple[int, int], ...]:
    """The chunks of `count` elements of `itemsize` bytes: near-equal whole-element ranges of
    at most `most_bytes` (default `chunk_bytes()`) each, or one chunk when it all fits.

    >>> staging_chunks(10, 4, most_bytes=16)
    ((0, 4), (4, 7), (7, 10))
    """
    most = chunk_bytes() if most_bytes is None else most_bytes
    per_chunk = max(1, most // itemsize)  # an element larger than a chunk is a chunk
    return chunk_bounds(count, max(1, -(-count // per_chunk)))


def staging_rule() -> str:
    """The chunk rule in force, in words (for zipcoll-info)."""
    return (f"chunks of up to {chunk_bytes()} bytes, {in_flight()} in flight "
            "(ZIPCOLL_STAGING_CHUNK_BYTES, ZIPCOLL_STAGING_IN_FLIGHT)")


def through_pinned(t: Transport, source: Any, target: Any,
                   reduce_chunk: Callable[[np.ndarray], Steps]) -> Steps:
    """All-reduce device data chunk by chunk on the host: `source` and `target` are Numba
    device arrays (the same one in place); `reduce_chunk(host)` all-reduces one pinned
    host chunk in place, on every rank alike (the same chunks everywhere).
    """
    bounds = staging_chunks(source.size, source.dtype.itemsize)
    return _pipeline(t, source, target, reduce_chunk, bounds, min(in_flight(), len(bounds)))


def _pipeline(t: Transport, source: Any, target: Any, reduce_chunk: Callable[[np.ndarray], Steps],
              bounds: tuple[tuple[int, int], ...], depth: int) -> Steps:
    """`through_pinned`'s steps: `depth` pinned buffers, chunk i in buffer i % depth."""
    longest = max(hi - lo for lo, hi in bounds)
    space = t.borrow(depth * longest, source.dtype, PINNED)
    boxes = [space.array[i * longest:(i + 1) * longest] for i in range(depth)]
    stream = devices.copy_stream()
    copied: dict[int, Any] = {}

    def copy_in(i: int) -> None:
        lo, hi = bounds[i]
        if hi > lo:
            source[lo:hi].copy_to_host(boxes[i % depth][:hi - lo], stream=stream)
        copied[i] = devices.recorded(stream)

    try:
        for i in range(depth):
            copy_in(i)
        for i, (lo, hi) in enumerate(bounds):
            host = boxes[i % depth][:hi - lo]
            copied.pop(i).synchronize()  # MPI reads the chunk only once it has arrived
            yield from reduce_chunk(host)
            if hi > lo:
                target[lo:hi].copy_to_device(host, stream=stream)
            if i + depth < len(bounds):
                copy_in(i + depth)  # queued behind the copy out of this same buffer
    finally:
        stream.synchronize()  # results in place, and no copy still using the pinned buffers
        t.give_back(space, PINNED)


class Stage:
    """How a compressed plan's device data reach an MPI that cannot read GPU memory.

    A schedule that may carry a codec passes every byte it sends or receives through its
    encoding (that is how it carries one), so wrapping the encoding (`Staged`) stages it.
    A lossless schedule that may not (native, rabenseifner, recdoubling: MPI's own
    collective, or the raw vector handed back after a fold), used as a two-level plan's
    inter level, runs on a host copy of its shard instead (`on_host`).
    """

    def __init__(self, device: Device, t: Transport):
        self.device, self._t = device, t

    def __call__(self, enc: Encoding) -> "Staged":
        return Staged(enc, self.device, self._t)

    def on_host(self, t: Transport, arr: Any, run: Callable[[np.ndarray], Steps]) -> Steps:
        """`run(host)` on host copies of device array `arr` (chunks through pinned memory)."""
        view = self.device.view(arr)
        return through_pinned(t, view, view, run)


class Staged(Encoding):
    """An encoding whose chunks live in device memory and whose wire bytes live in pinned
    host memory: what a schedule sends is packed on the device (encoded, or the raw chunk)
    and then copied to the host; what it receives is copied to the device and reduced or
    decoded there. The schedule's scratch slots (its `xp` is `PINNED`) are the host side.

    Every copy is waited for before MPI or the device reads its result, and device work
    is waited for before its bytes are copied: the codec kernels and CuPy may run on
    other streams than the copies.
    """

    def __init__(self, inner: Encoding, device: Device, t: Transport):
        if isinstance(inner, Lossless):  # reduce with the device's namespace
            inner = Lossless(inner.op, inner.dtype, device.xp)
        else:  # the codec takes the device's arrays as device memory
            inner = Compressed(_OnDevice(inner.encoder, device.for_codec), inner.dtype)
        self.inner, self.device, self._t = inner, device, t
        self.lossy = inner.lossy
        self.lands_in_place = False  # the wire is host memory, the chunks device memory

    @property
    def fixed_size(self) -> bool:
        return self.inner.fixed_size

    def wire_bytes(self, n: int) -> int:
        return self.inner.wire_bytes(n)

    def inbox(self, slot: Any, n: int) -> Any:
        """Where a packed chunk arrives: the host slot, as the inner encoding views it."""
        return self.inner.inbox(slot, n)

    def pack(self, chunk: Any, site: str, slot: Any) -> Any:
        """`chunk` packed on the device, then copied into the host `slot`."""
        with self._device_bytes(len(slot)) as space:
            return self._to_host(self.inner.pack(chunk, site, space), slot)

    def reduce(self, wire: Any, acc: Any, first: Any = None, received_first: bool = False) -> None:
        """acc <- first op received, on the device."""
        with self._on_device(wire) as received:
            self.inner.reduce(received, acc, first, received_first)

    def settle(self, chunk: Any, site: str, slot: Any) -> Any:
        """The owner's final value, settled on the device, its bytes copied into `slot`."""
        with self._device_bytes(len(slot)) as space:
            return self._to_host(self.inner.settle(chunk, site, space), slot)

    def landing(self, chunk: Any, slot: Any) -> Any:
        """Final bytes land on the host, never in the device chunk itself."""
        return self.inner.inbox(slot, chunk.size)

    def unpack(self, wire: Any, chunk: Any) -> None:
        """chunk <- the values of final bytes, on the device."""
        with self._on_device(wire) as received:
            self.inner.unpack(received, chunk)

    def forward_bytes(self, n: int) -> int:
        """Final bytes are forwarded from host slots: as many as go on the wire."""
        return self.wire_bytes(n)

    # -- copies ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _device_bytes(self, nbytes: int) -> Iterator[Any]:
        """Device scratch of `nbytes`, given back once the device is done with it."""
        space = self._t.borrow(nbytes, np.uint8, self.device.xp)
        try:
            yield space.array
        finally:
            devices.synchronize_device()
            self._t.give_back(space, self.device.xp)

    def _to_host(self, wire: Any, slot: Any) -> Any:
        """Copy device `wire` into host `slot` (typed alike) and wait for it: MPI reads it next."""
        devices.synchronize_device()  # the kernels that wrote `wire` are done
        host = slot[:wire.nbytes].view(wire.dtype)
        if wire.nbytes:
            _copy_waited(self.device.view(wire), host, to_host=True)
        return host

    @contextlib.contextmanager
    def _on_device(self, wire: Any) -> Iterator[Any]:
        """Host `wire`, copied to device scratch (typed alike) for the device to read."""
        with self._device_bytes(wire.nbytes) as space:
            received = space[:wire.nbytes].view(wire.dtype)
            if wire.nbytes:
                _copy_waited(self.device.view(received), wire, to_host=False)
            yield received


def _copy_waited(device_array: Any, host: Any, to_host: bool) -> None:
    """One copy between a device array and host memory on zipcoll's stream, waited for."""
    stream = devices.copy_stream()
    if to_host:
        device_array.copy_to_host(host, stream=stream)
    else:
        device_array.copy_to_device(host, stream=stream)
    stream.synchronize()


class _OnDevice:
    """An encoder whose arrays reach the codec as device memory (`for_codec`): under the
    simulator the device's NumPy arrays are wrapped, so the codec runs its CUDA kernels."""

    def __init__(self, encoder: Any, for_codec: Callable[[Any], Any]):
        self._encoder, self._device = encoder, for_codec
        self.codec = encoder.codec

    def encode(self, x: Any, site: str, out: Any = None) -> Any:
        return self._encoder.encode(self._device(x), site,
                                    out=None if out is None else self._device(out))

    def decode(self, payload: Any, out: Any) -> None:
        self._encoder.decode(self._device(payload), self._device(out))

    def decode_add(self, payload: Any, acc: Any) -> None:
        self._encoder.decode_add(self._device(payload), self._device(acc))

    def wire_bytes(self, n: int, dtype: Any) -> int:
        return self._encoder.wire_bytes(n, dtype)

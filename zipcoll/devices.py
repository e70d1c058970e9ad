"""Device memory as zipcoll moves it to and from the host: Numba views, pinned memory, a stream.

Copies between a GPU and the host go through Numba's CUDA support (a dependency), whatever
made the memory: CuPy arrays, torch tensors and `DeviceMemory` windows (no CuPy) are all
viewed as Numba device arrays through `__cuda_array_interface__`, without copying. Host
buffers are pinned (page-locked), so that copies on zipcoll's stream run asynchronously,
beside MPI. Under Numba's CUDA simulator the same calls run on host memory, which is how
the tests drive them without a GPU.

A `Device` also says how to compute on that memory where zipcoll can: CuPy on a GPU,
NumPy under the simulator, nothing for memory only the MPI library may touch (no CuPy).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from zipcoll import buffers
from zipcoll.buffers import CUDASIM, HOST, Buffer


@dataclass(frozen=True)
class Device:
    """How to reach one buffer's kind of device memory."""

    xp: Any  # the namespace its arrays compute with (CuPy; NumPy under the simulator); None: none
    view: Callable[[Any], Any]  # one of its 1-D arrays -> a Numba device array, same memory
    for_codec: Callable[[Any], Any]  # one of its arrays -> what the codecs take as device memory


def device_of(buf: Buffer) -> Device:
    """The `Device` of a device buffer (CUDA or CUDASIM)."""
    if buf.device == CUDASIM:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return Device(np, FakeCUDAArray, FakeCUDAArray)
    xp = None if buffers.handed_to_mpi(buf) else buffers.cupy()
    return Device(xp, _numba_view, lambda a: a)


def _numba_view(array: Any) -> Any:
    """A Numba device array over the memory of a CUDA array (`__cuda_array_interface__`).

    Its stream was synchronised when the buffer was wrapped: no second wait here.
    """
    from numba import cuda

    return cuda.as_cuda_array(array, sync=False)


def needs_staging(buf: Buffer, mpi_reads_gpu_memory: bool) -> bool:
    """Whether `buf`'s data must go through host memory to reach MPI.

    Not for host buffers, nor where MPI reads GPU memory itself; nor for a window zipcoll
    cannot compute on (no CuPy) over memory the CUDA driver does not know (or with no
    driver at all): that is host memory posing as a GPU's (mpi4py's tests do so), and MPI
    reads it as is.
    """
    if buf.device == HOST or mpi_reads_gpu_memory:
        return False
    if buffers.handed_to_mpi(buf):
        return cuda_driver_present() and _known_to_the_driver(buf.array.pointer)
    return True


def _known_to_the_driver(pointer: int) -> bool:
    """Whether the CUDA driver can copy from `pointer` (device, managed or pinned memory)."""
    from numba import cuda
    from numba.cuda.cudadrv.driver import CudaAPIError, get_devptr_for_active_ctx

    cuda.current_context()
    try:
        get_devptr_for_active_ctx(pointer)
    except CudaAPIError:  # plain host memory: the driver has no device address for it
        return False
    return True


@functools.lru_cache(maxsize=1)
def cuda_driver_present() -> bool:
    """Whether a real CUDA driver and device are usable (not the simulator)."""
    if buffers.simulator_on():
        return False
    from numba import cuda

    return bool(cuda.is_available())


def _pinned_empty(nbytes: int, dtype: Any = np.uint8) -> np.ndarray:
    from numba import cuda

    return cuda.pinned_array(nbytes, dtype=dtype)


# Pinned host memory as an array namespace: `Transport.borrow(n, dtype, PINNED)` pools it
# (page-locking is slow: buffers are kept between calls, as other scratch is).
PINNED = SimpleNamespace(__name__="pinned", empty=_pinned_empty)


@functools.lru_cache(maxsize=1)
def copy_stream() -> Any:
    """zipcoll's CUDA stream for copies to and from pinned memory (made once).

    A stream of its own, so the copies of one chunk run while the host works on another;
    the producer's stream was synchronised before staging starts.
    """
    from numba import cuda

    return cuda.stream()


def recorded(stream: Any) -> Any:
    """An event recorded on `stream` now: `.synchronize()` waits for what was queued before."""
    from numba import cuda

    event = cuda.event()
    event.record(stream)
    return event


def synchronize_device() -> None:
    """Wait for all work on the device (kernels on any stream, and copies)."""
    from numba import cuda

    cuda.synchronize()

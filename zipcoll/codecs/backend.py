"""Where an array lives, and the array namespace + kernels that work on it.

``backend_of(a)`` returns ``(backend, array)``: NumPy arrays run the ``numba.njit``
kernels on the host; CuPy arrays (and anything with ``__cuda_array_interface__``) run
the ``numba.cuda`` kernels, with CuPy for allocation and selection. Under the Numba
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) a Numba device array selects the CUDA
kernels on its host memory with NumPy as the namespace, which is how the CUDA kernels
are tested without a GPU.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from ..errors import MissingDependencyError


@dataclass(frozen=True)
class Backend:
    """An array namespace (``xp``) and the kernel module that runs on its arrays."""

    name: str
    xp: ModuleType
    kernels: ModuleType

    def to_host(self, a) -> np.ndarray:
        """A NumPy copy (or view) of ``a``."""
        return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _kernels(name: str) -> ModuleType:
    """Import a kernel module lazily: numba.cuda is slow to import and may be absent."""
    return importlib.import_module(f"zipcoll.codecs.kernels.{name}")


def cupy() -> ModuleType:
    """CuPy, or an error naming the extra that installs it: zipcoll's one import of CuPy."""
    try:
        return importlib.import_module("cupy")
    except ImportError:
        raise MissingDependencyError("cupy", "cuda12") from None


def host() -> Backend:
    """NumPy arrays, ``numba.njit`` kernels."""
    return Backend("cpu", np, _kernels("cpu"))


def cuda() -> Backend:
    """CuPy arrays, ``numba.cuda`` kernels."""
    return Backend("cuda", cupy(), _kernels("cuda"))


def simulator() -> Backend:
    """NumPy arrays, ``numba.cuda`` kernels run by the CUDA simulator."""
    return Backend("cudasim", np, _kernels("cuda"))


def _is_simulated(a) -> bool:
    """True for a device array of the Numba CUDA simulator."""
    return type(a).__module__.startswith("numba.cuda.simulator")


def backend_of(a) -> tuple[Backend, object]:
    """The backend for array ``a`` and ``a`` as an array of that backend's namespace."""
    if isinstance(a, np.ndarray):
        return host(), a
    if _is_simulated(a):
        return simulator(), a._ary  # the simulator keeps device memory in a NumPy array
    if hasattr(a, "__cuda_array_interface__"):
        xp = cupy()
        return cuda(), xp.asarray(a)
    raise TypeError(f"expected a NumPy, CuPy or Numba device array, got {type(a).__name__}")


def share_cores(ranks_on_node: int) -> int:
    """Give each of `ranks_on_node` processes its share of the cores for the CPU kernels.

    Numba starts a thread a core in every process: with more ranks on a node than cores,
    the parallel kernels' threads fight and wait on each other (a 4 MiB int8 ring at 4
    ranks on 2 cores took 170 ms with 2 threads a rank, 46 ms with 1). An explicit
    NUMBA_NUM_THREADS is left alone. Returns the thread count now in force.
    """
    import os

    import numba

    if "NUMBA_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        numba.set_num_threads(max(1, min(numba.config.NUMBA_NUM_THREADS,
                                         (cores or 1) // max(1, ranks_on_node))))
    return numba.get_num_threads()

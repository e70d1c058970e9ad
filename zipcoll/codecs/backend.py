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
from .kernels.threads import choose_layer


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


def machine_identity() -> str:
    """This process's machine and cores: ``"<boot id>/<cpus it may run on>"``.

    The kernel's boot id is the same for every process on one machine, whatever its
    network namespace or container (emulated nodes, ``docker run``); the affinity mask
    tells apart ranks pinned to different cores. Gather it from every rank and give it
    to ``threads_for``. Example: ``"5f2c...e1/0-3,8"``.
    """
    import os
    import socket

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = socket.gethostname()  # no Linux boot id: one machine a host name
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))
    return f"{boot}/{_cpu_ranges(cpus)}"


def _cpu_ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the kernel's cpulist format)."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(c) if c == start else f"{start}-{c}")
            start = None
    return ",".join(parts)


def _parse_identity(identity: str) -> tuple[str, frozenset]:
    """Boot id and cpu set of a ``machine_identity`` string."""
    boot, _, cpulist = identity.rpartition("/")
    cpus: set[int] = set()
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if not boot or not cpus:
        raise ValueError(f"not a machine identity: {identity!r}")
    return boot, frozenset(cpus)


def threads_for(identities: list[str], rank: int) -> int:
    """Kernel threads for ``rank``: its cores divided among the ranks that share them.

    ``identities[i]`` is rank i's ``machine_identity()``. Ranks on the same machine
    (boot id) whose CPU sets overlap this rank's share its cores, however MPI groups
    them into nodes: emulated nodes, containers and oversubscribed allocations all
    count. Returns ``max(1, cores // sharing ranks)``, this rank included.
    """
    cores, sharing = cores_shared(identities, rank)
    return max(1, cores // sharing)


def cores_shared(identities: list[str], rank: int) -> tuple[int, int]:
    """``rank``'s cores and the ranks on them (itself included), from every rank's identity."""
    boot, cpus = _parse_identity(identities[rank])
    sharing = 0
    for identity in identities:
        other_boot, other_cpus = _parse_identity(identity)
        sharing += other_boot == boot and not cpus.isdisjoint(other_cpus)
    return len(cpus), sharing


def share_machine_cores(identities: list[str], rank: int) -> int:
    """Set this process's kernel threads to ``threads_for(identities, rank)``.

    Numba starts a thread a core in every process: with more ranks on a machine than
    cores, the parallel kernels' threads fight and wait on each other (a 4 MiB int8 ring
    at 4 ranks on 2 cores took 170 ms with 2 threads a rank, 46 ms with 1). An explicit
    NUMBA_NUM_THREADS is left alone. Returns the thread count now in force.
    """
    return _use_threads(threads_for(identities, rank))


def _use_threads(threads: int) -> int:
    """Use ``threads`` kernel threads (at most Numba's pool) unless NUMBA_NUM_THREADS is set."""
    import os

    import numba

    choose_layer()  # set_num_threads starts Numba's threads, which fixes the layer
    if "NUMBA_NUM_THREADS" not in os.environ:
        numba.set_num_threads(max(1, min(numba.config.NUMBA_NUM_THREADS, threads)))
    return numba.get_num_threads()

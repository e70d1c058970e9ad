"""zipcoll-info: what zipcoll found on this machine (MPI, CUDA awareness, GPU libraries,
layout) and every ZIPCOLL_* setting in force."""
from __future__ import annotations

import importlib
import os
import sys


def _version(module: str) -> str:
    try:
        return getattr(importlib.import_module(module), "__version__", "installed")
    except ImportError:
        return "not installed"


def cuda_target() -> str:
    """Which `numba.cuda` the CUDA kernels use: NVIDIA's numba-cuda, or Numba's built-in."""
    try:
        from numba import cuda
    except Exception as error:  # noqa: BLE001 - a broken CUDA install is reported, not fatal
        return f"unavailable ({type(error).__name__}: {error})"
    if getattr(cuda, "implementation", "") == "NVIDIA":
        return f"numba-cuda {_version('numba_cuda')}"
    return ("Numba's built-in numba.cuda (deprecated: "
            "pip install -e \".[cuda12]\" brings numba-cuda)")


def gpus() -> str:
    """The GPUs the CUDA driver sees, or why none."""
    from zipcoll.buffers import simulator_on

    if simulator_on():
        return "CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "none (no CUDA driver or device)"
        return ", ".join(_gpu_name(gpu) for gpu in cuda.gpus)
    except Exception as error:  # noqa: BLE001
        return f"unknown ({type(error).__name__}: {error})"


def _gpu_name(gpu) -> str:
    name = gpu.name.decode() if isinstance(gpu.name, bytes) else gpu.name
    return f"{gpu.id}: {name} (compute {'.'.join(map(str, gpu.compute_capability))})"


def _kernel_threads(comm) -> str:
    """The CPU kernels' thread count in force on this rank, and where it comes from."""
    from zipcoll.codecs.backend import cores_shared, machine_identity, share_machine_cores
    from zipcoll.transport import allgather_objects

    identities = allgather_objects(comm, machine_identity())
    threads = share_machine_cores(identities, comm.Get_rank())
    if "NUMBA_NUM_THREADS" in os.environ:
        return f"{threads} (NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']})"
    cores, sharing = cores_shared(identities, comm.Get_rank())
    return f"{threads} a rank (rank 0's {cores} cores, shared by {sharing} ranks on them)"


def report() -> list[tuple[str, str]]:
    """(item, value) lines describing this process's view of zipcoll's world."""
    from mpi4py import MPI

    import zipcoll
    from zipcoll import settings
    from zipcoll.collectives.staging import staging_rule
    from zipcoll.transport import cuda_awareness

    comm = MPI.COMM_WORLD
    topology = zipcoll.Topology.from_comm(comm)
    return [
        ("zipcoll", zipcoll.__version__),
        ("python", sys.version.split()[0]),
        ("mpi4py", _version("mpi4py")),
        ("MPI library", MPI.Get_library_version().rstrip("\x00").splitlines()[0].strip()),
        ("CUDA-aware MPI", "{} ({})".format(*cuda_awareness())),
        ("GPU staging", staging_rule()),
        ("numpy", _version("numpy")),
        ("numba", _version("numba")),
        ("CUDA target", cuda_target()),
        ("GPUs", gpus()),
        ("cupy", _version("cupy")),
        ("torch", _version("torch")),
        ("jax", _version("jax")),
        ("ranks", str(comm.Get_size())),
        ("kernel threads", _kernel_threads(comm)),
        ("nodes", f"{topology.num_nodes} ({[len(n) for n in topology.nodes]} ranks each)"),
        ("algorithms", ", ".join(zipcoll.ALGORITHMS)),
        ("codecs", codec_names()),
        *settings.table(),
    ]


def codec_names() -> str:
    """The codec specs a user can pass: feedback is a wrapper, written around another."""
    import zipcoll

    return ", ".join("feedback:X (error feedback around codec X)" if name == "feedback"
                     else name for name in zipcoll.list_codecs())


def main(argv: list[str] | None = None) -> int:
    """Print the report on rank 0."""
    lines = report()
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        width = max(len(item) for item, _ in lines)
        for item, value in lines:
            print(f"{item:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

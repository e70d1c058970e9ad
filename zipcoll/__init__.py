"""zipcoll: MPI all-reduce algorithms that compress what they send.

    from mpi4py import MPI
    import numpy as np, zipcoll

    total = zipcoll.allreduce(np.ones(1 << 20, np.float32), algorithm="ring")
    approx = zipcoll.allreduce(x, algorithm="hierarchical", codec="int8", key="grad")
    shard = zipcoll.reduce_scatter(x, codec="int8")   # and zipcoll.allgather(shard)
    comm = zipcoll.Intracomm(MPI.COMM_WORLD)   # drop-in: comm.Allreduce(...) is zipcoll's
    zipcoll.configure(slice_bytes="4M")        # or ZIPCOLL_SLICE_BYTES=4M (docs/settings.md)

`zipcoll.torch` (PyTorch's DDP communication hooks) and `zipcoll.lowrank` (PowerSGD) are
imported on first use.
"""
import importlib

from zipcoll.codecs import get_codec, list_codecs
from zipcoll.collectives import (ALGORITHMS, SCHEDULES, SHARDED, SHARDED_ALGORITHMS, Intracomm,
                                 Request, allgather, allreduce, explain, iallgather, iallreduce,
                                 ireduce_scatter, reduce_scatter, save_profile, sparse_allgather,
                                 sparse_allreduce)
from zipcoll.collectives.progress import testall, waitall, waitany
from zipcoll.collectives.encoding import FEEDBACK as feedback
from zipcoll.errors import CodecNotApplied, MismatchError, MissingDependencyError, ZipcollError
from zipcoll.failures import abort_on_error
from zipcoll.settings import configure
from zipcoll.topologies import Topology

__version__ = "0.1.0"


def __getattr__(name: str):
    """`zipcoll.torch` on first use: PyTorch is optional and slow to import (and
    `zipcoll.lowrank`, PowerSGD, likewise)."""
    if name in ("torch", "lowrank"):
        return importlib.import_module(f"zipcoll.{name}")
    raise AttributeError(f"module 'zipcoll' has no attribute {name!r}")


__all__ = [
    "ALGORITHMS", "CodecNotApplied", "Intracomm", "MismatchError", "MissingDependencyError", "Request",
    "SCHEDULES", "SHARDED", "SHARDED_ALGORITHMS", "Topology", "ZipcollError", "abort_on_error",
    "allgather", "allreduce", "configure", "explain", "feedback",
    "get_codec", "iallgather", "iallreduce", "ireduce_scatter", "list_codecs", "reduce_scatter",
    "save_profile", "sparse_allgather", "sparse_allreduce",
    "testall", "waitall", "waitany",
]

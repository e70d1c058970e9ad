"""zipcoll: MPI all-reduce algorithms that compress what they send.

    from mpi4py import MPI
    import numpy as np, zipcoll

    total = zipcoll.allreduce(np.ones(1 << 20, np.float32), algorithm="ring")
    comm = zipcoll.Intracomm(MPI.COMM_WORLD)   # drop-in: comm.Allreduce(...) is zipcoll's
"""
from zipcoll.collectives import ALGORITHMS, Intracomm, Request, allreduce, iallreduce
from zipcoll.collectives import sparse_allgather, sparse_allreduce
from zipcoll.errors import MismatchError, MissingDependencyError, ZipcollError

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS", "Intracomm", "MismatchError", "MissingDependencyError", "Request",
    "ZipcollError", "allreduce", "iallreduce", "sparse_allgather", "sparse_allreduce",
]

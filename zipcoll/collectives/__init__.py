"""Schedules: who sends what to whom, and when."""
from zipcoll.collectives.api import ALGORITHMS, Intracomm, Request, allreduce, iallreduce
from zipcoll.collectives.sparse import sparse_allgather, sparse_allreduce

__all__ = ["ALGORITHMS", "Intracomm", "Request", "allreduce", "iallreduce", "sparse_allgather",
           "sparse_allreduce"]

"""Schedules: who sends what to whom, and when.

`SCHEDULES` is the registry (name -> `registry.Schedule`); `ALGORITHMS` the names
`algorithm=` takes ("auto" and the registry's).
"""
from zipcoll.collectives.api import Intracomm, Request, allreduce, iallreduce, save_profile
from zipcoll.collectives.registry import SCHEDULES, Schedule, algorithms
from zipcoll.collectives.sparse import sparse_allgather, sparse_allreduce

ALGORITHMS = algorithms()

__all__ = ["ALGORITHMS", "Intracomm", "Request", "SCHEDULES", "Schedule", "allreduce",
           "iallreduce", "save_profile", "sparse_allgather", "sparse_allreduce"]

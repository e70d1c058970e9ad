"""Schedules: who sends what to whom, and when.

`SCHEDULES` is the registry (name -> `registry.Schedule`); `ALGORITHMS` the names
`algorithm=` takes ("auto" and the registry's). `SHARDED`: the reduce-scatter /
all-gather schedules (`SHARDED_ALGORITHMS`: the names their `algorithm=` takes).
"""
from zipcoll.collectives.api import Intracomm, Request, allreduce, explain, iallreduce, save_profile
from zipcoll.collectives.registry import SCHEDULES, SHARDED, Schedule, algorithms
from zipcoll.collectives.sharded import allgather, iallgather, ireduce_scatter, reduce_scatter
from zipcoll.collectives.sharded import algorithms as sharded_algorithms
from zipcoll.collectives.sparse import sparse_allgather, sparse_allreduce

ALGORITHMS = algorithms()
SHARDED_ALGORITHMS = sharded_algorithms()

__all__ = ["ALGORITHMS", "Intracomm", "Request", "SCHEDULES", "SHARDED", "SHARDED_ALGORITHMS",
           "Schedule", "allgather", "allreduce", "explain", "iallgather", "iallreduce",
           "ireduce_scatter", "reduce_scatter", "save_profile", "sparse_allgather",
           "sparse_allreduce"]

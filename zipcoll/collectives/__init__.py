"""Schedules: who sends what to whom, and when."""
from zipcoll.collectives.api import ALGORITHMS, Intracomm, Request, allreduce, iallreduce

__all__ = ["ALGORITHMS", "Intracomm", "Request", "allreduce", "iallreduce"]

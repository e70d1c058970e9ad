"""``zipcoll.explain``: which plan ``auto`` would run for a message, and what each would cost.

    >>> ranking = zipcoll.explain(64 << 20, comm=MPI.COMM_WORLD, codec="int8")
    >>> print(ranking)              # every plan, cheapest first, with predicted times
    >>> ranking.best                # PlanShape('hierarchical', 'ring', None, 'int8')

Every rank must get the same answer (all ranks must run the same schedule), so the
profile is rank 0's: ``shared_profile(comm)`` loads it on rank 0 (the ``profile`` path,
else $ZIPCOLL_PROFILE, else the defaults) and broadcasts it, once per communicator
(cached on it as an MPI attribute, freed with it). The ranking is then a pure function
of (bytes, topology shape, codec, dtype, op, profile), the same on every rank.
"""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from zipcoll.topologies.cost import PlanShape, Profile, Selector, load_profile, rank_plans
from zipcoll.topologies.topology import Topology

_keyval = None


class Ranking(list):
    """(predicted seconds, PlanShape) pairs, cheapest first; prints as a table."""

    def __init__(self, items, nbytes: int, source: str):
        super().__init__(items)
        self.nbytes = nbytes
        self.source = source

    @property
    def best(self) -> PlanShape:
        """The plan ``auto`` runs."""
        return self[0][1]

    def __str__(self) -> str:
        lines = [f"# {self.nbytes} bytes; profile: {self.source}",
                 f"{'predicted':>12}  {'vs best':>8}  plan"]
        best = self[0][0] if self else 0.0
        for seconds, plan in self:
            ratio = f"{seconds / best:>7.2f}x" if best > 0 else f"{'-':>8}"
            lines.append(f"{seconds * 1e3:>9.3f} ms  {ratio}  {plan}")
        return "\n".join(lines)


def shared_profile(comm: MPI.Comm, path: str | None = None) -> Selector:
    """A Selector holding rank 0's profile (collective).

    Without ``path``: $ZIPCOLL_PROFILE or the defaults, read once per communicator and
    cached on it (what ``auto`` uses). With ``path``: that file, read now, not cached.
    Either way only rank 0 reads; the others get its contents.
    """
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval()
    selector = comm.Get_attr(_keyval) if path is None else None
    if selector is None:
        data = load_profile(path).to_dict() if comm.Get_rank() == 0 else None
        selector = Selector(Profile.from_dict(comm.bcast(data, root=0)))
        if path is None:
            comm.Set_attr(_keyval, selector)
    return selector


def explain(nbytes: int, comm: MPI.Comm | None = None, codec: Any = None,
            topology: Topology | None = None, dtype: str = "float32", op: str = "sum",
            profile: Profile | str | None = None, native: bool = True) -> Ranking:
    """Every plan an all-reduce of ``nbytes`` could run on ``comm``, cheapest first.

    Collective when it must build the topology or share the profile (first use on a
    communicator); ``profile`` given as a Profile is used as is (then the caller makes
    it the same everywhere), as a path it is read on rank 0 and shared. ``native=False``
    leaves out the plans that use the MPI library's own op, as ``auto`` does for an op
    and dtype on which it differs from zipcoll's (``collectives.ops.native_agrees``).
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    if topology is None:
        topology = Topology.from_comm(comm)
    if not isinstance(profile, Profile):
        profile = shared_profile(comm, profile).profile
    ranked = rank_plans(nbytes, topology, profile, codec, dtype, op, native)
    return Ranking(ranked, nbytes, profile.source)

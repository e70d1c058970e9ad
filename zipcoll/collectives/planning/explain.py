"""What ``zipcoll.explain`` shows: which plan ``auto`` would run for a message, and what each would cost.

    >>> ranking = zipcoll.explain(64 << 20, comm=MPI.COMM_WORLD, codec="int8")
    >>> print(ranking)              # every plan, cheapest first, with predicted times
    >>> ranking.best                # PlanShape('hierarchical', 'ring', None, 'int8')
    >>> zipcoll.explain(64 << 20, codec="int8", collective="reduce_scatter")  # its plans

Every rank must get the same answer (all ranks must run the same schedule), so the
profile is rank 0's: ``shared_profile(comm)`` loads it on every rank (the ``profile``
path, else $ZIPCOLL_PROFILE, else the defaults), raises alike everywhere if any rank
failed, and gives every rank rank 0's; a communicator's context does so once, at its
first use. The ranking (``ranking``) is then a pure function of (bytes, topology shape,
codec, dtype, op, profile), the same on every rank.
"""
from __future__ import annotations

from typing import Any, Mapping

from mpi4py import MPI

from zipcoll.collectives.planning.model import Shape
from zipcoll.collectives.planning.plans import (PlanShape, codec_idle, rank_plans,
                                                unmeasured_behind)
from zipcoll.collectives.planning.profile import (Link, Profile, ProfileError, load_profile,
                                                  profile_source)
from zipcoll.collectives.planning.selector import bucket_size, size_bucket
from zipcoll.collectives.planning.sharded import rank_sharded
from zipcoll.transport import allgather_objects, bcast_object


class Ranking(list):
    """(predicted seconds, PlanShape) pairs, cheapest first; prints as a table headed by
    the topology and the profile priced, marking plans whose codec is never applied."""

    def __init__(self, items, nbytes: int, source: str, topology: Any = None,
                 profile: Profile | None = None, measured: Mapping | None = None,
                 collective: str = "all-reduce"):
        super().__init__(items)
        self.collective = collective
        self.nbytes = nbytes
        self.source = source
        self.topology = topology
        self.profile = profile
        # what online tuning measured on this job: PlanShape -> (seconds, calls timed)
        self.measured = dict(measured or {})

    @property
    def best(self) -> PlanShape:
        """The plan ``auto`` runs."""
        return self[0][1]

    def __str__(self) -> str:
        what = "" if self.collective == "all-reduce" else f"{self.collective} of "
        lines = [f"# {what}{self.nbytes} bytes on {layout(self.topology)}" if self.topology
                 else f"# {what}{self.nbytes} bytes",
                 f"# profile: {self.source}" + (f"; {rates(self.profile)}" if self.profile else ""),
                 f"{'predicted':>12}  {'vs best':>8}  "
                 + (f"{'measured':>12} {'calls':>5}  " if self.measured else "") + "plan"]
        best = self[0][0] if self else 0.0
        behind = (unmeasured_behind(self, self.nbytes, self.topology, self.profile)
                  if self.collective == "all-reduce" and self.topology is not None
                  and self.profile is not None else set())
        for seconds, plan in self:
            ratio = f"{seconds / best:>7.2f}x" if best > 0 else f"{'-':>8}"
            idle = (self.collective == "all-reduce" and self.topology is not None
                    and codec_idle(plan, self.topology))
            mark = "  (codec not applied: its level has one rank)" if idle else ""
            if plan in behind:
                mark += "  (not measured at this size: after the plans the profile measured)"
            timed = ""
            if self.measured:
                took, calls = self.measured.get(plan, (None, 0))
                timed = (f"{took * 1e3:>9.3f} ms {calls:>5}  " if took is not None
                         else f"{'-':>12} {'-':>5}  ")
            lines.append(f"{seconds * 1e3:>9.3f} ms  {ratio}  {timed}{plan}{mark}")
        return "\n".join(lines)


def layout(topology: Any) -> str:
    """"2 nodes x 4 ranks" (the largest node's count where nodes differ)."""
    shape = Shape.of(topology)
    nodes = f"{shape.nodes} node" + ("s" if shape.nodes != 1 else "")
    uneven = "" if shape.uniform else " at most"
    return f"{nodes} x{uneven} {shape.per_node} rank" + ("s" if shape.per_node != 1 else "")


def _link(link: Link) -> str:
    rate = f"{1 / link.beta / 1e9:.2f} GB/s" if link.beta > 0 else "unbounded"
    return f"{rate} + {link.alpha * 1e6:.0f} us a message"


def rates(profile: Profile) -> str:
    """The profile's link rates, as the model prices them."""
    return f"intra-node {_link(profile.intra)}, inter-node {_link(profile.inter)}"


def codec_not_applied(plan: Any, profile: Profile) -> str:
    """Why ``auto`` sent `plan` lossless though a codec was passed, and how to force it:
    the CodecNotApplied warning's text (the same on every rank: the plan and profile are)."""
    codec, nbytes, op, native = plan.dropped
    priced = bucket_size(size_bucket(nbytes))  # the size auto priced this call's size class at
    ranking = rank_plans(priced, plan.topology, profile, codec, plan.work_dtype.name, op, native)
    applied = [(t, p) for t, p in ranking if p.inter_codec is not None
               and not codec_idle(p, plan.topology)]
    best_time, best = ranking[0]
    text = (f"codec {codec.codec_id!r} not applied: algorithm='auto' sends this all-reduce "
            f"({nbytes} bytes, priced at {priced}) on {layout(plan.topology)} lossless: the "
            f"cost model (profile: {profile.source}; {rates(profile)}) prices {best} at "
            f"{best_time * 1e3:.3f} ms")
    if not applied:
        return text + ", and no plan can carry the codec here (op, dtype or one rank)."
    time, shape = applied[0]
    return (text + f" and the cheapest plan with the codec, {shape}, at {time * 1e3:.3f} ms. "
            f"To apply the codec anyway name an algorithm, e.g. algorithm={shape.name!r}; "
            f"zipcoll.explain(nbytes, comm, codec=...) lists every plan. This warning "
            f"(zipcoll.CodecNotApplied) is given once per communicator.")


def shared_profile(comm: MPI.Comm, path: str | None = None) -> Profile:
    """Rank 0's profile on every rank, or the same ProfileError on every rank (collective).

    ``path``: that file, else $ZIPCOLL_PROFILE, else the defaults. Every rank reads its own
    file; if any rank cannot read or parse it, every rank raises the same ProfileError
    naming that rank, before any data moves (nobody waits for a rank that failed).
    A communicator's context loads it once, at its first use (what ``auto`` prices with).
    """
    profile, failure = None, None
    try:
        profile = load_profile(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # not a profile
        failure = f"{profile_source(path)}: {type(e).__name__}: {e}"
    failures = [(rank, text) for rank, text in enumerate(allgather_objects(comm, failure))
                if text is not None]
    if failures:
        rank, text = failures[0]
        others = f" (and {len(failures) - 1} other ranks)" if len(failures) > 1 else ""
        raise ProfileError(f"the cost model's profile could not be loaded on rank {rank} of "
                           f"{comm.Get_size()}{others}: {text}")
    return Profile.from_dict(bcast_object(comm, profile.to_dict() if comm.Get_rank() == 0 else None))


def ranking(nbytes: int, topology: Any, profile: Profile, codec: Any = None,
            dtype: str = "float32", op: str = "sum", native: bool = True,
            measured: Mapping | None = None) -> Ranking:
    """Every plan an all-reduce of ``nbytes`` could run on ``topology``, cheapest first
    (a pure function: ``zipcoll.explain`` finds the topology and profile of a communicator);
    ``measured``: what online tuning timed (PlanShape -> (seconds, calls)), shown beside."""
    ranked = rank_plans(nbytes, topology, profile, codec, dtype, op, native)
    return Ranking(ranked, nbytes, profile.source, topology, profile, measured)


def sharded_ranking(kind: str, nbytes: int, topology: Any, profile: Profile, codec: Any = None,
                    dtype: str = "float32", native: bool = True) -> Ranking:
    """Every plan a reduce-scatter or all-gather (`kind`) of ``nbytes`` (the whole vector)
    could run on ``topology``, cheapest first, as its ``auto`` prices them
    (``planning.sharded``): the first is what ``auto`` runs."""
    ranked = rank_sharded(kind, nbytes, topology, profile, codec, dtype, native)
    return Ranking(ranked, nbytes, profile.source, topology, profile, collective=kind)

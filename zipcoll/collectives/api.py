"""allreduce / iallreduce / Intracomm / explain: the public entry points, and the agreement check.

Every check that can fail runs before any data moves (`plan.make_plan`). Then the
agreement check (one small Iallreduce, on by default for every call; ZIPCOLL_CHECK=0
turns it off): a rank that rejects its arguments still joins it, so every other rank
learns of the failure and raises too, instead of waiting; ranks that disagree on count,
dtype, op, algorithm, codec or layout all raise MismatchError naming what each had.
Every call runs through its thread's progress engine (`progress`) as a generator of
non-blocking steps (`call`), so non-blocking calls complete in any order on each rank.
"""
from __future__ import annotations

import functools
import json
import warnings
from typing import Any, Hashable

from mpi4py import MPI

from zipcoll import settings
from zipcoll.collectives import registry
from zipcoll.collectives.agreement import code, layout_text
from zipcoll.collectives.call import Call, start
from zipcoll.collectives.progress import check_threads
from zipcoll.collectives.context import Context, context_for
from zipcoll.collectives.dispatch import (shape_uses_collectives, split_keys, steps_for,
                                          uses_collectives)
from zipcoll.collectives.ops import op_code
from zipcoll.collectives.plan import Plan, make_plan, with_shape
from zipcoll.collectives.progress import Request, Straight
from zipcoll.collectives.sharded import ShardedMethods, is_sharded_algorithm
from zipcoll.codecs import Codec, get_codec
from zipcoll.errors import CodecNotApplied
from zipcoll.failures import abort_on_error
from zipcoll.topologies import Topology
from zipcoll.collectives.planning.explain import (Ranking, codec_not_applied, ranking,
                                                  shared_profile, sharded_ranking)
from zipcoll.collectives.planning.sharded import collective_kind
from zipcoll.collectives.planning.profile import Profile


def checks_enabled() -> bool:
    """Whether calls run the agreement check: yes unless ZIPCOLL_CHECK=0 (for raw speed)."""
    return settings.get().check


def allreduce(sendbuf: Any, recvbuf: Any = None, *, op: Any = MPI.SUM,
              comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "auto",
              codec: Any = None, key: Hashable = None, topology: Topology | None = None) -> Any:
    """All-reduce `sendbuf` over `comm`; the result is in `recvbuf` if given, else a new array.

    `op`: an MPI.Op, or "sum", "prod", "max", "min", ..., or "mean" (floats).
    `algorithm`: "auto" or a name in `zipcoll.collectives.SCHEDULES`; two-level ones may
    name their inter level, "hierarchical:tree".
    `codec`: compress on the wire: a spec ("int8", "topk:ratio=0.01", {"id": "int4"}), or
    {"intra": spec, "inter": spec} for two-level algorithms (a plain spec: inter only).
    SUM and "mean" only. `key`: names the tensor, for error feedback across calls.
    `topology`: nodes or grid (default: `Topology.from_comm(comm)`).

    >>> total = zipcoll.allreduce(np.ones(4, np.float32), algorithm="ring")   # doctest: +SKIP
    """
    return start_allreduce(sendbuf, recvbuf, op, comm, algorithm, codec, key, topology,
                           True).wait()


def iallreduce(sendbuf: Any, recvbuf: Any = None, *, op: Any = MPI.SUM,
               comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "auto",
               codec: Any = None, key: Hashable = None,
               topology: Topology | None = None) -> Request:
    """Start an all-reduce (arguments as `allreduce`); the Request advances on test()/wait(),
    as does any other zipcoll call on the same communicator."""
    request = start_allreduce(sendbuf, recvbuf, op, comm, algorithm, codec, key, topology, False)
    assert isinstance(request, Request)  # a non-blocking start is never straight
    return request


def start_allreduce(sendbuf: Any, recvbuf: Any, op: Any, comm: MPI.Intracomm, algorithm: str,
                    codec: Any, key: Hashable, topology: Topology | None,
                    blocking: bool) -> Request | Straight:
    """Start one call (`call.start`): checks, agreement and schedule as its steps.

    Nothing waits for another rank here; a blocking call is what this returns waited on
    (`allreduce` is exactly that), and either kind tells its `plan`: a benchmark times the
    blocking call with this to learn which plan each call ran.
    """
    check_threads()
    ctx = context_for(comm)
    abort_on_error.install()
    check = checks_enabled()
    tuning = check and settings.get().tune  # online tuning needs the agreement

    def prepare() -> Plan:
        plan = make_plan(sendbuf, recvbuf, op, algorithm, codec, key,
                         ctx.layout(topology), ctx.selector, ctx.plans)
        if tuning and plan.auto is not None:
            # a new kind prices its plans (ms): here, before the agreement, so that no rank
            # waits for the others' pricing inside the timed steps of the kind's first call
            ctx.tuner.kind(plan.auto[5], ctx.selector.profile)
        if plan.dropped is not None and not ctx.warned_codec_dropped:
            ctx.warned_codec_dropped = True  # the plan is every rank's: so is this warning
            text = codec_not_applied(plan, ctx.selector.profile)
            kind = ctx.tuner.kind(plan.auto[5], ctx.selector.profile) if tuning else None
            if kind is not None and any(p.inter_codec for p in kind.candidates):  # alike everywhere
                text += (" auto is also timing plans that carry the codec on this job's first "
                         "calls of this size (online tuning): it applies the codec if one of "
                         "them is the fastest.")
            warnings.warn(text, CodecNotApplied, stacklevel=2)
        return plan

    return start(Call(ctx, "all-reduce", _FIELDS, prepare,
                      lambda plan: _signature(plan, algorithm),
                      lambda plan: _shown(plan, algorithm),
                      lambda plan: _collective(ctx, plan, tuning),
                      lambda plan: ctx.first_use(split_keys(plan)),
                      lambda plan, tag, _, may_block: steps_for(ctx.transport, plan, tag, may_block),
                      lambda plan: plan.outcome(), check,
                      (lambda plan, turn: _tuned(ctx, plan, turn)) if tuning else None), blocking)


def _collective(ctx: Context, plan: Plan, tuning: bool) -> bool:
    """Whether the call may run MPI collectives: its plan, or (tuned) any plan it may get."""
    if uses_collectives(ctx.transport, plan):
        return True
    if not tuning or plan.auto is None:
        return False
    possible = ctx.tuner.possible(plan.auto[5], ctx.selector.profile)
    found = plan.memo.get(("collective", len(possible)))  # the set only shrinks: its size
    if found is None:                                     # tells which it is
        found = plan.memo[("collective", len(possible))] = any(
            shape_uses_collectives(ctx.transport, plan.topology, shape) for shape in possible)
    return found


def _tuned(ctx: Context, plan: Plan | None, turn: int) -> Plan | None:
    """The plan online tuning gives call `turn` (after its agreement is read)."""
    if plan is None or plan.auto is None:
        return plan
    nbytes, op, native, _, codec, kind = plan.auto
    shape = ctx.tuner.decide(turn, kind, ctx.selector.profile, nbytes)
    if shape is None:
        return plan
    chosen = plan.memo.get("chosen")  # the model's choice: `plan` itself, for its every copy
    if chosen is None:
        chosen = plan.memo["chosen"] = ctx.selector.choose(nbytes, plan.topology, codec,
                                                           plan.work_dtype, op, native)
    return plan if shape == chosen else with_shape(plan, shape)


def explain(nbytes: int, comm: MPI.Intracomm | None = None, codec: Any = None,
            topology: Any = None, dtype: str = "float32", op: str = "sum",
            profile: Profile | str | None = None, native: bool = True,
            collective: str = "allreduce") -> Ranking:
    """Every plan an all-reduce of ``nbytes`` could run on ``comm``, cheapest first.

    The topology and profile are the ones ``auto`` prices with on ``comm`` (its context's:
    collective on the communicator's first use), with what its online tuning measured so
    far beside the predictions. A ``topology`` given is used as it is; a
    ``profile`` given as a Profile is used as it is (then the caller makes it the same
    everywhere), as a path it is read now on every rank, rank 0's shared (collective).
    Given both, nothing is collective. ``native=False`` leaves out the plans that use the
    MPI library's own op, as ``auto`` does for an op and dtype on which it differs from
    zipcoll's (``collectives.ops.native_agrees``).

    ``collective="reduce_scatter"`` or ``"allgather"``: the plans of that collective
    instead (``nbytes``: the whole vector, every rank's blocks together), priced as its
    ``auto`` prices them (no online tuning there: predictions only).

    >>> print(zipcoll.explain(64 << 20, comm=MPI.COMM_WORLD, codec="int8"))  # doctest: +SKIP
    >>> zipcoll.explain(64 << 20, codec="int8", collective="reduce_scatter").best  # doctest: +SKIP
    """
    kind = None if collective in ("allreduce", "all-reduce") else collective_kind(collective)
    comm = MPI.COMM_WORLD if comm is None else comm
    measured = None
    if topology is None or profile is None:
        ctx = context_for(comm)
        topology = ctx.topology if topology is None else topology
        if kind is None:
            measured = ctx.tuner.measured_for(nbytes, topology, codec, dtype, op, native)
        profile = ctx.selector.profile if profile is None else profile
    if not isinstance(profile, Profile):
        profile = shared_profile(comm, profile)
    if kind is not None:
        return sharded_ranking(kind, nbytes, topology, profile, codec, dtype, native)
    return ranking(nbytes, topology, profile, codec, dtype, op, native, measured)


_FIELDS = ("", "count", "dtype", "op", "algorithm", "resolved algorithm", "codec", "layout")


def _signature(plan: Plan | None, algorithm: str) -> list[int]:
    """Numbers every rank must agree on; the first says whether this rank rejected its input."""
    if plan is None:
        return [1] + [0] * (len(_FIELDS) - 1)
    signature = plan.memo.get(("signature", algorithm))  # the same for every copy of a plan
    if signature is None:
        signature = plan.memo[("signature", algorithm)] = [
            0, plan.count, _code(plan.recv.dtype.str), op_code(plan.op) * 2 + plan.mean,
            _code(str(algorithm)), _code(plan.name), _code(_codecs_text(plan)),
            _code(layout_text(plan.topology))]
    return signature


def _shown(plan: Plan | None, algorithm: str) -> list[str]:
    """How this rank describes each field (only made when ranks disagree)."""
    if plan is None:
        return ["rejected"] * len(_FIELDS)
    op = getattr(plan.op, "name", "user-defined") + (" (mean)" if plan.mean else "")
    return ["", str(plan.count), plan.recv.dtype.name, op, str(algorithm), plan.name,
            _codecs_text(plan), layout_text(plan.topology)]


def _codecs_text(plan: Plan) -> str:
    if plan.codec is None and plan.intra_codec is None:
        return "null"
    return json.dumps([c.get_config() if c else None for c in (plan.intra_codec, plan.codec)])


_code = functools.lru_cache(maxsize=1024)(code)


def save_profile(path: str, comm: MPI.Intracomm = MPI.COMM_WORLD) -> None:
    """Write the profile `auto` uses on `comm` with what it learned online (measured plans,
    the JSON of ``zipcoll-bench calibrate --plans``) to `path`, on rank 0: a later job
    with ZIPCOLL_PROFILE=path starts tuned. Every rank holds the same learned times (they
    are agreed); collective only on a communicator's first use."""
    ctx = context_for(comm)
    profile = ctx.tuner.profile(ctx.selector.profile)
    if ctx.transport.rank == 0:
        profile.save(path)


class Intracomm(ShardedMethods, MPI.Intracomm):
    """An mpi4py Intracomm over the same communicator whose Allreduce/Iallreduce are zipcoll's,
    and its Reduce_scatter(_block)/Allgather(v) and their I-forms (`ShardedMethods`).

    `algorithm` names a schedule of either table (all-reduce or reduce-scatter/all-gather);
    the collectives of the other table run "auto".

    Existing mpi4py code switches by wrapping its communicator and changing nothing else:

    >>> comm = zipcoll.Intracomm(MPI.COMM_WORLD, algorithm="ring", codec="int8")  # doctest: +SKIP
    >>> comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)                             # doctest: +SKIP
    """

    def __new__(cls, comm: MPI.Intracomm | None = None, algorithm: str = "auto",
                codec: Any = None):
        if not is_sharded_algorithm(algorithm):
            registry.parse(algorithm)  # ValueError now, not at the first call
        self = super().__new__(cls, MPI.COMM_WORLD if comm is None else comm)
        self.algorithm = algorithm
        self.codec = codec
        if isinstance(codec, (str, Codec)) or isinstance(codec, dict) and "id" in codec:
            get_codec(codec)  # an unknown codec fails here, not at the first call
        return self

    # -- communicators made from this one keep its algorithm and codec ------------------
    # mpi4py builds Dup/Clone/Idup results with type(self).__new__ (so with the defaults:
    # "auto", no codec) and Split/Create/Create_group results as plain MPI.Intracomm.

    def Clone(self) -> "Intracomm":
        return self._keeping(super().Clone())

    def Dup(self, info: MPI.Info | None = None) -> "Intracomm":
        return self._keeping(super().Dup(info))

    def Dup_with_info(self, info: MPI.Info) -> "Intracomm":
        return self._keeping(super().Dup_with_info(info))

    def Idup(self, info: MPI.Info | None = None) -> tuple["Intracomm", MPI.Request]:
        comm, request = super().Idup(info)
        return self._keeping(comm), request

    def Idup_with_info(self, info: MPI.Info) -> tuple["Intracomm", MPI.Request]:
        comm, request = super().Idup_with_info(info)
        return self._keeping(comm), request

    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        return self._keeping(super().Split(color, key))

    def Split_type(self, split_type: int, key: int = 0,
                   info: MPI.Info = MPI.INFO_NULL) -> "Intracomm":
        return self._keeping(super().Split_type(split_type, key, info))

    def Create(self, group: MPI.Group) -> "Intracomm":
        return self._keeping(super().Create(group))

    def Create_group(self, group: MPI.Group, tag: int = 0) -> "Intracomm":
        return self._keeping(super().Create_group(group, tag))

    def _keeping(self, comm: MPI.Intracomm) -> MPI.Intracomm:
        """`comm` (a new communicator) as this class, with this one's algorithm and codec;
        MPI.COMM_NULL (a rank left out of a Split or Create) stays as mpi4py returns it."""
        if comm == MPI.COMM_NULL:
            return comm
        kept = comm if type(comm) is type(self) else type(self).__new__(type(self), comm)
        kept.algorithm, kept.codec = self.algorithm, self.codec
        return kept

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:
        """Like MPI.Intracomm.Allreduce, with zipcoll's algorithm and codec."""
        allreduce(sendbuf, recvbuf, op=op, comm=self, algorithm=self._allreduce_algorithm(),
                  codec=self.codec)

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> Request:
        """Like MPI.Intracomm.Iallreduce; returns a zipcoll.Request (Test/Wait)."""
        return iallreduce(sendbuf, recvbuf, op=op, comm=self,
                          algorithm=self._allreduce_algorithm(), codec=self.codec)

    def _allreduce_algorithm(self) -> str:
        """The communicator's algorithm, or "auto" where it names a reduce-scatter one only."""
        try:
            registry.parse(self.algorithm)
        except ValueError:
            return "auto"
        return self.algorithm


__all__ = ["Intracomm", "Request", "allreduce", "checks_enabled", "explain", "iallreduce",
           "save_profile", "start_allreduce"]

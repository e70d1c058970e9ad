"""allreduce / iallreduce / Intracomm: the public entry points, and the agreement check.

Every check that can fail runs before any data moves (`plan.make_plan`). Where the
agreement check runs (see `agreement_checked`), a rank that rejects its arguments still
joins it, so every other rank learns of the failure and raises too, instead of waiting.
"""
from __future__ import annotations

import json
import os
import weakref
from typing import Any, Callable, Hashable

from mpi4py import MPI

from zipcoll.collectives import registry
from zipcoll.collectives.agreement import agree, check_comm, code
from zipcoll.collectives.dispatch import steps_for
from zipcoll.collectives.ops import op_code
from zipcoll.collectives.plan import Plan, make_plan
from zipcoll.collectives.schedule import Steps, run, test, wait
from zipcoll.codecs import Codec, get_codec
from zipcoll.codecs.backend import share_cores
from zipcoll.topologies import Topology
from zipcoll.transport import Transport, transport_for


def debug_enabled() -> bool:
    """ZIPCOLL_DEBUG=1: run the agreement check on every call, native ones included."""
    return os.environ.get("ZIPCOLL_DEBUG", "0") not in ("", "0")


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
    steps, plan = _start(sendbuf, recvbuf, op, comm, algorithm, codec, key, topology, True)
    run(steps)
    return plan.outcome()


def iallreduce(sendbuf: Any, recvbuf: Any = None, *, op: Any = MPI.SUM,
               comm: MPI.Intracomm = MPI.COMM_WORLD, algorithm: str = "auto",
               codec: Any = None, key: Hashable = None,
               topology: Topology | None = None) -> "Request":
    """Start an all-reduce (arguments as `allreduce`); the Request advances on test()."""
    steps, plan = _start(sendbuf, recvbuf, op, comm, algorithm, codec, key, topology, False)
    return Request(steps, plan.outcome)


class Request:
    """A zipcoll all-reduce in flight. `test()` advances it; `wait()` finishes it.

    `wait()` returns what `allreduce` would have returned. `Test`/`Wait` are aliases,
    so code written against `mpi4py.MPI.Request` keeps working.
    """

    def __init__(self, steps: Steps, outcome: Callable[[], Any]):
        self._steps = steps
        self._outcome = outcome
        self._pending: list = []
        self._done = False
        self._advance()  # post the first step now, so data moves while the caller computes

    def _advance(self) -> None:
        try:
            self._pending = next(self._steps)
        except StopIteration:
            self._pending, self._done = [], True

    def test(self) -> bool:
        """Advance as far as possible without blocking; True once the result is complete."""
        while not self._done:
            if self._pending and not test(self._pending):
                return False
            self._advance()
        return True

    def wait(self) -> Any:
        """Block until complete; return the result."""
        while not self._done:
            wait(self._pending)
            self._advance()
        return self._outcome()

    Test = test
    Wait = wait


def _start(sendbuf: Any, recvbuf: Any, op: Any, comm: MPI.Intracomm, algorithm: str,
           codec: Any, key: Hashable, topology: Topology | None,
           blocking: bool) -> tuple[Steps, Plan]:
    """Validate, agree, and build the steps of one call (nothing has moved yet)."""
    t, found = _context(comm)
    try:
        plan, error = make_plan(sendbuf, recvbuf, op, algorithm, codec, key,
                                _topology(t, found, topology)), None
    except (TypeError, ValueError) as exc:
        plan, error = None, exc
    if agreement_checked(plan):
        _agree(t, plan, error, algorithm)
    elif error is not None:
        raise error
    return steps_for(t, plan, blocking), plan


# Each communicator's topology, found (collectively) at its first call.
_TOPOLOGIES: "weakref.WeakKeyDictionary[Transport, Topology]" = weakref.WeakKeyDictionary()


def _context(comm: Any) -> tuple[Transport, Topology]:
    """The comm's transport and topology, both made on first use."""
    t = transport_for(check_comm(comm))
    topology = _TOPOLOGIES.get(t)
    if topology is None:
        topology = _TOPOLOGIES[t] = Topology.from_comm(t.comm)
        share_cores(t.ranks_sharing_memory())
    return t, topology


def _topology(t: Transport, found: Topology, topology: Topology | None) -> Topology:
    if topology is None:
        return found
    if not isinstance(topology, Topology) or topology.size != t.size:
        raise ValueError(f"topology must be a zipcoll.Topology of {t.size} ranks")
    return topology


def agreement_checked(plan: Plan | None) -> bool:
    """Whether this call runs the agreement check (every rank decides alike).

    Always with ZIPCOLL_DEBUG=1; else for every algorithm but native. The check is one
    Allreduce of 16 int64 (a few microseconds): "auto" only leaves native for messages
    large enough that this stays under 1% of the call (see README, "Agreement check").
    """
    if debug_enabled():
        return True
    return plan is None or not plan.schedule.native


_FIELDS = ("", "count", "dtype", "op", "algorithm", "resolved algorithm", "codec", "topology")


def _signature(plan: Plan | None, algorithm: str) -> list[int]:
    """Numbers every rank must agree on; the first says whether this rank rejected its input."""
    if plan is None:
        return [1] + [0] * (len(_FIELDS) - 1)
    codecs = [c.get_config() if c else None for c in (plan.intra_codec, plan.codec)]
    layout = (plan.topology.node_of, plan.topology.grid) if plan.topology else None
    return [0, plan.count, code(plan.recv.dtype.str), op_code(plan.op) * 2 + plan.mean,
            code(str(algorithm)), code(plan.name), code(json.dumps(codecs)),
            code(repr(layout))]


def _agree(t: Transport, plan: Plan | None, error: Exception | None, algorithm: str) -> None:
    """Raise on every rank if any rank rejected its input or the ranks differ."""
    agree(t, _signature(plan, algorithm), _FIELDS, error, "all-reduce")


class Intracomm(MPI.Intracomm):
    """An mpi4py Intracomm over the same communicator whose Allreduce/Iallreduce are zipcoll's.

    Existing mpi4py code switches by wrapping its communicator and changing nothing else:

    >>> comm = zipcoll.Intracomm(MPI.COMM_WORLD, algorithm="ring", codec="int8")  # doctest: +SKIP
    >>> comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)                             # doctest: +SKIP
    """

    def __new__(cls, comm: MPI.Intracomm | None = None, algorithm: str = "auto",
                codec: Any = None):
        registry.parse(algorithm)  # ValueError now, not at the first call
        self = super().__new__(cls, MPI.COMM_WORLD if comm is None else comm)
        self.algorithm = algorithm
        self.codec = codec
        if isinstance(codec, (str, Codec)) or isinstance(codec, dict) and "id" in codec:
            get_codec(codec)  # an unknown codec fails here, not at the first call
        return self

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:
        """Like MPI.Intracomm.Allreduce, with zipcoll's algorithm and codec."""
        allreduce(sendbuf, recvbuf, op=op, comm=self, algorithm=self.algorithm,
                  codec=self.codec)

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> Request:
        """Like MPI.Intracomm.Iallreduce; returns a zipcoll.Request (Test/Wait)."""
        return iallreduce(sendbuf, recvbuf, op=op, comm=self, algorithm=self.algorithm,
                          codec=self.codec)


__all__ = ["Intracomm", "Request", "allreduce", "iallreduce"]

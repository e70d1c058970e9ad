"""What zipcoll keeps per communicator: its transport, its topology, and its calls' order.

Made on the first call on a communicator (collectively: a private duplicate, and the
topology's one allgather) and kept on it as an MPI attribute (`transport.attachment_for`),
so it goes when the communicator is freed: nothing else holds it.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from mpi4py import MPI

from zipcoll import settings
from zipcoll.codecs.backend import machine_identity, share_machine_cores
from zipcoll.collectives.agreement import check_settings
from zipcoll.collectives.planning.explain import shared_profile
from zipcoll.collectives.planning.selector import Selector
from zipcoll.collectives.planning.tuning import Tuner
from zipcoll.collectives.progress import Engine, Gate, current, run
from zipcoll.collectives.schedule import Steps
from zipcoll.topologies import Topology
from zipcoll.transport import Transport, attachment_for


class Context:
    """One communicator's transport, its topology and selector (found on first use), and the
    order of its calls.

    MPI matches calls on one communicator in the order each rank starts them, so each
    call takes its number at start (`begin`), and the steps that must match across ranks
    in that order wait at a `Gate` for their turn: posting the agreement, reading its
    answer, and running a schedule that calls MPI's own collectives (or splits the
    communicator). Calls on other communicators never wait for these turns.
    """

    def __init__(self, transport: Transport):
        self.transport = transport
        self._topology: Topology | None = None
        self._selector: Selector | None = None
        self._preparing = False
        self.started = 0  # calls begun, in start order
        self.agreements_posted = 0  # of them, how many posted their agreement (or passed)
        self._passed: set[int] = set()  # turns passed out of order, waiting for older ones
        self.collective_turns: deque = deque()  # calls that run MPI collectives, in start order
        self._requested: set = set()  # sub-communicator layouts some started call needs
        self.live = 0  # calls in flight
        self.owner: Engine | None = None  # the engine (thread) of the calls in flight
        self.warned_codec_dropped = False  # CodecNotApplied: once per communicator
        self.agreed_settings: int | None = None  # `Settings.code` the ranks last agreed on
        self.tuner = Tuner(transport.rank)  # algorithm="auto"'s online tuning
        self.plans: dict = {}  # checked plans by their arguments (`plan.make_plan`'s cache)

    @property
    def ready(self) -> bool:
        """Whether the topology and selector are known (no collective left to prepare)."""
        return self._selector is not None

    def preparing(self) -> Steps:
        """The first use's collective steps: the private duplicate's completion, then the
        settings compared, the topology and rank 0's profile. Other calls wait for the one
        that runs them."""
        while not self.ready:
            if self._preparing:
                yield Gate(lambda: not self._preparing)
                continue
            self._preparing = True
            try:
                if self.transport.duplicating:
                    yield self.transport.duplicating
                # all ranks have started this call (the duplicate completed): the blocking
                # collectives on the private communicator below meet every rank there
                self._prepare()
            finally:
                self._preparing = False

    def _prepare(self) -> None:
        self.transport.duplicated()
        mine = settings.get()
        rows = self.transport.allgather_object((machine_identity(), mine.errors,
                                                mine.agreeing()))
        check_settings([row[1:] for row in rows])  # raises alike on every rank
        self.agreed_settings = mine.code
        topology = Topology.from_comm(self.transport.comm)
        # the CPU kernels' threads: this machine's cores shared by every rank on them
        share_machine_cores([row[0] for row in rows], self.transport.rank)
        self._topology = topology
        self._selector = Selector(shared_profile(self.transport.comm))

    def _ensure(self) -> None:
        if not self.ready:
            run(current(), self.preparing())

    @property
    def selector(self) -> Selector:
        """algorithm="auto"'s cost model, with rank 0's profile (collective on first use)."""
        if self._selector is None:  # asked several times a call: one test once prepared
            self._ensure()
        return self._selector

    @property
    def topology(self) -> Topology:
        """The communicator's nodes (collective on first use)."""
        if self._topology is None:
            self._ensure()
        return self._topology

    def layout(self, topology: Topology | None) -> Topology:
        """A call's topology: `topology` if given (a Topology of this communicator's size:
        ValueError otherwise), else the communicator's own. Asks for the own one either
        way: a call may be the communicator's first use, which is collective."""
        found = self.topology
        if topology is None:
            return found
        if not isinstance(topology, Topology) or topology.size != self.transport.size:
            raise ValueError(f"topology must be a zipcoll.Topology of {self.transport.size} ranks")
        return topology

    def claim(self, engine: Engine) -> None:
        """A call starts on `engine`'s thread: RuntimeError if another thread's calls are in
        flight here (MPI matches a communicator's calls in start order, which two threads
        at once cannot keep alike on every rank)."""
        if self.live and self.owner is not engine:
            raise RuntimeError(
                f"thread {engine.thread!r} started a zipcoll call on a communicator on which "
                f"thread {self.owner.thread!r} has calls in flight: use one communicator per "
                "thread (e.g. comm.Dup() for each)")
        self.owner = engine

    def begin(self) -> int:
        """A call starts here: its number, in start order (the same on every rank)."""
        self.started += 1
        self.live += 1
        return self.started - 1

    def end(self) -> None:
        self.live -= 1

    def first_use(self, layouts: list) -> bool:
        """Whether a call that needs these sub-communicator layouts is the first to (the
        same on every rank: it counts started calls, not splits done)."""
        if not layouts:  # a flat schedule in rank order: every call's case on one node
            return False
        new = [layout for layout in layouts if layout not in self._requested]
        self._requested.update(new)
        return bool(new)

    def my_turn(self, turn: int) -> Gate | None:
        """A step that waits until every call older than number `turn` has posted its
        agreement; None when they have."""
        if self.agreements_posted == turn:
            return None
        return Gate(lambda: self.agreements_posted == turn)

    def pass_turn(self, turn: int) -> None:
        """Call `turn` has posted its agreement, or will post none (idempotent)."""
        if turn >= self.agreements_posted:
            self._passed.add(turn)
        while self.agreements_posted in self._passed:
            self._passed.discard(self.agreements_posted)
            self.agreements_posted += 1

    def collective_turn(self, ticket: object) -> Gate | None:
        """A step that waits until every older call that runs MPI collectives here has
        ended; None when they have."""
        if self.collective_turns[0] is ticket:
            return None
        return Gate(lambda: self.collective_turns[0] is ticket)

    def next_tag(self) -> int:
        """The first tag of a new call's block (taken at start, in start order)."""
        return self.transport.next_tag()


def context_for(comm: Any) -> Context:
    """The Context of `comm` (TypeError for what is not a usable intra-communicator).

    It lives on `comm`'s attribute: freeing `comm` drops it (and frees its private
    communicators at a later call, once no call in flight holds them).
    """
    held = attachment_for(check_comm(comm))
    ctx = held.context
    if ctx is None:
        ctx = held.context = Context(held.transport)
    return ctx


def check_comm(comm: Any) -> MPI.Intracomm:
    """`comm`, if it is a usable intra-communicator; TypeError otherwise."""
    if isinstance(comm, MPI.Comm) and comm == MPI.COMM_NULL:
        raise TypeError("comm is MPI.COMM_NULL: a null or freed communicator")
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py Intracomm, not {type(comm).__name__}")
    return comm

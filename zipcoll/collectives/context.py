"""What zipcoll keeps per communicator: its transport and its topology (and the engine).

Made on the first call on a communicator (collectively: a private duplicate, and the
topology's one allgather) and kept on it as an MPI attribute (`transport.attachment_for`),
so it goes when the communicator is freed: nothing else holds it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpi4py import MPI

from zipcoll.codecs.backend import machine_identity, share_machine_cores
from zipcoll.collectives.progress import ENGINE, Engine
from zipcoll.topologies import Topology
from zipcoll.transport import Transport, attachment_for


@dataclass
class Context:
    """One communicator's transport, (found on first use) topology, and the process's engine."""

    transport: Transport
    engine: Engine = ENGINE
    _topology: Topology | None = None
    _selector: Any = None

    @property
    def selector(self) -> Any:
        """algorithm="auto"'s cost model, with rank 0's profile (collective on first use)."""
        if self._selector is None:
            from zipcoll.topologies.explain import shared_profile

            self.engine.drain()
            self._selector = shared_profile(self.transport.comm)
        return self._selector

    @property
    def topology(self) -> Topology:
        """The communicator's nodes (collective on first use: no call may be in flight)."""
        if self._topology is None:
            self.engine.drain()
            self._topology = Topology.from_comm(self.transport.comm)
            # the CPU kernels' threads: this machine's cores shared by every rank on them
            identities = self.transport.allgather_object(machine_identity())
            share_machine_cores(identities, self.transport.rank)
        return self._topology

    def next_tag(self) -> int:
        """The first tag of a new call's block; waits (advancing the others) while the block
        it wraps onto is still held by a call in flight."""
        tag = self.transport.next_tag()
        if self.transport.tag_held(tag):
            self.engine.wait_until(lambda: not self.transport.tag_held(tag))
        return tag


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

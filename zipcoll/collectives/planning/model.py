"""The cost model's vocabulary: what a schedule's cost formula is given, and the pieces
several formulas share.

Each schedule prices itself (`registry.Schedule.cost`, beside its `run`): a function
``(n, span, work, codec) -> seconds`` of n bytes on a `Span` of ranks, with the speeds and
overheads of a `Work`. Step counts are those of zipcoll's own schedules (Thakur,
Rabenseifner and Gropp 2005 and NCCL's tuning model give the classic forms).

Assumptions, where a formula needs one:
- ranks of a node are consecutive (what ``Topology.ring_order`` and MPI's usual mapping give);
- a step whose pairs cross nodes with k ranks of a node crossing at once shares the node's
  link: its beta is multiplied by k (rails of the two-level schedules: k = ranks per node);
- a step costs its slowest link: a flat ring across nodes goes at the inter-node rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.profile import CodecSpeed, DEFAULT_CODECS, Link, Profile, Rate


@dataclass(frozen=True)
class Shape:
    """What of a topology the model reads: the same on every rank (no rank in it)."""

    size: int
    nodes: int
    per_node: int  # ranks per node; on a non-uniform topology the largest node's

    def __post_init__(self) -> None:
        # a kind of call's key holds its shape, looked up on every auto call: hashed once
        object.__setattr__(self, "_hash", hash((self.size, self.nodes, self.per_node)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def uniform(self) -> bool:
        return self.nodes * self.per_node == self.size

    @classmethod
    def of(cls, topology: Any) -> Shape:
        """The shape of a ``zipcoll.Topology`` (or of anything with size/num_nodes/nodes)."""
        if isinstance(topology, Shape):
            return topology
        nodes = getattr(topology, "nodes", None)
        per_node = max(len(n) for n in nodes) if nodes else topology.local_size
        return cls(topology.size, topology.num_nodes, per_node)

    @property
    def label(self) -> str:
        """"NxL", as calibrated native times are keyed."""
        return f"{self.nodes}x{self.per_node}"


@dataclass(frozen=True)
class Span:
    """The ranks one schedule runs over: ``size`` ranks, ``per_node`` consecutive ones a node."""

    size: int
    per_node: int
    intra: Link
    inter: Link

    @property
    def ring_link(self) -> Link:
        """A ring step goes at its slowest hop: a ring over several nodes has both kinds."""
        if self.size <= self.per_node:
            return self.intra
        if self.per_node == 1:
            return self.inter
        return Link(max(self.intra.alpha, self.inter.alpha), max(self.intra.beta, self.inter.beta))

    def pair_link(self, distance: int) -> Link:
        """The link of an exchange between ranks ``distance`` apart (recursive halving/doubling).

        Partners under ``per_node`` apart share a node; farther ones cross, all of a node's
        ranks at once, so the node's link is shared by ``per_node`` streams.
        """
        return self.intra if distance < self.per_node else self.inter.shared(self.per_node)


@dataclass(frozen=True)
class Work:
    """What one schedule needs besides its span: compute speeds, overheads, dtype."""

    profile: Profile
    itemsize: int
    dtype: str
    step: float  # per-step overhead (0 for the MPI library's own C loops)
    links: str = "as measured"  # or "bandwidth" (no latency), "free": for pipelining bounds

    def hop(self, link: Link, nbytes: float) -> float:
        """One step that sends ``nbytes`` over ``link``."""
        return link.time(nbytes) + self.step

    def reduce(self, nbytes: float) -> float:
        return self.profile.reduce.time(nbytes)  # an infinitely fast Rate gives 0

    def wire(self, codec: Codec | None, nbytes: float) -> float:
        """Bytes on the wire for ``nbytes`` of input."""
        if codec is None:
            return nbytes
        count = int(nbytes // self.itemsize)
        return codec.wire_bytes(count, self.dtype) if count else 0

    def encode(self, codec: Codec, nbytes: float) -> float:
        return self.profile.codec_speed(codec).encode.time(nbytes)

    def decode(self, codec: Codec, nbytes: float) -> float:
        return self.profile.codec_speed(codec).decode.time(nbytes)

    def decode_add(self, codec: Codec, nbytes: float) -> float:
        return self.profile.codec_speed(codec).decode_add.time(nbytes)



# ------------------------------------------------------- pieces the formulas share

def pof2(p: int) -> int:
    """The largest power of two <= p."""
    return 1 << (p.bit_length() - 1)


def fold(n: float, span: Span, work: Work, codec: Codec | None) -> float:
    """Non-power-of-two p: 2(p - pof2) ranks fold in pairs (n bytes, reduce) and unfold (n bytes).

    Pairs are neighbours (2i, 2i+1): one node when nodes hold 2 or more ranks.
    """
    if pof2(span.size) == span.size:
        return 0.0
    link = span.pair_link(1)
    if codec is None:
        return 2 * work.hop(link, n) + work.reduce(n)
    w = work.wire(codec, n)
    return (2 * work.hop(link, w) + 2 * work.encode(codec, n) + work.decode_add(codec, n)
            + work.decode(codec, n))


def segments(nbytes: float, segment_bytes: int) -> tuple[int, float]:
    """(count, bytes) of the pipeline segments of `nbytes` in segments of `segment_bytes`."""
    count = max(1, math.ceil(nbytes / segment_bytes))
    return count, nbytes / count


def all_to_all(span: Span, wire: float) -> float:
    """Every rank sends ``wire`` bytes to each of the p-1 others at once.

    Across nodes, a node's link carries its L ranks' messages to the p-L ranks elsewhere;
    inside a node, the L-1 neighbours' messages go alongside.
    """
    p, local = span.size, min(span.per_node, span.size)
    near = (local - 1) * span.intra.time(wire)
    if p == local:
        return near
    far = (p - local) * span.inter.alpha + local * (p - local) * wire * span.inter.beta
    return max(near, far)


def interpolate(points: Iterable[tuple[int, float]], n: float) -> float:
    """Log-log interpolation; flat below the smallest size, linear in n above the largest."""
    pts = sorted(points)
    sizes = np.log([max(b, 1) for b, _ in pts])
    times = np.log([t for _, t in pts])
    if n >= pts[-1][0]:
        return pts[-1][1] * n / pts[-1][0]
    return float(np.exp(np.interp(math.log(max(n, 1)), sizes, times)))


# ---------------------------------------- one resource alone (the pipelining bounds)

FREE = Rate(float("inf"))
NO_LINK = Link(0.0, 0.0)


def links_only(work: Work) -> Work:
    """``work`` with free computation and no latency: what only the links' bandwidth costs."""
    free = CodecSpeed(FREE, FREE, FREE)
    profile = replace(work.profile, reduce=FREE, codecs={k: free for k in DEFAULT_CODECS})
    return replace(work, profile=profile, step=0.0, links="bandwidth")


def cpu_only(work: Work) -> Work:
    """``work`` with free links: what only the computation and the steps cost."""
    return replace(work, links="free")


def pipelined_time(one: Callable[[float, Work], float], n: float, slices: int, work: Work) -> float:
    """`one(bytes, work)` over `slices` slices, several in flight: with f one slice's time,
    f_link what its bytes alone cost and f_cpu what its computation and steps alone cost,
    the pipeline runs at the busier once full: f(n / S) + (S - 1) max(f_link(n / S), f_cpu(n / S))."""
    if slices <= 1:
        return one(n, work)
    s = n / slices
    return one(s, work) + (slices - 1) * max(one(s, links_only(work)), one(s, cpu_only(work)))


def spans_with(span: Span, work: Work) -> Span:
    """``span`` with its links as ``work`` prices them (free, bandwidth only, or as they are)."""
    if work.links == "free":
        return replace(span, intra=NO_LINK, inter=NO_LINK)
    if work.links == "bandwidth":
        return replace(span, intra=Link(0.0, span.intra.beta), inter=Link(0.0, span.inter.beta))
    return span

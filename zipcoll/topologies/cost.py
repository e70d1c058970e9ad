"""What an all-reduce plan costs: an alpha-beta-gamma model per link class, plus codec speeds.

A message of m bytes over a link costs ``alpha + m * beta`` (Hockney); reducing m bytes
costs ``m * gamma`` (numpy add); a codec costs ``overhead + m / throughput`` per call, for
encode, decode and decode_add, and puts ``codec.wire_bytes`` on the wire. Two link
classes: ``intra`` (ranks on one node: shared memory, NVLink) and ``inter`` (between
nodes). Step counts are those of zipcoll's own schedules (the formulas sit beside each
function below; Thakur, Rabenseifner and Gropp 2005 and NCCL's tuning model give the
classic forms). zipcoll's schedules also pay what Python costs: ``step_overhead`` per
step, ``call_overhead`` per call, plus the agreement check (one small native Allreduce).

Assumptions, where a formula needs one:
- ranks of a node are consecutive (what ``Topology.ring_order`` and MPI's usual mapping give);
- a step whose pairs cross nodes with k ranks of a node crossing at once shares the node's
  link: its beta is multiplied by k (rails of the two-level schedules: k = ranks per node);
- a step costs its slowest link: a flat ring across nodes goes at the inter-node rate.

Everything here is a pure function of (plan, bytes, topology shape, profile): every rank
that holds the same profile ranks the plans alike (see ``explain`` for how the profile
is made the same on every rank).

    >>> from zipcoll.topologies import Topology
    >>> topo = Topology.from_layout(8, 0, ranks_per_node=4)
    >>> plans = rank_plans(64 << 20, topo, DEFAULT_PROFILE, codec="int8")
    >>> seconds, best = plans[0]
"""
from __future__ import annotations

import functools
import inspect
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np

from zipcoll.codecs import Codec, get_codec

PROFILE_ENV = "ZIPCOLL_PROFILE"
FLOAT_DTYPES = ("float16", "float32", "float64")

# -------------------------------------------------- what the collectives offer, by name
# The only place the model learns which schedules exist and what they take; the schedule
# registry (issue 8) answers these three questions once it lands. Imports are lazy:
# the collectives import this module to choose, and must not be imported back here first.

def lossless_flat() -> tuple[str, ...]:
    """The flat schedules zipcoll runs itself (native apart): lossless for any op without a codec."""
    from zipcoll.collectives.registry import flat

    return tuple(s.name for s in flat() if not s.native)


def two_level_names() -> tuple[str, ...]:
    from zipcoll.collectives.registry import SCHEDULES

    return tuple(name for name, s in SCHEDULES.items() if s.two_level)


def accepting(codec: Codec) -> list[str]:
    """The flat schedules that can carry ``codec`` (the registry's rule)."""
    from zipcoll.collectives.registry import accepting as carriers

    return carriers(codec)


def segment_bytes() -> int:
    """A tree's pipeline segment."""
    from zipcoll.collectives.schedules.tree import SEGMENT_BYTES

    return SEGMENT_BYTES


def slice_count(nbytes: int) -> int:
    """How many slices a two-level call of ``nbytes`` runs in."""
    from zipcoll.collectives.plan import slice_count as count

    return count(nbytes)


def flat_slices(nbytes: int, ranks: int, nodes: int, ratio: float) -> int:
    """How many slices a flat call of ``nbytes`` runs in (the collectives' rule)."""
    from zipcoll.collectives.plan import flat_slices as count

    return count(nbytes, ranks, nodes, ratio)


# ----------------------------------------------------------------------------- profile

@dataclass(frozen=True)
class Link:
    """One link class: ``alpha`` seconds per message, ``beta`` seconds per byte."""

    alpha: float
    beta: float

    def time(self, nbytes: float) -> float:
        """Seconds to send one message of ``nbytes``."""
        return self.alpha + nbytes * self.beta

    def shared(self, streams: int) -> Link:
        """This link carrying ``streams`` messages at once: each gets 1/streams of it."""
        return Link(self.alpha, self.beta * max(1, streams))


@dataclass(frozen=True)
class Rate:
    """Work at ``bytes_per_s`` of input, plus a fixed ``overhead`` per call."""

    bytes_per_s: float
    overhead: float = 0.0

    def time(self, nbytes: float) -> float:
        """Seconds for one call on ``nbytes`` of input (0 for no input)."""
        return 0.0 if nbytes <= 0 else self.overhead + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class CodecSpeed:
    """How fast one codec encodes, decodes and decodes-and-adds (bytes of float input)."""

    encode: Rate
    decode: Rate
    decode_add: Rate


def _speed(encode_gbs: float, decode_gbs: float, add_gbs: float, overhead: float) -> CodecSpeed:
    return CodecSpeed(Rate(encode_gbs * 1e9, overhead), Rate(decode_gbs * 1e9, overhead),
                      Rate(add_gbs * 1e9, overhead))


# Codec throughputs (GB/s of input): encode, decode, decode_add, as `zipcoll-bench
# calibrate` measured them with 4 ranks at once on this project's 2-core machine
# (benchmarks/results/calibrate/1x4-shm.json, 16 MiB): what each rank gets when all
# encode together; repeat runs there differ 2-8x. A codec call inside a schedule costs
# 137 us beyond its work there (ring + int8 against ring at 1 KiB); one process alone on
# a quiet machine codes 3-10x faster (benchmarks/results/codecs-quiet.md). Calibrate.
DEFAULT_CODEC_OVERHEAD = 137e-6
DEFAULT_CODECS = {
    "none": _speed(0.91, 0.88, 8.94, DEFAULT_CODEC_OVERHEAD),
    "fp16": _speed(0.60, 1.42, 0.90, DEFAULT_CODEC_OVERHEAD),
    "bf16": _speed(1.40, 1.75, 12.20, DEFAULT_CODEC_OVERHEAD),
    "int8": _speed(0.71, 1.54, 1.75, DEFAULT_CODEC_OVERHEAD),
    "int4": _speed(0.61, 1.16, 3.59, DEFAULT_CODEC_OVERHEAD),
    "int2": _speed(0.68, 0.93, 3.35, DEFAULT_CODEC_OVERHEAD),
    "qsgd": _speed(0.22, 1.03, 1.44, DEFAULT_CODEC_OVERHEAD),
    "terngrad": _speed(0.54, 0.82, 1.01, DEFAULT_CODEC_OVERHEAD),
    "sign": _speed(0.79, 2.84, 8.87, DEFAULT_CODEC_OVERHEAD),
    "topk": _speed(0.78, 13.08, 88.37, DEFAULT_CODEC_OVERHEAD),
    "randomk": _speed(7.16, 5.48, 23.62, DEFAULT_CODEC_OVERHEAD),
    "threshold": _speed(1.12, 14.36, 62.47, DEFAULT_CODEC_OVERHEAD),
}


@dataclass(frozen=True)
class Profile:
    """Everything the model knows about a machine; JSON via ``to_dict`` / ``from_dict``.

    ``native``: measured times of the MPI library's own Allreduce on the calibrated job,
    ``{"NxL": [[bytes, seconds], ...]}`` (N nodes of L ranks); used for that layout only,
    other layouts get the modelled native time.
    ``plans``: measured times of whole zipcoll calls (``zipcoll-bench calibrate --plans``),
    ``{"NxL": {"plan": [[bytes, seconds], ...]}}`` keyed by ``str(PlanShape)``; on that
    layout they replace the formulas for the plans measured: what the job did beats
    what a model of it says (how TCP shares a link, how oversubscribed ranks are
    scheduled). The formulas still price the plans and layouts not measured.
    """

    intra: Link
    inter: Link
    reduce: Rate  # gamma = 1 / reduce.bytes_per_s
    step_overhead: float  # seconds per schedule step (Python: generator, Waitall, numpy call)
    call_overhead: float  # seconds per zipcoll call besides its steps (plan, staging, dispatch)
    codecs: Mapping[str, CodecSpeed] = field(default_factory=dict)
    native: Mapping[str, tuple] = field(default_factory=dict)
    source: str = ""
    plans: Mapping[str, Mapping[str, tuple]] = field(default_factory=dict)

    def codec_speed(self, codec: Codec) -> CodecSpeed:
        """The speed of ``codec``: measured for its id, else the default table, else int8's."""
        codec_id = _base_id(codec)
        return (self.codecs.get(codec_id) or DEFAULT_CODECS.get(codec_id)
                or self.codecs.get("int8") or DEFAULT_CODECS["int8"])

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (``from_dict`` inverts it)."""
        out = asdict(self)
        out["native"] = {k: [list(p) for p in v] for k, v in self.native.items()}
        out["plans"] = {k: {plan: [list(p) for p in v] for plan, v in table.items()}
                        for k, table in self.plans.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> Profile:
        """The profile of ``to_dict``'s output (or a JSON file's contents)."""
        codecs = {k: CodecSpeed(**{part: Rate(**r) for part, r in v.items()})
                  for k, v in data.get("codecs", {}).items()}
        native = {k: _points(v) for k, v in data.get("native", {}).items()}
        plans = {k: {plan: _points(v) for plan, v in table.items()}
                 for k, table in data.get("plans", {}).items()}
        return cls(Link(**data["intra"]), Link(**data["inter"]), Rate(**data["reduce"]),
                   float(data["step_overhead"]), float(data["call_overhead"]), codecs, native,
                   str(data.get("source", "")), plans)

    def save(self, path: str) -> None:
        """Write the profile as JSON."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1, sort_keys=True)
            f.write("\n")


def _points(pairs: Iterable) -> tuple:
    return tuple((int(b), float(s)) for b, s in pairs)


def _base_id(codec: Codec) -> str:
    """The id whose speed a codec has (an error-feedback wrapper runs its inner codec)."""
    inner = getattr(codec, "codec", None)
    return _base_id(inner) if isinstance(inner, Codec) else codec.codec_id


# Defaults, for a job that was not calibrated. Inside a node: the same 1x4 calibration
# (ring steps: 24 us + 1/1.84 GB/s; numpy add 10.5 GB/s; zipcoll 13 us a step, 144 us a
# call). Between nodes: 10 Gbit/s Ethernet with TCP: 9.3 Gbit/s of goodput (the emulated
# cluster's 10 Gbit/s link, benchmarks/cluster/README.md) and 50 us a message (small ring
# steps between the emulated nodes took 30-60 us in quiet calibrations, up to 360 us in
# busy ones: benchmarks/results/calibrate/README.md).
DEFAULT_PROFILE = Profile(
    intra=Link(alpha=24e-6, beta=1 / 1.84e9),
    inter=Link(alpha=50e-6, beta=1 / 1.16e9),
    reduce=Rate(bytes_per_s=10.5e9),
    step_overhead=13e-6,
    call_overhead=144e-6,
    codecs=DEFAULT_CODECS,
    source="defaults (zipcoll.topologies.cost.DEFAULT_PROFILE)",
)


def load_profile(path: str | None = None) -> Profile:
    """The profile at ``path``, else at $ZIPCOLL_PROFILE, else ``DEFAULT_PROFILE``."""
    path = path or os.environ.get(PROFILE_ENV) or None
    if path is None:
        return DEFAULT_PROFILE
    with open(path) as f:
        data = json.load(f)
    return replace(Profile.from_dict(data), source=str(path))


# ------------------------------------------------------------------------------- plans

class PlanShape(NamedTuple):
    """An algorithm with its codec placement: what the model prices and ``auto`` picks.

    ``algorithm``: a flat schedule, "native", "hierarchical" or "torus"; ``inner``: the
    inter-level schedule of a two-level one (else None); ``intra_codec``: level 1's codec
    (two-level only); ``inter_codec``: the flat schedule's codec, or level 2's. Codecs are
    spec strings ("int8", "topk:ratio=0.01"); "none" carries raw values.
    """

    algorithm: str
    inner: str | None = None
    intra_codec: str | None = None
    inter_codec: str | None = None

    @property
    def name(self) -> str:
        """The ``algorithm=`` string: "ring", "hierarchical:ring"."""
        return self.algorithm if self.inner is None else f"{self.algorithm}:{self.inner}"

    def __str__(self) -> str:
        codecs = [c for c in (self.intra_codec, self.inter_codec) if c is not None]
        if self.intra_codec is not None:
            return f"{self.name} + intra {self.intra_codec}, inter {self.inter_codec}"
        return self.name + "".join(f" + {c}" for c in codecs)


def codec_spec(codec: Any) -> str | None:
    """The short spec string of a codec argument: its id, plus what differs from the defaults.

    >>> codec_spec({"id": "topk", "ratio": 0.01}), codec_spec("int8:block=256")
    ('topk:ratio=0.01', 'int8')
    """
    if codec is None:
        return None
    codec = get_codec(codec)
    inner = getattr(codec, "codec", None)
    if isinstance(inner, Codec):  # error feedback: "feedback:<inner spec>"
        return f"{codec.codec_id}:{codec_spec(inner)}"
    config = codec.get_config()
    codec_id = config.pop("id")
    defaults = _defaults(type(codec))
    changed = {k: v for k, v in sorted(config.items()) if defaults.get(k, ...) != v}
    items = ",".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in changed.items())
    return f"{codec_id}:{items}" if items else codec_id


@functools.lru_cache(maxsize=None)
def _defaults(codec_type: type) -> dict:
    """A codec class's constructor defaults (cached: ``auto`` asks on every call)."""
    return {name: param.default for name, param
            in inspect.signature(codec_type.__init__).parameters.items()}


@dataclass(frozen=True)
class Shape:
    """What of a topology the model reads: the same on every rank (no rank in it)."""

    size: int
    nodes: int
    per_node: int  # ranks per node; on a non-uniform topology the largest node's

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


# ---------------------------------------------------------------------- the formulas

def ring(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Ring: reduce-scatter p-1 steps + allgather p-1 steps, each of n/p bytes.

        lossless:    2(p-1) (alpha + n/p beta) + (p-1) n/p gamma
        compressed:  2(p-1) (alpha + w(n/p) beta)
                     + (p-1) [enc + dec_add](n/p)             reduce-scatter, per hop
                     + [enc + dec](n/p) + (p-1) dec(n/p)      owner's encode, allgather
    """
    p = span.size
    if p == 1:
        return 0.0
    m = n / p
    moves = 2 * (p - 1) * work.hop(span.ring_link, work.wire(codec, m))
    if codec is None:
        return moves + (p - 1) * work.reduce(m)
    return (moves + (p - 1) * (work.encode(codec, m) + work.decode_add(codec, m))
            + work.encode(codec, m) + p * work.decode(codec, m))


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _fold(n: float, span: Span, work: Work, codec: Codec | None) -> float:
    """Non-power-of-two p: 2(p - pof2) ranks fold in pairs (n bytes, reduce) and unfold (n bytes).

    Pairs are neighbours (2i, 2i+1): one node when nodes hold 2 or more ranks.
    """
    if _pof2(span.size) == span.size:
        return 0.0
    link = span.pair_link(1)
    if codec is None:
        return 2 * work.hop(link, n) + work.reduce(n)
    w = work.wire(codec, n)
    return (2 * work.hop(link, w) + 2 * work.encode(codec, n) + work.decode_add(codec, n)
            + work.decode(codec, n))


def recdoubling(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Recursive doubling: log2(q) exchanges of the whole vector (q = largest power of 2 <= p).

        sum over i < log2 q of (alpha_i + n beta_i + n gamma)    partner at distance 2^i
        + fold/unfold when p is not a power of two
    """
    q = _pof2(span.size)
    total = _fold(n, span, work, codec)
    for i in range(q.bit_length() - 1):
        link = span.pair_link(1 << i)
        if codec is None:
            total += work.hop(link, n) + work.reduce(n)
        else:
            total += (work.hop(link, work.wire(codec, n)) + work.encode(codec, n)
                      + work.decode_add(codec, n))
    return total


def rabenseifner(n: float, span: Span, work: Work) -> float:
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather.

        halving step i (partner 2^i away) sends n / 2^(i+1) and reduces as much;
        doubling mirrors it without the reduction:
        sum over i < log2 q of [2 (alpha_i + n/2^(i+1) beta_i) + n/2^(i+1) gamma]
        + fold/unfold (2 messages of n, one reduction of n) when p is not a power of two
    """
    q = _pof2(span.size)
    total = _fold(n, span, work, None)
    for i in range(q.bit_length() - 1):
        m = n / (2 << i)
        total += 2 * work.hop(span.pair_link(1 << i), m) + work.reduce(m)
    return total


def _segments(nbytes: float) -> tuple[int, float]:
    """(count, bytes) of the pipeline segments of a tree (segment_bytes() each, as tree.py)."""
    count = max(1, math.ceil(nbytes / segment_bytes()))
    return count, nbytes / count


def _root_step(children_intra: int, children_inter: int, span: Span, nbytes: float) -> float:
    """The root's step: a segment from each child, the two link classes side by side."""
    times = [link.alpha + k * nbytes * link.beta
             for k, link in ((children_intra, span.intra), (children_inter, span.inter)) if k]
    return max(times, default=0.0)


def tree(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Binomial tree, reduce then broadcast, each pipelined in S segments of s bytes.

    Depth d = ceil(log2 p); the root has d children (those under per_node away on its node)
    and bounds the pace: per step it takes (reduce) or gives (broadcast) d segments.

        per phase: (d-1) (alpha + s beta)            fill: a segment descends the levels
                   + S (alpha + d s beta + step)     the root's steps
        reduce:    + S d s gamma   (compressed: S [d dec_add(s) + enc(s)], down: S [enc + dec](s))
    """
    p = span.size
    if p == 1:
        return 0.0
    d = math.ceil(math.log2(p))
    near = sum(1 for i in range(d) if (1 << i) < span.per_node)
    segments, s = _segments(n)
    w = work.wire(codec, s)
    fill = (d - 1) * work.hop(span.ring_link, w)
    root = segments * (_root_step(near, d - near, span, w) + work.step)
    if codec is None:
        return 2 * (fill + root) + segments * d * work.reduce(s)
    up = segments * (d * work.decode_add(codec, s) + work.encode(codec, s))
    down = segments * (work.encode(codec, s) + work.decode(codec, s))
    return 2 * (fill + root) + up + down


def dbtree(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Double binary tree (NCCL's): two trees of depth d = floor(log2 p), n/2 each, side by side.

    Each rank is interior (2 children) in one tree and a leaf in the other, so per step it
    sends 2 segments (one per tree) and takes 2 (NCCL: ~ the ring's bandwidth, log p latency).

        per phase: (d-1) (alpha + s beta) + S (alpha + 2 s beta + step)   S segments of n/2
        reduce:    + S 2 s gamma   (compressed: S [2 dec_add(s) + 2 enc(s)], down: S [enc + dec](s) x2)
    """
    p = span.size
    if p == 1:
        return 0.0
    d = max(1, int(math.log2(p)))
    segments, s = _segments(n / 2)
    w = work.wire(codec, s)
    link = span.ring_link
    phase = (d - 1) * work.hop(link, w) + segments * work.hop(link, 2 * w)
    if codec is None:
        return 2 * phase + segments * 2 * work.reduce(s)
    up = segments * 2 * (work.decode_add(codec, s) + work.encode(codec, s))
    down = segments * 2 * (work.encode(codec, s) + work.decode(codec, s))
    return 2 * phase + up + down


def _all_to_all(span: Span, wire: float) -> float:
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


def twophase(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Two-phase (1-bit Adam): all-to-all of chunks, owners sum, allgather of the sums.

        2 x all-to-all of w(n/p) per pair
        compressed: + p enc(n/p) + (p-1) dec_add(n/p) + p dec(n/p)
        raw values: + (p-1) (n/p) gamma
    """
    p = span.size
    if p == 1:
        return 0.0
    m = n / p
    moves = 2 * (_all_to_all(span, work.wire(codec, m)) + work.step)
    if codec is None:
        return moves + (p - 1) * work.reduce(m)
    return (moves + p * work.encode(codec, m) + (p - 1) * work.decode_add(codec, m)
            + p * work.decode(codec, m))


def allgather(n: float, span: Span, work: Work, codec: Codec | None = None) -> float:
    """Allgather of every rank's vector (encoded once), then each rank sums all p of them.

        all-to-all of w(n) per pair
        compressed: + enc(n) + p dec_add(n)
                    (+ one all-to-all of 8 bytes first, for variable-size codecs)
        raw values: + (p-1) n gamma
    """
    p = span.size
    if p == 1:
        return 0.0
    moves = _all_to_all(span, work.wire(codec, n)) + work.step
    if codec is None:
        return moves + (p - 1) * work.reduce(n)
    sizes = 0.0 if codec.fixed_size else _all_to_all(span, 8) + work.step
    return sizes + moves + work.encode(codec, n) + p * work.decode_add(codec, n)


def native_model(n: float, span: Span, profile: Profile) -> float:
    """The MPI library's Allreduce, modelled: the best of the algorithms it picks among
    (Open MPI's tuned / MPICH: recursive doubling, Rabenseifner, ring), run in C: no
    per-step overhead."""
    work = Work(profile, 1, "uint8", 0.0)
    return min(recdoubling(n, span, work), rabenseifner(n, span, work), ring(n, span, work))


def native(n: float, shape: Shape, profile: Profile) -> float:
    """Native Allreduce: measured (log-log interpolation) where the profile has this layout."""
    points = profile.native.get(shape.label)
    if points:
        return _interpolate(points, n)
    return native_model(n, _flat_span(shape, profile), profile)


def _interpolate(points: Iterable[tuple[int, float]], n: float) -> float:
    """Log-log interpolation; flat below the smallest size, linear in n above the largest."""
    pts = sorted(points)
    sizes = np.log([max(b, 1) for b, _ in pts])
    times = np.log([t for _, t in pts])
    if n >= pts[-1][0]:
        return pts[-1][1] * n / pts[-1][0]
    return float(np.exp(np.interp(math.log(max(n, 1)), sizes, times)))


# ------------------------------------------------------------------ plan -> seconds

def _flat_span(shape: Shape, profile: Profile) -> Span:
    return Span(shape.size, shape.per_node if shape.nodes > 1 else shape.size,
                profile.intra, profile.inter)


def _flat(name: str, n: float, span: Span, work: Work, codec: Codec | None) -> float:
    """A flat schedule's time (no call overhead)."""
    if name == "ring":
        return ring(n, span, work, codec)
    if name == "tree":
        return tree(n, span, work, codec)
    if name == "dbtree":
        return dbtree(n, span, work, codec)
    if name == "recdoubling":
        return recdoubling(n, span, work, codec)
    if name == "rabenseifner" and codec is None:
        return rabenseifner(n, span, work)
    if name in ("twophase", "allgather"):
        return (twophase if name == "twophase" else allgather)(n, span, work, codec)
    if name == "native" and codec is None:
        return native_model(n, span, work.profile)
    raise ValueError(f"the model has no formula for {name!r} with codec {codec!r}")


def _sliced_flat(name: str, n: float, shape: Shape, span: Span, work: Work,
                 codec: Codec | None) -> float:
    """A flat schedule in S slices (across nodes, ``plan.flat_slices``' rule), several in
    flight: with f one slice's time, f_link what its bytes alone cost and f_cpu what its
    computation and steps alone cost, the pipeline runs at the busier once full:
        f(n / S) + (S - 1) max(f_link(n / S), f_cpu(n / S))
    """
    ratio = 1.0 if codec is None else n / max(1.0, work.wire(codec, n))
    slices = flat_slices(int(n), shape.size, shape.nodes, ratio)
    s = n / slices
    if slices == 1:
        return _flat(name, n, span, work, codec)
    links, cpu = _links_only(work), _cpu_only(work)
    return (_flat(name, s, span, work, codec) + (slices - 1)
            * max(_flat(name, s, _spans_with(span, links), links, codec),
                  _flat(name, s, _spans_with(span, cpu), cpu, codec)))


def two_level(n: float, rows: Span, columns: Span, inner: str, work: Work,
              intra_codec: Codec | None, inter_codec: Codec | None) -> float:
    """Level-1 ring reduce-scatter, ``inner`` on 1/L of the data across, level-1 ring allgather.

    zipcoll runs it in S slices (``slice_count``), several in flight: while one slice
    waits on a link, others reduce, encode or use the other link. With a = level 1 and
    b = level 2 of one slice, each split into what keeps a link busy (its bytes) and what
    keeps the CPU busy (reductions, codecs, steps), the pipeline runs at its busiest
    resource once full:
        S slices: a + b + (S - 1) max(a_link, b_link, a_cpu + b_cpu)
        inner "native" (MPI collectives match by order: one slice at a time): S (a + b)
    Every rank of a node runs level 2 at once: ``columns`` carries that sharing.
    """
    slices = slice_count(int(n))
    s = n / slices

    def levels(w: Work) -> tuple[float, float]:
        a = ring(s, _spans_with(rows, w), w, intra_codec)
        b = _flat(inner, s / rows.size, _spans_with(columns, w), w, inter_codec) if columns.size > 1 else 0.0
        return a, b

    a, b = levels(work)
    if inner == "native" or slices == 1:
        return slices * (a + b)
    a_link, b_link = levels(_links_only(work))
    a_cpu, b_cpu = levels(_cpu_only(work))
    return a + b + (slices - 1) * max(a_link, b_link, a_cpu + b_cpu)


_FREE = Rate(float("inf"))
_NO_LINK = Link(0.0, 0.0)


def _links_only(work: Work) -> Work:
    """``work`` with free computation and no latency: what only the links' bandwidth costs."""
    free = CodecSpeed(_FREE, _FREE, _FREE)
    profile = replace(work.profile, reduce=_FREE, codecs={k: free for k in DEFAULT_CODECS})
    return replace(work, profile=profile, step=0.0, links="bandwidth")


def _cpu_only(work: Work) -> Work:
    """``work`` with free links: what only the computation and the steps cost."""
    return replace(work, links="free")


def _spans_with(span: Span, work: Work) -> Span:
    """``span`` with its links as ``work`` prices them (free, bandwidth only, or as they are)."""
    if work.links == "free":
        return replace(span, intra=_NO_LINK, inter=_NO_LINK)
    if work.links == "bandwidth":
        return replace(span, intra=Link(0.0, span.intra.beta), inter=Link(0.0, span.inter.beta))
    return span


def _two_level_spans(kind: str, shape: Shape, profile: Profile) -> tuple[Span, Span]:
    """(rows, columns): nodes and rails for hierarchical; grid rows and columns for torus.

    A torus on uniform nodes has rows = nodes (hierarchical's spans); on one node a
    near-square grid (hierarchical.grid_of) whose both levels are intra; across non-uniform
    nodes, both levels are priced at the inter-node rate.
    """
    if kind == "hierarchical" or shape.nodes > 1 and shape.uniform:
        rows = Span(shape.per_node, shape.per_node, profile.intra, profile.intra)
        columns = Span(shape.nodes, 1, profile.inter, profile.inter.shared(shape.per_node))
        return rows, columns
    x, y = _grid(shape.size)
    if shape.nodes == 1:
        return (Span(x, x, profile.intra, profile.intra), Span(y, y, profile.intra, profile.intra))
    return (Span(x, 1, profile.inter, profile.inter),
            Span(y, 1, profile.inter, profile.inter.shared(x)))


def codec_idle(plan: PlanShape, topology: Any) -> bool:
    """Whether ``plan`` carries a codec on a level of one rank, which sends nothing (a
    hierarchical plan's inter level on one node): the codec is never applied."""
    if plan.algorithm not in two_level_names():
        return False
    shape = Shape.of(topology)
    if plan.algorithm == "torus" and not (shape.nodes > 1 and shape.uniform):
        rows, columns = _grid(shape.size)
    else:
        rows, columns = shape.per_node, shape.nodes
    return (plan.inter_codec is not None and columns == 1
            or plan.intra_codec is not None and rows == 1)


def _grid(size: int) -> tuple[int, int]:
    """hierarchical.grid_of's near-square grid: X the largest divisor <= sqrt(size)."""
    x = max(d for d in range(1, int(size ** 0.5) + 1) if size % d == 0)
    return x, size // x


def predict(plan: PlanShape, nbytes: int, topology: Any, profile: Profile | None = None,
            dtype: str = "float32") -> float:
    """Predicted seconds of one all-reduce of ``nbytes`` with ``plan`` on ``topology``.

    Non-native plans include zipcoll's call overhead and its agreement check (one small
    native Allreduce). A plan the profile measured on this layout (``Profile.plans``,
    float32 SUM) is priced by its measured times, by bytes, whatever the dtype.
    """
    profile = profile or DEFAULT_PROFILE
    shape = Shape.of(topology)
    dtype = np.dtype(dtype).name
    n = float(nbytes)
    measured = profile.plans.get(shape.label, {}).get(str(plan))
    if measured:
        return _interpolate(measured, n)
    if plan.algorithm == "native":
        return native(n, shape, profile)
    if shape.size == 1:
        return profile.call_overhead
    work = Work(profile, np.dtype(dtype).itemsize, dtype, profile.step_overhead)
    intra = _codec(plan.intra_codec)
    inter = _codec(plan.inter_codec)
    fixed = profile.call_overhead + native(64, shape, profile)
    if plan.algorithm in two_level_names():
        rows, columns = _two_level_spans(plan.algorithm, shape, profile)
        return fixed + two_level(n, rows, columns, plan.inner or "ring", work, intra, inter)
    return fixed + _sliced_flat(plan.algorithm, n, shape, _flat_span(shape, profile), work, inter)


def _codec(spec: str | None) -> Codec | None:
    return None if spec is None else get_codec(spec)


# ------------------------------------------------------------------------- bounds

def bounds(plan: PlanShape, nbytes: int, topology: Any, link_bytes_per_s: float,
           codec_speeds: Mapping[str, CodecSpeed], ranks_per_machine: int = 1,
           dtype: str = "float32") -> tuple[float, float]:
    """(wire, codec): lower bounds on a call's time from the plan's formula, each alone.

    wire: the plan's messages on the inter-node links at ``link_bytes_per_s`` (no latency,
    nothing else costs); 0 on one node. codec: its encode and decode work at
    ``codec_speeds`` (by codec id, no per-call cost, links free), times
    ``ranks_per_machine`` ranks whose codecs share the cores the speeds were measured on.
    """
    zero = Link(0.0, 0.0)
    fast = {cid: CodecSpeed(_FREE, _FREE, _FREE) for cid in {**DEFAULT_CODECS, **codec_speeds}}
    codec_only = Profile(zero, zero, _FREE, 0.0, 0.0, {**fast, **codec_speeds}, {}, "codec bound")
    lossless = plan.intra_codec is None and plan.inter_codec is None
    wire = 0.0  # one node (or no link rate given): no inter-node link to bound by
    if Shape.of(topology).nodes > 1 and link_bytes_per_s > 0:
        wire_only = Profile(zero, Link(0.0, 1.0 / link_bytes_per_s), _FREE, 0.0, 0.0, fast,
                            {}, "wire bound")
        wire = predict(plan, nbytes, topology, wire_only, dtype)
    codec = 0.0 if lossless else ranks_per_machine * predict(plan, nbytes, topology, codec_only, dtype)
    return wire, codec


# ------------------------------------------------------------------ which plans exist

def candidate_plans(topology: Any, codec: Any = None, dtype: str = "float32",
                    op: str = "sum", native: bool = True) -> list[PlanShape]:
    """Every plan a call may run: lossless ones, and with ``codec`` those that may carry it.

    Raw-value schedules (twophase, allgather) are lossless only for SUM of floats; a codec
    goes flat or at the inter level (the intra level stays lossless, as ``auto`` does).
    Which schedule carries which codec is ``accepting``'s rule (the collectives').
    ``native=False``: no plan uses the MPI library's own op (flat, or as the inter level),
    for a dtype and op on which it does not give zipcoll's answer.
    """
    shape = Shape.of(topology)
    if shape.size == 1:
        return [PlanShape("native")]
    raw = _sums(op) and np.dtype(dtype).name in FLOAT_DTYPES
    lossless = list(lossless_flat())
    inners = (["native"] if native else []) + lossless
    plans = [PlanShape(a) for a in inners]
    for kind in _two_level_kinds(shape):
        plans += [PlanShape(kind, inner) for inner in inners]
    spec = codec_spec(codec)
    if spec is not None and raw and not get_codec(spec).lossless:
        carriers = accepting(get_codec(spec))
        plans += [PlanShape(a, None, None, spec) for a in carriers]
        for kind in _two_level_kinds(shape):
            plans += [PlanShape(kind, a, None, spec) for a in carriers]
    return plans


def _sums(op: Any) -> bool:
    """Whether ``op`` is SUM or "mean": a name, a zipcoll ReduceOp, or MPI.SUM."""
    from mpi4py import MPI

    if isinstance(op, MPI.Op):
        return op == MPI.SUM
    return str(getattr(op, "name", op)).lower() in ("sum", "mean")


def _two_level_kinds(shape: Shape) -> list[str]:
    """hierarchical on uniform nodes; torus where it differs from it (one node, or uneven nodes)."""
    kinds = ["hierarchical"] if shape.uniform else []
    x, y = _grid(shape.size)
    if x > 1 and (shape.nodes == 1 or not shape.uniform):
        kinds.append("torus")
    return kinds


def rank_plans(nbytes: int, topology: Any, profile: Profile | None = None, codec: Any = None,
               dtype: str = "float32", op: str = "sum",
               native: bool = True) -> list[tuple[float, PlanShape]]:
    """(predicted seconds, plan) of every candidate plan, cheapest first (``native``: see
    ``candidate_plans``).

    Ties go to the plan that sorts first by name, so every rank orders alike.
    """
    profile = profile or DEFAULT_PROFILE
    ranked = [(predict(plan, nbytes, topology, profile, dtype), plan)
              for plan in candidate_plans(topology, codec, dtype, op, native)]
    return sorted(ranked, key=lambda item: (item[0], tuple(str(x) for x in item[1])))


# --------------------------------------------------------------------------- choosing

RECENT_CALLS = 256


def size_bucket(nbytes: int) -> int:
    """The bucket of a message size: sizes in [2^(k-1), 2^k) share bucket k."""
    return int(nbytes).bit_length()


def bucket_size(bucket: int) -> int:
    """The size a bucket is priced at: its geometric middle, so no call's size decides."""
    return 0 if bucket == 0 else int(2 ** (bucket - 0.5))


class Selector:
    """``algorithm="auto"``'s decisions for one communicator, priced once per bucket.

    The cache key is (size bucket, dtype, op is SUM, codec spec, topology shape, whether
    native plans may run); each
    bucket is priced at its middle size, so the decision depends only on the key and the
    profile, never on which sizes came first. Give every rank the same profile
    (``zipcoll.topologies.explain.shared_profile``) and every rank decides alike.
    """

    def __init__(self, profile: Profile):
        self.profile = profile
        self._decided: dict[tuple, PlanShape] = {}
        self._recent: dict[tuple, tuple] = {}  # by the very objects of recent calls

    def choose(self, nbytes: int, topology: Any, codec: Any = None, dtype: str = "float32",
               op: str = "sum", native: bool = True) -> PlanShape:
        """The cheapest plan for a message of ``nbytes`` (cached per bucket).

        A call like a recent one (the same codec and topology objects) is answered from
        ``_recent`` without building the key: auto runs this on every call."""
        fast = (size_bucket(nbytes), dtype, op, id(codec), id(topology), native)
        hit = self._recent.get(fast)
        if hit is not None and hit[0] is codec and hit[1] is topology:
            return hit[2]
        key = (size_bucket(nbytes), np.dtype(dtype), _sums(op), _spec_of(codec),
               _shape_of(topology), bool(native))
        plan = self._decided.get(key)
        if plan is None:
            plan = choose(bucket_size(key[0]), key[4], key[3], self.profile, key[1].name,
                          "sum" if key[2] else "other", key[5])
            self._decided[key] = plan
        if len(self._recent) >= RECENT_CALLS:
            self._recent.clear()  # a new codec object every call (stochastic ones) must not pile up
        self._recent[fast] = (codec, topology, plan)
        return plan


def _spec_of(codec: Any) -> str | None:
    """``codec_spec``, remembered on the codec object (its configuration never changes).

    ``auto`` keys every call by it; a codec hashes by its whole configuration, so a
    lookup table keyed by codecs would cost as much as the spec itself. The private
    attribute stays out of ``get_config``.
    """
    if not isinstance(codec, Codec):
        return codec_spec(codec)
    spec = codec.__dict__.get("_auto_spec")
    if spec is None:
        spec = codec._auto_spec = codec_spec(codec)
    return spec


@functools.lru_cache(maxsize=64)
def _shape_of(topology: Any) -> Shape:
    return Shape.of(topology)


def choose(nbytes: int, topology: Any, codec: Any = None, profile: Profile | None = None,
           dtype: str = "float32", op: str = "sum", native: bool = True) -> PlanShape:
    """The plan ``rank_plans`` puts first (uncached; see ``Selector`` for the cached form)."""
    return rank_plans(nbytes, topology, profile, codec, dtype, op, native)[0][1]

"""What the cost model knows about a machine: link, reduction and codec speeds (a `Profile`).

A message of m bytes over a link costs ``alpha + m * beta`` (Hockney); reducing m bytes
costs ``m * gamma`` (numpy add); a codec costs ``overhead + m / throughput`` per call, for
encode, decode and decode_add; PowerSGD's products, elementwise passes and
orthogonalization have speeds of their own (``LowRankSpeed``). Two link classes: ``intra`` (ranks on one node: shared
memory, NVLink) and ``inter`` (between nodes). ``zipcoll-bench calibrate`` measures a
profile and saves it as JSON; ``load_profile`` reads one back ($ZIPCOLL_PROFILE).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Mapping

from zipcoll import settings
from zipcoll.codecs import Codec
from zipcoll.errors import ZipcollError

PROFILE_ENV = "ZIPCOLL_PROFILE"


class ProfileError(ZipcollError, ValueError):
    """A rank could not read or parse the cost model's profile ($ZIPCOLL_PROFILE): raised
    on every rank of the communicator alike, before any data moves."""

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
class Product:
    """A matrix product by a factor of few columns: ``overhead + max(bytes / bytes_per_s,
    flops / flops_per_s)`` with bytes those of the large matrix read or written."""

    bytes_per_s: float
    flops_per_s: float
    overhead: float = 0.0

    def time(self, nbytes: float, flops: float) -> float:
        return self.overhead + max(nbytes / self.bytes_per_s, flops / self.flops_per_s)


@dataclass(frozen=True)
class LowRankSpeed:
    """How fast a rank does PowerSGD's local work: products with a factor, elementwise
    passes over a matrix (bytes of the matrix a second), orthogonalization (bytes of a
    factor of 4 columns a second, plus a call's overhead; QR's work grows as n r², so a
    factor of r columns takes r/4 times as long a byte)."""

    product: Product
    elementwise_bytes_per_s: float
    orthogonalize_bytes_per_s: float
    orthogonalize_overhead: float

    def orthogonalize(self, rows: int, columns: int, itemsize: int) -> float:
        nbytes = rows * columns * itemsize
        return self.orthogonalize_overhead + nbytes * columns / 4 / self.orthogonalize_bytes_per_s

    def to_dict(self) -> dict:
        return {"product": vars(self.product).copy(),
                "elementwise_bytes_per_s": self.elementwise_bytes_per_s,
                "orthogonalize_bytes_per_s": self.orthogonalize_bytes_per_s,
                "orthogonalize_overhead": self.orthogonalize_overhead}

    @classmethod
    def from_dict(cls, data: dict) -> LowRankSpeed:
        return cls(Product(**data["product"]), float(data["elementwise_bytes_per_s"]),
                   float(data["orthogonalize_bytes_per_s"]), float(data["orthogonalize_overhead"]))


# Two ranks on this project's 2-core machine, one BLAS thread each, both at once, as
# `zipcoll-bench calibrate` measures them (zipcoll.lowrank on a 64 MiB float32 matrix:
# benchmarks/results/lowrank-cost/, medians of 15 calibrations): the products stream the
# matrix at 4.3 GB/s (4 columns) or compute 70 GFLOP/s (32), the elementwise passes run at
# 4.2 GB/s, orthogonalizing a factor of 4 columns (LAPACK's QR) at 0.34 GB/s of it.
DEFAULT_LOWRANK = LowRankSpeed(Product(bytes_per_s=4.3e9, flops_per_s=70e9, overhead=5e-6),
                               elementwise_bytes_per_s=4.2e9,
                               orthogonalize_bytes_per_s=0.34e9, orthogonalize_overhead=0.0)


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
    lowrank: LowRankSpeed = DEFAULT_LOWRANK  # PowerSGD's local work (planning/lowrank.py)

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
        out["lowrank"] = self.lowrank.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> Profile:
        """The profile of ``to_dict``'s output (or a JSON file's contents)."""
        codecs = {k: CodecSpeed(**{part: Rate(**r) for part, r in v.items()})
                  for k, v in data.get("codecs", {}).items()}
        native = {k: _points(v) for k, v in data.get("native", {}).items()}
        plans = {k: {plan: _points(v) for plan, v in table.items()}
                 for k, table in data.get("plans", {}).items()}
        lowrank = (LowRankSpeed.from_dict(data["lowrank"]) if "lowrank" in data
                   else DEFAULT_LOWRANK)  # profiles saved before it was measured
        return cls(Link(**data["intra"]), Link(**data["inter"]), Rate(**data["reduce"]),
                   float(data["step_overhead"]), float(data["call_overhead"]), codecs, native,
                   str(data.get("source", "")), plans, lowrank)

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
    source="defaults (zipcoll.collectives.planning.DEFAULT_PROFILE)",
)


def profile_path(path: str | None = None) -> str | None:
    """``path``, else $ZIPCOLL_PROFILE (zipcoll.settings), else None (the defaults)."""
    return path or settings.get().profile


def profile_source(path: str | None = None) -> str:
    """Where ``load_profile(path)`` reads from, as an error message names it."""
    found = profile_path(path)
    if found is None:
        return "the defaults"
    return f"{found!r}" if path else f"{PROFILE_ENV}={found!r}"


def load_profile(path: str | None = None) -> Profile:
    """The profile at ``path``, else at $ZIPCOLL_PROFILE, else ``DEFAULT_PROFILE``.

    OSError where the file cannot be read; ValueError, KeyError, TypeError or
    AttributeError where it is not a profile's JSON."""
    path = profile_path(path)
    if path is None:
        return DEFAULT_PROFILE
    with open(path) as f:
        data = json.load(f)
    return replace(Profile.from_dict(data), source=str(path))



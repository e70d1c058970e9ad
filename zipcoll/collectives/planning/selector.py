"""algorithm="auto": which schedule a call gets, from the cost model.

`plans.rank_plans` prices every plan the registry allows (schedule, inner schedule, where
the codec goes) for this size, layout, dtype and op, with a profile every rank shares
(`explain.shared_profile`, loaded by the communicator's context: $ZIPCOLL_PROFILE, or the
defaults), and the cheapest runs; decisions are cached per size bucket. Every rank decides alike: the same profile, and
nothing that depends on the rank goes into the model. `zipcoll.explain` shows the ranking.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from zipcoll.codecs import Codec
from zipcoll.collectives.planning.model import Shape
from zipcoll.collectives.planning.plans import PlanShape, is_sum, codec_idle, codec_spec, rank_plans
from zipcoll.collectives.planning.profile import Profile
from zipcoll.collectives.registry import SCHEDULES, Schedule


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
    (``explain.shared_profile``) and every rank decides alike.
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
        key = (size_bucket(nbytes), np.dtype(dtype), is_sum(op), spec_of(codec),
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


def spec_of(codec: Any) -> str | None:
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


def schedules_for(nbytes: int, topology: Any, codec: Any, dtype: Any, op: str,
                  selector: Selector, native: bool = True) -> tuple[Schedule, Schedule | None, bool]:
    """(schedule, inner schedule, whether to use the codec) for `nbytes` on `topology`;
    `native`: whether plans may use the MPI library's own op (it gives zipcoll's answer)."""
    if topology.size == 1:
        return SCHEDULES["native"], None, False  # one rank: a copy, no op applied
    shape = selector.choose(nbytes, topology, codec, dtype, op, native)
    decision = _DECISIONS.get((shape, topology.num_nodes, topology.size))
    if decision is None:
        inner = SCHEDULES[shape.inner] if shape.inner else None
        compress = shape.inter_codec is not None and not codec_idle(shape, topology)
        decision = _DECISIONS[shape, topology.num_nodes, topology.size] = (SCHEDULES[shape.algorithm], inner, compress)
    return decision


_DECISIONS: dict = {}  # (PlanShape, nodes, ranks) -> what runs it: auto asks on every call


def default_inner(codec: Any) -> str:
    """The inter-node schedule of a two-level algorithm: ring where the codec allows, else allgather."""
    return "ring" if codec is None or SCHEDULES["ring"].accepts(codec) else "allgather"

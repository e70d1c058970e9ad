"""The cost of one low-rank (PowerSGD) step: its local work, its two dependent rounds.

`zipcoll.lowrank` runs, for every matrix M (n x m) given, with r' = min(n, m, r):

    before P's round   M += residual          one elementwise pass over M
                       orthogonalize Q        (m x r')
                       P = M Q                one product: reads M, 2 n m r' flops
    round 1            all-reduce P (n r' a matrix) and, beside it, the dense tensors
    before Q's round   orthogonalize P        (n x r')
                       Q = Mᵀ P               one product
    round 2            all-reduce Q (m r' a matrix): it needs P, so it waits for round 1
    after              M ≈ P Qᵀ               one product: writes M, 2 n m r' flops
                       residual = M - P Qᵀ    one elementwise pass over M

A product's time is its overhead plus the slower of streaming M (bytes) and its flops
(at r' of a few columns a product is bound by memory, not arithmetic); the elementwise
passes run at the profile's elementwise rate; orthogonalization at its own rate in bytes
of the factor. Each round is priced as `predict` prices an all-reduce of its bytes; the
dense all-reduce and P's share the links, so they are added, not overlapped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from zipcoll.collectives.planning.plans import PlanShape, predict
from zipcoll.collectives.planning.profile import Profile


def matrix_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """(n, m) of a tensor PowerSGD may compress: dim 0 x the rest, as PyTorch's hook
    reshapes a conv weight; None for a tensor of one dimension or none, or no rows."""
    if len(shape) < 2 or shape[0] == 0:
        return None
    return int(shape[0]), math.prod(shape) // int(shape[0])


def compressible(n: int, m: int, rank: int, min_compression_rate: float) -> bool:
    """PyTorch's rule: a matrix gains when (n + m) r' x the rate is below n m."""
    return (n + m) * min(n, m, rank) * min_compression_rate < n * m


def split(shapes: Iterable[Sequence[int]], rank: int,
          min_compression_rate: float = 2) -> tuple[list[tuple[int, int, int]], int]:
    """(n, m, r') of each matrix compressed, and the elements of the tensors sent dense.
    ValueError for a rank below 1 (as `zipcoll.lowrank.PowerSGDState`)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive int, not {rank!r}")
    matrices, dense = [], 0
    for shape in shapes:
        nm = matrix_shape(shape)
        if nm is not None and compressible(*nm, rank, min_compression_rate):
            matrices.append((*nm, min(*nm, rank)))
        else:
            dense += math.prod(shape)
    return matrices, dense


@dataclass(frozen=True)
class LowRankCost:
    """Seconds of one low-rank step on one bucket of tensors, by part, and what it sends."""

    before: float  # M + residual, orthogonalize Q, P = M Q
    p_round: float  # all-reduce of every P, and of the dense tensors beside it
    between: float  # orthogonalize P, Q = Mᵀ P
    q_round: float  # all-reduce of every Q
    after: float  # P Qᵀ into the tensors, the residual
    elements: int  # elements given
    sent: int  # elements all-reduced: r'(n + m) a compressed matrix, all of a dense tensor

    @property
    def compute(self) -> float:
        return self.before + self.between + self.after

    @property
    def total(self) -> float:
        return self.compute + self.p_round + self.q_round


def lowrank_cost(shapes: Iterable[Sequence[int]], rank: int, topology: Any, profile: Profile,
                 plan: PlanShape = PlanShape("ring"), dense_plan: PlanShape | None = None,
                 itemsize: int = 4, min_compression_rate: float = 2,
                 error_feedback: bool = True) -> LowRankCost:
    """The predicted cost of `zipcoll.lowrank.allreduce` on tensors of `shapes` (one call).

    `plan` runs the P and Q all-reduces (its codec, if any, on them), `dense_plan` the
    dense tensors (default: `plan` without its codec: they are averaged exactly).
    """
    speed = profile.lowrank
    matrices, dense = split(shapes, rank, min_compression_rate)
    passes = 2 if error_feedback else 0  # M + residual before, M - P Qᵀ after
    before = between = after = 0.0
    for n, m, r in matrices:
        big, flops = n * m * itemsize, 2.0 * n * m * r
        product = speed.product.time(big, flops)
        elementwise = big / speed.elementwise_bytes_per_s
        before += elementwise * passes / 2 + speed.orthogonalize(m, r, itemsize) + product
        between += speed.orthogonalize(n, r, itemsize) + product
        after += product + elementwise * passes / 2
    p_elements = sum(n * r for n, _, r in matrices)
    q_elements = sum(m * r for _, m, r in matrices)
    dense_plan = dense_plan or PlanShape(plan.algorithm, inner=plan.inner)
    p_round = (_allreduce(plan, p_elements * itemsize, topology, profile)
               + _allreduce(dense_plan, dense * itemsize, topology, profile))
    q_round = _allreduce(plan, q_elements * itemsize, topology, profile)
    elements = sum(n * m for n, m, _ in matrices) + dense
    return LowRankCost(before, p_round, between, q_round, after, elements,
                       p_elements + q_elements + dense)


def _allreduce(plan: PlanShape, nbytes: int, topology: Any, profile: Profile) -> float:
    return predict(plan, nbytes, topology, profile) if nbytes else 0.0


"""The agreement check: one small Allreduce before data moves, so no rank waits forever.

Each rank states a signature: first whether it rejected its own arguments, then numbers
every rank must agree on (count, dtype, op, ...), then any extra numbers whose maximum
the caller wants. A rank that rejected its arguments raises the reason; every other rank
raises MismatchError; ranks that disagree all raise MismatchError naming the fields.
"""
from __future__ import annotations

import zlib
from typing import Callable

import numpy as np

from zipcoll.collectives.context import Context
from zipcoll.errors import MismatchError


def code(text: str) -> int:
    """A number every process computes alike for the same text."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def agree(ctx: Context, signature: list[int], fields: tuple[str, ...],
          error: Exception | None, what: str, shown: Callable[[], list[str]],
          blocking: bool) -> np.ndarray:
    """Raise on every rank unless all accepted and agree on `fields`; the maxima of the signature.

    `signature[0]` is 1 where this rank rejected its arguments (raising `error`);
    `signature[i]` for 1 <= i < len(fields) must be equal everywhere (`fields[i]` names it);
    `shown()[i]` is how this rank describes its value of field i, for the message.
    `blocking`: one Allreduce (the caller drained the engine: nothing is in flight);
    else an Iallreduce waited through the engine, so the calls in flight keep moving.
    Every rank makes the same choice for a call (MPI does not match the two kinds).
    """
    if blocking:
        lows, highs = ctx.transport.agree(signature)
    else:
        request, lows, highs = ctx.transport.iagree(signature)
        ctx.engine.wait_mpi(request)
        lows, highs = lows(), highs()
    if error is not None:
        raise error
    if highs[0]:
        raise MismatchError(f"another rank rejected its arguments to this {what} "
                            "(it raised the reason); nothing was sent")
    differing = [i for i in range(1, len(fields)) if lows[i] != highs[i]]
    if differing:
        raise MismatchError(f"ranks disagree on this {what}; nothing was sent:\n"
                            + _what_each_had(ctx, differing, fields, shown))
    return highs


def _what_each_had(ctx: Context, differing: list[int], fields: tuple[str, ...],
                   shown: Callable[[], list[str]]) -> str:
    """One line a differing field, naming each rank's value (every rank takes this path)."""
    everyone = ctx.transport.comm.allgather(shown())
    lines = []
    for i in differing:
        values = [("?" if row is None else row[i]) for row in everyone]
        groups: dict[str, list[int]] = {}
        for rank, value in enumerate(values):
            groups.setdefault(value, []).append(rank)
        lines.append(f"  {fields[i]}: " + "; ".join(f"{value} on rank{'s' * (len(r) > 1)} "
                                                    f"{_ranks(r)}" for value, r in groups.items()))
    return "\n".join(lines)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"

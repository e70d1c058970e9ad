"""The agreement check: one small Iallreduce before data moves, so no rank waits forever.

Each rank states a signature: first whether it rejected its own arguments, then numbers
every rank must agree on (count, dtype, op, ..., and the code of its settings that must
agree: `Settings.code`), then any extra numbers whose maximum the caller wants. A rank
that rejected its arguments raises the reason; every other rank raises MismatchError;
ranks that disagree all raise MismatchError naming the fields.

The settings are also compared whole at a communicator's first use, checked or not
(`check_settings`, on what the first use gathers anyway): a rank with ZIPCOLL_CHECK=0
among ranks with the check on would otherwise skip agreements the others wait in.

The agreement is a call's own first non-blocking step (`agree` is a generator of
steps): posted in the order the calls started on the communicator, on a duplicate of
its own, so that it matches across ranks whatever else is in flight.
"""
from __future__ import annotations

import functools
import json
import zlib
from typing import TYPE_CHECKING, Callable

import numpy as np

from zipcoll import settings
from zipcoll.collectives.schedule import Steps
from zipcoll.errors import MismatchError

if TYPE_CHECKING:  # the context imports this module: it compares settings at first use
    from zipcoll.collectives.context import Context
    from zipcoll.topologies import Topology

# How each rank describes its fields when ranks disagree: a JSON record of this many bytes.
_SHOWN_BYTES = 2048


def code(text: str) -> int:
    """A number every process computes alike for the same text."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


@functools.lru_cache(maxsize=64)
def layout_text(topology: Topology) -> str:
    """How a call shows its layout, and what its agreement compares (by `code`): made once
    per topology, not every call (a 1024-rank layout's text takes some 50 us)."""
    return repr((topology.node_of, topology.grid))


def agree(ctx: Context, turn: int, signature: list[int], fields: tuple[str, ...],
          error: BaseException | None, what: str, shown: Callable[[], list[str]],
          extra: Callable[[], list[int]] = list) -> Steps:
    """Steps that raise on every rank unless all accepted and agree on `fields` and on the
    settings that must agree; they return the maxima of the signature.

    `turn`: the call's number on the communicator (`Context.begin`): the agreement is
    posted when every older call has posted its own (or passed its turn).
    `signature[0]` is 1 where this rank rejected its arguments (raising `error`);
    `signature[i]` for 1 <= i < len(fields) must be equal everywhere (`fields[i]` names it);
    `shown()[i]` is how this rank describes its value of field i, for the message.
    `extra()`: more numbers whose maxima go after the signature's, taken when the
    agreement is posted (the times of older calls this rank has finished by then: the
    online tuning's, `planning.tuning`).
    """
    mine, n = settings.get(), len(fields)
    gate = ctx.my_turn(turn)
    if gate is not None:
        yield gate
    t = ctx.transport
    agreement = t.iagree(signature[:n] + [mine.code] + signature[n:] + extra())
    ctx.pass_turn(turn)
    try:
        yield [agreement.request]
        lows, highs = agreement.read()
    finally:
        t.agreed(agreement)
    if error is not None:
        raise error
    if highs[0]:
        raise MismatchError(f"another rank rejected its arguments to this {what} "
                            "(it raised the reason); nothing was sent")
    if lows[1:n + 1] != highs[1:n + 1]:
        differing = [i for i in range(1, n + 1) if lows[i] != highs[i]]
        everyone = yield from _everyones(ctx, turn, shown() + [mine.changed])
        raise MismatchError(f"ranks disagree on this {what}; nothing was sent:\n"
                            + _what_each_had(everyone, differing, fields + _SETTINGS))
    ctx.agreed_settings = mine.code
    return highs[:n] + highs[n + 1:]  # without the settings' code


# the settings' field: each rank shows those not at their defaults
_SETTINGS = ("settings that must agree (ZIPCOLL_*)",)


def check_settings(records: list[tuple[dict[str, str], dict[str, str]]]) -> None:
    """Raise on every rank unless every rank's settings were taken and agree.

    `records`: each rank's (refused variables -> why, `Settings.agreeing()`), in rank
    order, the same list on every rank: ValueError naming each refused value and its
    rank, else MismatchError naming each setting that differs and each rank's value.
    """
    refused = [f"rank {rank}: {why}" for rank, (errors, _) in enumerate(records)
               for why in errors.values()]
    if refused:
        raise ValueError("a ZIPCOLL_* variable has a value it does not take; nothing was sent:\n  "
                         + "\n  ".join(refused))
    first = records[0][1]
    names = tuple(name for name in first if any(row[name] != first[name] for _, row in records))
    if names:
        everyone = [[row[name] for name in names] for _, row in records]
        raise MismatchError("ranks disagree on settings that must agree across ranks; "
                            "nothing was sent:\n"
                            + _what_each_had(everyone, list(range(len(names))), names))


def _everyones(ctx: Context, turn: int, mine: list[str]) -> Steps:
    """Every rank's `mine`, in rank order: point to point on the agreements' communicator,
    tagged by the call's turn, so it needs no place in the order of collectives."""
    t = ctx.transport
    record = np.zeros(_SHOWN_BYTES, np.uint8)
    text = json.dumps([value[:200] for value in mine]).encode()[:_SHOWN_BYTES]
    record[:len(text)] = np.frombuffer(text, np.uint8)
    records = [np.zeros(_SHOWN_BYTES, np.uint8) for _ in range(t.size)]
    records[t.rank][...] = record
    yield t.exchange_shown(record, records, turn)
    return [_decoded(r) for r in records]


def _decoded(record: np.ndarray) -> list[str] | None:
    try:
        return json.loads(record.tobytes().rstrip(b"\0").decode())
    except ValueError:  # cut inside a value: a description too long to show
        return None


def _what_each_had(everyone: list, differing: list[int], fields: tuple[str, ...]) -> str:
    """One line a differing field, naming each rank's value."""
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

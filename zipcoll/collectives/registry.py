"""The schedule registry: every all-reduce schedule zipcoll has, by name, with its
properties and its cost.

Each module of `zipcoll/collectives/schedules/` registers its schedule when imported,
and `SCHEDULES` imports them all on first use, so adding a schedule is adding one module:

    # zipcoll/collectives/schedules/myschedule.py
    from zipcoll.collectives.planning.model import Span, Work
    from zipcoll.collectives.registry import Schedule, register

    def myschedule(t, buf, enc, tag, xp, send=None):
        ...                                 # written over zipcoll.collectives.steps

    def myschedule_cost(n, span: Span, work: Work, codec=None) -> float:
        ...                                 # seconds for n bytes over span's ranks

    register(Schedule("myschedule", myschedule, "when it wins", per_hop=True,
                      cost=myschedule_cost))

Everything that lists, checks or prices algorithms (the plan, `algorithm="auto"` and
`zipcoll.explain` through `collectives.planning`, the benchmarks, the tests) reads the
registry; `zipcoll.ALGORITHMS` is derived from it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

# A flat schedule: (transport, buf, encoding, tag, xp, send=None) -> Steps, in place on buf.
# A two-level one: (levels, buf, encodings, inner, tag, xp, send=None) -> Steps.
ScheduleFunction = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class _Carries:
    """What a schedule can carry: the properties an all-reduce schedule and a
    reduce-scatter / all-gather one share (keyword-only, after each one's own fields).

    `codecs`: whether a codec may compress what it sends (every schedule is lossless
    without one, for every predefined op on every dtype MPI defines it for).
    `per_hop`: partial sums are re-encoded at every hop (a rescaling sparsifier would
    compound its 1/ratio there, so those are refused).
    `fixed_size_payloads`: receivers preallocate what they receive, so a codec whose
    payload size depends on the data (threshold) is refused.
    `two_level`: reduce-scatter in a level of fast links, an inner flat schedule across
    the slow level (`split` gives the levels), allgather in the fast level again.
    `native`: the MPI library's own collective (the only one that takes user-defined ops).
    """

    codecs: bool = True
    per_hop: bool = False
    fixed_size_payloads: bool = True
    two_level: bool = False
    native: bool = False
    split: Callable[..., Any] | None = None  # two-level: (topology) -> level layout

    def _carries(self, codec: Any, reencodes: bool) -> bool:
        """Whether `codec` may compress this schedule's messages; `reencodes`: partial sums
        are re-encoded at every hop in the direction asked about."""
        if not self.codecs:
            return False
        if self.fixed_size_payloads and not codec.fixed_size:
            return False
        rescaling = codec.sparse and codec.unbiased
        return not (reencodes and rescaling)


@dataclass(frozen=True)
class Schedule(_Carries):
    """One all-reduce schedule and what it can carry (the fields of `_Carries`, and:)

    `tags`: tags one run uses side by side (of the call's block).
    `cost`: a flat schedule's formula, ``(n bytes, span, work, codec or None) -> seconds``
    (`planning.model`: the ranks it runs over, the machine's speeds); `auto` prices the
    schedule with it, and leaves out a flat schedule without one. A two-level schedule
    is priced from its `split`: the ring's cost in level 1, its inner schedule's across.
    """

    name: str
    run: ScheduleFunction
    summary: str
    tags: int = 1
    cost: Callable[..., float] | None = None  # flat: (n, span, work, codec) -> seconds

    def accepts(self, codec: Any) -> bool:
        """Whether this schedule can carry `codec` (two-level: at its inter level, see plan)."""
        return self._carries(codec, self.per_hop)


class _Registry(Mapping):
    """name -> Schedule, filled by importing every module of a package of schedules."""

    def __init__(self, package: str = "zipcoll.collectives.schedules") -> None:
        self._schedules: dict[str, Any] = {}
        self._loaded = False
        self._package = package

    def add(self, schedule: Schedule) -> Schedule:
        held = self._schedules.get(schedule.name)
        if held is not None and held != schedule:
            raise ValueError(f"schedule {schedule.name!r} is already registered")
        self._schedules[schedule.name] = schedule
        return schedule

    def _load(self) -> dict[str, Schedule]:
        if not self._loaded:
            self._loaded = True
            package = importlib.import_module(self._package)
            for module in pkgutil.iter_modules(package.__path__):
                if not module.ispkg:  # a package inside is a table of its own (sharded/)
                    importlib.import_module(f"{package.__name__}.{module.name}")
        return self._schedules

    def __getitem__(self, name: str) -> Schedule:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        schedules = self._load()
        return iter(sorted(schedules, key=lambda name: _listing_order(schedules[name])))

    def __len__(self) -> int:
        return len(self._load())


def _listing_order(schedule: Any) -> tuple[int, str]:
    """native first, then flat schedules, then two-level ones; alphabetical within."""
    return (0 if schedule.native else 2 if schedule.two_level else 1, schedule.name)


SCHEDULES = _Registry()


@dataclass(frozen=True)
class ShardSchedule(_Carries):
    """One reduce-scatter / all-gather schedule: both directions, their properties and costs.

    `reduce_scatter(t, work, blocks, enc, tag, xp, send=None)`: afterwards
    `work[slice(*blocks[t.rank])]` holds the reduction of every rank's block t.rank (read
    from `send`, else from `work`; the rest of `work` is scratch).
    `allgather(t, buf, blocks, enc, tag, xp)`: `buf[slice(*blocks[t.rank])]` holds this
    rank's block; afterwards every rank's block is in place (a codec's decoding; the
    caller puts its own exact block back). Two-level ones take `Levels` for `t` and a
    pair of encodings (level 1 lossless, level 2 the codec's) for `enc`.
    `cost_rs` / `cost_ag`: ``(n bytes of the whole vector, span, work, codec) -> seconds``
    (two-level: ``(n, rows, columns, work, codec)``, rows the node level).
    `sliced`: its steps take any block bounds (each block a range of `work` / `buf`, in
    any order, gaps between them), so a call runs in slices side by side, slice i on
    part i of every block (`slicing.sharded_slicing`); false where a step sends a span
    of several blocks as one message.
    The other fields are `_Carries`'s.
    """

    name: str
    reduce_scatter: ScheduleFunction
    allgather: ScheduleFunction
    summary: str
    cost_rs: Callable[..., float] | None = None
    cost_ag: Callable[..., float] | None = None
    sliced: bool = False

    def accepts(self, codec: Any, collective: str) -> bool:
        """Whether this schedule's `collective` ("reduce-scatter"/"all-gather") can carry `codec`
        (MPI's own reduce-scatter applies its op itself: lossless only; an all-gather forwards
        payloads unchanged, so per-hop re-encoding is the reduce-scatter's alone)."""
        reduce_scatter = collective == "reduce-scatter"
        if self.native and reduce_scatter:
            return False
        return self._carries(codec, self.per_hop and reduce_scatter)


# name -> ShardSchedule: the modules of collectives/schedules/sharded/, each registering one
SHARDED = _Registry("zipcoll.collectives.schedules.sharded")


def register_sharded(schedule: ShardSchedule) -> ShardSchedule:
    """Add `schedule` to `SHARDED` (called by each module of schedules/sharded/ at import)."""
    return SHARDED.add(schedule)


def register(schedule: Schedule) -> Schedule:
    """Add `schedule` to `SCHEDULES` (called by each schedule module at import)."""
    return SCHEDULES.add(schedule)


def flat() -> list[Schedule]:
    """The schedules that run on one communicator (an inner level of a two-level one)."""
    return [s for s in SCHEDULES.values() if not s.two_level]


def accepting(codec: Any) -> list[str]:
    """Names of the flat schedules that can carry `codec`."""
    return [s.name for s in flat() if s.accepts(codec)]


def parse(algorithm: Any) -> tuple[Schedule | None, Schedule | None]:
    """(schedule, inner) of a name: "ring" -> (ring, None), "torus:tree" -> (torus, tree).

    "auto" gives (None, None): decided per call. ValueError names what exists.
    """
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, not {type(algorithm).__name__}")
    name, _, inner = algorithm.partition(":")
    if name == "auto" and not inner:
        return None, None
    schedule = SCHEDULES.get(name)
    if schedule is None or (inner and not schedule.two_level):
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of "
                         f"{', '.join(algorithms())} (two-level ones also as "
                         f"'hierarchical:tree')")
    if not inner:
        return schedule, None
    inner_schedule = SCHEDULES.get(inner)
    if inner_schedule is None or inner_schedule.two_level:
        raise ValueError(f"unknown inter-level schedule {inner!r} in {algorithm!r}; "
                         f"expected one of {', '.join(s.name for s in flat())}")
    return schedule, inner_schedule


def algorithms() -> tuple[str, ...]:
    """Every name `algorithm=` takes: "auto", then the registry's."""
    return ("auto",) + tuple(SCHEDULES)

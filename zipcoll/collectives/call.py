"""One collective call from start to end, in its communicator's order, without blocking.

Every zipcoll collective (all-reduce, sparse all-gather) starts the same way: take its
number and tag on the communicator, check its arguments locally, agree with the other
ranks (a non-blocking step), wait for its turn if its schedule calls MPI's own
collectives, then run its schedule. `start` returns the Request at once: nothing here
waits for another rank, so a non-blocking call is non-blocking however late the others
are, and a blocking call is the same call waited on (advancing the thread's other calls
on every communicator meanwhile, never finishing them first).

    rank 0: a = iallreduce(x, comm=A); allreduce(y, comm=B); a.wait()
    rank 1: allreduce(y, comm=B); a = iallreduce(x, comm=A); a.wait()

completes: calls on different communicators are independent. On one communicator,
calls match in the order each rank starts them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from zipcoll import settings
from zipcoll.collectives.agreement import agree
from zipcoll.collectives.context import Context
from zipcoll.collectives.planning.tuning import SLOTS
from zipcoll.collectives.progress import Gate, Request, Straight, current
from zipcoll.collectives.schedule import Steps


@dataclass
class Call:
    """What a collective needs to start: its checks, what ranks compare, and its steps.

    `prepare()`: the local checks, giving the call's plan (any exception is this rank's
    rejection, which every rank then raises); `signature(plan)` / `shown(plan)`: the
    numbers ranks compare and how this rank describes them (plan None: rejected);
    `collective(plan)`: whether its steps call MPI's collectives (or split the
    communicator: also collective); `first_use(plan)`: whether it is the first call to
    need a split (the agreement then runs even with checks off: only an agreement tells
    that every rank has started the call); `steps(plan, tag, highs, may_block)`: the
    schedule (`highs`: the agreement's maxima, None without one; `may_block`: every rank
    agreed that its call is a blocking one with no other call in flight on its thread, so
    the steps may call MPI's blocking collectives, whose algorithms are faster than the
    non-blocking ones of some libraries: Open MPI's libnbc Iallreduce takes 1.2-1.3x its
    Allreduce at 1-16 MiB);
    `outcome(plan)`: what a wait returns; `tune(plan, turn)`: the plan to run instead
    (algorithm="auto" tuning online), called once the agreement is read, in start order,
    so that it decides from agreed numbers only (`planning.tuning`); checked calls only.
    """

    ctx: Context
    what: str
    fields: tuple[str, ...]
    prepare: Callable[[], Any]
    signature: Callable[[Any], list[int]]
    shown: Callable[[Any], list[str]]
    collective: Callable[[Any], bool]
    first_use: Callable[[Any], bool]
    steps: Callable[[Any, int, Any], Steps]
    outcome: Callable[[Any], Any]
    check: bool = True
    tune: Callable[[Any, int], Any] | None = None


class Started:
    """A Call's run: its plan (or rejection), found at start when the communicator is ready."""

    def __init__(self, call: Call, alone: bool):
        self.call = call
        self.alone = alone  # a blocking call, no other call live on its thread at its start
        self.plan: Any = None
        self.error: BaseException | None = None
        self.highs: Any = None
        self.may_block = False  # every rank's call is alone (agreed)

    def _prepare(self) -> None:
        try:
            settings.current()  # a value refused since the first use: this rank's rejection
            self.plan = self.call.prepare()
        except Exception as exc:  # whatever its type: every rank must learn of it
            self.plan, self.error = None, exc

    def steps(self) -> Steps:
        call, ctx = self.call, self.call.ctx
        t, tuner = ctx.transport, ctx.tuner
        turn, tag = ctx.begin(), ctx.next_tag()
        tag_ticket, ticket = t.hold_tag(tag), None
        try:
            if not ctx.ready:
                yield from ctx.preparing()
            self._prepare()
            if self.plan is not None and call.collective(self.plan):
                ticket = object()
                ctx.collective_turns.append(ticket)
            first = self.plan is not None and call.first_use(self.plan)
            # settings changed since the last agreement: agree once even with checks off,
            # so that a rank whose check was turned off meets the others' agreement
            changed = settings.get().code != ctx.agreed_settings
            if call.check or first or changed:
                signature = call.signature(self.plan) + [0 if self.alone else 1]
                highs = yield from agree(ctx, turn, signature, call.fields,
                                         self.error, call.what, lambda: call.shown(self.plan),
                                         lambda: tuner.slots(turn))
                # the tuner reads agreements in start order: the same sequence on every rank
                gate = tuner.in_order(turn)
                if gate is not None:
                    yield gate
                tuner.learn(turn, highs[len(highs) - SLOTS:])
                self.may_block = highs[len(highs) - SLOTS - 1] == 0
                self.highs = highs[:len(highs) - SLOTS - 1]
                if call.check and call.tune is not None:
                    self.plan = call.tune(self.plan, turn)
            else:
                ctx.pass_turn(turn)
                if self.error is not None:
                    raise self.error
            tuner.done(turn)
            gate = None if ticket is None else ctx.collective_turn(ticket)
            if gate is not None:
                yield gate
            if not t.tag_turn(tag, tag_ticket):  # the block wrapped onto a call in flight
                yield Gate(lambda: t.tag_turn(tag, tag_ticket))
            began = tuner.clock()
            yield from call.steps(self.plan, tag, self.highs, self.may_block)
            tuner.finished(turn, tuner.clock() - began)
        finally:
            tuner.done(turn)
            t.release_tag(tag, tag_ticket)
            ctx.pass_turn(turn)
            if ticket is not None:
                ctx.collective_turns.remove(ticket)
            ctx.end()

    def outcome(self) -> Any:
        return self.call.outcome(self.plan)


def start(call: Call, blocking: bool) -> Request | Straight:
    """Start `call` on the calling thread's engine; its Request.

    A rank that rejects its own arguments raises at once from a non-blocking start (its
    agreement goes on in the background, so the other ranks raise from their waits); a
    blocking call raises from its wait, after the agreement, on every rank alike.
    """
    engine = current()
    call.ctx.claim(engine)
    # nothing can join a blocking call's engine while it waits: its thread is in the wait
    alone = blocking and not engine.busy
    started = Started(call, alone)
    if alone:
        return Straight(engine, started.steps(), started.outcome, lambda: started.plan)
    request = Request(engine, started.steps(), started.outcome, lambda: started.plan)
    if started.error is not None and not blocking:
        raise started.error
    return request

"""The progress engine: it advances the zipcoll calls in flight, one engine per thread.

A zipcoll call is a generator of steps (see `schedule`): each step posts MPI requests,
and the next step can only start once they complete, in Python. MPI lets each rank
complete its requests in any order, so waiting on one call must keep the others moving:
rank 0 may wait on b while rank 1 waits on a, and a cannot finish unless rank 0 posts
its next step of a meanwhile. So every wait or test, and every blocking call made while
another is in flight, goes through the thread's engine, which advances all of that
thread's calls in flight, oldest first, on every communicator. A blocking call with
nothing else in flight on its thread waits on its steps straight (`Straight`).

    a = zipcoll.iallreduce(x)
    b = zipcoll.iallreduce(y)
    zipcoll.waitall([b, a])        # any order, on any rank

A step may also be a `Gate`: the call waits, without MPI requests, until a condition
that other calls of the same thread make true (its turn on the communicator).

Threads: each thread has its own engine, so threads calling on different communicators
never touch each other's MPI requests (MPI_THREAD_MULTIPLE). Two threads working on the
same calls at once is refused with a RuntimeError (MPI forbids it too).
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterable

from mpi4py import MPI

from zipcoll.collectives.schedule import Steps, test, wait


class Gate:
    """A step that waits for `ready()`, made true by an older call of the same engine."""

    __slots__ = ("ready",)

    def __init__(self, ready: Callable[[], bool]):
        self.ready = ready


class Request:
    """A zipcoll call in flight. `test()` advances it; `wait()` finishes it and returns its result.

    `wait()` returns what `allreduce` would have returned. `Test`/`Wait` are aliases that
    take mpi4py's optional `status` too, so code written against `mpi4py.MPI.Request`
    keeps working. To wait a list mixing zipcoll and MPI requests, use `zipcoll.waitall`.
    """

    def __init__(self, engine: "Engine", steps: Steps, outcome: Callable[[], Any],
                 plan: Callable[[], Any] = lambda: None):
        self._engine = engine
        self._steps = steps
        self._outcome = outcome
        self._plan = plan
        self._pending: Any = []
        self._done = False
        self._error: BaseException | None = None
        engine.start(self)  # posts the first step now: data moves while the caller computes

    @property
    def plan(self) -> Any:
        """What this call runs (`collectives.plan.Plan`: schedule, inner schedule, codecs,
        slicing; "auto" resolved), once its arguments are checked; None before that (while
        a communicator's first call prepares) and for a call that rejected them. An "auto"
        call tuning online may change it once its agreement is read: from then on (and
        always once it is done) it is the plan the call runs."""
        return self._plan()

    @property
    def done(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._done

    def _advance(self) -> None:
        """Run steps while their requests are complete (or their gate open); never blocks."""
        try:
            while not self._done:
                pending = self._pending
                if isinstance(pending, Gate):
                    if not pending.ready():
                        return
                elif pending and not test(pending):
                    return
                try:
                    self._pending = next(self._steps)
                except StopIteration:
                    self._pending, self._done = [], True
        except Exception as exc:  # raised by its own steps, not by another call's
            self._pending, self._done, self._error = [], True, exc

    def _requests(self) -> list:
        """The MPI requests this call waits on now (none while it waits at a gate)."""
        pending = self._pending
        if isinstance(pending, Gate):
            return []
        return [r for r in pending if r != MPI.REQUEST_NULL]

    def _result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._outcome()

    def test(self, status: MPI.Status | None = None) -> bool:
        """Advance every call of this request's thread; True once this one is complete."""
        self._engine.progress()
        if self._done and self._error is not None:
            raise self._error
        _clear(status)
        return self._done

    def wait(self, status: MPI.Status | None = None) -> Any:
        """Block until complete (advancing the thread's other calls); the result."""
        self._engine.wait_until(lambda: self._done)
        _clear(status)
        return self._result()

    Test = test
    Wait = wait


def _clear(status: MPI.Status | None) -> None:
    """A collective's status, as MPI leaves it: no source, no tag, no error."""
    if status is not None:
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)


class Engine:
    """One thread's live calls, advanced together in the order they started."""

    def __init__(self) -> None:
        self._live: list[Request] = []
        self._lock = threading.RLock()
        self._depth = 0
        self.thread = threading.current_thread().name
        self._held = _Held(self)  # one for every use: it keeps no state of its own

    @property
    def busy(self) -> bool:
        """Whether calls are in flight here."""
        return bool(self._live)

    def _hold(self) -> "_Held":
        return self._held

    def start(self, request: Request) -> None:
        with self._hold():
            request._advance()
            if not request.done:
                self._live.append(request)

    def progress(self) -> None:
        """Advance every live call as far as it can go without blocking."""
        with self._hold():
            self._progress()

    def _progress(self) -> None:
        for request in list(self._live):
            request._advance()
        self._live = [r for r in self._live if not r.done]

    def wait_until(self, condition: Callable[[], bool], extra: list | None = None) -> None:
        """Advance every live call, blocking between rounds, until `condition()` holds.

        `extra`: more MPI requests (not zipcoll calls) to wake on, e.g. a user's.
        """
        with self._hold():
            while True:
                self._progress()
                if condition():
                    return
                pending = [r for call in self._live for r in call._requests()]
                pending += [r for r in extra or () if r != MPI.REQUEST_NULL]
                if not pending:
                    raise RuntimeError("zipcoll progress engine: nothing in flight can satisfy "
                                       "the wait (a schedule yielded no request)")
                if extra is None and len(self._live) == 1 and type(self._live[0]._pending) is list:
                    # one call, whose step needs all its requests: nothing else to move meanwhile
                    MPI.Request.Waitall(pending)
                else:
                    MPI.Request.Waitany(pending)

    def wait_mpi(self, request: MPI.Request) -> None:
        """Wait for one MPI request, advancing the live calls meanwhile."""
        self.wait_until(lambda: request == MPI.REQUEST_NULL or request.Test(), extra=[request])

    def drain(self) -> None:
        """Finish every live call of this thread."""
        self.wait_until(lambda: not self._live)


class _Held:
    """The engine's lock, taken without waiting: another thread inside it is a misuse."""

    __slots__ = ("engine",)

    def __init__(self, engine: Engine):
        self.engine = engine

    def __enter__(self) -> None:
        engine = self.engine
        if not engine._lock.acquire(blocking=False):
            raise RuntimeError(
                f"two threads at once on the zipcoll calls started by thread "
                f"{self.engine.thread!r}: wait or test a call from one thread at a time "
                "(calls on different communicators may run in different threads)")

        engine._depth += 1
        if engine._depth == 1:
            _INSIDE.add(engine)

    def __exit__(self, *exc: Any) -> None:
        engine = self.engine
        engine._depth -= 1
        if engine._depth == 0:
            _INSIDE.discard(engine)
        engine._lock.release()


_INSIDE: set[Engine] = set()  # engines a thread is running now (for the thread-level rules)


@functools.lru_cache(maxsize=1)
def _thread_level() -> int:
    return MPI.Query_thread()


_LEVEL_NAMES = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
                MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}


def check_threads() -> None:
    """The thread level MPI granted, honoured before a call makes any MPI call: below
    MPI_THREAD_MULTIPLE, one thread inside zipcoll at a time (and below
    MPI_THREAD_SERIALIZED, the main thread only); RuntimeError otherwise."""
    level = _thread_level()
    if level >= MPI.THREAD_MULTIPLE:
        return
    name = _LEVEL_NAMES.get(level, str(level))
    if level <= MPI.THREAD_FUNNELED and not MPI.Is_thread_main():
        raise RuntimeError(f"MPI granted {name}: zipcoll calls only from the main thread "
                           "(initialize MPI with MPI_THREAD_MULTIPLE to call from others)")
    engine = current()
    if any(other is not engine for other in _INSIDE):
        raise RuntimeError(f"MPI granted {name}: another thread is inside a zipcoll call; "
                           "one thread at a time may call (or initialize MPI with "
                           "MPI_THREAD_MULTIPLE)")


_THREAD = threading.local()


def current() -> Engine:
    """The calling thread's engine."""
    engine = getattr(_THREAD, "engine", None)
    if engine is None:
        engine = _THREAD.engine = Engine()
    return engine


def run(engine: Engine, steps: Steps, outcome: Callable[[], Any] = lambda: None) -> Any:
    """Run a call to the end through `engine` (a blocking call)."""
    return Request(engine, steps, outcome).wait()


class Straight:
    """A blocking call with no other call in flight on its thread, run when waited on.

    Nothing else of the thread needs advancing while it waits, so each step is waited on
    in MPI itself: the same steps as through the engine (agreement, turns, tags), without
    the engine's rounds of tests between them, which cost more than the MPI calls of a
    small message. Its thread cannot start another call before the wait returns.
    """

    __slots__ = ("_engine", "_steps", "_outcome", "_plan")

    def __init__(self, engine: Engine, steps: Steps, outcome: Callable[[], Any],
                 plan: Callable[[], Any] = lambda: None):
        self._engine, self._steps, self._outcome, self._plan = engine, steps, outcome, plan

    @property
    def plan(self) -> Any:
        """What this call runs, as `Request.plan` tells it."""
        return self._plan()

    def wait(self) -> Any:
        steps = self._steps
        with self._engine._hold():  # another thread on this thread's calls: refused
            try:
                for step in steps:
                    if type(step) is list:  # the common step: requests that must all complete
                        if step:
                            MPI.Request.Waitall(step)
                    elif isinstance(step, Gate):
                        if not step.ready():  # only another call could open it: none is live
                            raise RuntimeError("zipcoll progress engine: nothing in flight can "
                                               "satisfy the wait (a gate no call can open)")
                    elif step:
                        wait(step)
            finally:
                steps.close()  # an MPI error mid-step: the call's own clean-up still runs
        return self._outcome()


def waitall(requests: Iterable[Any]) -> list:
    """Wait for every request, zipcoll's or mpi4py's (any order is fine); the results in
    the order given (None for an MPI request)."""
    requests = list(requests)
    return [_wait_one(request) for request in requests]


def _wait_one(request: Any) -> Any:
    if isinstance(request, Request):
        return request.wait()
    current().wait_mpi(request)  # an MPI request: the thread's calls move meanwhile
    return None


def testall(requests: Iterable[Any]) -> bool:
    """Advance them all; True when every one is complete (zipcoll's or mpi4py's)."""
    return all([_test_one(request) for request in list(requests)])


def _test_one(request: Any) -> bool:
    if isinstance(request, Request):
        return request.test()
    current().progress()
    return request == MPI.REQUEST_NULL or bool(request.Test())


def waitany(requests: Iterable[Any]) -> tuple[int, Any]:
    """Wait until one of `requests` (zipcoll's or mpi4py's) completes: (its index, its result)."""
    requests = list(requests)
    if not requests:
        raise ValueError("waitany needs at least one request")
    mine = current()
    while True:
        for index, request in enumerate(requests):
            if _test_one(request):
                return index, _wait_one(request)
        others = [r for r in requests if not isinstance(r, Request)]
        engines = {id(r._engine): r._engine for r in requests if isinstance(r, Request)}
        if set(engines) <= {id(mine)}:
            mine.wait_until(lambda: any(_done(r) for r in requests), extra=others)


def _done(request: Any) -> bool:
    if isinstance(request, Request):
        return request.done
    return request == MPI.REQUEST_NULL or bool(request.Test())

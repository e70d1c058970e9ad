"""The progress engine: it advances every zipcoll call in flight in this process.

A zipcoll call is a generator of steps (see `schedule`): each step posts MPI requests,
and the next step can only start once they complete, in Python. MPI lets each rank
complete its requests in any order, so waiting on one call must keep the others moving:
rank 0 may wait on b while rank 1 waits on a, and a cannot finish unless rank 0 posts
its next step of a meanwhile. So every wait or test, and every blocking call, goes
through the `ENGINE`, which advances all live calls, oldest first, on every
communicator (MPI promises progress across communicators too).

    a = zipcoll.iallreduce(x)
    b = zipcoll.iallreduce(y)
    zipcoll.waitall([b, a])        # any order, on any rank
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from mpi4py import MPI

from zipcoll.collectives.schedule import Steps, test


class Request:
    """A zipcoll call in flight. `test()` advances it; `wait()` finishes it and returns its result.

    `wait()` returns what `allreduce` would have returned. `Test`/`Wait` are aliases,
    so code written against `mpi4py.MPI.Request` keeps working.
    """

    def __init__(self, engine: "Engine", steps: Steps, outcome: Callable[[], Any]):
        self._engine = engine
        self._steps = steps
        self._outcome = outcome
        self._pending: list = []
        self._done = False
        self._error: BaseException | None = None
        engine.start(self)  # posts the first step now: data moves while the caller computes

    @property
    def done(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._done

    def _advance(self) -> None:
        """Run steps while their requests are complete; never blocks."""
        try:
            while not self._done:
                if self._pending and not test(self._pending):
                    return
                try:
                    self._pending = next(self._steps)
                except StopIteration:
                    self._pending, self._done = [], True
        except Exception as exc:  # raised by its own wait/test, not by another call's
            self._pending, self._done, self._error = [], True, exc

    def _result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._outcome()

    def test(self) -> bool:
        """Advance every call on this communicator; True once this one is complete."""
        self._engine.progress()
        if self._done and self._error is not None:
            raise self._error
        return self._done

    def wait(self) -> Any:
        """Block until complete (advancing every call on this communicator); the result."""
        self._engine.wait_until(lambda: self._done)
        return self._result()

    Test = test
    Wait = wait


class Engine:
    """The live calls, advanced together in the order they started."""

    def __init__(self) -> None:
        self._live: list[Request] = []

    def start(self, request: Request) -> None:
        request._advance()
        if not request.done:
            self._live.append(request)

    def progress(self) -> None:
        """Advance every live call as far as it can go without blocking."""
        for request in list(self._live):
            request._advance()
        self._live = [r for r in self._live if not r.done]

    def wait_until(self, condition: Callable[[], bool], extra: Any = None) -> None:
        """Advance every live call, blocking between rounds, until `condition()` holds.

        `extra`: one more MPI request (not a zipcoll call) to wake on, e.g. an agreement.
        """
        while True:
            self.progress()
            if condition():
                return
            pending = [r for call in self._live for r in call._pending if r != MPI.REQUEST_NULL]
            if extra is not None and extra != MPI.REQUEST_NULL:
                pending.append(extra)
            if not pending:
                raise RuntimeError("zipcoll progress engine: nothing in flight can satisfy "
                                   "the wait (a schedule yielded no request)")
            MPI.Request.Waitany(pending)

    def wait_mpi(self, request: MPI.Request) -> None:
        """Wait for one MPI request of the library's own, advancing the live calls meanwhile."""
        self.wait_until(lambda: request.Test(), extra=request)

    def drain(self) -> None:
        """Finish every live call (before a blocking collective such as a communicator split)."""
        self.wait_until(lambda: not self._live)


ENGINE = Engine()


def run(engine: Engine, steps: Steps, outcome: Callable[[], Any] = lambda: None) -> Any:
    """Run a call to the end through `engine` (a blocking call)."""
    return Request(engine, steps, outcome).wait()


def waitall(requests: Iterable[Request]) -> list:
    """Wait for every request (any order is fine); their results, in the order given."""
    requests = list(requests)
    return [request.wait() for request in requests]


def testall(requests: Iterable[Request]) -> bool:
    """Advance them all; True when every one is complete."""
    return all([request.test() for request in list(requests)])


def waitany(requests: Iterable[Request]) -> tuple[int, Any]:
    """Wait until one of `requests` completes: (its index, its result)."""
    requests = list(requests)
    if not requests:
        raise ValueError("waitany needs at least one request")
    engines = {id(r._engine): r._engine for r in requests}
    while True:
        for index, request in enumerate(requests):
            if request.test():
                return index, request.wait()
        if len(engines) == 1:
            next(iter(engines.values())).wait_until(lambda: any(r.done for r in requests))

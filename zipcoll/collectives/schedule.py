"""What every schedule shares: the generator protocol, chunking, and the driver.

A schedule is a generator over a Transport that works in place on a flat array and
yields the lists of MPI requests it must wait on before going on. `run` drives one to
the end (blocking); `zipcoll.Request` drives one a step per `test()` (non-blocking).
"""
from __future__ import annotations

import functools
from typing import Any, Generator, Iterator

from mpi4py import MPI

Steps = Generator[list, None, None]


@functools.lru_cache(maxsize=256)
def chunk_bounds(count: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Split range(count) into `parts` contiguous pieces whose sizes differ by at most 1
    (cached: a call like the last one splits alike)."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (i < extra)
        bounds.append((start, stop))
        start = stop
    return tuple(bounds)


def split_space(space: Any, sizes: list) -> list:
    """Consecutive views of `space` with the given sizes."""
    views, start = [], 0
    for size in sizes:
        views.append(space[start:start + size])
        start += size
    return views


def copy_in(buf: Any, send: Any) -> None:
    """Start an in-place schedule from `send` (out of place) by copying it into `buf`."""
    if send is not None:
        buf[...] = send


class AnyOf(list):
    """Requests of which any one completing lets the schedule go on (for side-by-side runs)."""


def wait(requests: list) -> None:
    """Block until a step's requests allow the schedule to go on."""
    if isinstance(requests, AnyOf):
        MPI.Request.Waitany(requests)
    else:
        MPI.Request.Waitall(requests)


def test(requests: list) -> bool:
    """Whether a step's requests allow the schedule to go on, without blocking."""
    if isinstance(requests, AnyOf):
        # an outer wait may already have completed (and nulled) one of these
        return any(r == MPI.REQUEST_NULL for r in requests) or MPI.Request.Testany(requests)[1]
    return MPI.Request.Testall(requests)


def run(steps: Steps) -> None:
    """Drive a schedule to the end, waiting on each step's requests."""
    for requests in steps:
        wait(requests)


def side_by_side(*schedules: Steps) -> Steps:
    """Run several schedules at once, each advancing as soon as its own step completes.

    Lock-step would deadlock: a rank may be a leaf (ready) in one tree and wait as a
    parent in the other, while its peer waits the other way round.
    """
    yield from pipelined(iter(schedules), window=len(schedules))


def pipelined(schedules: Iterator[Steps], window: int) -> Steps:
    """Run schedules with at most `window` in flight, starting the next when one ends.

    While one waits on the network, another computes (encodes, reduces): the overlap
    that hides codec time behind a slow link.
    """
    live: dict = {}
    waiting = True
    while live or waiting:
        while waiting and len(live) < window:
            steps = next(schedules, None)
            waiting = steps is not None
            if waiting:
                live[steps] = []
        for steps in list(live):
            while test(live[steps]):
                try:
                    live[steps] = next(steps)
                except StopIteration:
                    del live[steps]
                    break
        if live and not (waiting and len(live) < window):
            yield AnyOf(request for requests in live.values() for request in requests
                        if request != MPI.REQUEST_NULL)

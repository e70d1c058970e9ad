"""The process-wide scratch pool alone (no MPI traffic): budget, latest buffer, idling, threads."""
from __future__ import annotations

import threading

import numpy as np

import zipcoll
from zipcoll import transport
from zipcoll.transport import ScratchPool


def _cycle(pool: ScratchPool, nbytes: int) -> int:
    """One call that borrows `nbytes` and gives them back; the id of the buffer it used."""
    pool.tick()
    view = pool.borrow(nbytes, np.uint8)
    pool.give_back(view)
    return id(view.raw)


def test_budget_holds_beyond_the_latest_buffer():
    zipcoll.configure(scratch_bytes=10 << 20)
    pool = ScratchPool()
    views = [pool.borrow(4 << 20, np.uint8) for _ in range(5)]  # one call's five buffers
    for view in views:
        pool.give_back(view)
    # the latest (4 MiB) kept whatever its size, then the newest others up to the budget
    assert pool.held() == 3 * (4 << 20)


def test_a_buffer_larger_than_the_budget_is_reused():
    zipcoll.configure(scratch_bytes=1 << 20)
    pool = ScratchPool()
    first = _cycle(pool, 8 << 20)
    assert all(_cycle(pool, 8 << 20) == first for _ in range(5))


def test_idle_buffers_are_released_by_other_calls():
    pool = ScratchPool()
    _cycle(pool, 2 << 20)
    assert pool.held() >= 2 << 20
    for _ in range(transport._SCRATCH_IDLE_CALLS + 1):
        pool.tick()  # calls that use no scratch
    assert pool.held() == 0


def test_threads_share_the_pool_safely():
    zipcoll.configure(scratch_bytes=4 << 20)
    pool = ScratchPool()
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(2000):
                pool.tick()
                views = [pool.borrow(int(rng.integers(1, 1 << 18)), np.uint8) for _ in range(3)]
                for view in views:
                    view.array[:] = seed  # a buffer lent twice at once would be overwritten
                for view in views:
                    if np.any(view.array != seed):
                        errors.append("a buffer was lent to two borrowers at once")
                    pool.give_back(view)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pool.held() <= (4 << 20) + (1 << 18)

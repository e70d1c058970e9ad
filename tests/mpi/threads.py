"""Test helper: one thread per communicator, each making many calls at once with the other.

Imported by the MPI tests as `from threads import on_two_communicators` (tests/mpi is on
sys.path as each test file's directory, as for `from test_compressed import ...`).
"""
from __future__ import annotations

import threading
from typing import Callable

from mpi4py import MPI


def on_two_communicators(comms: tuple[MPI.Intracomm, MPI.Intracomm], rounds: int,
                         call: Callable[[MPI.Intracomm, float, int], bool]) -> None:
    """Run `call(c, value, i)` for i in range(rounds) in one thread per communicator of
    `comms` (values 1.0 and 5.0: the two threads' data differ), and assert that neither
    thread hung (100 s each), raised, or had a call return False (a wrong result)."""
    wrong, errors = [], []

    def work(c, value):
        try:
            for i in range(rounds):
                if not call(c, value, i):
                    wrong.append((value, i))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(c, v)) for c, v in zip(comms, (1.0, 5.0))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=100)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not errors, errors
    assert not wrong, wrong[:5]

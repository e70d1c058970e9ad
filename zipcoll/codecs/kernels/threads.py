"""Numba's threading layer for the CPU kernels, chosen before Numba starts its threads.

Numba's default where TBB is absent is OpenMP. Its runtime, started in a process that
also runs torch (with an OpenMP runtime of its own), slowed torch's forward and backward
several times over: a small CNN's DDP step took 4-6 ms with gloo and tens of milliseconds
with the hook, before a byte was compressed. The workqueue layer starts plain threads
that sleep between kernels. Numba fixes the layer at its first thread launch
(``numba.set_num_threads`` or a parallel kernel), so every zipcoll path that may launch
them calls ``choose_layer()`` first. An explicit NUMBA_THREADING_LAYER is the user's
choice and stays.

workqueue aborts the process when two threads launch parallel kernels at once, and zipcoll
serves two threads on two communicators: ``one_launch_at_a_time`` serializes them.
"""
from __future__ import annotations

import functools
import os
import threading

import numba

LAYER = "workqueue"
_LAUNCH = threading.RLock()


def choose_layer() -> None:
    """Use ``LAYER`` unless the user set NUMBA_THREADING_LAYER (no effect once started)."""
    if "NUMBA_THREADING_LAYER" not in os.environ:
        # the environment too: Numba re-reads its config from it when it compiles
        os.environ["NUMBA_THREADING_LAYER"] = LAYER
        numba.config.THREADING_LAYER = LAYER


def one_launch_at_a_time(entry):
    """``entry`` (a function that may launch a parallel kernel) under the launch lock."""
    @functools.wraps(entry)
    def serialized(*args, **kwargs):
        with _LAUNCH:
            return entry(*args, **kwargs)
    return serialized


choose_layer()

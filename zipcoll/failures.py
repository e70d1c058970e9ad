"""A failing rank ends the job: an uncaught exception aborts every rank, not just its own.

Without it, one rank's exception leaves the others waiting in a collective forever
(under plain `python script.py`; `python -m mpi4py script.py` does the same as this).
From the first zipcoll call on, an uncaught exception prints its traceback and then
calls `MPI.COMM_WORLD.Abort(1)`, which ends every rank with a non-zero status. Turn it
off with `zipcoll.abort_on_error(False)` or ZIPCOLL_ABORT_ON_ERROR=0 (then your own
handler, or mpi4py's, must end the job).
"""
from __future__ import annotations

import os
import sys
import threading


class AbortOnError:
    """The excepthooks that abort the MPI job; call with False to turn them off."""

    def __init__(self) -> None:
        self.enabled = os.environ.get("ZIPCOLL_ABORT_ON_ERROR", "1").strip() not in ("0", "no")
        self._installed = False

    def __call__(self, enabled: bool = True) -> None:
        """Turn aborting on an uncaught exception on or off (it is on by default)."""
        self.enabled = bool(enabled)
        if enabled:
            self.install()

    def install(self) -> None:
        """Wrap sys.excepthook and threading.excepthook (once; cheap to call again)."""
        if self._installed or not self.enabled:
            return
        self._installed = True
        previous, previous_thread = sys.excepthook, threading.excepthook

        def excepthook(kind, value, traceback):
            previous(kind, value, traceback)
            self._abort()

        def thread_excepthook(args):
            previous_thread(args)
            if args.exc_type is not SystemExit:
                self._abort()

        sys.excepthook = excepthook
        threading.excepthook = thread_excepthook

    def _abort(self) -> None:
        if not self.enabled:
            return
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)


abort_on_error = AbortOnError()

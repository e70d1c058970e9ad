"""A failing rank ends the job: an uncaught exception aborts every rank, not just its own.

Without it, one rank's exception leaves the others waiting in a collective forever
(under plain `python script.py`; `python -m mpi4py script.py` does the same as this).
From the first zipcoll call on, an uncaught exception prints its traceback and then
calls `MPI.COMM_WORLD.Abort(1)`, which ends every rank with a non-zero status. Turn it
off with `zipcoll.abort_on_error(False)` or ZIPCOLL_ABORT_ON_ERROR=0 (then your own
handler, or mpi4py's, must end the job).

Exits: `sys.exit(n)` (or `exit(n)`, `quit(n)`) with n non-zero, or a message, that ends
the process aborts the job with status n (1 for a message) once Python's exit handlers
have run, as `python -m mpi4py` does. SystemExit never reaches sys.excepthook, and at
exit Python no longer says why it exits, so zipcoll replaces `sys.exit`, `exit` and
`quit` (at the first call) with ones that raise a SystemExit subclass, `RankExit`; the
interpreter reads its `code` when the exception ends the program, with no Python frame
left, and that read is what asks for the abort (a SystemExit caught and handled never
has its code read that way). A `raise SystemExit(n)` of your own, or an `exit` bound
before the first zipcoll call (`from sys import exit`), is not seen: the job then
behaves as under plain mpi4py.
`sys.exit(0)` (or None) is a normal end: that rank finalizes MPI as any rank that ends.
If other ranks are still waiting on it in a call, the job does not end by itself: MPI
makes that an erroneous program, and Open MPI's launcher waits (tested: the job is
still running 10 s later). End a job on purpose with a non-zero status, or
`MPI.COMM_WORLD.Abort()`.
"""
from __future__ import annotations

import builtins
import sys
import threading
from typing import Any

from zipcoll import settings


class RankExit(SystemExit):
    """The SystemExit that zipcoll's `sys.exit` raises: when the interpreter reads its code
    to end the process (no Python frame is then running), a non-zero code aborts the job."""

    @property
    def code(self) -> Any:
        code = SystemExit.code.__get__(self)
        if _read_by_the_interpreter():
            try:
                abort_on_error.exiting(code)
            except Exception:  # noqa: BLE001 - the process must still exit with `code`
                pass
        return code


def _read_by_the_interpreter() -> bool:
    """Whether no Python code called the caller of this function (RankExit.code)."""
    try:
        sys._getframe(2)  # 0: here, 1: RankExit.code, 2: whoever read the code
    except ValueError:
        return True
    return False


def _exit(*status: Any) -> None:
    """sys.exit, raising RankExit (a SystemExit) so that zipcoll sees the exit status."""
    raise RankExit(*status)


class _Quitter:
    """The builtins `exit` and `quit` (site.Quitter), raising RankExit."""

    def __init__(self, original: Any):
        self._original = original

    def __repr__(self) -> str:
        return repr(self._original)

    def __call__(self, code: Any = None) -> None:
        try:
            sys.stdin.close()  # as site.Quitter does
        except Exception:
            pass
        raise RankExit(code)


class AbortOnError:
    """The excepthooks that abort the MPI job; call with False to turn them off."""

    def __init__(self) -> None:
        self._enabled: bool | None = None  # None: the setting ZIPCOLL_ABORT_ON_ERROR
        self._installed = False

    @property
    def enabled(self) -> bool:
        """Whether an uncaught exception aborts the job: this object's call, else the setting."""
        return settings.get().abort_on_error if self._enabled is None else self._enabled

    def __call__(self, enabled: bool = True) -> None:
        """Turn aborting on an uncaught exception on or off (it is on by default)."""
        self._enabled = bool(enabled)
        if enabled:
            self.install()

    def install(self) -> None:
        """Wrap sys.excepthook and threading.excepthook, replace sys.exit, exit and quit
        (once; cheap to call again)."""
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
        _exit.__doc__, _exit.__wrapped__ = sys.exit.__doc__, sys.exit
        sys.exit = _exit
        for name in ("exit", "quit"):
            if hasattr(builtins, name):
                setattr(builtins, name, _Quitter(getattr(builtins, name)))

    def exiting(self, code: Any) -> None:
        """The process ends with `code` (a SystemExit's): abort the job if it is not 0, with
        that status (1 for a message), once Python's exit handlers have run, as
        `python -m mpi4py` does."""
        status = code if isinstance(code, int) else int(code is not None)
        if not (self.enabled and status):
            return
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            if hasattr(MPI, "_set_abort_status"):
                MPI._set_abort_status(status)  # mpi4py aborts instead of finalizing
            else:
                sys.stderr.flush()
                MPI.COMM_WORLD.Abort(status)

    def _abort(self) -> None:
        if not self.enabled:
            return
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)


abort_on_error = AbortOnError()

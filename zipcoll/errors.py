"""The exceptions users of zipcoll can catch."""


class ZipcollError(Exception):
    """Base class of zipcoll's own exceptions."""


class MismatchError(ZipcollError, ValueError):
    """Ranks disagree on count, dtype, op, algorithm or codec of one collective call.

    Raised on every rank of the communicator, before any data moves.
    """


class MissingDependencyError(ZipcollError, ImportError):
    """An optional dependency (CuPy, torch, JAX) is needed but not installed."""

    def __init__(self, package: str, extra: str):
        super().__init__(
            f"{package} is required for this; install it with: pip install 'zipcoll[{extra}]'"
        )
        self.package = package
        self.extra = extra

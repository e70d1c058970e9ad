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


class CodecNotApplied(UserWarning):
    """``algorithm="auto"`` sent a call lossless although a codec was passed: the cost model
    prices compression dearer for this size and layout (one node, say). Warned once per
    communicator, alike on every rank; name an algorithm (``algorithm="ring"``) to force
    the codec. Silence it with ``warnings.filterwarnings("ignore", category=CodecNotApplied)``.
    """

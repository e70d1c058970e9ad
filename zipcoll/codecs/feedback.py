"""``feedback``: error feedback (residual memory) around any codec.

``ErrorFeedback(codec).encode(x, key=k)`` encodes ``x + r_k`` and keeps the new residual
``r_k = (x + r_k) - decode(payload)``, so what one step loses is sent in the next
(EF-SGD, EF-signSGD, 1-bit Adam). Memory: one array the size and dtype of ``x`` per live
key; ``reset(key)`` frees one, ``reset()`` all. A residual holding NaN/Inf is dropped
rather than kept, so one bad step does not poison every later one.
"""
from __future__ import annotations

from typing import Hashable, Mapping

import numpy as np

from .backend import backend_of
from .base import Codec, get_codec


class ErrorFeedback(Codec):
    """Wraps ``codec``: adds the residual kept for ``key`` before each encode."""

    codec_id = "feedback"
    wire_tag = 0  # never on the wire: payloads are the inner codec's

    def __init__(self, codec):
        self._codec = get_codec(codec)
        self._residuals: dict[Hashable, object] = {}

    @property
    def codec(self) -> Codec:
        """The wrapped codec."""
        return self._codec

    def get_config(self) -> dict:
        """``{"id": "feedback", "codec": inner config}``."""
        return {"id": self.codec_id, "codec": self._codec.get_config()}

    @classmethod
    def from_config(cls, config: Mapping) -> "ErrorFeedback":
        """The wrapper of ``config["codec"]`` (a config, a spec string or a codec)."""
        return cls(config["codec"])

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._codec, name)  # lossless, unbiased, fixed_size, sparse, ...

    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        """As the inner codec (per call; the feedback makes the sum over calls track x)."""
        return self._codec.unbiased

    def encode(self, x, out=None, seed: int | None = None, key: Hashable = None):
        """Payload of ``x`` plus the residual of ``key``; the residual is then updated."""
        _, x = backend_of(x)
        residual = self._residuals.get(key)
        if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
            raise ValueError(f"feedback key {key!r} holds a residual of {residual.shape} "
                             f"{residual.dtype}, got {x.shape} {x.dtype}; reset(key) first")
        target = x if residual is None else x + residual
        payload = self._codec.encode(target, out=out, seed=seed)
        residual = self._codec.decode(payload, out=residual)
        residual *= -1
        residual += target  # target - decoded, in place
        if _all_finite(residual):
            self._residuals[key] = residual
        else:
            self._residuals.pop(key, None)
        return payload

    def reset(self, key: Hashable = ...) -> None:
        """Forget the residual of ``key``, or of every key when called without one."""
        if key is ...:
            self._residuals.clear()
        else:
            self._residuals.pop(key, None)

    def keys(self) -> list:
        """The keys that hold a residual."""
        return list(self._residuals)

    def nbytes(self) -> int:
        """Bytes held by the residuals of all keys."""
        return sum(int(r.nbytes) for r in self._residuals.values())

    def wire_bytes(self, n: int, dtype="float32") -> int:
        """As the inner codec."""
        return self._codec.wire_bytes(n, dtype)

    def error_bound(self, x) -> np.ndarray:
        """The inner codec's bound for ``x`` alone (a payload here encodes x + residual)."""
        return self._codec.error_bound(x)

    def decode(self, payload, out=None):
        """As the inner codec."""
        return self._codec.decode(payload, out)

    def decode_add(self, payload, acc):
        """As the inner codec."""
        return self._codec.decode_add(payload, acc)

    def _encode(self, bk, x, out, seed):  # encode is overridden
        raise AssertionError("unreachable")

    _decode = _payload_bytes = _encode


def _all_finite(a) -> bool:
    """True if ``a`` holds no NaN/Inf."""
    _, a = backend_of(a)
    xp = np if isinstance(a, np.ndarray) else __import__("cupy")
    return bool(xp.isfinite(a).all())

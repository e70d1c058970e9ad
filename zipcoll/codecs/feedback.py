"""``feedback``: error feedback (residual memory) around any codec.

``ErrorFeedback(codec).encode(x, key=k)`` encodes ``x + r_k`` and keeps the new residual
``r_k = (x + r_k) - decode(payload)``, so what one step loses is sent in the next
(EF-SGD, EF-signSGD, 1-bit Adam). The inner codec does both in one call
(``encode_with_residual``; the block codecs in one pass over the data). Memory: one
array the size and dtype of ``x`` per live key; ``reset(key)`` frees one, ``reset()``
all. ``decay`` scales the residual kept after each step (default: the inner codec's
``feedback_decay``, 1 but for sign, whose lagging residual is halved: see sign.py). A residual holding NaN/Inf is dropped rather than kept, so one bad step does not
poison every later one. Payloads are the inner codec's: there is no feedback format.
"""
from __future__ import annotations

from typing import Hashable, Mapping

import numpy as np

from .backend import backend_of
from .base import Codec, get_codec


class ErrorFeedback(Codec):
    """Wraps ``codec``: adds the residual kept for ``key`` before each encode."""

    codec_id = "feedback"

    def __init__(self, codec, decay: float | None = None):
        self._codec = get_codec(codec)
        default = self._codec.feedback_decay
        self._decay = float(default if decay is None else decay)
        if not 0.0 <= self._decay <= 1.0:
            raise ValueError(f"feedback decay must be in [0, 1], got {decay!r}")
        self._residuals: dict[Hashable, object] = {}

    @property
    def decay(self) -> float:
        """What is kept of a residual from one step to the next."""
        return self._decay

    @property
    def codec(self) -> Codec:
        """The wrapped codec."""
        return self._codec

    def get_config(self) -> dict:
        """``{"id": "feedback", "codec": inner config}``, and ``decay`` if not the codec's."""
        config = {"id": self.codec_id, "codec": self._codec.get_config()}
        if self._decay != self._codec.feedback_decay:
            config["decay"] = self._decay
        return config

    def spec(self) -> str:
        """``"feedback:<inner spec>"``, with ``decay=`` first where it is not the codec's."""
        decay = "" if self._decay == self._codec.feedback_decay else f"decay={self._decay}:"
        return f"{self.codec_id}:{decay}{self._codec.spec()}"

    @classmethod
    def from_config(cls, config: Mapping) -> "ErrorFeedback":
        """The wrapper of ``config["codec"]`` (a config, a spec string or a codec)."""
        return cls(config["codec"], config.get("decay"))

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
        bk, x = backend_of(x)
        residual = self._residuals.pop(key, None)
        if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
            self._residuals[key] = residual
            raise ValueError(f"feedback key {key!r} holds a residual of {residual.shape} "
                             f"{residual.dtype}, got {x.shape} {x.dtype}; reset(key) first")
        if residual is None:
            residual = bk.xp.zeros_like(x)
        payload, finite = self._codec.encode_feedback(x, residual, out=out, seed=seed)
        if finite:
            if self._decay != 1.0:
                residual *= self._decay
            self._residuals[key] = residual
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

    def residuals(self) -> dict:
        """Each key's residual (the arrays themselves: copy them to keep them)."""
        return dict(self._residuals)

    def load_residuals(self, residuals: Mapping) -> None:
        """Hold ``residuals`` (key -> array, as ``residuals()`` gave) from now on."""
        self._residuals.update(residuals)

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


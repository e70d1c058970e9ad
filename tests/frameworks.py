"""Test helpers: the array frameworks zipcoll takes (torch, JAX, Numba device arrays).

Like `arrays.KINDS`, but for frameworks a test imports only if installed: each
`Framework` makes its own array from a NumPy one and reads one back. Numba device arrays
are the CUDA simulator's (`numba.cuda.to_device` under NUMBA_ENABLE_CUDASIM=1 returns
this same class): host memory behind a device array's interface, so the device-array
path runs without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest


def _torch_make(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(a.copy())


def _jax_make(a: np.ndarray) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(a)


def _numba_make(a: np.ndarray) -> Any:
    from numba.cuda.simulator.cudadrv.devicearray import to_device

    return to_device(a)


@dataclass(frozen=True)
class Framework:
    """One framework: how to make its array from NumPy, read one back, and whether it is mutable."""

    name: str
    module: str  # imported (or skipped) before use
    make: Callable[[np.ndarray], Any]
    read: Callable[[Any], np.ndarray]
    mutable: bool

    def require(self) -> None:
        """Skip the test if the framework is not installed."""
        pytest.importorskip(self.module)

    def __repr__(self) -> str:
        return self.name


FRAMEWORKS = [
    Framework("torch", "torch", _torch_make, lambda t: t.numpy(), True),
    Framework("jax", "jax", _jax_make, lambda j: np.asarray(j), False),
    Framework("numba-sim", "numba", _numba_make, lambda d: d.copy_to_host(), True),
]
MUTABLE = [f for f in FRAMEWORKS if f.mutable]


def framework_params(frameworks=FRAMEWORKS) -> list:
    return [pytest.param(f, id=f.name) for f in frameworks]

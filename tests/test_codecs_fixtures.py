"""Stored encodings: a change of any codec's wire format fails here.

Regenerate (after a deliberate, versioned format change) with
``ZIPCOLL_WRITE_FIXTURES=1 python -m pytest tests/test_codecs_fixtures.py``.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from zipcoll.codecs import get_codec

FIXTURES = Path(__file__).parent / "fixtures" / "codecs"
SPECS = ["none", "fp16", "bf16", "int8", "int8:stochastic=true", "int4:block=64", "int2",
         "qsgd", "terngrad", "sign", "topk:ratio=0.05", "topk:k=7,values=float16",
         "randomk:k=20", "threshold:tau=3.0"]


def data() -> np.ndarray:
    """The fixed input: 300 values, not a multiple of the block, with NaN and Inf."""
    x = np.linspace(-5, 5, 300) ** 3 / 25 + np.sin(np.arange(300))
    x[[17, 150]] = [np.nan, np.inf]
    return x.astype(np.float32)


def encodings() -> dict:
    """spec -> payload bytes, as encoded now (seed 1234)."""
    return {spec: get_codec(spec).encode(data(), seed=1234) for spec in SPECS}


if os.environ.get("ZIPCOLL_WRITE_FIXTURES") == "1":  # pragma: no cover
    FIXTURES.mkdir(parents=True, exist_ok=True)
    stored = {spec: payload.tobytes().hex() for spec, payload in encodings().items()}
    (FIXTURES / "encodings.json").write_text(json.dumps(stored, indent=0) + "\n")


STORED = json.loads((FIXTURES / "encodings.json").read_text())


@pytest.mark.parametrize("spec", SPECS)
def test_encoding_unchanged(spec):
    payload = get_codec(spec).encode(data(), seed=1234)
    assert payload.tobytes().hex() == STORED[spec], f"wire format of {spec} changed"


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("spec", SPECS)
def test_stored_payload_decodes(spec):
    codec = get_codec(spec)
    stored = np.frombuffer(bytes.fromhex(STORED[spec]), np.uint8).copy()
    y = codec.decode(stored)
    np.testing.assert_array_equal(y, codec.decode(codec.encode(data(), seed=1234)))
    ok = np.isfinite(data()) & np.isfinite(y)
    assert np.all(np.abs(y - data())[ok] <= codec.error_bound(data())[ok])

"""A short soak (benchmarks/soak.py) in the suite: a few hundred random calls up to 64 KiB.

Every call is checked by the soak itself (against the MPI library's Allreduce, the bound
model of test_compressed.py, identity across ranks, untouched send buffers); this test
asserts that no rank found a problem and that the calls covered every kind of call.
The long run, with its RSS figures, is benchmarks/results/soak/.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import soak  # noqa: E402

pytestmark = pytest.mark.mpi

CALLS = 300


def test_short_soak(comm):
    # timeout=None: pytest-timeout ends a hang here
    options = soak.Options(calls=CALLS, seed=11, max_bytes=64 << 10, orders="per-rank",
                           many=150, timeout=None, rss_every=CALLS)
    tally = soak.soak(options, comm)
    assert tally.problems == [], "\n".join(f"{c}: {p}" for c, p in tally.problems[:20])
    assert tally.calls == CALLS
    kinds = set(soak.ENTRIES) | {"iallreduce", "sparse_allgather", "sparse_allreduce"}
    assert set(tally.by_kind) == kinds, f"kinds never drawn: {kinds - set(tally.by_kind)}"
    assert set(tally.by_comm) == set(soak.COMMS)
    lossy = [c for c in tally.by_codec if not c.startswith("none")]
    assert len(lossy) >= 10, f"only {lossy} compressed"

"""Bruck's all-reduce: against the MPI library's Allreduce, with a codec, and under auto
and explain (the op x dtype grid runs in test_allreduce.py, codecs in test_compressed.py:
both loop over the registry)."""
import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.plan import make_plan
from zipcoll.collectives.planning import (DEFAULT_PROFILE, PROFILE_ENV, PlanShape, Profile, Shape)

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("dtype, op", [("float64", MPI.SUM), ("int32", MPI.PROD),
                                       ("complex128", MPI.PROD), ("uint8", MPI.BAND)])
@pytest.mark.parametrize("count", [0, 1, 7, 1001])
def test_bruck_matches_mpis_allreduce(comm, dtype, op, count):
    rng = np.random.default_rng(comm.rank)
    x = (rng.integers(1, 4, count) + (1j * rng.integers(0, 2, count) if "complex" in dtype
                                      else 0)).astype(dtype)
    ref = np.empty_like(x)
    comm.Allreduce(x, ref, op=op)
    got = zipcoll.allreduce(x, op=op, comm=comm, algorithm="bruck")
    assert np.array_equal(got, ref)
    inplace = x.copy()
    zipcoll.allreduce(MPI.IN_PLACE, inplace, op=op, comm=comm, algorithm="bruck")
    assert np.array_equal(inplace, ref)
    assert comm.allgather(got.tobytes()) == [got.tobytes()] * comm.size


def test_bruck_with_a_codec_is_alike_everywhere_and_close(comm):
    x = np.random.default_rng(comm.rank).standard_normal(4099).astype(np.float32)
    exact = np.empty(x.size, np.float64)
    comm.Allreduce(x.astype(np.float64), exact, op=MPI.SUM)
    got = zipcoll.allreduce(x, comm=comm, algorithm="bruck", codec="int8")
    assert comm.allgather(got.tobytes()) == [got.tobytes()] * comm.size
    # each rank's vector encoded once: at most p int8 steps of its own scale apart
    scales = comm.allgather(float(np.abs(x).max()) / 127)
    assert np.abs(got - exact).max() <= sum(scales) * 1.01 + 1e-5


def test_auto_runs_bruck_where_the_profile_prices_it_cheapest(comm, tmp_path, zipcoll_env):
    topology = zipcoll.Topology.from_comm(comm)
    label = Shape.of(topology).label
    fastest = {label: {"bruck": ((8, 1e-9), (1 << 30, 1e-6))}}
    profile = Profile(**{**DEFAULT_PROFILE.__dict__, "plans": fastest})
    ranking = zipcoll.explain(1 << 10, comm=comm, topology=topology, profile=profile)
    if comm.size == 1:
        assert ranking.best == PlanShape("native")  # one rank: a copy
        return
    assert ranking.best == PlanShape("bruck") and "bruck" in str(ranking)
    path = tmp_path / "profile.json"
    profile.save(str(path))
    zipcoll_env(**{PROFILE_ENV: str(path)})
    fresh = comm.Dup()  # its first call loads that profile
    try:
        selector = context_for(fresh).selector
        x = np.arange(256, dtype=np.float32) + comm.rank
        plan = make_plan(x, None, "sum", "auto", None, None, topology, selector)
        assert plan.schedule.name == "bruck"
        ref = np.empty_like(x)
        comm.Allreduce(x, ref)
        assert np.array_equal(zipcoll.allreduce(x, comm=fresh), ref)  # auto: bruck
    finally:
        fresh.Free()

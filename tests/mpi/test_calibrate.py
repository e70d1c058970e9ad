"""Calibration on a live job, and `explain`'s ranking being the same on every rank."""
import json

import pytest
from mpi4py import MPI

from zipcoll.bench import autocheck
from zipcoll.bench import calibrate as cal
from zipcoll.topologies import Topology
from zipcoll.collectives import planning as cost
from zipcoll import explain
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning import shared_profile


@pytest.fixture
def quick(monkeypatch):
    """A few sizes and one codec: seconds, not minutes."""
    monkeypatch.setattr(cal, "STEP_SIZES", [8, 1 << 12, 1 << 16, 1 << 20])
    monkeypatch.setattr(cal, "NATIVE_SIZES", [8, 1 << 12, 1 << 16, 1 << 20])
    monkeypatch.setattr(cal, "CODEC_SIZES", (1 << 12, 1 << 18))


def test_calibrate_measures_a_profile_every_rank_shares(comm, quick, tmp_path):
    if comm.size < 2:
        pytest.skip("links need two ranks")
    profile, points = cal.calibrate(comm, quick=True, codecs=["int8"])
    assert 0 < profile.intra.alpha < 0.05 and 0 < profile.intra.beta < 1e-6  # > 1 MB/s
    assert [n for n, _ in points["intra"]] == cal.STEP_SIZES[::2]
    assert all(s > 0 for _, s in points["intra"])
    assert profile.inter == cost.DEFAULT_PROFILE.inter  # one node: no inter-node link measured
    assert profile.reduce.bytes_per_s > 1e6 and profile.step_overhead >= 0
    native = profile.native[f"1x{comm.size}"]
    assert [n for n, _ in native] == cal.NATIVE_SIZES[::2] and all(s > 0 for _, s in native)
    assert profile.codecs["int8"].encode.bytes_per_s > 1e6
    assert comm.allgather(profile.to_dict()) == [profile.to_dict()] * comm.size
    path = tmp_path / f"profile{comm.rank}.json"
    profile.save(str(path))
    loaded = cost.load_profile(str(path))
    assert (loaded.intra, loaded.native, loaded.source) == (profile.intra, profile.native, str(path))


def test_calibrate_command_writes_the_json(comm, quick, tmp_path):
    path = comm.bcast(str(tmp_path / "profile.json"), root=0)  # rank 0's path on every rank
    assert cal.main(["-o", path, "--codec", "sign"]) == 0
    comm.Barrier()
    if comm.rank == 0:
        data = json.load(open(path))
        assert cost.Profile.from_dict(data).codecs["sign"].encode.bytes_per_s > 0
        assert "ring_steps" in data


@pytest.mark.parametrize("codec", [None, "int8", "topk:ratio=0.01"])
def test_explain_is_the_same_on_every_rank(comm, codec):
    for nbytes in (8, 1 << 16, 1 << 22, 1 << 26):
        ranking = explain(nbytes, comm=comm, codec=codec)
        rows = [(round(t, 15), tuple(p)) for t, p in ranking]
        assert comm.allgather(rows) == [rows] * comm.size
        assert ranking.best == ranking[0][1] and str(ranking).count("\n") == len(ranking) + 2


def test_ranks_with_different_profiles_still_agree(comm, tmp_path, zipcoll_env):
    # each rank points ZIPCOLL_PROFILE at its own, different file: rank 0's is used everywhere
    own = cost.Profile(cost.Link(1e-6 * (comm.rank + 1), 1e-9), cost.Link(1e-5, 1e-8 * (comm.rank + 1)),
                       cost.Rate(1e9), 0.0, 0.0)
    path = tmp_path / f"rank{comm.rank}.json"
    own.save(str(path))
    zipcoll_env(**{cost.PROFILE_ENV: str(path)})
    fresh = comm.Dup()  # a communicator with no profile cached yet
    try:
        selector = context_for(fresh).selector
        assert selector.profile.intra.alpha == pytest.approx(1e-6)  # rank 0's
        topo = Topology.from_comm(fresh, ranks_per_node=max(1, comm.size // 2))
        plans = [selector.choose(n, topo, "int4") for n in (8, 1000, 1 << 20, 3 << 20, 1 << 26)]
        assert comm.allgather([tuple(p) for p in plans]) == [[tuple(p) for p in plans]] * comm.size
        assert context_for(fresh).selector is selector  # one per communicator
        other = shared_profile(fresh, path=comm.bcast(str(path), root=comm.size - 1))
        assert other.intra.alpha == pytest.approx(1e-6 * comm.size)  # that file, now
        # each rank names its own file; rank 0's is read and used everywhere
        ranking = explain(1 << 20, comm=fresh, topology=topo, profile=str(path))
        assert ranking.source == comm.bcast(str(path), root=0)
        assert ranking.best == cost.choose(1 << 20, topo, None, selector.profile)
    finally:
        fresh.Free()


def test_explain_prices_with_the_communicators_own_topology_and_profile(comm, tmp_path,
                                                                        zipcoll_env):
    """explain and auto read one context: the profile loaded once, at first use, the same."""
    path = tmp_path / f"rank{comm.rank}.json"
    cost.Profile(cost.Link(2e-6, 1e-9), cost.Link(3e-5, 1e-8), cost.Rate(1e9), 0.0, 0.0).save(str(path))
    zipcoll_env(**{cost.PROFILE_ENV: str(path)})
    fresh = comm.Dup()
    try:
        ranking = explain(1 << 20, comm=fresh, codec="int8")
        ctx = context_for(fresh)
        assert ranking.profile is ctx.selector.profile and ranking.topology is ctx.topology
        assert ranking.source == comm.bcast(str(path), root=0)
        assert ranking.profile.intra.alpha == pytest.approx(2e-6)  # the file's, not defaults
    finally:
        fresh.Free()


def test_calibrated_plans_price_auto_on_this_layout(comm, quick, monkeypatch):
    if comm.size < 2:
        pytest.skip("one rank runs native only")
    monkeypatch.setattr(autocheck, "SCREEN_SECONDS", 0.002)
    monkeypatch.setattr(autocheck, "ROUND_SECONDS", 0.002)
    profile, _ = cal.calibrate(comm, quick=True, codecs=["int8"], plan_codecs=["int8"],
                               plan_sizes=[8, 1 << 12])
    topology = Topology.from_comm(comm)
    table = profile.plans[cost.Shape.of(topology).label]
    assert set(table) == {str(p) for p in cost.candidate_plans(topology, "int8")}
    assert all([n for n, _ in points] == [8, 1 << 12] and all(s > 0 for _, s in points)
               for points in table.values())
    assert comm.allgather(profile.to_dict()) == [profile.to_dict()] * comm.size
    # auto's ranking is the measured one: the fastest measured plan at 4 KiB comes first
    fastest = min(table, key=lambda plan: table[plan][1][1])
    assert str(cost.choose(1 << 12, topology, "int8", profile)) == fastest


def test_autocheck_times_auto_beside_every_plan(comm, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(autocheck, "SCREEN_SECONDS", 0.002)
    monkeypatch.setattr(autocheck, "ROUND_SECONDS", 0.002)
    monkeypatch.setattr(autocheck, "PAIR_SECONDS", 0.002)
    path = comm.bcast(str(tmp_path / "autocheck.json"), root=0)
    assert autocheck.main(["-m", "1K:2K", "--codec", "int8", "--rounds", "2", "--json", path]) == 0
    # auto prices a size at its bucket's middle (1 KiB: 1448 B), with COMM_WORLD's profile
    expected = [str(explain(int(n * 2 ** 0.5), comm=MPI.COMM_WORLD).best) for n in (1024, 2048)]
    every = {autocheck.label(p) for p in autocheck.plans_to_time(Topology.from_comm(comm), "int8")[0]}
    comm.Barrier()
    if comm.rank == 0:
        data = json.load(open(path))
        assert [s["nbytes"] for s in data["sizes"]] == [1024, 2048]
        picks = [s["picks"]["lossless"] for s in data["sizes"]]
        assert picks == (expected if comm.size > 1 else ["native", "native"])
        for size in data["sizes"]:
            assert size["seconds"]["auto"] > 0 and size["seconds"][autocheck.MPI_OWN] > 0
            # the paired timing, mode by mode: its auto, its pick and its fastest plan of
            # the rounds
            plans = {x: s for x, s in size["seconds"].items()
                     if not x.startswith("auto") and x != autocheck.MPI_OWN}
            fastest = {"lossless": min((s, x) for x, s in plans.items() if "+" not in x)[1],
                       "int8": min((s, x) for x, s in plans.items())[1]}
            for mode, auto in [("lossless", "auto"), ("int8", "auto + int8")]:
                paired = size["paired"][mode]
                assert size["paired_calls"][mode] >= autocheck.MIN_PAIR_CALLS
                assert {auto, size["picks"][mode], fastest[mode]} <= set(paired)
                assert all(s > 0 for s in paired.values())
                # which plan each of auto's calls there ran: a plan it may pick
                ran = size["auto_ran"][mode]
                assert len(ran) == size["paired_calls"][mode]
                assert set(ran) <= every | {"model"}
        assert "auto/best paired" in capsys.readouterr().out


def test_online_autocheck_keeps_what_each_kind_learned(comm, tmp_path, monkeypatch):
    """--online: each size's JSON holds each kind's tuning after its learning and at the
    end (times, estimates, tries, dropped, the plan settled on), what a miss is read from."""
    if comm.size < 2:
        pytest.skip("one rank has nothing to tune")
    from zipcoll.collectives.planning import tuning

    for name in ("SCREEN_SECONDS", "ROUND_SECONDS", "PAIR_SECONDS"):
        monkeypatch.setattr(autocheck, name, 0.002)
    path = comm.bcast(str(tmp_path / "online.json"), root=0)
    assert autocheck.main(["-m", "64K:64K", "--codec", "int8", "--rounds", "1", "--online",
                           "--learn-calls", "12", "--json", path]) == 0
    comm.Barrier()
    if comm.rank != 0:
        return
    size = json.load(open(path))["sizes"][0]
    for mode in ("lossless", "int8"):
        learned, end = size["tuning"][mode]["learned"], size["tuning"][mode]["end"]
        assert set(learned["plans"]) == set(end["plans"])  # the kind's candidates
        assert end["calls"] >= learned["calls"] + size["paired_calls"][mode]
        assert end["settled"] in end["plans"] and not end["plans"][end["settled"]]["dropped"]
        for state in (learned, end):
            for plan in state["plans"].values():
                assert len(plan["ms"]) <= tuning.KEEP
                ms = plan["ms"]
                if ms:  # the estimate: the mean of the times kept but the slowest
                    mean = ms[0] if len(ms) == 1 else (sum(ms) - max(ms)) / (len(ms) - 1)
                    assert plan["estimate_ms"] == pytest.approx(mean, abs=1e-3)
        assert set(size["auto_ran"][mode]) <= set(end["plans"])

"""The cost model's formulas against values computed by hand, and the plan ranking (no MPI).

A round profile makes the arithmetic checkable: intra alpha 1 us and 1 ns/byte, inter
10 us and 10 ns/byte, gamma 1 ns/byte, codecs at 1 GB/s (decode 2 GB/s), no overheads.
"""
import json
import math

import numpy as np
import pytest

from zipcoll import get_codec
from zipcoll.collectives import planning as cost
from zipcoll.collectives.planning import (DEFAULT_PROFILE, CodecSpeed, Link, PlanShape, Profile,
                                          Rate, Shape, Span, Work)
from zipcoll.collectives.registry import SCHEDULES, accepting, flat
from zipcoll.topologies import Topology

INTRA, INTER = Link(1e-6, 1e-9), Link(10e-6, 1e-8)
ROUND = Profile(INTRA, INTER, Rate(1e9), step_overhead=0.0, call_overhead=0.0,
                codecs={"int8": CodecSpeed(Rate(1e9), Rate(2e9), Rate(1e9))},
                native={"1x4": ((64, 1e-5), (1 << 30, 1.0)), "2x2": ((64, 2e-5), (1 << 30, 2.0))})
WORK = Work(ROUND, 4, "float32", 0.0)
ONE_NODE = Span(4, 4, INTRA, INTER)
TWO_BY_TWO = Span(4, 2, INTRA, INTER)
N = 4e6  # bytes: 1e6 float32
INT8 = get_codec("int8")


def formula(name):
    """The cost formula the schedule registered beside its run."""
    return SCHEDULES[name].cost


def test_ring_one_node():
    # 2(p-1) steps of n/p = 1e6 B: 6 (1us + 1ms), plus (p-1) reductions of 1e6 B: 3 ms
    assert formula("ring")(N, ONE_NODE, WORK) == pytest.approx(6 * 1.001e-3 + 3e-3)


def test_ring_across_nodes_goes_at_the_inter_rate():
    # 6 (10us + 1e6 * 10ns) + 3 ms
    assert formula("ring")(N, TWO_BY_TWO, WORK) == pytest.approx(6 * 10.01e-3 + 3e-3)


def test_ring_with_a_codec():
    w = INT8.wire_bytes(250_000, "float32")  # one chunk of 1e6 bytes
    hops = 6 * (1e-6 + w * 1e-9)
    reduce_scatter = 3 * (1e-3 + 1e-3)  # encode + decode_add per hop
    owner_and_allgather = 1e-3 + 4 * 0.5e-3  # owner encodes once, p decodes
    assert formula("ring")(N, ONE_NODE, WORK, INT8) == pytest.approx(hops + reduce_scatter + owner_and_allgather)


def test_rabenseifner_power_of_two_across_nodes():
    # distance 1 (same node): 2 (1us + 2e6 ns) + 2e6 ns = 6.002 ms
    # distance 2 (other node, both ranks of a node at once: beta x2): 2 (10us + 1e6 x 20ns) + 1 ms
    assert formula("rabenseifner")(N, TWO_BY_TWO, WORK) == pytest.approx(6.002e-3 + 2 * 20.01e-3 + 1e-3)


def test_rabenseifner_three_ranks_folds():
    # fold + unfold of the whole vector (2 x 4.001 ms) and one reduction of it (4 ms),
    # then one halving/doubling step between 2 ranks: 2 (1us + 2 ms) + 2 ms
    span = Span(3, 3, INTRA, INTER)
    assert formula("rabenseifner")(N, span, WORK) == pytest.approx(12.002e-3 + 6.002e-3)


def test_recdoubling_small_message():
    # log2 4 = 2 exchanges of 4 KB: each 1 us + 4 us on the wire + 4 us reducing
    assert formula("recdoubling")(4e3, ONE_NODE, WORK) == pytest.approx(2 * 9e-6)


def test_binomial_tree_pipelined():
    # 8 segments of 5e5 B (4e6 / 512 KiB rounded up); depth 2, both root children local.
    # per phase: fill 1 x (1us + 0.5 ms) + 8 root steps of (1us + 2 x 0.5 ms)
    # reduce: 8 x 2 children x 0.5 ms
    phase = (1e-6 + 5e-4) + 8 * (1e-6 + 1e-3)
    assert formula("tree")(N, ONE_NODE, WORK) == pytest.approx(2 * phase + 8e-3)


def test_double_binary_tree():
    # halves of 2e6 B in 4 segments of 5e5; depth 2; per step 2 segments out (one per tree)
    phase = (1e-6 + 5e-4) + 4 * (1e-6 + 1e-3)
    assert formula("dbtree")(N, ONE_NODE, WORK) == pytest.approx(2 * phase + 4 * 2 * 5e-4)


def test_allgather_across_nodes():
    w = INT8.wire_bytes(1_000_000, "float32")
    # a node's link carries its 2 ranks' payloads to the 2 ranks elsewhere: 2 alphas + 4 w beta
    moves = max(1e-6 + w * 1e-9, 2 * 10e-6 + 4 * w * 1e-8)
    expected = moves + 4e-3 + 4 * 4e-3  # encode n once, decode_add all 4 payloads
    assert formula("allgather")(N, TWO_BY_TWO, WORK, INT8) == pytest.approx(expected)


def test_twophase_one_node():
    w = INT8.wire_bytes(250_000, "float32")
    moves = 2 * 3 * (1e-6 + w * 1e-9)  # twice: 3 neighbours' chunks
    codec = 4 * 1e-3 + 3 * 1e-3 + 4 * 0.5e-3  # p encodes, p-1 decode_adds, p decodes of n/p
    assert formula("twophase")(N, ONE_NODE, WORK, INT8) == pytest.approx(moves + codec)


def test_hierarchical_slices_pipeline():
    n = 4 << 20  # 2 slices of 2 MiB
    s = n / 2
    a = 2 * (1e-6 + s / 2 * 1e-9) + s / 2 * 1e-9  # ring over the node's 2 ranks
    b = 2 * (10e-6 + s / 4 * 2e-8) + s / 4 * 1e-9  # ring over 2 nodes on s/2, both rails share
    # once full, the pipeline goes at its busiest resource: a link's bytes, or the CPU
    busiest = max(2 * s / 2 * 1e-9, 2 * s / 4 * 2e-8, s / 2 * 1e-9 + s / 4 * 1e-9)
    expected = 2e-5 + a + b + busiest  # + the agreement check (native at 64 B)
    plan = PlanShape("hierarchical", "ring")
    assert cost.predict(plan, n, Topology.from_layout(4, 0, ranks_per_node=2), ROUND) == pytest.approx(expected)


def test_predict_adds_the_agreement_check_and_call_overhead():
    profile = Profile(INTRA, INTER, Rate(1e9), 0.0, 5e-4, ROUND.codecs, ROUND.native)
    topo = Topology.from_layout(4, 1)
    assert cost.predict(PlanShape("ring"), N, topo, profile) == pytest.approx(
        5e-4 + 1e-5 + 6 * 1.001e-3 + 3e-3)


def test_native_interpolates_measured_times_log_log():
    profile = Profile(INTRA, INTER, Rate(1e9), 0.0, 0.0, native={"1x4": ((1000, 1e-5), (100_000, 1e-3))})
    topo = Topology.from_layout(4, 0)
    native = PlanShape("native")
    assert cost.predict(native, 10_000, topo, profile) == pytest.approx(1e-4)
    assert cost.predict(native, 10, topo, profile) == pytest.approx(1e-5)  # flat below
    assert cost.predict(native, 200_000, topo, profile) == pytest.approx(2e-3)  # linear above


def test_native_without_measurements_is_the_best_of_its_algorithms():
    topo = Topology.from_layout(8, 0, ranks_per_node=4)
    span = Span(8, 4, INTRA, INTER)
    work = Work(ROUND, 1, "uint8", 0.0)
    for n in (8, 1 << 16, 1 << 24):
        expected = min(formula("recdoubling")(n, span, work), formula("rabenseifner")(n, span, work),
                       formula("ring")(n, span, work))
        assert cost.predict(PlanShape("native"), n, topo, ROUND) == pytest.approx(expected)


def test_small_messages_favour_few_steps_large_ones_bandwidth():
    one_node = Topology.from_layout(8, 0)
    profile = Profile(INTRA, INTER, Rate(1e9), 20e-6, 0.0, ROUND.codecs)
    small = {p.name: t for t, p in cost.rank_plans(64, one_node, profile)}
    assert small["recdoubling"] < small["ring"]
    large = {p.name: t for t, p in cost.rank_plans(64 << 20, one_node, profile)}
    assert large["ring"] < large["recdoubling"] and large["rabenseifner"] < large["tree"]


# ----------------------------------------------------------------------------- plans

def names(plans):
    return {str(p) for p in plans}


def test_lossless_plans_only_without_a_codec():
    plans = cost.candidate_plans(Topology.from_layout(4, 0, ranks_per_node=2))
    assert all(p.inter_codec is None and p.intra_codec is None for p in plans)
    inners = {s.name for s in flat()}
    assert inners | {f"hierarchical:{inner}" for inner in inners} == names(plans)
    assert not any(p.algorithm == "torus" for p in plans)  # the same as hierarchical here


def test_raw_value_schedules_take_any_op():
    topo = Topology.from_layout(4, 0)
    assert "twophase" in names(cost.candidate_plans(topo, dtype="int32"))
    assert "allgather" in names(cost.candidate_plans(topo, op="max"))
    assert names(cost.candidate_plans(topo, codec="int8", dtype="int64")) == names(
        cost.candidate_plans(topo, dtype="int64"))


@pytest.mark.parametrize("codec", ["int8", "randomk:ratio=0.01", "threshold:tau=2.5"])
def test_codec_placements_follow_accepting_schedules(codec):
    plans = cost.candidate_plans(Topology.from_layout(4, 0, ranks_per_node=2), codec=codec)
    spec = cost.codec_spec(codec)
    carriers = set(accepting(get_codec(codec)))
    assert {p.algorithm for p in plans if p.inter_codec == spec and p.inner is None} == carriers
    assert {p.inner for p in plans if p.inter_codec == spec and p.algorithm == "hierarchical"} == carriers


def test_what_carries_a_codec_follows_each_schedules_properties():
    ring, allgather, twophase = SCHEDULES["ring"], SCHEDULES["allgather"], SCHEDULES["twophase"]
    assert ring.accepts(INT8) and twophase.accepts(INT8)
    assert not ring.accepts(get_codec("randomk:ratio=0.01"))  # rescaling: no per-hop schedule
    assert twophase.accepts(get_codec("randomk:ratio=0.01"))
    assert allgather.accepts(get_codec("threshold:tau=2.5"))  # variable-size payloads
    assert not twophase.accepts(get_codec("threshold:tau=2.5"))


def test_one_rank_has_only_native():
    assert cost.candidate_plans(Topology.from_layout(1, 0), codec="int8") == [PlanShape("native")]


def test_uneven_nodes_have_no_hierarchical_plan():
    plans = cost.candidate_plans(Topology.from_layout(6, 0, ranks_per_node=4))
    assert not any(p.algorithm == "hierarchical" for p in plans)
    assert any(p.algorithm == "torus" for p in plans)  # a 2x3 grid


def test_ranking_is_the_same_on_every_rank_of_an_uneven_topology():
    rankings = [cost.rank_plans(1 << 20, Topology.from_layout(6, r, ranks_per_node=4),
                                codec="int4") for r in range(6)]
    assert all(r == rankings[0] for r in rankings)
    times = [t for t, _ in rankings[0]]
    assert times == sorted(times) and all(math.isfinite(t) and t > 0 for t in times)


def test_plan_shape_names():
    plan = PlanShape("hierarchical", "ring", None, "int8")
    assert plan.name == "hierarchical:ring" and str(plan) == "hierarchical:ring + int8"
    assert str(PlanShape("ring")) == "ring"


def test_codec_spec_is_short_and_round_trips():
    for spec in ("int8", "int4:block=128", "topk:ratio=0.01", "feedback:sign"):
        assert cost.codec_spec(spec) == spec
        assert get_codec(cost.codec_spec(get_codec(spec))) == get_codec(spec)
    assert cost.codec_spec({"id": "int8", "block": 256}) == "int8"


# --------------------------------------------------------------------------- profiles

def test_profile_json_round_trip(tmp_path, zipcoll_env):
    path = tmp_path / "profile.json"
    ROUND.save(str(path))
    assert cost.Profile.from_dict(json.loads(path.read_text())) == ROUND
    zipcoll_env(**{cost.PROFILE_ENV: str(path)})
    loaded = cost.load_profile()
    assert loaded.intra == INTRA and loaded.native == ROUND.native and loaded.source == str(path)
    zipcoll_env(**{cost.PROFILE_ENV: None})
    assert cost.load_profile() is DEFAULT_PROFILE


def test_unknown_codec_speed_falls_back_to_the_defaults():
    assert ROUND.codec_speed(get_codec("sign")) == cost.DEFAULT_CODECS["sign"]
    assert ROUND.codec_speed(get_codec("feedback:int8")) == ROUND.codecs["int8"]


def test_shape_reads_no_rank():
    shapes = {Shape.of(Topology.from_layout(5, r, ranks_per_node=2)) for r in range(5)}
    assert shapes == {Shape(5, 3, 2)}


# --------------------------------------------------------------------------- choosing

def test_selector_prices_each_bucket_once_at_its_middle():
    selector = cost.Selector(ROUND)
    topo = Topology.from_layout(4, 2, ranks_per_node=2)
    first = selector.choose(1000, topo, "int8")
    assert selector.choose(1023, topo, "int8") is first  # same bucket: [512, 1024)
    assert first == cost.choose(cost.bucket_size(cost.size_bucket(1000)), topo, "int8", ROUND)
    assert cost.bucket_size(cost.size_bucket(1000)) == int(2 ** 9.5)
    assert set(selector._decided) >= {(10, np.dtype("float32"), True, "int8", Shape(4, 2, 2),
                                       True)}


@pytest.mark.parametrize("layout", [(4, 4), (4, 2), (3, 1)])
@pytest.mark.parametrize("nbytes", [8, 1 << 20])
def test_without_native_no_plan_uses_the_mpi_librarys_op(layout, nbytes):
    """Where the MPI library's op differs from zipcoll's (int16 SUM, float MAX), auto must
    pick a plan of zipcoll's own: neither flat native nor a native inter level."""
    topo = Topology.from_layout(layout[0], 0, ranks_per_node=layout[1])
    for dtype, op in (("int16", "sum"), ("float32", "max")):
        ranked = cost.rank_plans(nbytes, topo, DEFAULT_PROFILE, None, dtype, op, native=False)
        assert ranked and all("native" not in str(plan) for _, plan in ranked), ranked
        selector = cost.Selector(DEFAULT_PROFILE)
        assert selector.choose(nbytes, topo, None, dtype, op, native=False) == ranked[0][1]
        assert "native" not in str(selector.choose(nbytes, topo, None, dtype, op, False))
    assert cost.choose(8, topo, None, DEFAULT_PROFILE, "int16", "sum") == PlanShape("native")


def test_ring_over_nodes_goes_at_the_slower_link():
    slow_inside = Span(8, 4, Link(1e-6, 1e-8), Link(1e-6, 1e-9))  # e.g. PCIe without P2P
    assert formula("ring")(N, slow_inside, WORK) == pytest.approx(14 * (1e-6 + 5e5 * 1e-8) + 7 * 5e-4)


# -------------------------------------------------------------------------- simulator

def test_simulated_iteration():
    from zipcoll.bench import simulate as sim

    assert sim.buckets((130 << 20)) == [64 << 20, 64 << 20, 2 << 20]
    shape = sim.cluster(32, 8)
    profile = sim.gpu_profile("ib100")
    ring = PlanShape("ring")
    it = sim.iteration(25.6e6, shape, profile, 0.25, ring)
    comm = sum(cost.predict(ring, b, shape, profile) for b in sim.buckets(25.6e6 * 4))
    assert it.communication == pytest.approx(comm)
    assert it.efficiency == pytest.approx(0.25 / (0.25 + comm))
    hidden = sim.iteration(25.6e6, shape, profile, 0.25, ring, overlap=1.0)
    assert hidden.efficiency == 1.0  # all of it behind compute


def test_simulator_against_shi_with_host_staged_pcie():
    """The committed table's claim: 8 x 4 GPUs without P2P lands within 15 points."""
    from zipcoll.bench import simulate as sim

    for name, params, batch, single, published in sim.SHI:
        rows = sim.simulate(params, 32, "ib100", batch / single, None, 4, "pcie-host")
        assert abs(rows["baseline (NCCL ring)"].efficiency - published / (32 * single)) < 0.15, name


def test_calibration_fit_recovers_a_line_and_ignores_a_slow_small_message():
    from zipcoll.bench.calibrate import fit_line, two_point_rate

    sizes = [8, 1 << 10, 1 << 14, 1 << 20, 1 << 22, 1 << 24]
    line = [20e-6 + n * 1e-9 for n in sizes]
    assert fit_line(sizes, line) == pytest.approx((20e-6, 1e-9))
    noisy = list(line)
    noisy[0] = 700e-6  # one small message that waited on something else
    assert fit_line(sizes, noisy) == pytest.approx((20e-6, 1e-9))
    rate = two_point_rate((1000, 11000), [2e-6, 12e-6])  # 1 ns/byte + 1 us
    assert (rate.bytes_per_s, rate.overhead) == pytest.approx((1e9, 1e-6))


def test_mean_counts_as_a_sum():
    topo = Topology.from_layout(4, 0)
    assert names(cost.candidate_plans(topo, op="mean")) == names(cost.candidate_plans(topo))
    from mpi4py import MPI
    assert names(cost.candidate_plans(topo, op=MPI.SUM)) == names(cost.candidate_plans(topo))
    assert "int8" not in str(names(cost.candidate_plans(topo, codec="int8", op=MPI.MAX)))
    assert names(cost.candidate_plans(topo, codec="int8", op="mean")) == names(
        cost.candidate_plans(topo, codec="int8"))


def test_raw_value_twophase_and_allgather_without_a_codec():
    # twophase: 2 all-to-alls of 1e6 B chunks to 3 neighbours, 3 reductions of a chunk
    assert formula("twophase")(N, ONE_NODE, WORK) == pytest.approx(2 * 3 * 1.001e-3 + 3e-3)
    # allgather: the whole 4e6 B to 3 neighbours, 3 reductions of the whole vector
    assert formula("allgather")(N, ONE_NODE, WORK) == pytest.approx(3 * 4.001e-3 + 12e-3)


def test_simulate_command(capsys):
    from zipcoll.bench import simulate as sim

    assert sim.main(["--shi", "--gpus-per-node", "4", "--intra", "pcie-host"]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name, *_ in sim.SHI) and "23.9%" in table
    assert sim.main(["--params", "25.6M", "--gpus", "16", "--compute-ms", "250", "--codec", "int8"]) == 0
    out = capsys.readouterr().out
    assert "2 nodes of 8" in out and "best with int8" in out


def test_measured_plans_price_their_layout_only():
    topo = Topology(4, 0, (0, 0, 1, 1))
    slow_native = {"2x2": {"native": ((8, 1.0), (1 << 20, 2.0)), "ring": ((8, 1e-3), (1 << 20, 2e-3))}}
    profile = cost.Profile(**{**DEFAULT_PROFILE.__dict__, "plans": slow_native})
    assert cost.predict(PlanShape("ring"), 1 << 10, topo, profile) == pytest.approx(
        math.exp(np.interp(math.log(1 << 10), [math.log(8), math.log(1 << 20)],
                           [math.log(1e-3), math.log(2e-3)])))
    assert cost.predict(PlanShape("native"), 1 << 20, topo, profile) == 2.0
    assert cost.choose(1 << 10, topo, None, profile) != PlanShape("native")
    # another layout, and plans not measured, keep the formulas
    assert cost.predict(PlanShape("ring"), 1 << 10, Topology(4, 0, (0, 1, 2, 3)), profile) == \
        cost.predict(PlanShape("ring"), 1 << 10, Topology(4, 0, (0, 1, 2, 3)), DEFAULT_PROFILE)
    assert cost.predict(PlanShape("tree"), 1 << 10, topo, profile) == \
        cost.predict(PlanShape("tree"), 1 << 10, topo, DEFAULT_PROFILE)
    assert cost.Profile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_bounds_wire_is_the_plans_bytes_on_the_link_and_codec_its_work():
    two_nodes = Topology(2, 0, (0, 1))
    link = 1e9 / 8  # 1 Gbit/s in bytes a second
    speed = CodecSpeed(Rate(1e9), Rate(2e9), Rate(2e9))
    n = 64 << 20
    wire, codec = cost.bounds(PlanShape("ring"), n, two_nodes, link, {})
    assert (wire, codec) == (pytest.approx(n / link), 0.0)  # each node sends 2 (p-1)/p of n
    wire, codec = cost.bounds(PlanShape("ring", None, None, "int8"), n, two_nodes, link,
                              {"int8": speed}, ranks_per_machine=2)
    assert wire == pytest.approx(get_codec("int8").wire_bytes(n // 4) / link, rel=0.01)
    # per rank (ring's docstring, p = 2): encode + decode_add a half (reduce-scatter), encode
    # the owned half, decode both halves of the result (allgather)
    half = n / 2
    per_rank = half / 1e9 + half / 2e9 + half / 1e9 + 2 * half / 2e9
    assert codec == pytest.approx(2 * per_rank)
    assert cost.bounds(PlanShape("ring"), n, Topology(2, 0, (0, 0)), link, {}) == (0.0, 0.0)
    # one node, no link rate (the suite's 1x4): no wire bound, the codec's work still counts
    one_node = cost.bounds(PlanShape("ring", None, None, "int8"), n, Topology(2, 0, (0, 0)),
                           0.0, {"int8": speed}, ranks_per_machine=2)
    assert one_node == (0.0, pytest.approx(2 * per_rank))


def test_calibrated_plan_times_never_fall_with_size():
    from zipcoll.bench.calibrate import rising
    assert rising([(8, 3.0), (16, 1.0), (32, 2.0), (64, 1.5), (128, 4.0)]) == \
        [(8, 1.0), (16, 1.0), (32, 1.5), (64, 1.5), (128, 4.0)]


def test_flat_schedules_across_nodes_are_priced_in_their_slices():
    from zipcoll.collectives.slicing import flat_slices
    work = cost.Work(DEFAULT_PROFILE, 4, "float32", DEFAULT_PROFILE.step_overhead)
    n = 64 << 20
    for nodes, sliced in (((0, 1, 2, 3), True), ((0, 0, 0, 0), False)):
        topo = Topology(4, 0, nodes)
        shape = cost.Shape.of(topo)
        whole = formula("ring")(n, cost.plans.flat_span(shape, DEFAULT_PROFILE), work)
        priced = cost.predict(PlanShape("ring"), n, topo) - DEFAULT_PROFILE.call_overhead \
            - cost.plans.native(64, shape, DEFAULT_PROFILE)
        assert (flat_slices(n, 4, shape.nodes) > 1) == sliced
        # overlap hides the reductions behind the link, never the link's own time
        wire = cost.bounds(PlanShape("ring"), n, topo, 1 / DEFAULT_PROFILE.inter.beta, {})[0]
        assert (wire < priced < whole) if sliced else priced == pytest.approx(whole)


def test_selector_answers_a_repeated_call_alike_and_forgets_old_objects():
    selector = cost.Selector(DEFAULT_PROFILE)
    topo = Topology(4, 0, (0, 0, 1, 1))
    codec = get_codec("int8")
    first = selector.choose(1 << 20, topo, codec, "float32", "sum")
    assert selector.choose(1 << 20, topo, codec, "float32", "sum") is first
    assert selector.choose(1 << 20, topo, get_codec("int8"), "float32", "sum") == first
    for _ in range(2 * cost.selector.RECENT_CALLS):  # a new codec object every call
        selector.choose(1 << 20, topo, get_codec("qsgd"), "float32", "sum")
    assert len(selector._recent) <= cost.selector.RECENT_CALLS


# ------------------------------------------------- every schedule owns its cost

LAYOUTS = [Topology.from_layout(4, 0), Topology.from_layout(8, 0, ranks_per_node=4),
           Topology.from_layout(6, 0, ranks_per_node=4), Topology.from_layout(3, 0, ranks_per_node=1)]


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_schedule_has_a_cost_and_auto_can_pick_it(name):
    """A flat schedule registers its formula; a two-level one is priced from its split.
    Where a profile measured it fastest, auto runs it (the selector's path, as calls go)."""
    schedule = SCHEDULES[name]
    if schedule.two_level:
        assert schedule.split is not None and schedule.cost is None
        assert all(cost.levels(schedule, t) is not None for t in LAYOUTS
                   if name in cost.two_level_schedules(t))
        found = [t for t in LAYOUTS if name in cost.two_level_schedules(t)]
        assert found, f"{name} is priced on none of the layouts"
    else:
        assert callable(schedule.cost), f"{name} registers no cost formula"
        for span in (ONE_NODE, TWO_BY_TWO, Span(3, 1, INTRA, INTER)):
            for codec in (None, INT8) if schedule.accepts(INT8) else (None,):
                seconds = schedule.cost(N, span, WORK, codec)
                assert math.isfinite(seconds) and seconds > 0, (name, span, codec)
        found = LAYOUTS
    for topo in found:
        plans = cost.candidate_plans(topo, codec="int8" if schedule.codecs else None)
        mine = [p for p in plans if name in (p.algorithm, p.inner)]
        assert mine, f"{name} is no candidate on {topo.size} ranks"
        for plan in mine:
            assert math.isfinite(cost.predict(plan, 1 << 20, topo, ROUND))
        shape = Shape.of(topo)
        measured = {shape.label: {str(plan): ((8, 1e-9), (1 << 30, 1e-3))}
                    for plan in mine[:1]}
        fastest = Profile(**{**ROUND.__dict__, "plans": measured})
        selector = cost.Selector(fastest)
        assert selector.choose(1 << 20, topo, "int8" if schedule.codecs else None) == mine[0]


def test_a_flat_schedule_without_a_cost_is_left_out_of_auto(monkeypatch):
    """A schedule registered without its formula fails the test above, not users' calls."""
    from dataclasses import replace

    costless = replace(SCHEDULES["ring"], name="costless", cost=None)
    monkeypatch.setitem(SCHEDULES._schedules, "costless", costless)
    topo = Topology.from_layout(4, 0)
    assert "costless" in SCHEDULES
    assert not any("costless" in (p.algorithm, p.inner) for p in cost.candidate_plans(topo, codec="int8"))
    assert cost.choose(1 << 20, topo, "int8", DEFAULT_PROFILE).algorithm != "costless"


def test_bruck_needs_no_fold_where_p_is_not_a_power_of_two():
    small = 64.0
    three = Span(3, 3, INTRA, INTER)
    assert formula("bruck")(small, three, WORK) < formula("recdoubling")(small, three, WORK)
    # 2 steps of 1 us + 64 ns, 4 x 64 B reduced or copied
    assert formula("bruck")(small, three, WORK) == pytest.approx(2 * (1e-6 + 64e-9) + 4 * 64e-9)
    four = Span(4, 4, INTRA, INTER)  # 3 whole vectors received where recdoubling takes 2
    assert formula("bruck")(N, four, WORK) > formula("recdoubling")(N, four, WORK)

"""The reduce-scatter / all-gather schedules' costs (no MPI): by hand on a round profile,
and the shape every formula must have (zero on one rank, growing with the size)."""
import pytest

from zipcoll import get_codec
from zipcoll.collectives.planning import CodecSpeed, Link, Profile, Rate, Span, Work
from zipcoll.collectives.registry import SHARDED

INTRA, INTER = Link(1e-6, 1e-9), Link(10e-6, 1e-8)
ROUND = Profile(INTRA, INTER, Rate(1e9), step_overhead=0.0, call_overhead=0.0,
                codecs={"int8": CodecSpeed(Rate(1e9), Rate(2e9), Rate(1e9))})
WORK = Work(ROUND, 4, "float32", 0.0)
ONE_NODE = Span(4, 4, INTRA, INTER)
N = 4e6  # bytes: 1e6 float32
INT8 = get_codec("int8")
FLAT = [name for name, s in SHARDED.items() if not s.two_level]


def test_ring_reduce_scatter_by_hand():
    # p-1 = 3 steps of n/p = 1e6 B (1 us + 1 ms each), each reduced (1 ms)
    assert SHARDED["ring"].cost_rs(N, ONE_NODE, WORK) == pytest.approx(3 * 1.001e-3 + 3e-3)


def test_ring_allgather_by_hand():
    assert SHARDED["ring"].cost_ag(N, ONE_NODE, WORK) == pytest.approx(3 * 1.001e-3)


def test_halving_reduce_scatter_by_hand():
    # q = 4: steps of n/2 and n/4 bytes, each reduced: (1us + 2ms + 2ms) + (1us + 1ms + 1ms)
    assert SHARDED["halving"].cost_rs(N, ONE_NODE, WORK) == pytest.approx(6.002e-3)


def test_halving_pays_the_fold_on_three_ranks():
    three = Span(3, 3, INTRA, INTER)
    assert SHARDED["halving"].cost_rs(N, three, WORK) > SHARDED["halving"].cost_rs(
        N, Span(2, 2, INTRA, INTER), WORK)


@pytest.mark.parametrize("name", FLAT)
@pytest.mark.parametrize("kind", ["cost_rs", "cost_ag"])
def test_every_flat_formula(name, kind):
    cost = getattr(SHARDED[name], kind)
    assert cost is not None, f"{name} has no {kind}"
    assert cost(N, Span(1, 1, INTRA, INTER), WORK) == 0.0 or SHARDED[name].native
    small, large = cost(4e3, ONE_NODE, WORK), cost(N, ONE_NODE, WORK)
    assert 0 < small < large


@pytest.mark.parametrize("kind", ["reduce-scatter", "all-gather"])
def test_a_codec_cuts_the_wire_across_slow_links(kind):
    across = Span(4, 1, INTRA, INTER)
    attr = "cost_rs" if kind == "reduce-scatter" else "cost_ag"
    for name in FLAT:
        schedule = SHARDED[name]
        if schedule.accepts(INT8, kind):
            cost = getattr(schedule, attr)
            assert cost(64e6, across, WORK, INT8) < cost(64e6, across, WORK), name


def test_the_mpi_librarys_reduce_scatter_is_lossless_only():
    assert not SHARDED["native"].accepts(INT8, "reduce-scatter")
    assert SHARDED["native"].accepts(get_codec("threshold:tau=1"), "all-gather")
    assert not SHARDED["ring"].accepts(get_codec("threshold:tau=1"), "all-gather")


def test_two_level_prices_both_levels():
    rows, columns = Span(2, 2, INTRA, INTER), Span(2, 1, INTRA, INTER.shared(2))
    hier = SHARDED["hierarchical"]
    lossless = hier.cost_rs(N, rows, columns, WORK, None, SHARDED["ring"])
    assert lossless > SHARDED["ring"].cost_rs(N, rows, WORK)  # the node level alone
    assert hier.cost_ag(64e6, rows, columns, WORK, INT8, SHARDED["ring"]) < hier.cost_ag(
        64e6, rows, columns, WORK, None, SHARDED["ring"])


def test_explain_ranks_the_sharded_plans_auto_prices():
    """zipcoll.explain(collective=...) with a topology and a profile (nothing collective):
    every plan auto may run, cheapest first, the MPI library's own reduce-scatter only
    without a codec, two-level plans where nodes hold several ranks."""
    import zipcoll
    from zipcoll.collectives.planning import Shape
    from zipcoll.collectives.planning.sharded import predict_sharded, sharded_plans

    shape = Shape(4, 2, 2)
    for collective, kind in (("reduce_scatter", "reduce-scatter"), ("allgather", "all-gather")):
        for codec in (None, "int8"):
            ranking = zipcoll.explain(64 << 20, codec=codec, topology=shape, profile=ROUND,
                                      collective=collective)
            flat = None if codec is None else get_codec(codec)
            plans = sharded_plans(kind, shape, flat)
            assert len(ranking) == len(plans)
            assert [s for s, _ in ranking] == sorted(s for s, _ in ranking)
            assert min(predict_sharded(kind, s, i, 64 << 20, shape, ROUND, flat)
                       for s, i in plans) == ranking[0][0]
            assert any(p.algorithm == "hierarchical" for _, p in ranking)
            natives = [p for _, p in ranking if p.algorithm == "native"]
            assert bool(natives) == (codec is None or kind == "all-gather")
            assert str(ranking).startswith(f"# {kind} of {64 << 20} bytes on 2 nodes x 2 ranks")
    with pytest.raises(ValueError, match="unknown collective"):
        zipcoll.explain(1 << 20, topology=shape, profile=ROUND, collective="alltoall")


def test_slices_hide_the_codec_behind_a_slow_link():
    """Across 1 Gbit/s, a large int8 reduce-scatter in slices is priced under the link
    time plus all of its codec work, as it runs (the codec overlaps the wire)."""
    from zipcoll.collectives.planning import Shape
    from zipcoll.collectives.planning.sharded import predict_sharded

    slow = Profile(INTRA, Link(50e-6, 8 / 1e9), Rate(10e9), step_overhead=0.0,
                   call_overhead=0.0, codecs={"int8": CodecSpeed(Rate(1e9), Rate(2e9),
                                                                 Rate(2e9))})
    two = Span(2, 1, INTRA, slow.inter)
    work = Work(slow, 4, "float32", 0.0)
    ring = SHARDED["ring"]
    unsliced = ring.cost_rs(64e6, two, work, INT8)
    sliced = predict_sharded("reduce-scatter", ring, None, 64e6, Shape(2, 2, 1), slow, INT8)
    assert sliced < unsliced


"""The cost model of a low-rank (PowerSGD) step, and `zipcoll-bench simulate --codec powersgd`."""
import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mpi4py import MPI

from zipcoll import lowrank
from zipcoll.bench import calibrate as cal
from zipcoll.bench import simulate as sim
from zipcoll.collectives.planning import DEFAULT_PROFILE, Link, PlanShape, Profile, Shape, predict
from zipcoll.collectives.planning.lowrank import compressible, lowrank_cost, matrix_shape
from zipcoll.collectives.planning.profile import DEFAULT_LOWRANK

TWO_NODES = Shape(2, 2, 1)
SLOW = dataclasses.replace(DEFAULT_PROFILE, inter=Link(100e-6, 1 / 117e6))  # 1 Gbit/s TCP

shapes = st.lists(st.one_of(
    st.tuples(st.integers(0, 40)),  # biases
    st.tuples(st.integers(0, 60), st.integers(1, 60)),  # weights, some too small to gain
    st.tuples(st.integers(1, 8), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3)),  # conv
), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(shapes=shapes, rank=st.integers(1, 9), rate=st.sampled_from([0, 1, 2, 4]))
def test_what_the_model_sends_is_what_lowrank_sends(shapes, rank, rate):
    """Elements given and sent as `zipcoll.lowrank` counts them in a real call (one rank)."""
    state = lowrank.PowerSGDState(rank=rank, min_compression_rate=rate, comm=MPI.COMM_SELF,
                                  algorithm="ring")
    arrays = [np.ones(s, np.float32) for s in shapes]
    lowrank.allreduce(state, arrays)
    _, given_, sent = state.compression_stats()
    cost = lowrank_cost(shapes, rank, Shape(1, 1, 1), DEFAULT_PROFILE, min_compression_rate=rate)
    assert (cost.elements, cost.sent) == (given_, sent)


@pytest.mark.parametrize("rank", [0, -1, 2.5, True])
def test_a_rank_below_one_is_refused(rank):
    with pytest.raises(ValueError, match="positive int"):
        lowrank_cost([(64, 64)], rank, TWO_NODES, SLOW)


def test_a_matrix_sends_r_times_n_plus_m():
    cost = lowrank_cost([(4096, 1024), (1024,)], 4, TWO_NODES, SLOW)
    assert cost.sent == 4 * (4096 + 1024) + 1024 and cost.elements == 4096 * 1024 + 1024
    assert matrix_shape((64, 3, 7, 7)) == (64, 147) and matrix_shape((5,)) is None
    assert matrix_shape((0, 3)) is None
    assert compressible(4096, 1024, 4, 2) and not compressible(8, 8, 4, 2)


def test_two_dependent_rounds_priced_as_the_planner_prices_all_reduces():
    """P (with the dense tensors beside it), then Q: each as `predict` prices it, added."""
    plan = PlanShape("ring", inter_codec="fp16")
    cost = lowrank_cost([(4096, 4096), (4096,)], 4, TWO_NODES, SLOW, plan)
    assert cost.p_round == pytest.approx(predict(plan, 4096 * 4 * 4, TWO_NODES, SLOW)
                                         + predict(PlanShape("ring"), 4096 * 4, TWO_NODES, SLOW))
    assert cost.q_round == pytest.approx(predict(plan, 4096 * 4 * 4, TWO_NODES, SLOW))
    assert cost.total == pytest.approx(cost.compute + cost.p_round + cost.q_round)


def test_the_local_work():
    """Three products and, with error feedback, two passes over each matrix; QR's share
    grows with the rank; only dense tensors: no local work, one round."""
    big = (4096, 4096)
    nbytes = 4096 * 4096 * 4
    speed = DEFAULT_LOWRANK
    with_ef = lowrank_cost([big], 4, TWO_NODES, SLOW)
    without = lowrank_cost([big], 4, TWO_NODES, SLOW, error_feedback=False)
    assert with_ef.compute - without.compute == pytest.approx(2 * nbytes / speed.elementwise_bytes_per_s)
    products = 3 * speed.product.time(nbytes, 2.0 * 4096 * 4096 * 4)
    orth = 2 * speed.orthogonalize(4096, 4, 4)
    assert without.compute == pytest.approx(products + orth)
    assert lowrank_cost([big], 64, TWO_NODES, SLOW).compute > with_ef.compute
    dense = lowrank_cost([(100,), (3, 3)], 4, TWO_NODES, SLOW)
    assert dense.compute == 0 and dense.q_round == 0 and dense.sent == 109


def test_a_codec_on_the_factors_is_cheaper_on_a_slow_network():
    layers = [(8192, 8192)] * 4
    plain = lowrank_cost(layers, 32, TWO_NODES, SLOW)
    fp16 = lowrank_cost(layers, 32, TWO_NODES, SLOW, PlanShape("ring", inter_codec="fp16"))
    assert fp16.p_round + fp16.q_round < plain.p_round + plain.q_round
    assert fp16.compute == plain.compute


def test_the_profile_keeps_the_lowrank_speeds():
    measured = dataclasses.replace(DEFAULT_LOWRANK, elementwise_bytes_per_s=1.5e9)
    profile = dataclasses.replace(DEFAULT_PROFILE, lowrank=measured)
    assert Profile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    older = DEFAULT_PROFILE.to_dict()
    del older["lowrank"]  # a profile saved before the low-rank speeds were measured
    assert Profile.from_dict(older).lowrank == DEFAULT_LOWRANK


def test_calibrate_measures_the_lowrank_speeds():
    speed = cal.measure_lowrank(MPI.COMM_WORLD, 1, side=256)
    values = [speed.product.bytes_per_s, speed.product.flops_per_s, speed.elementwise_bytes_per_s,
              speed.orthogonalize_bytes_per_s]
    assert all(math.isfinite(v) and v > 0 for v in values), speed


def test_the_models_have_their_published_sizes():
    """torchvision's ResNet-50 and Hugging Face's BertModel (with its pooler) count these."""
    assert sim.parameters(sim.MODELS["resnet50"]) == 25_557_032
    assert sim.parameters(sim.MODELS["bert-base"]) == 109_482_240
    assert sim.parameters(sim.MODELS["bert-large"]) == 335_141_888


def test_simulated_powersgd():
    rows = sim.simulate(0, 32, "eth10", 0.301, "powersgd:rank=4", 4, "pcie", model="bert-base")
    low_rank = rows["best with powersgd:rank=4"]
    assert low_rank.plan.startswith("powersgd r4 (")
    assert low_rank.efficiency > rows["best lossless"].efficiency > 0
    # the same buckets, priced one by one, add up to the iteration's communication
    shape, profile = sim.cluster(32, 4), sim.gpu_profile("eth10", "pcie")
    expected = 0.0
    for bucket in sim.tensor_buckets(sim.MODELS["bert-base"]):
        sent = lowrank_cost(bucket, 4, shape, profile).sent
        expected += lowrank_cost(bucket, 4, shape, profile,
                                 sim.cheapest(4 * sent, shape, profile, None)).total
    assert low_rank.communication == pytest.approx(expected)
    assert sum(sum(math.prod(s) for s in b) for b in sim.tensor_buckets(sim.MODELS["resnet50"])) \
        == 25_557_032
    with pytest.raises(ValueError, match="--model"):
        sim.simulate(25.6e6, 32, "ib100", 0.25, "powersgd:rank=4")
    with pytest.raises(ValueError, match="rank= and pq="):
        sim.powersgd_setting("powersgd:rank=4,ratio=2")


def test_simulate_command_prices_powersgd(capsys):
    assert sim.main(["--shi", "--codec", "powersgd:rank=4,pq=fp16"]) == 0
    table = capsys.readouterr().out
    assert table.count("powersgd r4 (") == 3
    assert sim.main(["--model", "resnet50", "--gpus", "16", "--compute-ms", "250",
                     "--codec", "powersgd:rank=2"]) == 0
    assert "best with powersgd:rank=2" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sim.main(["--params", "25M", "--gpus", "16", "--compute-ms", "250", "--codec", "powersgd"])
    with pytest.raises(SystemExit):
        sim.main(["--shi", "--codec", "powersgd:rank=0"])

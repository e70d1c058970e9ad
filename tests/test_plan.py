"""make_plan's local work (no message moves): codec specs parsed once where that is safe."""
import numpy as np
from mpi4py import MPI

from zipcoll.collectives.plan import _codec, make_plan
from zipcoll.topologies import Topology
from zipcoll.collectives.planning import DEFAULT_PROFILE, Selector

TWO_NODES = Topology(4, 0, (0, 0, 1, 1))


def plan_of(algorithm, codec):
    x = np.ones(1024, np.float32)
    return make_plan(x, np.empty_like(x), MPI.SUM, algorithm, codec, None, TWO_NODES,
                     Selector(DEFAULT_PROFILE))


def test_a_stateless_codec_spec_is_parsed_once():
    first, second = plan_of("ring", "int8"), plan_of("ring", "int8:block=128")
    assert plan_of("ring", "int8").codec is first.codec
    assert second.codec.block == 128 and second.codec is not first.codec


def test_a_stochastic_codec_gets_its_own_random_stream_every_call():
    for spec in ("qsgd", "int8:stochastic=true", "terngrad"):
        assert plan_of("ring", spec).codec is not plan_of("ring", spec).codec


def test_error_feedback_is_never_shared_between_calls():
    # its residuals are state: one object per call, as before (the key says whose they are)
    assert _codec("feedback:int8") is not _codec("feedback:int8")

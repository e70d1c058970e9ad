"""Compressed all-reduce (codec=...): error bounds, identity across ranks, unbiasedness, errors.

Error bounds. Elementwise, with S = sum over ranks of |x_r| (float64) and "exact" the
float64 sum of every rank's input, a result must satisfy |got - exact| <= bound, where:

* One encode of a vector v errs by at most B(M) per element, for any v with |v| <= M
  elementwise, from the codec's own `error_bound`:
  - absmax block quantizers (int8/int4/int2, stochastic int8, terngrad): a schedule
    encodes chunks, whose blocks need not line up with the blocks of the whole vector;
    every block holding element i lies within block-1 elements of i, so
    B(M) = codec.error_bound(window_max(M, block - 1)): the block max it takes is >= the
    true one. `sign` (mean-|x| scale): radius 2*block - 1, so that every element of
    the block `error_bound` averages over is >= the max over the true block.
  - casts (fp16, bf16): elementwise and monotone in |x|: B(M) = codec.error_bound(M).
  - topk: an element may be left out: B(M) = M. threshold: left out only if below tau:
    B(M) = min(M, tau). (float32 values of float32 data are exact when sent.)
* Errors add up along the path, and each encoded value carries the errors made before
  it, so after k encodes the error is at most E_k = E_{k-1} + B(S + E_{k-1}), E_0 = 0.
  The number of encodes whose errors reach one element (q ranks in the schedule):
  ring q-1 reduce-scatter + 1 allgather = q (0 for q = 1); tree and dbtree: every
  non-root sends its partial sum up (q-1) + the root's encode for the broadcast = q
  (NOT depth + 1: sibling subtrees' errors add at their parent); twophase q-1 + 1 = q
  (0 for q = 1); allgather q. Two-level (L ranks per node or grid row, N nodes or
  columns): the inter schedule's n(N) encodes of the inter codec, plus with an intra
  codec N*(L-1) reduce-scatter encodes (all nodes' shards meet at level 2) and one
  allgather encode (none when L = 1).
* `allgather` encodes each rank's own input whole: bound = sum_r error_bound(x_r) exactly.
* Float rounding of the sums: + (p + encodes + 2) * eps(dtype) * (S + E); then x 1.01.

Each bound test also asserts the observed error is > 0 where something lossy was
encoded, and logs max(err/bound). Typical max(err/bound) at 4 ranks, 1001 elements:
int8/int4 0.3-0.6 (allgather 0.5-0.9), fp16/bf16 0.2-0.5, int2 0.1-0.3,
topk ~0.1-0.4, sign ~0.01-0.05 (sign's bound compounds x3 a hop: honest but loose; its
useful check is error feedback, tests/mpi/test_feedback.py).

Stochastic codecs (qsgd, terngrad, stochastic int8, randomk): over T = 40 calls (each
call seeds every encode site differently) R = sqrt(T) rms(mean error) / rms(error) must
be < 2.5: ~1 when unbiased, ~sqrt(T) = 6.3 when biased; biased controls (randomk
unscaled, int8/int4 to nearest) must give R > 4, so the check can fail.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from zipcoll.collectives import SCHEDULES
from zipcoll.collectives.plan import make_plan
from zipcoll.collectives.schedule import chunk_bounds
from zipcoll.collectives.registry import parse
from arrays import all_rank_data, differing_across_ranks, rank_data, window_max, topology_of
from zipcoll.codecs import BF16, FP16, BlockQuantizer, Raw, Sign, Threshold, TopK

pytestmark = pytest.mark.mpi

P = MPI.COMM_WORLD.Get_size()

# One spec per registered codec (minus the `feedback` wrapper: that is key=).
DETERMINISTIC = {"none": "none", "fp16": "fp16", "bf16": "bf16", "int8": "int8",
                 "int4": "int4", "int2": "int2", "sign": "sign", "topk": "topk:ratio=0.1"}
STOCHASTIC = {"qsgd": "qsgd", "terngrad": "terngrad", "int8-stochastic": "int8:stochastic=true",
              "randomk": "randomk:ratio=0.25"}
VARIABLE = {"threshold": "threshold:tau=1.0"}  # any-size payloads: allgather schedules only
ALL_SPECS = {**DETERMINISTIC, **STOCHASTIC, **VARIABLE}
# Codecs whose single-call error is bounded (deterministically) by the model above.
BOUNDED = {k: v for k, v in ALL_SPECS.items() if k not in ("qsgd", "randomk")}

# The flat schedules that carry a codec, from the registry.
FLAT = tuple(name for name, s in SCHEDULES.items() if s.codecs and not s.two_level)


def accepted(algorithm: str, spec: str) -> bool:
    """Whether `algorithm` takes the codec of `spec` (Schedule.accepts): variable-size codecs
    only where payloads may be any size; randomk's 1/ratio rescaling would compound at every
    re-encode of a per-hop schedule. Bare two-level names pick an inter level that takes it."""
    schedule, inner = parse(algorithm)
    codec = zipcoll.get_codec(spec)
    if schedule.two_level:
        return inner is None or inner.accepts(codec)
    return schedule.accepts(codec)



# (label, algorithm, layout)
VARIANTS = [(a, a, None) for a in FLAT] + [
    ("hierarchical", "hierarchical", None), ("hierarchical-2x2", "hierarchical", "2x2nodes"),
    ("torus", "torus", None), ("torus-2x2", "torus", "2x2grid"),
]


def cases(specs):
    out = []
    for label, algorithm, layout in VARIANTS:
        for name, spec in specs.items():
            if not accepted(algorithm, spec):
                continue
            out.append(pytest.param(algorithm, layout, spec, id=f"{label}-{name}"))
    return out


# -- the bound model ----------------------------------------------------------------------

def codec_bound(codec, x: np.ndarray) -> np.ndarray:
    """codec.error_bound(x), with fp16's half subnormal step as a floor: FP16.error_bound
    computes it in float16, where 2**-25 rounds to 0 (see test_fp16_bound_below_2_to_minus_14)."""
    bound = codec.error_bound(x)
    if isinstance(codec, FP16):
        bound = np.maximum(bound, float(np.finfo(np.float16).smallest_subnormal) / 2)
    return bound


def one_encode(codec, m: np.ndarray) -> np.ndarray:
    """B(M): the largest error of one encode of any v with |v| <= m (see module docstring)."""
    if isinstance(codec, Raw):
        return np.zeros_like(m)
    if isinstance(codec, (FP16, BF16)):
        return codec_bound(codec, m)
    if isinstance(codec, Sign):
        return codec.error_bound(window_max(m, 2 * codec.block - 1))
    if isinstance(codec, BlockQuantizer):
        return codec.error_bound(window_max(m, codec.block - 1))
    if isinstance(codec, TopK):
        return m.copy()
    if isinstance(codec, Threshold):
        return np.minimum(m, codec.tau)
    raise AssertionError(f"no bound model for {codec!r}")


def encodes(schedule: str, q: int) -> int:
    """Encodes whose errors reach one element, in a flat schedule over q ranks."""
    if schedule in ("ring", "twophase"):
        return q if q > 1 else 0
    return q  # tree, dbtree (q-1 up + 1 down), allgather (one per rank)


def levels_of(comm, algorithm: str, topology) -> tuple[int, int]:
    """(L, N): ranks a node (grid row) and nodes (columns) of a two-level algorithm."""
    topo = topology or zipcoll.Topology.from_comm(comm)
    if algorithm.startswith("hierarchical"):
        return topo.local_size, topo.num_nodes
    x, y = topo.with_grid().grid
    return x, y


def encode_path(comm, algorithm: str, topology, codec, intra) -> list:
    """The codecs of the encodes on one element's path, in order."""
    kind, _, inner = algorithm.partition(":")
    if kind in FLAT:
        return [codec] * encodes(kind, comm.size)
    per_hop_ok = codec is None or codec.fixed_size and codec.codec_id != "randomk"
    inner = inner or ("ring" if per_hop_ok else "allgather")
    L, N = levels_of(comm, kind, topology)
    path = [intra] * (N * (L - 1)) if intra is not None and L > 1 else []
    path += [codec] * encodes(inner, N) if codec is not None else []
    return path + ([intra] if intra is not None and L > 1 else [])


def error_bound(comm, algorithm, topology, codec, intra, parts, dtype,
                slices: int = 1) -> tuple[np.ndarray, int]:
    """(elementwise bound on |got - exact|, number of encodes) for this call, run in `slices`."""
    stack = np.abs(np.stack(parts).astype(np.float64))
    s = stack.sum(axis=0)
    if algorithm == "allgather":  # each rank's vector encoded once, a slice at a time
        e = sum(np.concatenate([codec_bound(codec, x[lo:hi]) for lo, hi in
                                chunk_bounds(x.size, slices)]) for x in parts)
        n = len(parts)
    else:
        path = encode_path(comm, algorithm, topology, codec, intra)
        e = np.zeros_like(s)
        for c in path:
            e = e + one_encode(c, s + e)
        n = len(path)
    eps = max(np.finfo(dtype).eps, np.finfo(np.float32).eps)
    return (e + (comm.size + n + 2) * eps * (s + e)) * 1.01 + 1e-30, n


def check_bound(comm, x_parts, got, algorithm, topology, spec, dtype, mean=False,
                slices=1) -> list[str]:
    """Problems with `got` against the bound (empty: fine); also error > 0 where lossy."""
    levels = isinstance(spec, dict) and "id" not in spec
    inter = spec.get("inter") if levels else spec
    codec = None if inter is None else zipcoll.get_codec(inter)  # None: a lossless level
    intra = zipcoll.get_codec(spec["intra"]) if levels and spec.get("intra") else None
    exact = np.stack(x_parts).astype(np.float64).sum(axis=0)
    bound, n = error_bound(comm, algorithm, topology, codec, intra, x_parts, dtype, slices)
    if mean:
        exact, bound = exact / comm.size, bound / comm.size * (1 + 1e-6)
    err = np.abs(np.asarray(got, np.float64) - exact)
    problems = []
    if not np.all(np.isfinite(got)):
        problems.append("non-finite result")
    bad = ~(err <= bound)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        problems.append(f"{bad.sum()} of {err.size} beyond the bound ({n} encodes), first "
                        f"[{i}]: err {err[i]:.4g} > bound {bound[i]:.4g}")
    lossy = any(not c.lossless for c in (codec, intra) if c is not None)
    if lossy and n and err.size >= 1000 and not err.max() > 0:
        problems.append(f"error is 0 after {n} lossy encodes: is the codec used at all?")
    return problems


def sizes(comm) -> list[int]:
    return sorted({0, 1, comm.size - 1, 1001})


# -- every (algorithm, codec): within the bound, bit-identical on every rank ---------------

@pytest.mark.parametrize("algorithm,layout,spec", cases(BOUNDED))
def test_error_within_bound(comm, algorithm, layout, spec):
    topology = topology_of(comm, layout)
    problems, results = [], {}
    counts = sizes(comm) + ([65537] if spec == "int8" else [])  # several tree segments
    for count in counts:
        x = rank_data("float32", count, comm.rank)
        sent = x.copy()
        got = zipcoll.allreduce(x, algorithm=algorithm, codec=spec, comm=comm,
                                topology=topology)
        assert got.dtype == np.float32 and got.shape == (count,)
        if not np.array_equal(x, sent):
            problems.append(f"count={count}: sendbuf modified")
        parts = all_rank_data("float32", count, comm.size)
        problems += [f"count={count}: {p}" for p in
                     check_bound(comm, parts, got, algorithm, topology, spec, np.float32)]
        results[f"count={count}"] = got
    problems += [f"{c}: not bit-identical across ranks"
                 for c in differing_across_ranks(comm, results)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "twophase", "allgather", "hierarchical"])
def test_error_within_bound_other_dtypes(comm, algorithm, dtype):
    x = rank_data(dtype, 1001, comm.rank)
    got = zipcoll.allreduce(x, algorithm=algorithm, codec="int8", comm=comm)
    assert got.dtype == np.dtype(dtype)
    parts = all_rank_data(dtype, 1001, comm.size)
    problems = check_bound(comm, parts, got, algorithm, None, "int8", np.dtype(dtype))
    problems += differing_across_ranks(comm, {"result": got})
    assert not problems, "\n".join(problems)


LEVEL_CODECS = {"intra": "fp16", "inter": "int8"}


@pytest.mark.parametrize("algorithm,layout", [
    ("hierarchical", None), ("hierarchical", "2x2nodes"), ("torus", None), ("torus", "2x2grid"),
    ("hierarchical:tree", "2x2nodes"), ("torus:twophase", "2x2grid"),
    ("hierarchical:allgather", "2x2nodes")])
@pytest.mark.parametrize("spec", [LEVEL_CODECS, {"inter": "int4"}, {"intra": "bf16"}, "int8"],
                         ids=["fp16+int8", "inter-int4", "intra-bf16", "plain-int8"])
def test_codec_per_level(comm, algorithm, layout, spec):
    topology = topology_of(comm, layout)
    problems, results = [], {}
    for count in sizes(comm):
        x = rank_data("float32", count, comm.rank)
        got = zipcoll.allreduce(x, algorithm=algorithm, codec=spec, comm=comm, topology=topology)
        parts = all_rank_data("float32", count, comm.size)
        problems += [f"count={count}: {p}" for p in
                     check_bound(comm, parts, got, algorithm, topology, spec, np.float32)]
        results[f"count={count}"] = got
    problems += [f"{c}: not bit-identical" for c in differing_across_ranks(comm, results)]
    assert not problems, "\n".join(problems)


def test_fp16_bound_below_2_to_minus_14(comm):
    """fp16's bound keeps the subnormal half-step 2**-25 (it once rounded to 0 in float16)."""
    x = np.full(8, 1e-6 / comm.size, np.float32)  # the sum, 1e-6, is below fp16's normal range
    got = zipcoll.allreduce(x, algorithm="allgather", codec="fp16", comm=comm)
    exact = np.stack([x] * comm.size).astype(np.float64).sum(0)
    bound = sum(zipcoll.get_codec("fp16").error_bound(x) for _ in range(comm.size))
    assert np.all(np.abs(got - exact) <= bound * 1.01 + (comm.size + 2) * 1.2e-7 * exact)


@pytest.mark.parametrize("spec", [None, "int8"])
def test_two_level_over_dbtree(comm, spec):
    """Pipelined slices around side-by-side trees: an outer wait may complete an inner step's
    request, which must then count as done (schedule.test), or the slice never advances."""
    for _ in range(20):
        for count in (0, 1, 2, comm.size + 1):
            x = rank_data("float32", count, comm.rank)
            got = zipcoll.allreduce(x, algorithm="torus:dbtree", codec=spec, comm=comm)
            assert got.shape == (count,)


def test_intra_codec_is_used(comm):
    """With a codec for the intra level only, the result is lossy where the node has 2+ ranks."""
    x = rank_data("float32", 1001, comm.rank)
    exact = zipcoll.allreduce(x, algorithm="hierarchical", comm=comm)
    got = zipcoll.allreduce(x, algorithm="hierarchical", codec={"intra": "int2"}, comm=comm)
    if comm.size > 1:
        assert not np.array_equal(got, exact)
    else:
        np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("algorithm,layout", [(a, None) for a in FLAT] + [
    ("hierarchical", "2x2nodes"), ("torus", "2x2grid")])
def test_mean(comm, algorithm, layout):
    """op="mean" is the compressed sum divided by the number of ranks (same bits)."""
    topology = topology_of(comm, layout)
    x = rank_data("float32", 1001, comm.rank)
    total = zipcoll.allreduce(x, algorithm=algorithm, codec="int8", comm=comm, topology=topology)
    mean = zipcoll.allreduce(x, op="mean", algorithm=algorithm, codec="int8", comm=comm,
                             topology=topology)
    np.testing.assert_array_equal(mean, total / np.float32(comm.size))
    parts = all_rank_data("float32", 1001, comm.size)
    problems = check_bound(comm, parts, mean, algorithm, topology, "int8", np.float32, mean=True)
    assert not problems, "\n".join(problems)


# -- stochastic codecs: unbiased over calls --------------------------------------------------

TRIALS = 40
N_UNBIASED = 64


def bias_ratio(comm, algorithm, topology, spec, trials=TRIALS) -> float:
    """R = sqrt(T) * rms_i(mean_t D[t, i]) / rms_{t,i}(D[t, i]), D = result - exact.

    The mean of T independent draws has variance var/T, so for an unbiased all-reduce
    E[R^2] ~ 1 (whatever the distribution: one rare huge value moves numerator and
    denominator alike); for a biased one R ~ sqrt(T) (~6.3). Aggregated over elements,
    since an element a hair off a quantization level legitimately rounds the same way
    in all T calls (a per-element z-score would call that a bias).
    """
    x = rank_data("float32", N_UNBIASED, comm.rank)
    exact = np.stack(all_rank_data("float32", N_UNBIASED, comm.size)).astype(np.float64).sum(0)
    runs = np.stack([zipcoll.allreduce(x, algorithm=algorithm, codec=spec, comm=comm,
                                       topology=topology).astype(np.float64)
                     for _ in range(trials)])
    assert not differing_across_ranks(comm, {"runs": runs}), "not bit-identical across ranks"
    d = runs - exact
    single = np.sqrt(np.mean(d ** 2))
    return float(np.sqrt(trials) * np.sqrt(np.mean(d.mean(axis=0) ** 2)) / single)


def unbiased_cases():
    return cases(STOCHASTIC)


@pytest.mark.parametrize("algorithm,layout,spec", unbiased_cases())
def test_unbiased(comm, algorithm, layout, spec):
    topology = topology_of(comm, layout)
    codec = zipcoll.get_codec(spec)
    path = ([codec] * comm.size if algorithm == "allgather"
            else encode_path(comm, algorithm, topology, codec, None))
    if not path:  # nothing is encoded (ring, twophase, one-node hierarchical on 1 level)
        x = rank_data("float32", N_UNBIASED, comm.rank)
        exact = zipcoll.allreduce(x, algorithm=algorithm, comm=comm, topology=topology)
        for _ in range(3):
            np.testing.assert_array_equal(zipcoll.allreduce(
                x, algorithm=algorithm, codec=spec, comm=comm, topology=topology), exact)
        return
    ratio = bias_ratio(comm, algorithm, topology, spec)
    # observed 0.7-1.4 for unbiased codecs; 6.3 (= sqrt(40)) for a biased one
    assert ratio < 2.5, f"biased? R = {ratio:.3g} (unbiased ~1, biased ~{np.sqrt(TRIALS):.2g})"


@pytest.mark.parametrize("algorithm,spec", [("allgather", "randomk:ratio=0.25,scaled=false"),
                                            ("ring", "int8"), ("twophase", "int4")])
def test_biased_controls_fail_the_unbiasedness_check(comm, algorithm, spec):
    """Biased codecs (unscaled randomk, round-to-nearest) must fail the check above."""
    if comm.size == 1 and algorithm in ("ring", "twophase"):
        pytest.skip("nothing encoded on 1 rank")
    assert bias_ratio(comm, algorithm, None, spec) > 4.0


@pytest.mark.parametrize("algorithm", ["ring", "tree", "dbtree", "hierarchical:ring",
                                       "torus:tree"])
def test_randomk_refused_per_hop(comm, algorithm):
    """A value surviving k re-encodes is scaled m^k (variance blows up): refused, everywhere."""
    with pytest.raises(ValueError, match="randomk"):
        zipcoll.allreduce(np.ones(8, np.float32), algorithm=algorithm,
                          codec="randomk:ratio=0.25", comm=comm)
    still_in_step(comm)


# -- entry points ----------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm,layout", [(a, None) for a in FLAT] + [
    ("hierarchical", "2x2nodes"), ("torus", None)])
def test_intracomm_and_iallreduce_take_a_codec(comm, algorithm, layout):
    topology = topology_of(comm, layout)
    x = rank_data("float32", 1001, comm.rank)
    ref = zipcoll.allreduce(x, algorithm=algorithm, codec="int4", comm=comm, topology=topology)
    got = {}
    if topology is None:  # Intracomm has no topology argument
        zcomm = zipcoll.Intracomm(comm, algorithm=algorithm, codec="int4")
        recv = np.zeros_like(x)
        zcomm.Allreduce(x, recv, op=MPI.SUM)
        got["Intracomm.Allreduce"] = recv
        inplace = x.copy()
        zcomm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM)
        got["Intracomm.Allreduce IN_PLACE"] = inplace
        irecv = np.zeros_like(x)
        zcomm.Iallreduce(x, irecv, op=MPI.SUM).Wait()
        got["Intracomm.Iallreduce"] = irecv
    request = zipcoll.iallreduce(x, algorithm=algorithm, codec="int4", comm=comm,
                                 topology=topology)
    while not request.test():
        pass
    got["iallreduce"] = request.wait()
    inplace = x.copy()
    zipcoll.allreduce(MPI.IN_PLACE, inplace, algorithm=algorithm, codec="int4", comm=comm,
                      topology=topology)
    got["allreduce IN_PLACE"] = inplace
    problems = [how for how, value in got.items() if not np.array_equal(value, ref)]
    assert not problems, f"differ from allreduce(codec='int4'): {problems}"
    if encode_path(comm, algorithm, topology, zipcoll.get_codec("int4"), None):
        assert not np.array_equal(ref, zipcoll.allreduce(x, algorithm=algorithm, comm=comm,
                                                         topology=topology)), "not compressed"


# -- argument errors: on every rank, before anything moves -----------------------------------

def untouched_after(comm, call) -> np.ndarray:
    """Run `call(recv)` on a sentinel receive buffer; return the buffer."""
    recv = np.full(5, 7.0, np.float32)
    call(recv)
    return recv


def still_in_step(comm) -> None:
    """A following call works: nothing of the failed call is left in flight."""
    x = rank_data("float32", 11, comm.rank)
    got = zipcoll.allreduce(x, algorithm="ring", comm=comm)
    exact = np.stack(all_rank_data("float32", 11, comm.size)).sum(0)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "dbtree", "twophase",
                                       "hierarchical:ring", "torus:tree"])
def test_codec_the_schedule_cannot_use(comm, algorithm):
    x = np.ones(5, np.float32)
    with pytest.raises(ValueError) as info:
        untouched_after(comm, lambda recv: zipcoll.allreduce(
            x, recv, algorithm=algorithm, codec="threshold:tau=0.5", comm=comm))
    message = str(info.value)
    # names the codec and the schedules that take it (allgather, and two-level over it)
    assert "threshold" in message and "can: allgather " in message, message
    assert "hierarchical" in message and "torus" in message, message
    still_in_step(comm)


def test_recv_untouched_on_error(comm):
    recv = np.full(5, 7.0, np.float32)
    with pytest.raises(ValueError):
        zipcoll.allreduce(np.ones(5, np.float32), recv, algorithm="ring", codec="threshold:tau=1",
                          comm=comm)
    np.testing.assert_array_equal(recv, 7.0)
    with pytest.raises(ValueError):
        zipcoll.allreduce(np.ones(5, np.float32), recv, op=MPI.MAX, algorithm="ring",
                          codec="int8", comm=comm)
    np.testing.assert_array_equal(recv, 7.0)


@pytest.mark.parametrize("op", [MPI.MAX, "max", "min", MPI.PROD])
@pytest.mark.parametrize("algorithm", ["ring", "allgather", "hierarchical", "auto"])
def test_lossy_codec_with_other_op(comm, op, algorithm):
    with pytest.raises(ValueError, match="SUM"):
        zipcoll.allreduce(np.ones(5, np.float32), op=op, algorithm=algorithm, codec="int8",
                          comm=comm)
    still_in_step(comm)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "complex64"])
@pytest.mark.parametrize("algorithm", ["ring", "twophase", "torus"])
def test_codec_with_non_float_dtype(comm, dtype, algorithm):
    with pytest.raises(TypeError):
        zipcoll.allreduce(np.ones(5, dtype), algorithm=algorithm, codec="fp16", comm=comm)
    still_in_step(comm)


@pytest.mark.parametrize("algorithm", FLAT)
def test_codec_per_level_needs_two_levels(comm, algorithm):
    with pytest.raises(ValueError, match="two-level"):
        zipcoll.allreduce(np.ones(5, np.float32), algorithm=algorithm, codec=LEVEL_CODECS,
                          comm=comm)
    with pytest.raises(ValueError):  # unknown level name
        zipcoll.allreduce(np.ones(5, np.float32), algorithm="hierarchical",
                          codec={"inter": "int8", "outer": "fp16"}, comm=comm)
    still_in_step(comm)


@pytest.mark.parametrize("mine,others", [("int8", "int4"), (None, "int8"),
                                         ("int8", "int8:block=128"), ("int8", LEVEL_CODECS)])
def test_ranks_disagree_on_the_codec(comm, mine, others):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    codec = mine if comm.rank == 0 else others
    with pytest.raises(zipcoll.MismatchError):
        zipcoll.allreduce(rank_data("float32", 64, comm.rank), algorithm="hierarchical",
                          codec=codec, comm=comm)
    still_in_step(comm)


# -- algorithm="auto" --------------------------------------------------------------------------

def test_auto_does_not_compress_on_one_node(comm):
    """Every call sends lossless: its plan carries no codec and its sum is the lossless one
    up to float32 rounding (while auto learns, calls of one kind may run different
    lossless plans, which add in other orders)."""
    topology = zipcoll.Topology.from_comm(comm)
    if topology.num_nodes > 1:
        pytest.skip("ranks span several nodes here")
    for count in (1001, 65537):
        x = rank_data("float32", count, comm.rank)
        lossless = zipcoll.allreduce(x, comm=comm)
        for spec in ("int2", "fp16", "topk:ratio=0.01", {"intra": "int8", "inter": "int2"}):
            for _ in range(3):  # the first calls of a kind, while auto tries its candidates
                request = zipcoll.iallreduce(x, codec=spec, comm=comm)
                got = request.wait()
                plan = request.plan
                assert plan.codec is None and plan.intra_codec is None, (spec, plan.name)
                np.testing.assert_allclose(got, lossless, rtol=1e-5, atol=1e-5,
                                           err_msg=f"codec={spec}")


@pytest.mark.parametrize("count", [1001, 1 << 20])
def test_auto_runs_the_cost_models_best_plan(comm, count):
    """auto's result is bit for bit that of the plan zipcoll.explain ranks first (the cost
    model's own pick: online tuning, which tries the runners-up too, is off)."""
    zipcoll.configure(tune=False)
    topology = topology_of(comm, "2x2nodes")
    for spec in (None, "int8", "threshold:tau=1"):
        x = rank_data("float32", count, comm.rank)
        best = zipcoll.explain(x.nbytes, comm=comm, codec=spec, topology=topology).best
        codec = spec if best.inter_codec else None
        got = zipcoll.allreduce(x, codec=spec, comm=comm, topology=topology)
        ref = zipcoll.allreduce(x, algorithm=best.name, codec=codec, comm=comm,
                                topology=topology)
        np.testing.assert_array_equal(got, ref, err_msg=f"{spec}: {best}")


def test_every_codec_is_covered():
    covered = {zipcoll.get_codec(s).codec_id for s in ALL_SPECS.values()}
    assert covered == set(zipcoll.list_codecs()) - {"feedback"}


@pytest.mark.parametrize("algorithm, spec", [("hierarchical:allgather", "threshold:tau=1.0"),
                                             ("hierarchical:allgather", "randomk:ratio=0.1"),
                                             ("hierarchical:native", None),
                                             ("hierarchical:twophase", "qsgd")])
def test_pipelined_slices_stay_in_step(comm, algorithm, spec):
    """Several 2 MiB slices in flight: their inner schedules must match slice for slice.

    MPI collectives match by start order, which differs between ranks when slices progress
    at different speeds (an Iallgatherv per slice once gave different bits on different ranks).
    """
    topology = zipcoll.Topology.from_comm(comm, ranks_per_node=2 if comm.size % 2 == 0 else 1)
    x = rank_data("float32", 3 << 19, comm.rank)  # 6 MiB: three slices
    results = {}
    for call in range(3):
        results[f"call{call}"] = zipcoll.allreduce(x, algorithm=algorithm, codec=spec,
                                                   comm=comm, topology=topology)
    exact = np.empty_like(x)
    comm.Allreduce(x, exact)
    problems = [f"{name}: not bit-identical" for name in differing_across_ranks(comm, results)]
    assert not problems, problems
    if spec is None:
        np.testing.assert_allclose(results["call0"], exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm,spec", [("hierarchical", None), ("hierarchical", "int8"),
                                            ("hierarchical:allgather", "topk:ratio=0.1")])
def test_one_rank_a_node_reads_the_send_buffer(comm, algorithm, spec):
    """With one rank a node, level 2 reads the caller's send buffer itself (no copy into
    recv first): the sum is right, the send buffer untouched, the bits alike on every rank."""
    topology = zipcoll.Topology.from_comm(comm, ranks_per_node=1)
    x = rank_data("float32", 5_003, comm.rank)
    before = x.copy()
    out = np.full_like(x, np.nan)
    zipcoll.allreduce(x, out, algorithm=algorithm, codec=spec, comm=comm, topology=topology)
    np.testing.assert_array_equal(x, before)
    if spec is None:
        exact = np.empty_like(x)
        comm.Allreduce(x, exact)
        np.testing.assert_allclose(out, exact, rtol=1e-5, atol=1e-4)
        return
    parts = all_rank_data("float32", x.size, comm.size)
    problems = check_bound(comm, parts, out, algorithm, topology, spec, np.float32)
    problems += [f"{c}: not bit-identical" for c in differing_across_ranks(comm, {"out": out})]
    assert not problems, "\n".join(problems)


# -- flat schedules in slices ------------------------------------------------------------------

@pytest.mark.parametrize("algorithm,spec", [
    (a, s) for a in FLAT for s in ("int8", "sign", "topk:ratio=0.1", "threshold:tau=1.0")
    if accepted(a, s)])
def test_sliced_within_bound(comm, algorithm, spec):
    """Each rank its own node and small slices: a flat schedule runs in slices, several in
    flight; each slice encodes on its own, so the bound of the whole call still holds."""
    zipcoll.configure(slice_bytes=1024)  # sign: slices of p x 28 x 128 bytes
    topology = zipcoll.Topology.from_comm(comm, ranks_per_node=1)
    x = rank_data("float32", 20_011, comm.rank)
    plan = make_plan(x, None, "sum", algorithm, spec, None, topology)
    assert plan.slicing.slices > 1 or comm.size == 1
    got = zipcoll.allreduce(x, algorithm=algorithm, codec=spec, comm=comm, topology=topology)
    parts = all_rank_data("float32", x.size, comm.size)
    problems = check_bound(comm, parts, got, algorithm, topology, spec, np.float32,
                           slices=plan.slicing.slices)
    problems += [f"{c}: not bit-identical" for c in differing_across_ranks(comm, {"got": got})]
    assert not problems, "\n".join(problems)

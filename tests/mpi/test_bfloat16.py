"""bfloat16 through every entry point: NumPy (`ml_dtypes.bfloat16`), torch and JAX buffers.

A bfloat16 call runs its schedule on a float32 copy and rounds the float32 result once,
to nearest even. Checked, on every schedule:
- lossless SUM: the exact sum rounded once (data whose float32 partial sums are exact),
  which is not what summing in bfloat16 gives (at 3 ranks and more);
- MAX/MIN: exact; "mean": the float32 mean rounded once;
- with a codec: exactly the float32 call's result on the same (widened) values, rounded
  once, so the float32 bounds of test_compressed.py hold, plus half an ulp of bfloat16;
  int8 and sign checked against that bound here;
- every rank ends with the same bits; torch tensors are written in place and JAX arrays
  come back as new JAX bfloat16 arrays; a user-defined op is refused on every rank.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import differing_across_ranks, rank_data, topology_of
from test_compressed import accepted, error_bound

pytestmark = pytest.mark.mpi

BF16 = np.dtype(ml_dtypes.bfloat16)
N = 1001

LOSSLESS = [(name, None) for name in zipcoll.SCHEDULES] + [
    ("hierarchical", "2x2nodes"), ("torus", "2x2grid")]


def integers(rank: int, count: int = N) -> np.ndarray:
    """bfloat16 integers in [-1024, 1024]: every float32 partial sum of 4 ranks is exact,
    while their bfloat16 sums need rounding (bfloat16 has 8 significant bits)."""
    rng = np.random.default_rng(7 + rank)
    return rng.integers(-1024, 1025, count).astype(np.float32).astype(BF16)


def everyone(comm, make) -> list[np.ndarray]:
    return [make(r) for r in range(comm.size)]


def bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


@pytest.mark.parametrize("algorithm,layout", LOSSLESS)
def test_sum_is_rounded_once(comm, algorithm, layout):
    topology = topology_of(comm, layout)
    parts = everyone(comm, integers)
    x = parts[comm.rank]
    sent = x.copy()
    got = zipcoll.allreduce(x, algorithm=algorithm, comm=comm, topology=topology)
    assert got.dtype == BF16 and got.shape == x.shape
    assert np.array_equal(bits(x), bits(sent)), "sendbuf modified"
    exact = np.sum([p.astype(np.float64) for p in parts], axis=0)
    np.testing.assert_array_equal(bits(got), bits(exact.astype(np.float32).astype(BF16)))
    if comm.size >= 3:  # not vacuous: summing in bfloat16 would round at every addition
        in_bf16 = parts[0]
        for p in parts[1:]:
            in_bf16 = (in_bf16 + p).astype(BF16)
        assert not np.array_equal(bits(in_bf16), bits(got))
    assert not differing_across_ranks(comm, {"sum": got})


@pytest.mark.parametrize("algorithm", ["native", "ring", "tree", "dbtree", "rabenseifner",
                                       "recdoubling", "allgather"])
@pytest.mark.parametrize("op", [MPI.MAX, MPI.MIN])
def test_max_min_exact(comm, algorithm, op):
    def values(rank):
        v = np.random.default_rng(rank).standard_normal(N).astype(BF16)
        v[:3] = [np.inf, -np.inf, 0.5] if rank == 0 else [1, 2, 0.0]
        return v

    parts = everyone(comm, values)
    got = zipcoll.allreduce(parts[comm.rank], op=op, algorithm=algorithm, comm=comm)
    ufunc = np.maximum if op == MPI.MAX else np.minimum
    want = ufunc.reduce(np.stack([p.astype(np.float32) for p in parts])).astype(BF16)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("algorithm", ["native", "ring", "allgather"])
def test_mean_and_prod_rounded_once(comm, algorithm):
    x = rank_data("float32", N, comm.rank).astype(BF16)
    for op in ("mean", MPI.PROD):
        got = zipcoll.allreduce(x, op=op, algorithm=algorithm, comm=comm)
        reference = zipcoll.allreduce(x.astype(np.float32), op=op, algorithm=algorithm,
                                      comm=comm)
        np.testing.assert_array_equal(bits(got), bits(reference.astype(BF16)))


def codec_cases():
    specs = {"fp16": "fp16", "bf16": "bf16", "int8": "int8", "int4": "int4", "int2": "int2",
             "sign": "sign", "topk": "topk:ratio=0.1", "threshold": "threshold:tau=1.0"}
    for algorithm in ["ring", "tree", "dbtree", "twophase", "allgather", "hierarchical",
                      "torus"]:
        for name, spec in specs.items():
            if accepted(algorithm, spec):
                yield pytest.param(algorithm, spec, id=f"{algorithm}-{name}")


@pytest.mark.parametrize("algorithm,spec", list(codec_cases()))
def test_codec_encodes_the_float32_values(comm, algorithm, spec):
    """The same float32 values, the same (deterministic) codec: the float32 call's result,
    rounded once."""
    x = rank_data("float32", N, comm.rank).astype(BF16)
    got = zipcoll.allreduce(x, algorithm=algorithm, codec=spec, comm=comm)
    reference = zipcoll.allreduce(x.astype(np.float32), algorithm=algorithm, codec=spec,
                                  comm=comm)
    assert got.dtype == BF16
    np.testing.assert_array_equal(bits(got), bits(reference.astype(BF16)))
    assert not differing_across_ranks(comm, {"got": got})


@pytest.mark.parametrize("algorithm", ["ring", "tree", "twophase", "allgather"])
@pytest.mark.parametrize("spec", ["int8", "sign"])
def test_codec_within_bound(comm, algorithm, spec):
    """float32's bound on the widened values, plus half an ulp of bfloat16 at the result."""
    parts = [rank_data("float32", N, r).astype(BF16).astype(np.float32)
             for r in range(comm.size)]
    got = zipcoll.allreduce(parts[comm.rank].astype(BF16), algorithm=algorithm, codec=spec,
                            comm=comm).astype(np.float64)
    exact = np.sum(parts, axis=0, dtype=np.float64)
    bound, encodes = error_bound(comm, algorithm, None, zipcoll.get_codec(spec), None, parts,
                                 np.float32)
    bound = bound + zipcoll.get_codec("bf16").error_bound(got)  # the one rounding
    err = np.abs(got - exact)
    assert np.all(err <= bound), f"{np.sum(err > bound)} beyond the bound ({encodes} encodes)"
    assert comm.size == 1 or err.max() > 0  # the codec was used


@pytest.mark.parametrize("codec", [None, "int8"])
def test_torch_tensor_in_place_and_new(comm, codec):
    torch = pytest.importorskip("torch")
    x = rank_data("float32", N, comm.rank).astype(BF16)
    want = zipcoll.allreduce(x, op="mean", algorithm="ring", codec=codec, comm=comm)
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).reshape(7, 143)
    memory = t.data_ptr()
    zipcoll.allreduce(MPI.IN_PLACE, t, op="mean", algorithm="ring", codec=codec, comm=comm)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == memory and t.shape == (7, 143)
    np.testing.assert_array_equal(t.reshape(-1).view(torch.int16).numpy().view(np.uint16),
                                  bits(want))
    source = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    new = zipcoll.iallreduce(source, op="mean", algorithm="ring", codec=codec,
                             comm=comm).wait()
    assert isinstance(new, torch.Tensor) and new.dtype == torch.bfloat16
    assert torch.equal(new, t.reshape(-1))
    out = torch.empty(N, dtype=torch.bfloat16)
    zipcoll.Intracomm(comm, algorithm="ring", codec=codec).Allreduce(source, out)
    total = zipcoll.allreduce(x, algorithm="ring", codec=codec, comm=comm)
    np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16), bits(total))


def test_jax_array_comes_back_as_jax_bfloat16(comm):
    jnp = pytest.importorskip("jax.numpy")
    x = rank_data("float32", N, comm.rank).astype(BF16)
    got = zipcoll.allreduce(jnp.asarray(x), algorithm="ring", comm=comm)
    assert type(got).__module__.split(".")[0] in ("jax", "jaxlib")
    assert got.dtype == jnp.bfloat16
    want = zipcoll.allreduce(x, algorithm="ring", comm=comm)
    np.testing.assert_array_equal(bits(np.asarray(got)), bits(want))
    with pytest.raises(TypeError, match="immutable"):
        zipcoll.allreduce(MPI.IN_PLACE, jnp.asarray(x), comm=comm)


def test_refused_on_every_rank(comm):
    x = np.ones(8, BF16)
    user_op = MPI.Op.Create(lambda a, b, dt: None, commute=True)
    try:
        with pytest.raises(TypeError, match="bfloat16"):
            zipcoll.allreduce(x, op=user_op, comm=comm)
    finally:
        user_op.Free()
    with pytest.raises(TypeError, match="land"):
        zipcoll.allreduce(x, op=MPI.LAND, comm=comm)
    with pytest.raises(TypeError, match="dtype"):
        zipcoll.allreduce(x, np.empty(8, np.float32), comm=comm)
    # one rank passes float32, the others bfloat16: every rank raises before data moves
    y = x.astype(np.float32) if comm.rank == 0 else x
    if comm.size > 1:
        with pytest.raises(zipcoll.MismatchError):
            zipcoll.allreduce(y, algorithm="ring", comm=comm)


@pytest.mark.parametrize("algorithm", ["allgatherv", "gtopk"])
def test_sparse_collectives_take_bfloat16(comm, algorithm):
    """Pairs gathered as bfloat16; sums (sparse_allreduce, gtopk's merges) in float32,
    rounded once."""
    size = 64
    indices = np.arange(comm.rank, size, 2, dtype=np.int64) % size
    values = integers(comm.rank, indices.size)
    k = size if algorithm == "gtopk" else None  # every index kept: the whole sum
    dense = zipcoll.sparse_allreduce(values, indices, size, algorithm=algorithm, k=k,
                                     comm=comm)
    exact = np.zeros(size)
    for r in range(comm.size):
        idx = np.arange(r, size, 2, dtype=np.int64) % size
        np.add.at(exact, idx, integers(r, idx.size).astype(np.float64))
    assert dense.dtype == BF16
    np.testing.assert_array_equal(bits(dense), bits(exact.astype(np.float32).astype(BF16)))
    got_indices, got_values, _ = zipcoll.sparse_allgather(values, indices, algorithm=algorithm,
                                                          k=k, comm=comm)
    assert got_values.dtype == BF16

"""Framework arrays through every entry point: torch tensors, JAX arrays, Numba device arrays.

Each framework's array goes in, and the caller's own kind comes out: a new array of that
framework, or the caller's torch tensor / Numba array written in place. Lossless results
are compared with the MPI library's Allreduce; compressed ones with zipcoll's result for
the same data as NumPy, bit for bit (the framework changes nothing but the wrapping).
JAX arrays are immutable: an in-place request on one is a TypeError on every rank.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import all_rank_data, differing_across_ranks, expected, mismatch, rank_data
from frameworks import MUTABLE, framework_params

pytestmark = pytest.mark.mpi

SHAPE = (7, 13)  # 91 elements: not a multiple of any world size here
CODECS = [None, "int8", "topk:ratio=0.1"]  # deterministic: a framework's result equals NumPy's
ALGORITHMS = {None: ("native", "ring", "dbtree"), "int8": ("ring", "tree"),
              "topk:ratio=0.1": ("allgather",)}
CASES = [pytest.param(codec, algorithm, id=f"{algorithm}-{codec or 'lossless'}")
         for codec in CODECS for algorithm in ALGORITHMS[codec]]


@pytest.fixture(params=framework_params())
def fw(request):
    request.param.require()
    return request.param


@pytest.fixture(params=framework_params(MUTABLE))
def mutable_fw(request):
    request.param.require()
    return request.param


def local_data(comm) -> np.ndarray:
    return rank_data("float32", int(np.prod(SHAPE)), comm.rank).reshape(SHAPE)


def reference(comm, data: np.ndarray, codec, algorithm: str) -> np.ndarray:
    """What zipcoll gives for the same call on NumPy arrays."""
    return zipcoll.allreduce(data, comm=comm, algorithm=algorithm, codec=codec)


def check_result(comm, got: np.ndarray, data: np.ndarray, codec, algorithm: str) -> None:
    """Lossless: MPI's answer within float reordering; compressed: NumPy's bits."""
    assert got.shape == SHAPE and got.dtype == np.float32
    if codec is None:
        parts = all_rank_data("float32", data.size, comm.size)
        assert mismatch(got, expected(comm, data).reshape(-1), parts, "sum") is None
    else:
        np.testing.assert_array_equal(got, reference(comm, data, codec, algorithm))
    assert not differing_across_ranks(comm, {"result": got})


@pytest.mark.parametrize("codec,algorithm", CASES)
def test_new_result_is_the_callers_kind(comm, fw, codec, algorithm):
    data = local_data(comm)
    sendbuf = fw.make(data)
    got = zipcoll.allreduce(sendbuf, comm=comm, algorithm=algorithm, codec=codec)
    assert type(got) is type(sendbuf) and got is not sendbuf
    check_result(comm, fw.read(got), data, codec, algorithm)
    np.testing.assert_array_equal(fw.read(sendbuf), data)  # the input is left alone


@pytest.mark.parametrize("codec,algorithm", CASES)
@pytest.mark.parametrize("form", ["recvbuf", "IN_PLACE"])
def test_in_place(comm, mutable_fw, codec, algorithm, form):
    data = local_data(comm)
    recvbuf = mutable_fw.make(np.zeros_like(data) if form == "recvbuf" else data)
    memory = _address(recvbuf)
    sendbuf = mutable_fw.make(data) if form == "recvbuf" else MPI.IN_PLACE
    got = zipcoll.allreduce(sendbuf, recvbuf, comm=comm, algorithm=algorithm, codec=codec)
    assert got is recvbuf and _address(recvbuf) == memory  # written where it was
    check_result(comm, mutable_fw.read(recvbuf), data, codec, algorithm)


def _address(obj) -> int:
    """Where obj's memory starts (torch and Numba arrays)."""
    return obj.data_ptr() if hasattr(obj, "data_ptr") else obj._ary.ctypes.data


def test_torch_in_place_writes_the_tensors_own_memory(comm):
    torch = pytest.importorskip("torch")
    data = local_data(comm)
    tensor = torch.from_numpy(data.copy())
    storage = tensor.data_ptr()
    mirror = tensor.view(-1)  # another view of the same memory sees the result
    zipcoll.allreduce(MPI.IN_PLACE, tensor, comm=comm, algorithm="ring", codec="int8")
    assert tensor.data_ptr() == storage
    np.testing.assert_array_equal(mirror.numpy(), tensor.numpy().reshape(-1))
    check_result(comm, tensor.numpy(), data, "int8", "ring")


@pytest.mark.parametrize("codec,algorithm", CASES)
def test_iallreduce(comm, fw, codec, algorithm):
    data = local_data(comm)
    sendbuf = fw.make(data)
    request = zipcoll.iallreduce(sendbuf, comm=comm, algorithm=algorithm, codec=codec)
    while not request.test():
        pass
    got = request.wait()
    assert type(got) is type(sendbuf)
    check_result(comm, fw.read(got), data, codec, algorithm)


@pytest.mark.parametrize("codec,algorithm", CASES)
def test_intracomm_allreduce(comm, fw, codec, algorithm):
    data = local_data(comm)
    zcomm = zipcoll.Intracomm(comm, algorithm=algorithm, codec=codec)
    # JAX arrays cannot be written: they go in as sendbuf, the result into NumPy
    recvbuf = fw.make(np.zeros_like(data)) if fw.mutable else np.zeros_like(data)
    zcomm.Allreduce(fw.make(data), recvbuf)
    got = fw.read(recvbuf) if fw.mutable else recvbuf
    check_result(comm, got, data, codec, algorithm)
    if fw.mutable:
        inplace = fw.make(data)
        zcomm.Allreduce(MPI.IN_PLACE, inplace)
        check_result(comm, fw.read(inplace), data, codec, algorithm)


def test_mean_on_torch(comm):
    torch = pytest.importorskip("torch")
    data = local_data(comm)
    grad = torch.from_numpy(data.copy())
    zipcoll.allreduce(MPI.IN_PLACE, grad, op="mean", comm=comm, algorithm="ring")
    np.testing.assert_allclose(grad.numpy(), expected(comm, data) / comm.size, rtol=1e-5,
                               atol=1e-6)


# -- refused before any message moves, on every rank ---------------------------------------

def _raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test asserts on the type
        return exc
    return None


def assert_still_in_step(comm) -> None:
    data = local_data(comm)
    check_result(comm, zipcoll.allreduce(data, comm=comm, algorithm="ring"), data, None, "ring")


@pytest.mark.parametrize("algorithm,codec", [("native", None), ("auto", None), ("ring", None),
                                             ("ring", "int8")])
@pytest.mark.parametrize("form", ["recvbuf", "IN_PLACE", "Intracomm"])
def test_jax_in_place_is_a_type_error(comm, algorithm, codec, form):
    jnp = pytest.importorskip("jax.numpy")
    data = local_data(comm)
    target = jnp.asarray(data)
    calls = {
        "recvbuf": lambda: zipcoll.allreduce(jnp.asarray(data), target, comm=comm,
                                             algorithm=algorithm, codec=codec),
        "IN_PLACE": lambda: zipcoll.allreduce(MPI.IN_PLACE, target, comm=comm,
                                              algorithm=algorithm, codec=codec),
        "Intracomm": lambda: zipcoll.Intracomm(comm, algorithm, codec).Allreduce(
            jnp.asarray(data), target),
    }
    error = _raised(calls[form])
    assert isinstance(error, TypeError) and "JAX arrays are immutable" in str(error)
    np.testing.assert_array_equal(np.asarray(target), data)
    assert_still_in_step(comm)


def test_jax_in_place_on_one_rank_only(comm):
    """One rank's JAX recvbuf is refused there; the others learn it and raise MismatchError."""
    jnp = pytest.importorskip("jax.numpy")
    data = local_data(comm)
    recvbuf = jnp.asarray(np.zeros_like(data)) if comm.rank == 0 else np.zeros_like(data)
    error = _raised(lambda: zipcoll.allreduce(data, recvbuf, comm=comm, algorithm="ring"))
    wanted = TypeError if comm.rank == 0 else zipcoll.MismatchError
    assert isinstance(error, wanted) or (comm.size == 1 and isinstance(error, TypeError))
    assert_still_in_step(comm)


def test_torch_tensor_that_requires_grad_is_a_type_error(comm):
    torch = pytest.importorskip("torch")
    weight = torch.ones(SHAPE, requires_grad=True)
    error = _raised(lambda: zipcoll.allreduce(weight, comm=comm, algorithm="ring"))
    assert isinstance(error, TypeError) and "detach" in str(error)
    assert_still_in_step(comm)


def test_torch_bfloat16_is_summed_in_float32(comm):
    torch = pytest.importorskip("torch")
    got = zipcoll.allreduce(torch.ones(8, dtype=torch.bfloat16), comm=comm, algorithm="ring")
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, torch.full((8,), float(comm.size), dtype=torch.bfloat16))

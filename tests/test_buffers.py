"""zipcoll.buffers.as_array: every buffer kind seen as a flat array, without copying."""
from __future__ import annotations

import array as pyarray
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from arrays import KINDS, DLPackOnly, FakeCUDA, view
from frameworks import framework_params
from zipcoll.buffers import HOST, as_array, empty_like, result_like
from zipcoll.errors import MissingDependencyError

KIND_DTYPES = [pytest.param(kind, dtype, id=f"{kind.name}-{dtype}")
               for kind in KINDS
               for dtype in ("bool", "uint8", "int32", "int64", "float16", "float64", "complex64")
               if kind.supports(np.dtype(dtype))]


@pytest.mark.parametrize("kind,dtype", KIND_DTYPES)
def test_every_kind_without_copy(kind, dtype):
    obj = kind.make(np.arange(6).astype(dtype))
    buf = as_array(obj, writable=True)
    assert buf.device == HOST and buf.source is obj
    assert buf.dtype == np.dtype(dtype) and buf.count == 6 and buf.shape == (6,)
    assert buf.array.ndim == 1 and buf.writable
    assert np.shares_memory(buf.array, view(obj))


@pytest.mark.parametrize("typecode", "bBhHiIlLqQfd")
def test_array_array_typecodes(typecode):
    obj = pyarray.array(typecode, [1, 2, 3])
    buf = as_array(obj)
    assert buf.dtype == np.dtype(typecode) and buf.count == 3
    assert np.shares_memory(buf.array, np.asarray(memoryview(obj)))


def test_memoryview_format_gives_dtype():
    assert as_array(memoryview(bytearray(16)).cast("i")).dtype == np.int32
    assert as_array(memoryview(np.zeros(2, np.complex64))).dtype == np.complex64
    assert as_array(bytearray(3)).dtype == np.uint8


def test_multidimensional_is_flattened_and_keeps_its_shape():
    a = np.zeros((2, 3, 4), np.float32)
    buf = as_array(a)
    assert buf.array.shape == (24,) and buf.shape == (2, 3, 4)
    assert np.shares_memory(buf.array, a)


# -- mpi4py buffer specs ---------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda b: [b, MPI.FLOAT], lambda b: (b, MPI.FLOAT)],
                         ids=["list", "tuple"])
def test_spec_with_datatype(make):
    a = np.zeros(8, np.float32)
    buf = as_array(make(a))
    assert buf.dtype == np.float32 and buf.count == 8 and buf.source is a
    assert np.shares_memory(buf.array, a)


def test_spec_with_count():
    a = np.zeros(8, np.float64)
    buf = as_array([a, 3, MPI.DOUBLE])
    assert buf.count == 3 and buf.shape == (3,)
    assert np.shares_memory(buf.array, a[:3]) and not np.shares_memory(buf.array, a[3:])


def test_spec_datatype_retypes_the_bytes():
    raw = bytearray(np.arange(4, dtype=np.int32).tobytes())
    buf = as_array([raw, MPI.INT])
    assert buf.dtype == np.int32
    np.testing.assert_array_equal(buf.array, [0, 1, 2, 3])
    assert as_array([raw, 2, MPI.INT64_T]).count == 2


@pytest.mark.parametrize("spec,match", [
    (lambda a: [a, 9, MPI.FLOAT], "count 9"),
    (lambda a: [a, -1, MPI.FLOAT], "count -1"),
    (lambda a: [a[:7].view(np.uint8)[:-1], MPI.FLOAT], "whole number"),
], ids=["count too large", "negative count", "partial item"])
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        as_array(spec(np.zeros(8, np.float32)))


# -- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("obj", [None, 3, 2.5, "text", object(), [1.0, 2.0], {"a": 1},
                                 MPI.IN_PLACE, MPI.BOTTOM],
                         ids=["None", "int", "float", "str", "object", "list", "dict",
                              "IN_PLACE", "BOTTOM"])
def test_non_buffers(obj):
    with pytest.raises(TypeError):
        as_array(obj)


@pytest.mark.parametrize("obj", [
    np.zeros(10)[::2],
    np.zeros((4, 4))[:, :2],
    np.zeros((4, 6), order="F")[:, ::2],
    np.zeros((2, 3, 4)).transpose(1, 0, 2)[:, :, 1:],
    np.arange(6.0)[::-1],
    np.broadcast_to(np.zeros(3), (4, 3)),
    memoryview(bytearray(8))[::2],
], ids=["strided", "column slice", "Fortran column slice", "permuted slice", "reversed",
        "broadcast", "strided memoryview"])
def test_non_contiguous(obj):
    with pytest.raises(ValueError, match="not contiguous"):
        as_array(obj)


# Contiguous in memory, in another order than C's: accepted as MPI reads them, in memory order.
def _orders():
    c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    return [np.asfortranarray(c[0]), c[0].T, np.asfortranarray(c), c.transpose(1, 0, 2),
            c.transpose(2, 0, 1), np.asfortranarray(c.reshape(2, 1, 12)), c.reshape(4, 6).T[:, None]]


ORDER_IDS = ["Fortran 2-D", "transposed C", "Fortran 3-D", "axes 1,0,2", "axes 2,0,1",
             "Fortran with a length-1 axis", "transposed, length-1 axis added"]


@pytest.mark.parametrize("arr", _orders(), ids=ORDER_IDS)
def test_any_memory_order_is_read_in_place_in_memory_order(arr):
    assert not arr.flags.c_contiguous
    buf = as_array(arr, writable=True)
    assert buf.shape == arr.shape and buf.count == arr.size and buf.array.ndim == 1
    assert buf.array.ctypes.data == arr.ctypes.data  # the same memory, from its start
    np.testing.assert_array_equal(buf.array, arr.ravel(order="K"))  # memory order
    buf.array[0] = -1  # a view: writes reach the caller's array
    assert arr.ravel(order="K")[0] == -1


@pytest.mark.parametrize("arr", _orders(), ids=ORDER_IDS)
def test_new_result_has_the_senders_shape_and_layout(arr):
    buf = as_array(arr)
    work = empty_like(buf)
    work[...] = np.arange(arr.size)  # values in memory order, as MPI delivers them
    result = result_like(buf, work)
    assert result.shape == arr.shape
    moving = [a for a in range(arr.ndim) if arr.shape[a] > 1]
    assert (np.argsort([result.strides[a] for a in moving]).tolist()
            == np.argsort([arr.strides[a] for a in moving]).tolist())
    np.testing.assert_array_equal(result.ravel(order="K"), np.arange(arr.size))
    assert np.shares_memory(result, work)


def test_spec_over_a_fortran_array_is_in_memory_order():
    arr = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    buf = as_array([arr, 5, MPI.INT])
    np.testing.assert_array_equal(buf.array, arr.ravel(order="F")[:5])


def test_fortran_dlpack_and_torch():
    arr = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    buf = as_array(DLPackOnly(arr))
    assert buf.array.ctypes.data == arr.ctypes.data
    np.testing.assert_array_equal(buf.array, arr.ravel(order="F"))
    torch = pytest.importorskip("torch")
    tensor = torch.arange(12.0).reshape(4, 3).T  # a transposed tensor: column-major (3, 4)
    buf = as_array(tensor)
    assert buf.array.ctypes.data == tensor.data_ptr() and buf.shape == (3, 4)
    np.testing.assert_array_equal(buf.array, np.arange(12.0))
    result = result_like(buf, buf.array * 2)
    assert isinstance(result, torch.Tensor) and result.stride() == tensor.stride()
    assert torch.equal(result, tensor * 2)


def readonly_numpy():
    a = np.zeros(4)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("make", [readonly_numpy, lambda: bytes(8), lambda: memoryview(bytes(8)),
                                  lambda: DLPackOnly(readonly_numpy()),
                                  lambda: [bytes(8), MPI.INT]],
                         ids=["numpy", "bytes", "memoryview", "dlpack", "spec"])
def test_read_only(make):
    obj = make()
    assert not as_array(obj).writable  # fine to send from
    with pytest.raises(ValueError, match="read-only"):
        as_array(obj, writable=True)


# -- devices -----------------------------------------------------------------------------

@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError


def test_cuda_array_interface_without_cupy(no_cupy):
    """Without CuPy a CUDA array is a window of device memory that only MPI reads."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = as_array(FakeCUDA(data))
    assert buf.device == "cuda" and buf.count == 12 and buf.dtype == np.float32
    assert buf.shape == (3, 4) and buf.writable
    window = buf.array[2:5].__cuda_array_interface__
    assert window["data"] == (data.ctypes.data + 8, False) and window["shape"] == (3,)
    assert buf.array.view(np.uint8).size == 48
    with pytest.raises(MissingDependencyError, match=r"zipcoll\[cuda12\]") as info:
        empty_like(buf)  # zipcoll would have to allocate device memory
    assert info.value.package == "cupy" and isinstance(info.value, TypeError)


def test_strided_cuda_array_without_cupy(no_cupy):
    with pytest.raises(ValueError, match="not contiguous"):
        as_array(FakeCUDA(np.zeros((4, 4))[:, :2]))
    assert as_array(FakeCUDA(np.zeros((4, 1, 4))[:, :, :])).count == 16


class DLPackOn(DLPackOnly):
    """A DLPack exporter that claims to live on another device."""

    def __init__(self, array, device_type):
        super().__init__(array)
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)


def test_dlpack_cuda_without_cupy(no_cupy):
    """Without CuPy a CUDA DLPack tensor is read by hand: a window of memory MPI reads."""
    data = np.arange(6, dtype=np.int16).reshape(2, 3)
    buf = as_array(DLPackOn(data, 2))  # kDLCUDA (host memory here, as far as the test goes)
    assert buf.device == "cuda" and buf.dtype == np.int16 and buf.shape == (2, 3)
    assert buf.array.__cuda_array_interface__["data"][0] == data.ctypes.data
    with pytest.raises(ValueError, match="not contiguous"):
        as_array(DLPackOn(np.zeros((4, 4))[:, ::2], 2))


def test_fortran_device_memory_without_cupy(no_cupy):
    arr = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    for obj in (FakeCUDA(arr), DLPackOn(arr, 2)):
        buf = as_array(obj)
        assert buf.device == "cuda" and buf.shape == (3, 4) and buf.count == 12
        assert buf.array.__cuda_array_interface__["data"][0] == arr.ctypes.data
    with pytest.raises(ValueError, match="not contiguous"):
        as_array(FakeCUDA(np.zeros((4, 6), order="F")[:, ::2]))


def test_dlpack_other_device():
    with pytest.raises(TypeError, match="DLPack device type 4"):
        as_array(DLPackOn(np.zeros(4), 4))  # kDLOpenCL


# -- results in the caller's kind ---------------------------------------------------------

@pytest.mark.parametrize("obj", [np.arange(6.0).reshape(2, 3), pyarray.array("i", range(6)),
                                 bytearray(range(6))], ids=["numpy", "array.array", "bytearray"])
def test_new_result_is_the_callers_kind(obj):
    buf = as_array(obj)
    work = empty_like(buf)
    work[...] = 7  # the reduction writes, then the result is handed back
    result = result_like(buf, work)
    assert type(result) is type(obj) and result is not obj
    np.testing.assert_array_equal(np.asarray(result).reshape(-1), np.full(6, 7))
    assert np.asarray(result).shape == np.asarray(obj).shape


def test_new_result_of_another_kind_is_numpy():
    buf = as_array(memoryview(np.arange(4.0)))
    result = result_like(buf, empty_like(buf))
    assert isinstance(result, np.ndarray) and result.shape == (4,)


# -- framework arrays: torch, JAX, Numba (simulated) device arrays ------------------------

def _address(obj) -> int:
    """Where a framework array's memory starts."""
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    if hasattr(obj, "unsafe_buffer_pointer"):
        return obj.unsafe_buffer_pointer()
    return obj._ary.ctypes.data


@pytest.mark.parametrize("fw", framework_params())
def test_framework_arrays_without_copy(fw):
    fw.require()
    obj = fw.make(np.arange(12, dtype=np.float32).reshape(3, 4))
    buf = as_array(obj)
    assert buf.device == HOST and buf.source is obj and buf.shape == (3, 4)
    assert buf.array.ctypes.data == _address(obj) and buf.count == 12
    assert buf.writable == fw.mutable


@pytest.mark.parametrize("fw", framework_params())
def test_framework_result_is_the_callers_kind_without_copy(fw):
    fw.require()
    obj = fw.make(np.zeros((3, 4), np.float32))
    buf = as_array(obj)
    work = empty_like(buf)
    work[...] = np.arange(12)
    result = result_like(buf, work)
    assert type(result) is type(obj) and result is not obj
    assert _address(result) == work.ctypes.data  # adopted, not copied
    np.testing.assert_array_equal(fw.read(result), np.arange(12).reshape(3, 4))


def test_jax_in_place_is_a_type_error():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(TypeError, match="JAX arrays are immutable"):
        as_array(jnp.zeros(4), writable=True)
    with pytest.raises(TypeError, match="JAX arrays are immutable"):
        as_array([jnp.zeros(4), MPI.FLOAT], writable=True)


def test_torch_tensor_that_requires_grad_is_a_type_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="detach"):
        as_array(torch.zeros(4, requires_grad=True))
    assert as_array(torch.zeros(4, requires_grad=True).detach()).count == 4


@pytest.mark.parametrize("module", ["torch", "jax.numpy"])
def test_bfloat16_is_read_as_ml_dtypes_bfloat16(module):
    """(test_bfloat16_buffers.py has the rest.)"""
    xp = pytest.importorskip(module)
    assert as_array(xp.zeros(4, dtype=xp.bfloat16)).dtype.name == "bfloat16"


def test_simulated_numba_arrays_are_what_numba_cuda_makes():
    """Under NUMBA_ENABLE_CUDASIM=1, numba.cuda.to_device returns the class the tests use,
    and zipcoll takes it as (simulated) device memory: its NumPy array, written in place."""
    code = ("import numpy as np; from numba import cuda; from zipcoll.buffers import as_array; "
            "d = cuda.to_device(np.arange(5.0)); b = as_array(d, writable=True); "
            "b.array[:] = 7; print(type(d).__name__, b.device, d.copy_to_host().sum())")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.stdout.split() == ["FakeCUDAArray", "cudasim", "35.0"], run.stderr[-2000:]

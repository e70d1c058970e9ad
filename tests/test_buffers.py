"""zipcoll.buffers.as_array: every buffer kind seen as a flat array, without copying."""
from __future__ import annotations

import array as pyarray
import sys

import numpy as np
import pytest
from mpi4py import MPI

from arrays import KINDS, DLPackOnly, FakeCUDA, view
from zipcoll import buffers
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
    np.zeros((3, 4), order="F"),
    memoryview(bytearray(8))[::2],
], ids=["strided", "column slice", "Fortran order", "strided memoryview"])
def test_non_contiguous(obj):
    with pytest.raises(ValueError, match="not contiguous"):
        as_array(obj)


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
    with pytest.raises(MissingDependencyError, match=r"zipcoll\[cuda12\]") as info:
        as_array(FakeCUDA(np.zeros(4, np.float32)))
    assert info.value.package == "cupy" and isinstance(info.value, ImportError)


class DLPackOn(DLPackOnly):
    """A DLPack exporter that claims to live on another device."""

    def __init__(self, array, device_type):
        super().__init__(array)
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)


def test_dlpack_cuda_without_cupy(no_cupy):
    with pytest.raises(MissingDependencyError, match=r"zipcoll\[cuda12\]"):
        as_array(DLPackOn(np.zeros(4), 2))  # kDLCUDA


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


def test_optional_imports_name_their_extra():
    with pytest.raises(MissingDependencyError, match=r"zipcoll\[jax\]"):
        buffers.import_optional("no_such_module_zipcoll", "jax")

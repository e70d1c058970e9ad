"""Any buffer -> a flat array view, without copying.

`as_array` accepts what mpi4py accepts, and what the array frameworks hand out:

- NumPy arrays, `array.array`, `bytearray`, `memoryview`, any buffer-protocol object;
- objects with `__dlpack__` (torch CPU tensors, JAX CPU arrays, NumPy >= 1.22);
- objects with `__cuda_array_interface__` (CuPy, Numba device arrays, torch CUDA);
  without CuPy, a `DeviceMemory` window that only the MPI library reads (as mpi4py does);
- Numba device arrays of the CUDA simulator: host memory, that zipcoll treats as a GPU's
  (device `CUDASIM`) while the simulator is on (`NUMBA_ENABLE_CUDASIM=1`), so the device
  paths (staging, codecs on the device) run without a GPU;
- mpi4py buffer specs: `[buf, datatype]`, `[buf, count, datatype]`, `(buf, datatype)`.

It returns a `Buffer`: a contiguous 1-D view (NumPy on the host, CuPy on a GPU), the
device it lives on, and how to hand a new result back in the caller's own kind. Like
mpi4py, it takes arrays that are contiguous in memory in C or Fortran order (or, beyond
mpi4py, in any other axis order, e.g. a transposed 3-D array): the 1-D view follows
memory order, which is the order MPI sends; strided views are refused (a copy would hide
writes).
JAX arrays are immutable: they are read in place, and a result is a new JAX array (an
in-place request on one is a TypeError); torch tensors and Numba arrays are written in place.

bfloat16: NumPy has no such dtype and cannot import it through DLPack, so a host tensor
of DLPack's bfloat16 (torch, JAX) is read by hand from its DLPack capsule, in place, as a
NumPy array of `ml_dtypes.bfloat16` (`BFLOAT16`), the dtype NumPy callers pass too.
"""
from __future__ import annotations

import array as _pyarray
import ctypes
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
from mpi4py import MPI

from zipcoll.codecs.backend import _is_simulated as is_simulated
from zipcoll.codecs.backend import cupy
from zipcoll.errors import MissingDependencyError

HOST = "host"
CUDA = "cuda"
CUDASIM = "cudasim"  # the CUDA simulator's device memory: NumPy arrays standing for a GPU's

# DLPack device types (dlpack.h): which ones are host memory.
_DLPACK_HOST_DEVICES = {1, 3}  # kDLCPU, kDLCUDAHost
_DLPACK_CUDA_DEVICES = {2, 13}  # kDLCUDA, kDLCUDAManaged
_DLPACK_BFLOAT = 4  # kDLBfloat

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


class DeviceComputeError(MissingDependencyError, TypeError):
    """Device memory that zipcoll would have to compute on (a codec, op="mean", a new
    result array) while CuPy is missing. A TypeError too, so that it counts as a rejected
    argument: every rank learns of it before any message moves."""

    def __init__(self, what: str):
        super().__init__("cupy", "cuda12")
        self.msg = (f"{what} on GPU buffers needs CuPy; install it with: "
                    "pip install 'zipcoll[cuda12]' (without it, lossless all-reduces of GPU "
                    "buffers go to the MPI library's own Allreduce)")
        self.args = (self.msg,)


class DeviceMemory:
    """A contiguous 1-D typed window of device memory that zipcoll cannot compute on
    (CuPy is missing). It exposes `__cuda_array_interface__`, so MPI reads and writes it
    in place, exactly as mpi4py hands such an object to MPI; `owner` keeps it alive."""

    def __init__(self, pointer: int, dtype: np.dtype, size: int, readonly: bool, owner: Any):
        self.pointer, self.dtype, self.size = pointer, np.dtype(dtype), size
        self.owner = owner
        self.flags = SimpleNamespace(c_contiguous=True, writeable=not readonly)

    @property
    def shape(self) -> tuple:
        return (self.size,)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.size,), "typestr": self.dtype.str, "strides": None,
                "data": (self.pointer, not self.flags.writeable), "version": 3,
                "stream": None}  # the owner's stream was synchronised when it was wrapped

    def reshape(self, *shape: Any) -> "DeviceMemory":
        if shape not in ((-1,), ((-1,),), (self.size,), ((self.size,),)):
            raise ValueError(f"device memory without CuPy stays 1-D, not {shape}")
        return self

    def view(self, dtype: Any) -> "DeviceMemory":
        dtype = np.dtype(dtype)
        nbytes = self.size * self.dtype.itemsize
        if nbytes % dtype.itemsize:
            raise ValueError(f"{nbytes} bytes are not a whole number of {dtype}")
        return DeviceMemory(self.pointer, dtype, nbytes // dtype.itemsize,
                            not self.flags.writeable, self.owner)

    def __getitem__(self, items: Any) -> "DeviceMemory":
        if not isinstance(items, slice):
            raise TypeError("device memory without CuPy is sliced, not indexed")
        start, stop, step = items.indices(self.size)
        if step != 1:
            raise ValueError("device memory without CuPy takes contiguous slices only")
        return DeviceMemory(self.pointer + start * self.dtype.itemsize, self.dtype,
                            max(0, stop - start), not self.flags.writeable, self.owner)


def simulator_on() -> bool:
    """Whether Numba's CUDA simulator stands in for CUDA (NUMBA_ENABLE_CUDASIM=1)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def handed_to_mpi(buf: "Buffer") -> bool:
    """Whether `buf` is device memory only the MPI library can reduce (no CuPy)."""
    return isinstance(buf.array, DeviceMemory)


class Buffer:
    """A caller's buffer seen as a contiguous 1-D array, plus where it came from.

    Made once per call and never changed; its dtype and count are read many times a call,
    so they are taken once here.
    """

    __slots__ = ("array", "device", "source", "shape", "axes", "dtype", "count")

    def __init__(self, array: Any, device: str, source: Any, shape: tuple,
                 axes: tuple | None = None):
        # numpy.ndarray on the host (and CUDASIM), cupy.ndarray or DeviceMemory on a GPU
        self.array = array
        self.device = device  # HOST, CUDA or CUDASIM
        self.source = source  # the caller's object, to build a result of the same kind
        self.shape = shape
        # the axes of `shape` from slowest- to fastest-varying in memory: `array` is the
        # source transposed to them, flattened (None: C order)
        self.axes = axes
        dtype = array.dtype
        self.dtype: np.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.count = int(array.size)

    def __repr__(self) -> str:
        return (f"Buffer({type(self.array).__name__} of {self.count} {self.dtype}, "
                f"device={self.device!r}, shape={self.shape!r}, axes={self.axes!r})")

    @property
    def writable(self) -> bool:
        flags = getattr(self.array, "flags", None)
        return bool(getattr(flags, "writeable", True))


def is_buffer_spec(obj: Any) -> bool:
    """True for mpi4py's `[buf, datatype]` / `[buf, count, datatype]` forms."""
    return (
        isinstance(obj, (list, tuple))
        and len(obj) in (2, 3)
        and isinstance(obj[-1], MPI.Datatype)
    )


def as_array(obj: Any, *, writable: bool = False) -> Buffer:
    """Wrap `obj` as a `Buffer` without copying; `writable` demands a writable one.

    >>> buf = as_array(np.arange(6.0).reshape(2, 3))
    >>> buf.array.shape, buf.device
    ((6,), 'host')
    """
    if type(obj) is np.ndarray:  # the common case first (subclasses take the long way)
        flags = obj.flags
        if flags.c_contiguous:  # a 1-D one is its own flat view
            buf = Buffer(obj if obj.ndim == 1 else obj.reshape(-1), HOST, obj, obj.shape)
        else:
            buf = _flat(obj, obj, HOST)
        if writable and not flags.writeable:
            raise ValueError("the receive buffer (ndarray) is read-only")
        return buf
    if obj is None or obj is MPI.IN_PLACE or obj is MPI.BOTTOM:
        raise TypeError(f"expected a buffer, got {obj!r}")
    if is_buffer_spec(obj):
        buf = _from_spec(obj)
    elif is_simulated(obj):  # the simulator keeps device memory in NumPy
        buf = _flat(obj._ary, obj, CUDASIM if simulator_on() else HOST)
    elif hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, np.ndarray):
        buf = _from_cuda(obj)
    else:
        buf = _from_host(obj)
    if writable and _is_jax(buf.source):
        raise TypeError("JAX arrays are immutable: pass the array as sendbuf (not recvbuf "
                        "or MPI.IN_PLACE) and use the new array returned")
    if writable and not buf.writable:
        raise ValueError(f"the receive buffer ({type(obj).__name__}) is read-only")
    return buf


def _flat(arr: Any, source: Any, device: str) -> Buffer:
    """Flatten an array contiguous in memory (in any axis order) to 1-D in memory order,
    refusing strided ones (a copy would hide writes)."""
    shape = tuple(arr.shape)
    if arr.flags.c_contiguous:
        return Buffer(arr.reshape(-1), device, source, shape)
    axes = memory_order(shape, tuple(arr.strides), arr.itemsize)
    if axes is None:
        raise ValueError(
            f"{type(source).__name__} buffer is not contiguous; pass a contiguous "
            "array (e.g. numpy.ascontiguousarray(x)) and copy the result back"
        )
    return Buffer(arr.transpose(axes).reshape(-1), device, source, shape, _unless_c_order(axes))


def memory_order(shape: tuple, strides: Any, itemsize: int) -> tuple | None:
    """The axis order in which an array of these strides (in bytes; None: C order) fills
    its memory without gaps, slowest-varying axis first; None if it does not (strided,
    negative or broadcast strides). C order gives (0, 1, ...), Fortran order (..., 1, 0).

    >>> memory_order((2, 3), (8, 24), 8)   # Fortran order
    (1, 0)
    """
    natural = tuple(range(len(shape)))
    if strides is None or 0 in shape:
        return natural
    strides = tuple(strides)
    ones = [a for a in natural if shape[a] == 1]  # any stride: they do not move in memory
    axes = sorted((a for a in natural if shape[a] != 1), key=lambda a: -strides[a])
    expected = itemsize
    for a in reversed(axes):
        if strides[a] != expected:
            return None
        expected *= shape[a]
    order = tuple(ones + axes)
    return natural if _is_c_order(order, shape) else order


def _is_c_order(order: tuple, shape: tuple) -> bool:
    """Whether `order` lists the axes that are not of length 1 in their natural order."""
    moving = [a for a in order if shape[a] != 1]
    return moving == sorted(moving)


def in_memory_order(flat: Any, shape: tuple, axes: tuple | None) -> Any:
    """`flat` (values in memory order) as an array of `shape` laid out in `axes` order."""
    if axes is None:
        return flat.reshape(shape)
    inverse = tuple(sorted(range(len(axes)), key=axes.__getitem__))
    return flat.reshape(tuple(shape[a] for a in axes)).transpose(inverse)


def _from_host(obj: Any) -> Buffer:
    if isinstance(obj, np.ndarray):
        return _flat(obj, obj, HOST)
    if hasattr(obj, "__dlpack__") and not _has_buffer_protocol(obj):
        return _from_dlpack(obj)
    try:
        arr = np.asarray(memoryview(obj))
    except TypeError:
        raise TypeError(
            f"{type(obj).__name__} is not a buffer: expected an array, a buffer-protocol "
            "object, a DLPack or CUDA array, or an mpi4py spec [buf, MPI.DATATYPE]"
        ) from None
    return _flat(arr, obj, HOST)


def _has_buffer_protocol(obj: Any) -> bool:
    try:
        memoryview(obj)
    except (TypeError, BufferError):  # BufferError: JAX's bfloat16
        return False
    return True


def _from_dlpack(obj: Any) -> Buffer:
    device_type, _ = obj.__dlpack_device__()
    if device_type in _DLPACK_CUDA_DEVICES:
        if not has_cupy():
            return _dlpack_device_memory(obj)
        return _flat(cupy().from_dlpack(obj), obj, CUDA)
    if device_type not in _DLPACK_HOST_DEVICES:
        raise TypeError(f"DLPack device type {device_type} is not supported (host or CUDA)")
    if _dtype_name(obj).endswith("bfloat16"):
        return _dlpack_host_bfloat16(obj)
    try:
        arr = np.from_dlpack(obj)
    except (BufferError, RuntimeError) as exc:  # e.g. a torch tensor needing grad
        raise TypeError(f"cannot read {type(obj).__name__} {_dtype_name(obj)} through "
                        f"DLPack: {exc}") from None
    return _flat(arr, obj, HOST)


class _HostWindow:
    """Host memory seen through `__array_interface__`; `owner` (the producer and its
    unconsumed DLPack capsule) lives as long as any array over the window."""

    def __init__(self, pointer: int, size: int, readonly: bool, owner: Any):
        self.__array_interface__ = {"shape": (size,), "typestr": "<u2", "version": 3,
                                    "data": (pointer, readonly)}
        self.owner = owner


def _dlpack_host_bfloat16(obj: Any) -> Buffer:
    """A host bfloat16 DLPack tensor (torch, JAX), in place, as a NumPy BFLOAT16 array.

    NumPy refuses DLPack's bfloat16, so the capsule is read by hand (as for device memory
    without CuPy) and stays unconsumed: the producer frees the memory only once the capsule,
    held by the array's base, is gone.
    """
    try:
        capsule = obj.__dlpack__()
    except (BufferError, RuntimeError) as exc:  # a torch tensor needing grad
        raise TypeError(f"cannot read {type(obj).__name__} {_dtype_name(obj)} through "
                        f"DLPack: {exc}") from None
    tensor = _capsule_tensor(capsule)
    if (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) != (_DLPACK_BFLOAT, 16, 1):
        raise TypeError(f"DLPack dtype (code {tensor.dtype.code}, {tensor.dtype.bits} bits) "
                        f"of {type(obj).__name__} is not bfloat16")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(tensor.strides[i] * 2
                                                    for i in range(tensor.ndim))
    axes = memory_order(shape, strides, 2)
    if axes is None:
        raise ValueError(f"{type(obj).__name__} buffer is not contiguous; pass a contiguous "
                         "tensor and copy the result back")
    size = int(np.prod(shape, dtype=np.int64))
    pointer = (tensor.data or 0) + tensor.byte_offset
    readonly = _is_jax(obj)  # JAX arrays are immutable; torch tensors are written in place
    window = np.asarray(_HostWindow(pointer, size, readonly, (obj, capsule)))
    return Buffer(window.view(BFLOAT16), HOST, obj, shape, _unless_c_order(axes))


def _capsule_tensor(capsule: Any) -> "_DLTensor":
    """The DLTensor inside an unconsumed "dltensor" capsule."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                  ctypes.c_char_p]
    return _DLTensor.from_address(get_pointer(capsule, b"dltensor"))


def _dtype_name(obj: Any) -> str:
    return str(getattr(obj, "dtype", "")) or "buffer"


def _framework(obj: Any) -> str:
    """The top-level module of obj's type: "torch", "jax", "jaxlib", "numba", "numpy", ..."""
    return type(obj).__module__.split(".")[0]


def _is_jax(obj: Any) -> bool:
    return _framework(obj) in ("jax", "jaxlib")


def has_cupy() -> bool:
    """Whether CuPy imports (zipcoll computes on device memory with it)."""
    try:
        cupy()
    except MissingDependencyError:
        return False
    return True


def _from_cuda(obj: Any) -> Buffer:
    if not has_cupy():
        return _device_memory(obj)
    arr = cupy().asarray(obj)  # zero-copy view of the device memory
    return _flat(arr, obj, CUDA)


def _device_memory(obj: Any) -> Buffer:
    """`__cuda_array_interface__` read by hand: a DeviceMemory window for MPI alone."""
    face = obj.__cuda_array_interface__
    if face.get("mask") is not None:
        raise TypeError(f"{type(obj).__name__} has a mask; masked device arrays are not buffers")
    dtype = np.dtype(face["typestr"])
    shape = tuple(int(n) for n in face["shape"])
    pointer, readonly = face["data"]
    axes = memory_order(shape, face.get("strides"), dtype.itemsize)
    if axes is None:
        raise ValueError(f"{type(obj).__name__} buffer is not contiguous; pass a contiguous "
                         "array and copy the result back")
    _wait_for_stream(face.get("stream"))
    size = int(np.prod(shape, dtype=np.int64))
    return Buffer(DeviceMemory(int(pointer or 0), dtype, size, bool(readonly), obj), CUDA,
                  obj, shape, _unless_c_order(axes))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """dlpack.h's DLTensor: the first member of the DLManagedTensor a "dltensor" capsule holds."""

    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DLPACK_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}  # kDLInt, kDLUInt, kDLFloat, ...


def _dlpack_device_memory(obj: Any) -> Buffer:
    """A CUDA DLPack tensor read by hand (no CuPy): a DeviceMemory window for MPI alone.

    The capsule stays unconsumed and referenced by the window, so the producer's deleter
    runs only when the window and the capsule are gone.
    """
    capsule = obj.__dlpack__()
    tensor = _capsule_tensor(capsule)
    if tensor.dtype.code == _DLPACK_BFLOAT:
        raise TypeError(f"bfloat16 {type(obj).__name__} on a GPU: zipcoll reads bfloat16 "
                        "from host memory only (MPI has no bfloat16 type)")
    kind = _DLPACK_KINDS.get(tensor.dtype.code)
    if kind is None or tensor.dtype.lanes != 1 or tensor.dtype.bits % 8:
        raise TypeError(f"DLPack dtype (code {tensor.dtype.code}, {tensor.dtype.bits} bits, "
                        f"{tensor.dtype.lanes} lanes) is not an MPI buffer type")
    dtype = np.dtype(f"{kind}{tensor.dtype.bits // 8}" if kind != "b" else "?")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(tensor.strides[i] * dtype.itemsize
                                                    for i in range(tensor.ndim))
    axes = memory_order(shape, strides, dtype.itemsize)
    if axes is None:
        raise ValueError(f"{type(obj).__name__} buffer is not contiguous; pass a contiguous "
                         "tensor and copy the result back")
    size = int(np.prod(shape, dtype=np.int64))
    pointer = (tensor.data or 0) + tensor.byte_offset
    return Buffer(DeviceMemory(pointer, dtype, size, False, (obj, capsule)), CUDA, obj, shape,
                  _unless_c_order(axes))


def _unless_c_order(axes: tuple) -> tuple | None:
    return None if axes == tuple(range(len(axes))) else axes


def _wait_for_stream(stream: Any) -> None:
    """CAI v3: the producer's stream must be synchronised before the memory is read."""
    if stream is None:
        return
    from numba import cuda

    cuda.external_stream(int(stream)).synchronize()


def _from_spec(spec: Any) -> Buffer:
    """[buf, datatype] or [buf, count, datatype]: a typed view of the first count items."""
    from mpi4py.util import dtlib

    buf, datatype = spec[0], spec[-1]
    dtype = dtlib.to_numpy_dtype(datatype)
    raw = as_array(buf)
    data = raw.array.view(np.uint8)
    if data.size % dtype.itemsize:
        raise ValueError(f"buffer of {data.size} bytes is not a whole number of {dtype}")
    typed = data.view(dtype)
    if len(spec) == 3:
        count = int(spec[1])
        if count < 0 or count > typed.size:
            raise ValueError(f"count {count} does not fit a buffer of {typed.size} {dtype}")
        typed = typed[:count]
    return Buffer(typed, raw.device, raw.source, (typed.size,))


def empty_like(buf: Buffer) -> Any:
    """A new uninitialised 1-D array on the same device as `buf`.

    For a JAX array on the host it is 64-byte aligned, so the result can become a JAX
    array without a copy (JAX adopts aligned host memory through DLPack, copies the rest).
    """
    if handed_to_mpi(buf):
        raise DeviceComputeError("a new result array (no recvbuf)")
    if buf.device == CUDA:
        return cupy().empty(buf.count, dtype=buf.dtype)
    if _is_jax(buf.source):
        return _aligned_empty(buf.count, buf.dtype, 64)
    return np.empty(buf.count, dtype=buf.dtype)


def _aligned_empty(count: int, dtype: np.dtype, alignment: int) -> np.ndarray:
    raw = np.empty(count * dtype.itemsize + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + count * dtype.itemsize].view(dtype)


def result_like(buf: Buffer, result: Any) -> Any:
    """Hand a finished `result` (a flat array) back in the kind and shape of the caller's buffer.

    Call it once the reduction is done: for some kinds (JAX, array.array, bytearray) it copies.
    """
    source = buf.source
    shaped = in_memory_order(result, buf.shape, buf.axes)  # the caller's shape and layout
    module = _framework(source)
    # NumPy's DLPack export has no bfloat16: hand over its bits and reinterpret them there
    bits = shaped.view(np.uint16) if shaped.dtype == BFLOAT16 else None
    if module == "torch":
        import torch

        if bits is not None:
            return torch.from_dlpack(bits.view(np.int16)).view(torch.bfloat16)
        return torch.from_dlpack(shaped)
    if module in ("jax", "jaxlib"):
        import jax
        import jax.numpy as jnp

        if bits is not None:
            return jax.lax.bitcast_convert_type(jnp.from_dlpack(bits), jnp.bfloat16)
        return jnp.from_dlpack(shaped)  # adopts aligned host memory, else copies
    if module == "numba":
        return _numba_like(source, shaped)
    if isinstance(source, _pyarray.array) and source.typecode == result.dtype.char:
        return _pyarray.array(source.typecode, result.tobytes())
    if isinstance(source, bytearray):
        return bytearray(result.tobytes())
    return shaped


def _numba_like(source: Any, shaped: Any) -> Any:
    """A Numba device array over `shaped` (a simulated one over host memory)."""
    if is_simulated(source):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(shaped)
    from numba import cuda

    return cuda.as_cuda_array(shaped)


def synchronize(buf: Buffer) -> None:
    """Wait for the GPU stream that produced `buf` before MPI reads the memory."""
    if buf.device == CUDA and not handed_to_mpi(buf):
        cupy().cuda.get_current_stream().synchronize()


def byte_range(buf: Buffer, count: int | None = None) -> tuple[int, int]:
    """[start, end) of the memory the first `count` items of `buf` (default all) cover.

    Host addresses for host arrays (the CUDA simulator's too: they are NumPy), device
    pointers for GPU ones (CuPy, or a `DeviceMemory` window): compare ranges of buffers
    on the same device only.
    """
    arr = buf.array
    if isinstance(arr, DeviceMemory):
        start = arr.pointer
    elif isinstance(arr, np.ndarray):
        start = arr.__array_interface__["data"][0]
    else:
        start = arr.__cuda_array_interface__["data"][0]
    items = buf.count if count is None else count
    return int(start or 0), int(start or 0) + items * buf.dtype.itemsize

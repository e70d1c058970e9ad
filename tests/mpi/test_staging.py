"""GPU data staged through pinned host memory (MPI not CUDA-aware), under Numba's CUDA simulator.

Simulated device arrays (`numba.cuda.to_device` with NUMBA_ENABLE_CUDASIM=1, which
tests/mpi/conftest.py turns on) take zipcoll's device path: with ZIPCOLL_CUDA_AWARE=0,
lossless plans move in chunks through pinned buffers, each chunk all-reduced on the host
by the plan's own schedule; with a codec, the codec runs its CUDA kernels on the device
and only packed bytes cross. Chunks are made tiny here (ZIPCOLL_STAGING_CHUNK_BYTES), so
that even small vectors take several.

- lossless: equal to the same schedule run over the same chunks as host arrays, bit for
  bit (for `native`, MPI's own Allreduce of those chunks); integers and MAX equal MPI's
  Allreduce of the whole message, bit for bit;
- with a codec: equal to the host path's result bit for bit (the CUDA kernels match the
  CPU kernels), so within the codec's bound as tests/mpi/test_compressed.py checks there.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from arrays import (FakeCUDA, all_rank_data, differing_across_ranks, expected, mismatch,
                    rank_data, topology_of)
from zipcoll import buffers
from zipcoll.collectives import staging
from zipcoll.collectives.ops import BY_NAME

pytestmark = pytest.mark.mpi

if not buffers.simulator_on():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "0":
        raise RuntimeError("tests/mpi/conftest.py should have turned the CUDA simulator on")
    pytest.skip("NUMBA_ENABLE_CUDASIM=0: these tests need the CUDA simulator",
                allow_module_level=True)

from numba import cuda  # noqa: E402  (the simulator's, now that it is on)

N = 37
CHUNK_BYTES = 48  # 6 float64 or 12 float32/int32 a chunk: 4-7 chunks of N


@pytest.fixture(autouse=True)
def staged(monkeypatch):
    monkeypatch.setenv("ZIPCOLL_CUDA_AWARE", "0")
    monkeypatch.setenv("ZIPCOLL_STAGING_CHUNK_BYTES", str(CHUNK_BYTES))
    monkeypatch.delenv("ZIPCOLL_STAGING_IN_FLIGHT", raising=False)


def _allreduce(comm, send, recv, op, algorithm, codec=None):
    zipcoll.allreduce(send, recv, op=op, comm=comm, algorithm=algorithm, codec=codec)


def _iallreduce(comm, send, recv, op, algorithm, codec=None):
    zipcoll.iallreduce(send, recv, op=op, comm=comm, algorithm=algorithm, codec=codec).wait()


def _Allreduce(comm, send, recv, op, algorithm, codec=None):
    zipcoll.Intracomm(comm, algorithm=algorithm, codec=codec).Allreduce(send, recv, op)


ENTRY_POINTS = [_allreduce, _iallreduce, _Allreduce]


def chunked_on_host(comm, data, op, algorithm):
    """The same schedule over the same chunks, on host arrays (native: MPI's own Allreduce)."""
    out = np.empty_like(data)
    for lo, hi in staging.staging_chunks(data.size, data.dtype.itemsize, CHUNK_BYTES):
        if algorithm == "native":
            comm.Allreduce(data[lo:hi], out[lo:hi], op=op)
        else:
            zipcoll.allreduce(data[lo:hi], out[lo:hi], op=op, comm=comm, algorithm=algorithm)
    return out


# -- lossless: chunks through pinned memory -----------------------------------------------

@pytest.mark.parametrize("call", ENTRY_POINTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm", zipcoll.ALGORITHMS)
def test_float_sum_equals_the_schedule_over_the_same_chunks(comm, algorithm, call):
    data = rank_data("float32", N, comm.rank)
    out = cuda.device_array(N, np.float32)
    call(comm, cuda.to_device(data), out, MPI.SUM, algorithm)
    got = out.copy_to_host()
    if algorithm != "auto":  # auto decides for the whole message, not for each chunk
        np.testing.assert_array_equal(got, chunked_on_host(comm, data, MPI.SUM, algorithm))
    assert mismatch(got, expected(comm, data), all_rank_data("float32", N, comm.size),
                    "sum") is None
    assert not differing_across_ranks(comm, {"result": got})


@pytest.mark.parametrize("dtype, op", [("int32", "sum"), ("float64", "max"), ("uint8", "bxor")])
@pytest.mark.parametrize("algorithm", ["native", "ring", "rabenseifner", "hierarchical", "auto"])
def test_exact_ops_equal_mpis_whole_allreduce(comm, algorithm, dtype, op):
    data = rank_data(dtype, N, comm.rank, op)
    buf = cuda.to_device(data)
    zipcoll.allreduce(MPI.IN_PLACE, buf, op=BY_NAME[op].mpi, comm=comm, algorithm=algorithm)
    np.testing.assert_array_equal(buf.copy_to_host(), expected(comm, data, op))


@pytest.mark.parametrize("algorithm", ["native", "ring", "tree"])
def test_in_place_specs_mean_and_a_new_result(comm, algorithm):
    data = rank_data("float64", 24, comm.rank).reshape(4, 6)
    buf = cuda.to_device(data)
    zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm=algorithm)
    want = chunked_on_host(comm, data.reshape(-1), MPI.SUM, algorithm).reshape(4, 6)
    np.testing.assert_array_equal(buf.copy_to_host(), want)
    out = cuda.to_device(np.full(30, 7.0))
    zipcoll.allreduce([cuda.to_device(data), 20, MPI.DOUBLE], [out, 20, MPI.DOUBLE],
                      comm=comm, algorithm=algorithm)
    host = out.copy_to_host()
    np.testing.assert_array_equal(host[:20], chunked_on_host(comm, data.reshape(-1)[:20],
                                                             MPI.SUM, algorithm))
    assert (host[20:] == 7).all()
    mean = zipcoll.allreduce(cuda.to_device(data), op="mean", comm=comm, algorithm=algorithm)
    assert type(mean).__name__ == "FakeCUDAArray" and mean.shape == (4, 6)
    np.testing.assert_array_equal(mean.copy_to_host(), want / comm.size)


@pytest.mark.parametrize("count", [0, 1, 5])
def test_short_messages(comm, count):
    data = rank_data("int64", count, comm.rank)
    out = cuda.device_array(count, np.int64)
    zipcoll.allreduce(cuda.to_device(data), out, comm=comm, algorithm="ring")
    np.testing.assert_array_equal(out.copy_to_host(), expected(comm, data))


def test_calls_in_flight_complete_in_any_order(comm):
    datas = [rank_data("int32", N + i, comm.rank) for i in range(3)]
    bufs = [cuda.to_device(d) for d in datas]
    requests = [zipcoll.iallreduce(MPI.IN_PLACE, bufs[0], comm=comm, algorithm="ring"),
                zipcoll.iallreduce(MPI.IN_PLACE, bufs[1], comm=comm, algorithm="native"),
                zipcoll.iallreduce(MPI.IN_PLACE, bufs[2], comm=comm, algorithm="hierarchical")]
    order = [2, 0, 1] if comm.rank % 2 else [1, 2, 0]
    for i in order:
        requests[i].wait()
    for data, buf in zip(datas, bufs):
        np.testing.assert_array_equal(buf.copy_to_host(), expected(comm, data))


class LoggedDeviceArray:
    """A simulated device array whose slices log each copy to or from the host."""

    def __init__(self, array, log, lo=0):
        self._array, self._log, self._lo = array, log, lo
        self.size, self.dtype = array.size, array.dtype

    def __getitem__(self, items):
        return LoggedDeviceArray(self._array[items], self._log, self._lo + items.start)

    def copy_to_host(self, host, stream=0):
        self._log.append(("to host", self._lo))
        self._array.copy_to_host(host, stream=stream)

    def copy_to_device(self, host, stream=0):
        self._log.append(("to device", self._lo))
        self._array.copy_to_device(host, stream=stream)


@pytest.mark.parametrize("buffers_in_flight", [1, 2, 3])
def test_the_pipeline_copies_the_next_chunk_before_reducing_this_one(comm, monkeypatch,
                                                                     buffers_in_flight):
    """Order of copies and all-reduces: chunk i+1's copy in is queued before chunk i is
    reduced; chunk i goes back before chunk i + depth comes in (their pinned buffer)."""
    from zipcoll.transport import transport_for

    monkeypatch.setenv("ZIPCOLL_STAGING_IN_FLIGHT", str(buffers_in_flight))
    data = rank_data("int32", 30, comm.rank)  # 12 int32 a chunk: 3 chunks
    log, device = [], cuda.to_device(data)
    array = LoggedDeviceArray(device, log)

    def reduce_chunk(host):
        log.append(("reduce", len(host)))
        yield [comm.Iallreduce(MPI.IN_PLACE, host, MPI.SUM)]

    steps = staging.through_pinned(transport_for(comm), array, array, reduce_chunk)
    for requests in steps:
        MPI.Request.Waitall(requests)
    np.testing.assert_array_equal(device.copy_to_host(), expected(comm, data))
    depth = min(buffers_in_flight, 3)
    want = [("to host", lo) for lo in (0, 10, 20)[:depth]]
    for i, lo in enumerate((0, 10, 20)):
        want += [("reduce", 10), ("to device", lo)]
        if i + depth < 3:
            want.append(("to host", (0, 10, 20)[i + depth]))
    assert log == want


# -- with a codec: encoding on the device -------------------------------------------------

CODEC_CASES = [("ring", "int8"), ("tree", "int4"), ("dbtree", "fp16"), ("twophase", "fp16"),
               ("allgather", "topk:ratio=0.2"), ("allgather", "threshold:tau=1"),
               ("hierarchical", "int8")]


# Under Numba's CUDA simulator the device kernels run as Python on NumPy scalars, whose
# uint64 random-stream state wraps (as it does on a GPU, by design) with a RuntimeWarning.
@pytest.mark.filterwarnings("ignore:overflow encountered in scalar add:RuntimeWarning")
@pytest.mark.parametrize("call", ENTRY_POINTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("algorithm, codec", CODEC_CASES, ids=[f"{a}-{c}" for a, c in CODEC_CASES])
def test_a_codec_on_the_device_gives_the_host_paths_bits(comm, algorithm, codec, call):
    data = rank_data("float32", N, comm.rank)
    out = cuda.device_array(N, np.float32)
    call(comm, cuda.to_device(data), out, MPI.SUM, algorithm, codec)
    host = zipcoll.allreduce(data, comm=comm, algorithm=algorithm, codec=codec)
    np.testing.assert_array_equal(out.copy_to_host(), host)


@pytest.mark.parametrize("layout", ["2x2nodes", "2x2grid"])
def test_two_levels_with_a_codec_per_level(comm, layout):
    topology = topology_of(comm, layout)
    algorithm = "hierarchical" if layout == "2x2nodes" else "torus"
    codec = {"intra": "fp16", "inter": "int4"}
    data = rank_data("float64", N, comm.rank)
    buf = cuda.to_device(data)
    zipcoll.allreduce(MPI.IN_PLACE, buf, op="mean", comm=comm, algorithm=algorithm,
                      codec=codec, topology=topology)
    host = zipcoll.allreduce(data, op="mean", comm=comm, algorithm=algorithm, codec=codec,
                             topology=topology)
    np.testing.assert_array_equal(buf.copy_to_host(), host)


@pytest.mark.parametrize("inner", ["native", "rabenseifner", "recdoubling"])
def test_a_lossless_inter_level_that_mpi_would_read_is_staged_on_the_host(comm, monkeypatch,
                                                                          inner):
    """An intra-level codec with an inter level whose schedule carries no codec (MPI's own
    collective, or a fold that hands back the raw vector): the inter level runs on host
    copies of the shard, through the chunk pipeline, and the result is the host path's."""
    topology = topology_of(comm, "2x2nodes")
    shards = []
    original = staging.through_pinned

    def through_pinned(t, source, target, reduce_chunk):
        shards.append(source.size)
        return original(t, source, target, reduce_chunk)

    monkeypatch.setattr(staging, "through_pinned", through_pinned)
    algorithm, codec = f"hierarchical:{inner}", {"intra": "fp16"}
    data = rank_data("float32", N, comm.rank)
    buf = cuda.to_device(data)
    zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm=algorithm, codec=codec,
                      topology=topology)
    host = zipcoll.allreduce(data, comm=comm, algorithm=algorithm, codec=codec,
                             topology=topology)
    np.testing.assert_array_equal(buf.copy_to_host(), host)
    assert shards, "the inter level was not staged"


def test_error_feedback_keeps_residuals_on_the_device_side_alike(comm):
    data = rank_data("float32", N, comm.rank)
    for step in range(2):
        buf = cuda.to_device(data)
        zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm="ring", codec="sign",
                          key="staged")
        host = zipcoll.allreduce(data, comm=comm, algorithm="ring", codec="sign", key="host")
        np.testing.assert_array_equal(buf.copy_to_host(), host, err_msg=f"step {step}")
    zipcoll.feedback.reset("staged")
    zipcoll.feedback.reset("host")


def test_only_packed_bytes_cross_to_the_host(comm, monkeypatch):
    """With int8, every copy to the host is a payload (a quarter of float32's bytes, plus
    the header and scales), never a raw chunk."""
    copied = []
    original = staging.Staged._to_host

    def to_host(self, wire, slot):
        copied.append((wire.dtype, wire.nbytes))
        return original(self, wire, slot)

    monkeypatch.setattr(staging.Staged, "_to_host", to_host)
    data = rank_data("float32", 4096, comm.rank)
    zipcoll.allreduce(MPI.IN_PLACE, cuda.to_device(data), comm=comm, algorithm="ring",
                      codec="int8")
    if comm.size > 1:
        most = zipcoll.get_codec("int8").wire_bytes(-(-4096 // comm.size))
        assert copied and all(d == np.uint8 and n <= most for d, n in copied)
        assert max(n for _, n in copied) < 4096 * 4 // comm.size // 2


# -- where MPI reads device memory itself, and bad settings -------------------------------

def test_cuda_aware_mpi_reads_the_device_memory_itself(comm, monkeypatch):
    monkeypatch.setenv("ZIPCOLL_CUDA_AWARE", "1")

    def no_staging(*args, **kwargs):
        raise AssertionError("staged although MPI is CUDA-aware")

    monkeypatch.setattr(staging, "through_pinned", no_staging)
    monkeypatch.setattr(staging, "Staged", no_staging)
    data = rank_data("float32", N, comm.rank)
    for codec in (None, "int8"):
        buf = cuda.to_device(data)
        zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm="ring", codec=codec)
        host = zipcoll.allreduce(data, comm=comm, algorithm="ring", codec=codec)
        np.testing.assert_array_equal(buf.copy_to_host(), host)


def test_fake_gpu_memory_without_a_driver_still_goes_to_mpi_as_is(comm):
    """A CAI-only host array (no CuPy, no CUDA driver: the simulator is not one) is handed
    to MPI as mpi4py would, staged or not: there is no device to copy from."""
    data = rank_data("int32", N, comm.rank)
    out = np.zeros(N, np.int32)
    zipcoll.allreduce(FakeCUDA(data), FakeCUDA(out), comm=comm, algorithm="ring")
    np.testing.assert_array_equal(out, expected(comm, data))


@pytest.mark.parametrize("name, value", [("ZIPCOLL_STAGING_CHUNK_BYTES", "0"),
                                         ("ZIPCOLL_STAGING_IN_FLIGHT", "none"),
                                         ("ZIPCOLL_CUDA_AWARE", "maybe")])
def test_a_bad_setting_raises_on_every_rank_and_the_next_call_works(comm, monkeypatch,
                                                                    name, value):
    data = rank_data("int32", N, comm.rank)
    buf = cuda.to_device(data)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        zipcoll.iallreduce(MPI.IN_PLACE, buf, comm=comm, algorithm="ring")
    np.testing.assert_array_equal(buf.copy_to_host(), data)  # untouched
    monkeypatch.setenv(name, {"ZIPCOLL_CUDA_AWARE": "0"}.get(name, "2"))
    zipcoll.allreduce(MPI.IN_PLACE, buf, comm=comm, algorithm="ring")
    np.testing.assert_array_equal(buf.copy_to_host(), expected(comm, data))


def test_host_and_device_buffers_in_one_call(comm):
    out = cuda.to_device(np.zeros(N))
    with pytest.raises(TypeError, match="sendbuf is on host but recvbuf is on cudasim"):
        zipcoll.allreduce(np.ones(N), out, comm=comm, algorithm="ring")
    assert (out.copy_to_host() == 0).all()

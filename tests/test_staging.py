"""The staging chunk rule and its settings, and how zipcoll learns whether MPI is CUDA-aware.

The pipeline itself runs under MPI and the CUDA simulator: tests/mpi/test_staging.py.
"""
import pytest

from zipcoll import settings
from zipcoll.collectives import staging
from zipcoll.collectives.staging import staging_chunks
from zipcoll.transport import _queried_cuda_support, cuda_aware, cuda_awareness


@pytest.fixture(autouse=True)
def default_settings(zipcoll_env):
    zipcoll_env(ZIPCOLL_STAGING_CHUNK_BYTES=None, ZIPCOLL_STAGING_IN_FLIGHT=None,
                ZIPCOLL_CUDA_AWARE=None)


# -- the chunk rule -----------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 1 << 20])  # 1 << 20 float32: exactly one chunk
def test_a_message_of_one_chunk_or_less_is_staged_whole(count):
    assert list(staging_chunks(count, 4)) == [(0, count)]


def test_chunks_are_near_equal_whole_elements_of_at_most_the_chunk_bytes():
    bounds = staging_chunks(1000, 8, most_bytes=1000)  # 125 float64 a chunk at most
    sizes = [hi - lo for lo, hi in bounds]
    assert len(bounds) == 8 and max(sizes) <= 125 and max(sizes) - min(sizes) <= 1
    assert bounds[0][0] == 0 and bounds[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous, in order


def test_one_more_element_than_fits_makes_two_chunks():
    assert list(staging_chunks((4 << 20) // 4 + 1, 4)) == [(0, 524289), (524289, 1048577)]


def test_an_element_larger_than_a_chunk_is_a_chunk():
    assert list(staging_chunks(3, 16, most_bytes=10)) == [(0, 1), (1, 2), (2, 3)]


def test_the_environment_sets_the_chunk_bytes_and_buffers(zipcoll_env):
    zipcoll_env(ZIPCOLL_STAGING_CHUNK_BYTES="4K", ZIPCOLL_STAGING_IN_FLIGHT="3")
    assert staging.chunk_bytes() == 4096 and staging.in_flight() == 3
    assert len(staging_chunks(10_000, 4)) == 10  # 1024 float32 a chunk at most
    assert list(staging_chunks(10_000, 4, most_bytes=40_000)) == [(0, 10_000)]  # the argument wins
    assert "4096 bytes, 3 in flight" in staging.staging_rule()


def test_defaults():
    assert staging.chunk_bytes() == 4 << 20
    assert staging.in_flight() == 2


@pytest.mark.parametrize("name", ["ZIPCOLL_STAGING_CHUNK_BYTES", "ZIPCOLL_STAGING_IN_FLIGHT"])
@pytest.mark.parametrize("value", ["0", "-4", "4X", "two"])
def test_a_bad_setting_is_a_value_error_naming_it(zipcoll_env, name, value):
    zipcoll_env(**{name: value})
    with pytest.raises(ValueError, match=name):
        settings.current()


# -- CUDA-awareness -----------------------------------------------------------------------

@pytest.mark.parametrize("value, answer", [("1", True), ("true", True), ("YES", True),
                                           ("0", False), ("false", False), (" no ", False)])
def test_zipcoll_cuda_aware_overrides_the_mpi_library(zipcoll_env, value, answer):
    zipcoll_env(ZIPCOLL_CUDA_AWARE=value)
    assert cuda_awareness() == (answer, f"ZIPCOLL_CUDA_AWARE={int(answer)}")
    assert cuda_aware() is answer


@pytest.mark.parametrize("value", ["", "  "])
def test_unset_or_blank_asks_the_mpi_library(zipcoll_env, value):
    zipcoll_env(ZIPCOLL_CUDA_AWARE=value)
    assert cuda_awareness() == _queried_cuda_support()


def test_the_mpi_librarys_answer_names_its_source():
    """Open MPI and MPICH export MPIX_Query_cuda_support; the pip Open MPI here says 0."""
    from mpi4py import MPI

    answer, source = cuda_awareness()
    if "Open MPI" in MPI.Get_library_version():
        assert source == f"MPIX_Query_cuda_support() = {int(answer)}"
    else:
        assert "MPIX_Query_cuda_support" in source


@pytest.mark.parametrize("value", ["2", "maybe", "onn"])
def test_a_bad_zipcoll_cuda_aware_is_a_value_error(zipcoll_env, value):
    zipcoll_env(ZIPCOLL_CUDA_AWARE=value)
    with pytest.raises(ValueError, match="ZIPCOLL_CUDA_AWARE"):
        settings.current()
    assert cuda_awareness() == _queried_cuda_support()  # read without raising: its default


def test_zipcoll_info_shows_the_answer_and_the_staging_rule(zipcoll_env):
    from zipcoll.info import report

    zipcoll_env(ZIPCOLL_CUDA_AWARE="0")
    lines = dict(report())
    assert lines["CUDA-aware MPI"] == "False (ZIPCOLL_CUDA_AWARE=0)"
    assert lines["GPU staging"].startswith(f"chunks of up to {4 << 20} bytes, 2 in flight")


# -- which buffers are staged -------------------------------------------------------------

def test_host_memory_posing_as_a_gpus_is_never_staged(monkeypatch):
    """A CAI-only host array without CuPy (mpi4py's fake GPU arrays): no driver here, and
    on a GPU machine the driver does not know its pointer; MPI reads it as is."""
    import sys

    import numpy as np

    from arrays import FakeCUDA
    from zipcoll.buffers import as_array
    from zipcoll.devices import needs_staging

    monkeypatch.setitem(sys.modules, "cupy", None)
    window = as_array(FakeCUDA(np.ones(3)))
    assert not needs_staging(window, mpi_reads_gpu_memory=False)
    assert not needs_staging(window, mpi_reads_gpu_memory=True)
    assert not needs_staging(as_array(np.ones(3)), mpi_reads_gpu_memory=False)

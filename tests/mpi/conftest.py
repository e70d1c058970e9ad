"""MPI tests: collective outcomes, and the `comm` fixture.

Run under mpiexec through tests/run.py (`mpiexec -n N python -m pytest --with-mpi tests/mpi`),
with Numba's CUDA simulator on unless NUMBA_ENABLE_CUDASIM is set.

Outcomes are collective: after each phase of each test (setup, call, teardown) the
ranks exchange whether they failed, and if any did, the test fails on every rank with a
message naming the failing ranks. So one rank's failed assert fails the test everywhere
instead of passing on some ranks while the failing rank falls out of step, and the
next collective hangs. Skips are not failures. A test that hangs anyway is ended by
pytest-timeout's thread method (pyproject: timeout, timeout_method = "thread"): it
dumps the stacks and calls os._exit, and mpiexec then aborts the other ranks.
"""
from __future__ import annotations

import os

# Numba's CUDA simulator stands in for a GPU (chosen before numba.cuda is first imported):
# simulated device arrays then take zipcoll's device paths (staging, codecs on the
# device). NUMBA_ENABLE_CUDASIM=0 keeps real CUDA (benchmarks/gpu_check.sh sets it).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402
from mpi4py import MPI  # noqa: E402

_outcomes = None  # a private duplicate of COMM_WORLD: the exchange never matches a test's messages


def _outcome_comm() -> MPI.Intracomm:
    global _outcomes
    if _outcomes is None:
        _outcomes = MPI.COMM_WORLD.Dup()
    return _outcomes


def _collective(phase: str):
    """Hook wrapper: run the phase, then fail it on every rank if it failed on any."""

    @pytest.hookimpl(wrapper=True)
    def hook(item):
        failure = None
        try:
            return (yield)
        except pytest.skip.Exception:
            raise
        except (Exception, pytest.fail.Exception) as exc:
            failure = exc
            raise
        finally:
            why = None if failure is None else _short(failure)
            failed = {r: w for r, w in enumerate(_outcome_comm().allgather(why)) if w is not None}
            if failure is not None and len(failed) > 1:
                failure.add_note(f"[{phase} failed on ranks {sorted(failed)}]")
            elif failure is None and failed:
                # raising in `finally` replaces a normal return: this rank fails too
                lines = "\n".join(f"  rank {r}: {w}" for r, w in failed.items())
                pytest.fail(f"{phase} failed on {len(failed)} of {MPI.COMM_WORLD.Get_size()} "
                            f"ranks (tests/run.py prints their output):\n{lines}", pytrace=False)

    hook.__name__ = f"pytest_runtest_{phase}"
    return hook


def _short(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}"


pytest_runtest_setup = _collective("setup")
pytest_runtest_call = _collective("call")
pytest_runtest_teardown = _collective("teardown")


@pytest.fixture
def comm() -> MPI.Intracomm:
    """MPI.COMM_WORLD."""
    return MPI.COMM_WORLD


@pytest.fixture
def small_slices() -> int:
    """Slices of 4 KiB (and every rank its own node, with `sliced_topology`): small test
    messages then run in several slices, as large ones do on a cluster."""
    import zipcoll

    zipcoll.configure(slice_bytes=4096)  # tests/conftest.py resets it after the test
    return 4096


@pytest.fixture
def nodes(comm, small_slices):
    """Every rank its own node (slices across nodes), with small slices."""
    import zipcoll

    return zipcoll.Topology.from_comm(comm, ranks_per_node=1)


@pytest.fixture
def count_slices(monkeypatch):
    """count_slices(module): a list that gets, call by call, how many slices each call
    through `module.pipelined` ran in."""
    def counter(module) -> list:
        started = []
        pipelined = module.pipelined

        def counting(runs, window):
            runs = list(runs)
            started.append(len(runs))
            return pipelined(iter(runs), window)

        monkeypatch.setattr(module, "pipelined", counting)
        return started
    return counter


@pytest.fixture(scope="module")
def torch_process_group():
    """gloo over MPI's ranks (zipcoll.torch.init_process_group), once per test module that
    asks for it (`pytest.mark.usefixtures("torch_process_group")`): DDP and FSDP need one to
    set up. Destroyed after the module's last test, so the next module starts its own."""
    import torch.distributed as dist

    import zipcoll.torch as ztorch

    ztorch.init_process_group()
    yield
    dist.destroy_process_group()


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """pytest-mpi's "MPI Information" prints MPI.Get_library_version(), which Open MPI ends
    with a NUL byte: strip it while the summary is written, so the test log is plain text."""
    version = MPI.Get_library_version
    MPI.Get_library_version = lambda: version().rstrip("\x00")
    try:
        return (yield)
    finally:
        MPI.Get_library_version = version

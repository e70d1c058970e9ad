"""mpi4py's own Allreduce/Iallreduce tests (or its Allgather / ReduceScatter /
ReduceScatterBlock ones), run on zipcoll.Intracomm.

Run under mpiexec with mpi4py's sdist `test/` folder on the command line:

    mpiexec -n 4 python benchmarks/peer/mpi4py_peer.py TESTDIR ALGORITHM [BACKENDS [SUITE]]

SUITE: "allreduce" (default) or "sharded" (testAllgather, testReduceScatter,
testReduceScatterBlock, blocking and non-blocking: ALGORITHM then names a schedule of
`zipcoll.SHARDED`).
ALGORITHM: a zipcoll algorithm name, or "mpi4py" for mpi4py's own Intracomm (the
baseline). BACKENDS: a comma-separated list of mpi4py's array backends (arrayimpl.py),
by class name prefix: "FakeGPU" (default: host arrays exposing only
`__cuda_array_interface__`), "ArrayArray", "ArrayNumPy". The DLPack wrappers are left out.

The tests pick their communicator from the TestCase class attribute COMM (COMM_WORLD,
COMM_SELF) or set it in setUp (the *Dup classes); each is replaced by a zipcoll.Intracomm
over the same communicator, so the tests run unchanged. Prints one summary line per rank;
the exit status is non-zero if any test failed on this rank.
"""
from __future__ import annotations

import sys
import unittest

from mpi4py import MPI

SUITES = {"allreduce": ("testAllreduce", "testIallreduce"),
          "sharded": ("testAllgather", "testReduceScatter", "testReduceScatterBlock")}
MODULES = ("test_cco_buf", "test_cco_nb_buf")


def _backends(prefixes: list[str]) -> None:
    """Keep only the array backends named (arrayimpl.loop() iterates over this list)."""
    import arrayimpl

    kept = [cls for cls in arrayimpl.ArrayBackends
            if any(cls.__name__.startswith(p) for p in prefixes)]
    arrayimpl.ArrayBackends[:] = kept
    if not kept:
        raise SystemExit(f"no mpi4py array backend matches {prefixes}")


def _wrap(comm: MPI.Intracomm, algorithm: str) -> MPI.Intracomm:
    if algorithm == "mpi4py":
        return comm
    import zipcoll

    return zipcoll.Intracomm(comm, algorithm=algorithm)


def _substitute(case: type, algorithm: str) -> None:
    """Give a TestCase class a zipcoll.Intracomm in place of its communicator."""
    if "setUp" in vars(case):  # the *Dup classes: self.COMM = MPI.COMM_X.Dup()
        original = case.setUp

        def setUp(self, original=original):
            original(self)
            self.COMM = _wrap(self.COMM, algorithm)

        case.setUp = setUp
    elif case.COMM != MPI.COMM_NULL:
        case.COMM = _wrap(case.COMM, algorithm)


def suite(algorithm: str, names: tuple[str, ...] = SUITES["allreduce"]) -> unittest.TestSuite:
    import importlib

    tests = unittest.TestSuite()
    for name in MODULES:
        module = importlib.import_module(name)
        for case in vars(module).values():
            if not (isinstance(case, type) and issubclass(case, unittest.TestCase)):
                continue
            if getattr(case, "COMM", MPI.COMM_NULL) == MPI.COMM_NULL and "setUp" not in vars(case):
                continue
            _substitute(case, algorithm)
            tests.addTests(case(t) for t in names if hasattr(case, t))
    return tests


def main() -> int:
    testdir, algorithm = sys.argv[1], sys.argv[2]
    prefixes = (sys.argv[3] if len(sys.argv) > 3 else "FakeGPU").split(",")
    names = SUITES[sys.argv[4] if len(sys.argv) > 4 else "allreduce"]
    sys.path.insert(0, testdir)
    _backends(prefixes)
    tests = suite(algorithm, names)
    result = unittest.TextTestRunner(stream=open("/dev/null", "w"), verbosity=0).run(tests)
    failed = len(result.failures) + len(result.errors)
    details = "".join(f"\n  {t.id()}: {err.strip().splitlines()[-1]}"
                      for t, err in result.failures + result.errors)
    comm = MPI.COMM_WORLD
    print(f"rank {comm.rank}/{comm.size} {algorithm} [{','.join(prefixes)}]: "
          f"{result.testsRun} tests, {failed} failed, {len(result.skipped)} skipped"
          f"{details}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The thread level MPI granted is honoured: below MPI_THREAD_MULTIPLE a second thread
inside zipcoll gets a clear RuntimeError, not a crash (each level needs its own job)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from run import mpi_env

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    from mpi4py import MPI
    import zipcoll

    world = MPI.COMM_WORLD
    other = world.Dup()
    x = np.ones(1024, np.float32)
    for c in (world, other):
        zipcoll.allreduce(x, comm=c, algorithm="ring")   # both ready
    said = []

    def second(delay):
        time.sleep(delay)
        try:
            zipcoll.iallreduce(x, comm=other, algorithm="ring").wait()
            said.append("ran")
        except RuntimeError as exc:
            said.append("refused: " + str(exc))

    thread = threading.Thread(target=second, args=(0.3,))
    if world.rank == 0:
        thread.start()            # while the main thread waits for the late rank below
    if world.rank == 1:
        time.sleep(1.5)
    got = zipcoll.allreduce(x, comm=world, algorithm="ring")
    if world.rank == 0:
        thread.join()
    assert np.all(got == world.size)
    got = zipcoll.allreduce(x, comm=other, algorithm="ring")   # the job goes on
    assert np.all(got == world.size)
    print("rank", world.rank, "level", MPI.Query_thread(), said, flush=True)
""")


@pytest.mark.parametrize("level, expected", [
    ("serialized", "refused: MPI granted MPI_THREAD_SERIALIZED: another thread"),
    ("funneled", "refused: MPI granted MPI_THREAD_FUNNELED: zipcoll calls only from the main"),
])
def test_a_second_thread_below_thread_multiple_is_refused(tmp_path, level, expected):
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    env["MPI4PY_RC_THREAD_LEVEL"] = level
    script = tmp_path / "threads.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("rank 0"))
    assert expected in line, proc.stdout

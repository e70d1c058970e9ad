"""A failing rank ends the job: an uncaught exception, or a killed process, under plain python."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from run import mpi_env

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from mpi4py import MPI
    import zipcoll

    zipcoll.allreduce(np.ones(4), algorithm="ring")
    if MPI.COMM_WORLD.rank == 1:
        if sys.argv[1] == "raise":
            raise RuntimeError("rank 1 fails here")
        os.kill(os.getpid(), signal.SIGKILL)
    zipcoll.allreduce(np.ones(4), algorithm="ring")   # rank 0 waits here for rank 1
    print("rank", MPI.COMM_WORLD.rank, "never gets here")
""")


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_rank_ends_the_job(tmp_path, how):
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "fail.py"
    script.write_text(SCRIPT)
    start = time.monotonic()
    proc = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(script), how], env=env,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert took < 30, took
    assert "never gets here" not in proc.stdout
    if how == "raise":
        assert "RuntimeError: rank 1 fails here" in proc.stderr  # the traceback is shown

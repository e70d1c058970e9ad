"""A failing rank ends the job: an uncaught exception, a killed process or a non-zero exit,
under plain python; sys.exit(0) on one rank is a normal end."""
from __future__ import annotations

import os
import shutil
import signal
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


EXIT_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    from mpi4py import MPI
    import zipcoll

    zipcoll.allreduce(np.ones(4), algorithm="ring")
    if MPI.COMM_WORLD.rank == 1:
        time.sleep(1.0)                                  # the others are in the call by now
        print("rank 1 exits", flush=True)
        sys.exit(int(sys.argv[1]))
    zipcoll.allreduce(np.ones(1000), algorithm="ring")   # waits for rank 1 forever
    print("rank", MPI.COMM_WORLD.rank, "never gets here", flush=True)
""")


def _launch(tmp_path, code: int) -> subprocess.Popen:
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    return subprocess.Popen(["mpiexec", "-n", "4", sys.executable, str(script), str(code)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _end(proc: subprocess.Popen) -> str:
    """Stop a job still running: the launcher first (it ends its ranks), then its session."""
    proc.terminate()
    try:
        output, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    return output


def test_sys_exit_non_zero_on_one_rank_ends_the_job(tmp_path):
    """sys.exit(3) on rank 1 while ranks 0, 2, 3 wait for it inside zipcoll.allreduce:
    the job ends with a non-zero status, as under `python -m mpi4py` (plain python)."""
    start = time.monotonic()
    proc = _launch(tmp_path, 3)
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        output = _end(proc)
        pytest.fail(f"the job still ran 30 s after rank 1's sys.exit(3):\n{output}")
    took = time.monotonic() - start
    assert proc.returncode != 0, output
    assert took < 30, took
    assert "rank 1 exits" in output and "never gets here" not in output, output


def test_sys_exit_zero_on_one_rank_is_a_normal_end_and_the_others_wait(tmp_path):
    """sys.exit(0) is a normal end of that rank (it finalizes MPI), as under mpi4py: ranks
    still waiting on it in a call keep waiting (an erroneous MPI program), so the job does
    not end by itself; what zipcoll's failures module documents."""
    proc = _launch(tmp_path, 0)
    lines = []
    deadline = time.monotonic() + 90  # a loaded machine starts four ranks slowly
    for line in proc.stdout:  # until rank 1 has exited
        lines.append(line)
        if "rank 1 exits" in line or time.monotonic() > deadline:
            break
    try:
        output, _ = proc.communicate(timeout=10)  # the others still wait for it
        pytest.fail(f"the job ended (status {proc.returncode}):\n{''.join(lines)}{output}")
    except subprocess.TimeoutExpired:
        output = "".join(lines) + _end(proc)
    assert "rank 1 exits" in output, output


CAUGHT_EXIT_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    import zipcoll

    zipcoll.allreduce(np.ones(4), algorithm="ring")
    try:
        sys.exit(3)                                      # caught: the program goes on
    except SystemExit as exc:
        assert exc.code == 3
    total = zipcoll.allreduce(np.ones(4), algorithm="ring")
    print("rank", MPI.COMM_WORLD.rank, "done", total[0], flush=True)
""")


def test_a_caught_sys_exit_does_not_end_the_job(tmp_path):
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "caught.py"
    script.write_text(CAUGHT_EXIT_SCRIPT)
    proc = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("done 2.0") == 2, proc.stdout

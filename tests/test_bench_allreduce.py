"""zipcoll-bench allreduce: size parsing, validation, table format, and one run on 2 ranks."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from zipcoll.bench import allreduce_bench as bench
from zipcoll.bench import timing

from run import mpi_env  # tests/run.py: Open MPI settings, the venv's bin/ first on PATH


@pytest.mark.parametrize("text, nbytes", [
    ("4", 4), ("64K", 64 << 10), ("64M", 64 << 20), ("1G", 1 << 30), ("16k", 16 << 10),
    ("16KiB", 16 << 10), ("2MB", 2 << 20), (" 8 ", 8),
])
def test_parse_size(text, nbytes):
    assert timing.parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "K", "4X", "-4", "1.5M", "4:8"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        timing.parse_size(text)


@pytest.mark.parametrize("text, expected", [
    ("4:64M", (4, 64 << 20)), ("1K:64M", (1024, 64 << 20)), ("64M", (4, 64 << 20)),
    ("8:", (8, 1 << 20)), ("16:16", (16, 16)),
])
def test_parse_range(text, expected):
    assert timing.parse_range(text) == expected


@pytest.mark.parametrize("text", ["8:4", "0:4", "a:b"])
def test_parse_range_rejects(text):
    with pytest.raises(ValueError):
        timing.parse_range(text)


def test_message_sizes_double_from_min():
    assert timing.message_sizes(4, 64) == [4, 8, 16, 32, 64]
    assert timing.message_sizes(3, 20) == [3, 6, 12]
    assert timing.message_sizes(1 << 20, 4 << 20) == [1 << 20, 2 << 20, 4 << 20]


def test_iteration_counts_follow_osu():
    assert timing.iteration_counts(8192) == (1000, 100)
    assert timing.iteration_counts(8193) == (100, 10)
    assert timing.iteration_counts(4, iterations=3, warmup=1) == (3, 1)
    assert timing.iteration_counts(1 << 26, iterations=7) == (7, 10)


def _buffers(result, exact, send):
    return bench.Buffers(np.asarray(send), np.asarray(exact), np.asarray(result))


def test_compare_floats_within_reordering_tolerance():
    from mpi4py import MPI
    send = np.array([1.0, -2.0, 3.0], np.float32)
    close = send + np.float32(1e-7)
    assert bench.compare(_buffers(close, send, send), "sum", MPI.COMM_SELF, None).ok
    far = send + np.float32(1e-3)
    assert bench.compare(_buffers(far, send, send), "sum", MPI.COMM_SELF, None).ok is False


def test_compare_integers_and_max_exactly():
    from mpi4py import MPI
    send = np.arange(5, dtype=np.int32)
    assert bench.compare(_buffers(send, send, send), "sum", MPI.COMM_SELF, None).ok
    off = send.copy()
    off[2] += 1
    assert bench.compare(_buffers(off, send, send), "sum", MPI.COMM_SELF, None).ok is False
    floats = send.astype(np.float64)
    assert bench.compare(_buffers(floats + 1e-15, floats, floats), "max",
                         MPI.COMM_SELF, None).ok is False


def test_input_data_differs_by_rank_and_cannot_overflow():
    a = bench.input_data(1000, np.dtype(np.float32), "sum", 0, 2, seed=0)
    b = bench.input_data(1000, np.dtype(np.float32), "sum", 1, 2, seed=0)
    assert a.dtype == np.float32 and not np.array_equal(a, b)
    small = bench.input_data(1000, np.dtype(np.uint8), "sum", 0, 4, seed=0)
    assert int(small.max()) * 4 <= 255


def test_table_columns_line_up():
    spread = timing.Spread(2e-3, 1e-3, 3e-3)
    row = bench.Row(1024, 256, 10, 1, spread, spread, 2, check=bench.Check(True))
    cols = bench.table_columns(full=True, codec=False, validate=True)
    header, line = bench.format_header(cols), bench.format_row(row, cols)
    assert header.startswith("# Size") and len(header) == len(line)
    assert line.split() == ["1024", "2000.00", "1000.00", "3000.00", "10", "0.001", "0.001",
                            "2000.00", "1.000", "PASS"]


def test_run_on_two_ranks(tmp_path):
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "result.json"
    cmd = ["mpiexec", "-n", "2", sys.executable, "-m", "zipcoll.bench", "allreduce",
           "-m", "4:4K", "-i", "3", "-x", "1", "-c", "--algorithm", "ring", "--json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# OSU MPI Allreduce Latency Test")
    assert any(line.startswith("# Timing:") for line in lines)
    table = [line.split() for line in lines if line and not line.startswith("#")]
    assert [int(fields[0]) for fields in table] == [4 << i for i in range(11)]
    assert all(fields[-1] == "PASS" for fields in table)
    assert "# Validation: PASS" in lines
    record = json.loads(out.read_text())
    assert record["ranks"] == 2 and record["algorithm"] == "ring"
    assert record["mpi_library"] and record["hostname"] and record["timestamp"]
    assert [r["size"] for r in record["rows"]] == [4 << i for i in range(11)]
    assert all(r["validation"] == "PASS" and r["avg_us"] > 0 for r in record["rows"])


def test_first_size_warms_up_before_the_probe():
    """A process's first calls (kernel loads, connections) must not size the time budget:
    at the first size each call runs once untimed before the probe; later sizes probe only."""
    from mpi4py import MPI
    args = bench.build_parser().parse_args(["-m", "4K:8K", "--time-budget", "1"])
    b = bench.Bench(args, MPI.COMM_SELF)
    calls = {"native": 0, "ours": 0}

    def counted(name):
        def call():
            calls[name] += 1
        return call

    b.iteration_counts(4096, counted("native"), counted("ours"))
    assert calls == {"native": 2, "ours": 2}  # warm-up, then the probe
    b.iteration_counts(8192, counted("native"), counted("ours"))
    assert calls == {"native": 3, "ours": 3}  # the probe only


def test_two_calls_are_timed_in_turn_so_a_slowdown_weighs_on_both(monkeypatch):
    """native and zipcoll alternate every IN_TURN calls: on a machine that turns 3x slower
    halfway through the run, their ratio is still their calls' (2x), where timing one
    after the other would read 6x."""
    from mpi4py import MPI
    clock = {"now": 0.0, "calls": 0}
    iterations = 2 * timing.IN_TURN
    order = []

    def call(name, seconds):
        def run():
            clock["calls"] += 1
            slow = 3 if clock["calls"] > iterations else 1  # the second half of 2 x iterations
            clock["now"] += seconds * slow
            order.append(name)
        return run

    class Clock:  # MPI's clock for this test only; the communicator stays MPI's own
        Wtime = staticmethod(lambda: clock["now"])

    monkeypatch.setattr(timing, "MPI", Clock)
    a, b = timing.time_in_turn([call("a", 1.0), call("b", 2.0)], iterations, 0, MPI.COMM_SELF)
    assert order == (["a"] * timing.IN_TURN + ["b"] * timing.IN_TURN) * 2
    assert (a, b) == (2.0, 4.0)
    clock.update(now=0.0, calls=0)
    order.clear()
    odd = timing.time_in_turn([call("a", 1.0), call("b", 2.0)], timing.IN_TURN + 3, 0,
                             MPI.COMM_SELF)
    assert order == ["a"] * timing.IN_TURN + ["b"] * timing.IN_TURN + ["a"] * 3 + ["b"] * 3
    assert len(odd) == 2


def test_auto_learns_untimed_before_its_timed_calls(tmp_path):
    """--learn-calls: auto's first calls at each size run untimed (its online tuning), their
    time goes to learning_us, and the timed calls' plans are counted after them."""
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "auto.json"
    cmd = ["mpiexec", "-n", "2", sys.executable, "-m", "zipcoll.bench", "allreduce",
           "-m", "64K:128K", "-i", "4", "-x", "1", "--algorithm", "auto", "--learn-calls", "12",
           "--json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert all(r["learning_us"] > 0 for r in rows)
    assert all(sum(r["plans"].values()) == 4 + 1 for r in rows)  # warm-up + timed, not learning
    args = bench.build_parser().parse_args(["--algorithm", "ring", "--learn-calls", "5"])
    from mpi4py import MPI
    assert bench.Bench(args, MPI.COMM_SELF).learn(lambda: None) is None  # fixed plans learn nothing

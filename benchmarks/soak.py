#!/usr/bin/env python
"""Soak: thousands of random zipcoll calls, each checked, memory sampled on every rank.

    mpiexec -n 4 python benchmarks/soak.py --calls 20000 --seed 1 --max-bytes 16M --out DIR

Every rank draws the same calls: call i comes from (--seed, i) alone, so only the data
(seeded by rank) and the order in which a rank completes its non-blocking calls differ
between ranks, and `--first i --calls 1` replays call i. A call picks:

- a communicator: COMM_WORLD, a Dup of it kept for the run, its halves or its odd and
  even ranks (Split), or a Dup made and freed around the call;
- a size, log-uniform from 1 byte to --max-bytes (1 call in 50: 0 items);
- a dtype and an op MPI defines on it ("mean" too on floats); an algorithm of
  zipcoll.ALGORITHMS, two-level ones also over a named inter schedule ("hierarchical:tree");
  a layout: the found one, emulated nodes (`Topology.from_comm(comm, ranks_per_node=2)`)
  or a 2-D grid;
- on float SUM and "mean", 7 times in 10 a codec the schedule accepts (every codec of
  `zipcoll.list_codecs()`, as tests/mpi/test_compressed.py spells them; per level on
  two-level schedules) as a spec, a config, a Codec or an ErrorFeedback object kept
  across calls; a third of them with key= (error feedback);
- an entry point: allreduce into a recvbuf, in place or into a new array;
  zipcoll.Intracomm(...).Allreduce, in place or not; or a batch of 2-6 iallreduce calls
  completed by wait(), polling test(), zipcoll.waitall or zipcoll.waitany, in a random
  order per rank (--orders same:
  the same order on every rank); with --many N, one batch in 25 has N small calls;
- or sparse_allgather / sparse_allreduce ("allgatherv" or "gtopk") where some ranks hold
  no pairs.

Those are the "random" units. --cases (default: all) adds, each 1 unit in 25 (see
`draw_case`): "orders" (non-blocking calls on 2-3 communicators started in each rank's
own order), "blocking" (blocking calls on one communicator between non-blocking ones on
another on even ranks, before them on odd ranks), "threads" (two threads, each on its
own communicator; only where MPI grants THREAD_MULTIPLE), "free" (a communicator freed
while its calls are in flight). `--cases random` draws exactly the calls it drew before
the cases existed.

Checks, per call: lossless results against the MPI library's own Allreduce of the same
data (tests/arrays.py `mismatch`: bit for bit, floats within reordering error); lossy
ones against tests/mpi/test_compressed.py's bound model (qsgd, randomk, key= calls and
kept ErrorFeedback objects, which that model does not bound, only for being finite);
sparse ones against the
concatenation / tests/mpi/test_sparse.py's serial gtopk; every result bit-identical on
every rank of its communicator; the send buffer untouched, a recvbuf's tail too.

A watchdog ends the job (MPI Abort, exit status 3) when one call or batch takes longer
than --timeout seconds, after printing it and every thread's stack. VmRSS and the peak
RSS (VmHWM) are read from /proc/self/status every --rss-every calls, after gc and
glibc's malloc_trim, with the scratch zipcoll keeps and its contexts alive. The summary
(calls by kind and case, mismatches, hangs, RSS and peak RSS at the start, after
--warmup calls and at the end, per rank) is printed by rank 0 and written to
DIR/summary.txt, with every problem and sample to DIR/soak.json. The exit status is 1
when a call had a problem or a rank's RSS grew after warm-up by more than --max-growth
MiB (32).
"""
from __future__ import annotations

import argparse
import ctypes
import faulthandler
import gc
import json
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT / "tests", ROOT / "tests" / "mpi"):  # the checks the tests make
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import zipcoll  # noqa: E402
from arrays import (OP_DTYPE_CASES, differing_across_ranks, expected, mismatch,  # noqa: E402
                    rank_data)
from test_compressed import ALL_SPECS, BOUNDED, accepted, check_bound  # noqa: E402
from test_sparse import as_pairs, dense_of, serial_gtopk  # noqa: E402
from zipcoll.bench.timing import machine, parse_size  # noqa: E402
from zipcoll.collectives import SCHEDULES  # noqa: E402
from zipcoll.collectives.ops import BY_NAME  # noqa: E402
from zipcoll.codecs import ErrorFeedback  # noqa: E402
from zipcoll.collectives.context import context_for  # noqa: E402
from zipcoll.collectives.plan import make_plan  # noqa: E402

HANG_STATUS = 3
SENTINEL_TAIL = 3  # receive-buffer items past the count, which must stay zero
COMMS = ("world", "dup", "halves", "odd-even", "fresh-dup")
COMM_WEIGHTS = (0.4, 0.15, 0.15, 0.15, 0.15)
KEPT = ("world", "dup", "halves", "odd-even")  # communicators kept for the whole run
THREAD_COMMS = ("thread-0", "thread-1")  # a Dup of the world per thread of a "threads" unit
# What a unit of work can be: "random" (one call or a batch on one communicator, or a
# sparse call) or one of the cases of CASE_UNITS, each 1 unit in CASE_ODDS when enabled.
CASES = ("random", "orders", "blocking", "threads", "free")
CASE_ODDS = 25
CASE_STREAM = 8191  # the case of unit i comes from (seed, i, CASE_STREAM): with the new
#                     cases off, every unit is drawn as before they existed
LAYOUTS = ("found", "nodes", "grid")
# a spec, a config dict, a Codec, or an ErrorFeedback kept across calls (one per spec, as a
# training loop keeps one per tensor)
CODEC_FORMS = ("spec", "config", "object", "feedback")
FEEDBACK_OBJECTS: dict[str, Any] = {}
COMPLETIONS = ("wait", "test", "waitall", "waitany")
ENTRIES = ("out", "inplace", "new", "intracomm", "intracomm-inplace")
TWO_LEVEL = tuple(n for n, s in SCHEDULES.items() if s.two_level)
FLAT = tuple(n for n, s in SCHEDULES.items() if not s.two_level)
FLOAT_DTYPES = ("float16", "float32", "float64")
# level-1 codecs of two-level schedules: carried by a per-hop ring
INTRA_SPECS = tuple(s for s in ALL_SPECS.values()
                    if SCHEDULES["ring"].accepts(zipcoll.get_codec(s)))
# sparse collectives: kept small, the gtopk reference is a Python loop
MANY_MAX_BYTES = 4 << 10  # the calls of a batch of `--many` outstanding
SPARSE_VALUE_DTYPES = ("int32", "int64", "float32", "float64")
SPARSE_MAX_SIZE = 1 << 20
SPARSE_MAX_NNZ = {"allgatherv": 1 << 16, "gtopk": 2048}


# -- what one call is ------------------------------------------------------------------------

@dataclass
class Call:
    """One zipcoll call, the same on every rank (the data differ)."""

    index: int
    comm: str
    kind: str  # an entry of ENTRIES, "iallreduce", "sparse_allgather", "sparse_allreduce"
    dtype: str = "float32"
    count: int = 0
    op: str = "sum"
    algorithm: str = "auto"
    layout: str = "found"
    codec: Any = None  # a spec, or {"intra": spec, "inter": spec}
    key: str | None = None
    codec_form: str = "spec"  # how the codec is passed: a spec, a config dict or a Codec
    sparse_algorithm: str = "allgatherv"
    index_dtype: str = "int64"
    k: int | None = None

    def __str__(self) -> str:
        if self.kind.startswith("sparse"):
            return (f"#{self.index} {self.kind} comm={self.comm} algorithm={self.sparse_algorithm} "
                    f"values={self.dtype} indices={self.index_dtype} size={self.count} k={self.k}")
        extra = f" codec={json.dumps(self.codec)}" if self.codec is not None else ""
        if self.codec is not None and self.codec_form != "spec":
            extra += f" (as {self.codec_form})"
        extra += f" key={self.key}" if self.key else ""
        return (f"#{self.index} {self.kind} comm={self.comm} algorithm={self.algorithm} "
                f"layout={self.layout} {self.dtype}[{self.count}] op={self.op}{extra}")


@dataclass
class Draw:
    """The next unit of work: one call, or a batch of non-blocking calls on one communicator
    ("random"), or the calls of one of the other CASES (on several communicators)."""

    calls: list[Call]
    completion: str = "wait"  # how a batch is completed: one of COMPLETIONS
    case: str = "random"


def draw(seed: int, index: int, max_bytes: int, sizes: dict[str, int],
         many: int = 0, cases: tuple[str, ...] = ("random",)) -> Draw:
    """The unit of work starting at call `index` (from the seed and index alone).

    One batch in 25 has `many` small calls outstanding at once (0: none such).
    `cases`: the kinds of unit drawn; each enabled case but "random" is 1 unit in
    CASE_ODDS (see `draw_case`).

    `sizes`: this rank's size of each communicator. Choices that do not fit a
    communicator's size are made deterministically from it, after every random number
    is drawn, so ranks of different communicators stay in step.
    """
    case = _draw_case(seed, index, cases)
    if case != "random":
        return draw_case(case, seed, index, max_bytes, sizes)
    rng = np.random.default_rng([seed, index])
    comm = COMMS[rng.choice(len(COMMS), p=COMM_WEIGHTS)]
    what = rng.random()
    if what < 0.08:
        return Draw([_draw_sparse(rng, index, comm, max_bytes)])
    if what < 0.2:
        n, crowd = int(rng.integers(2, 7)), rng.random() < 0.04 and many > 0
        n, most = (many, min(max_bytes, MANY_MAX_BYTES)) if crowd else (n, max_bytes)
        calls = [_draw_dense(rng, index + j, comm, most, sizes[comm], batch=True)
                 for j in range(n)]
        return Draw(calls, completion=COMPLETIONS[int(rng.integers(len(COMPLETIONS)))])
    return Draw([_draw_dense(rng, index, comm, max_bytes, sizes[comm], batch=False)])


def _draw_case(seed: int, index: int, cases: tuple[str, ...]) -> str:
    """Which kind of unit starts at `index`: each enabled case 1 in CASE_ODDS, else random."""
    extra = [c for c in CASES[1:] if c in cases]
    if not extra:
        return "random"
    roll = int(np.random.default_rng([seed, index, CASE_STREAM]).integers(CASE_ODDS))
    return extra[roll] if roll < len(extra) else "random"


def draw_case(case: str, seed: int, index: int, max_bytes: int,
              sizes: dict[str, int]) -> Draw:
    """The calls of a unit of one of the cases (every rank draws the same):

    - "orders": 2-3 kept communicators, 1-3 iallreduce calls on each, started in an
      order of each rank's own (each communicator's calls in the same order everywhere,
      as MPI requires) and completed in another;
    - "blocking": 1-3 iallreduce calls on one communicator A and 1-2 blocking calls on
      another B; even ranks start A's calls between B's, odd ranks make B's calls first;
    - "threads": two threads, each with 2-5 calls (blocking, or started and waited at
      its end) on its own Dup of the world (only where MPI grants THREAD_MULTIPLE);
    - "free": 1-3 iallreduce calls on a new Dup of a kept communicator, freed while
      they are in flight (MPI lets them complete), then completed.
    """
    rng = np.random.default_rng([seed, index, CASE_STREAM, 1])
    dense = lambda i, comm, batch: _draw_dense(  # noqa: E731
        rng, index + i, comm, max_bytes, sizes[comm], batch)
    calls: list[Call] = []
    if case == "orders":
        picked = [KEPT[int(i)] for i in rng.permutation(len(KEPT))[:int(rng.integers(2, 4))]]
        for comm in picked:
            calls += [dense(len(calls), comm, True) for _ in range(int(rng.integers(1, 4)))]
    elif case == "blocking":
        a, b = (KEPT[int(i)] for i in rng.permutation(len(KEPT))[:2])
        calls = [dense(i, a, True) for i in range(int(rng.integers(1, 4)))]
        calls += [dense(len(calls), b, False) for _ in range(int(rng.integers(1, 3)))]
    elif case == "threads":
        for comm in THREAD_COMMS:
            calls += [dense(len(calls), comm, rng.random() < 0.5)
                      for _ in range(int(rng.integers(2, 6)))]
        for call in calls:  # a key per thread: two threads on one key would share residuals
            call.key = call.key and f"{call.key}/{call.comm}"
    elif case == "free":
        twin = KEPT[int(rng.integers(len(KEPT)))]
        calls = [dense(i, twin, True) for i in range(int(rng.integers(1, 4)))]
    else:
        raise ValueError(f"unknown case {case!r}: expected one of {CASES}")
    completion = COMPLETIONS[int(rng.integers(len(COMPLETIONS)))]
    return Draw(calls, completion, case)


def _draw_dense(rng: np.random.Generator, index: int, comm: str, max_bytes: int, size: int,
                batch: bool) -> Call:
    op, dtype = OP_DTYPE_CASES[int(rng.integers(len(OP_DTYPE_CASES)))]
    codec_roll, codec_pick, key_roll, mean_roll, form_roll = rng.random(5)
    if rng.random() < 0.5:  # most calls that can carry a codec are float sums
        dtype = FLOAT_DTYPES[int(rng.integers(len(FLOAT_DTYPES)))]
        op = "mean" if mean_roll < 0.3 else "sum"
    count = _draw_count(rng, np.dtype(dtype).itemsize, max_bytes)
    algorithm = zipcoll.ALGORITHMS[int(rng.integers(len(zipcoll.ALGORITHMS)))]
    inner = FLAT[int(rng.integers(len(FLAT)))]
    if algorithm in TWO_LEVEL and rng.random() < 0.5:
        algorithm = f"{algorithm}:{inner}"
    layout = LAYOUTS[int(rng.integers(len(LAYOUTS)))]
    entry = ENTRIES[int(rng.integers(len(ENTRIES)))]
    codec = None
    if op in ("sum", "mean") and dtype in FLOAT_DTYPES and codec_roll < 0.7:
        codec = _draw_codec(rng, algorithm, codec_pick)
    key = f"soak/{int(rng.integers(4))}" if codec is not None and key_roll < 0.3 else None
    call = Call(index, comm, "iallreduce" if batch else entry, dtype, count, op,
                algorithm, _fitting_layout(layout, algorithm, size), codec, key,
                CODEC_FORMS[int(form_roll * len(CODEC_FORMS))])
    if call.kind.startswith("intracomm") and (call.layout != "found" or op == "mean"):
        call.kind = "out"  # Intracomm has no topology argument; its op is an MPI.Op
    return call


def _draw_count(rng: np.random.Generator, itemsize: int, max_bytes: int) -> int:
    """0 items one time in 50, else a log-uniform number of bytes in [1, max_bytes]."""
    zero, fraction = rng.random(2)
    if zero < 0.02:
        return 0
    return max(1, int(np.exp(fraction * np.log(max_bytes))) // itemsize)


def _draw_codec(rng: np.random.Generator, algorithm: str, pick: float) -> Any:
    """A codec `algorithm` accepts (None where it takes none); per level on two-level ones."""
    specs = [s for s in ALL_SPECS.values() if algorithm == "auto" or accepted(algorithm, s)]
    if not specs:
        return None
    spec = specs[int(pick * len(specs))]
    if algorithm.split(":")[0] in TWO_LEVEL and rng.random() < 0.3:
        return {"intra": INTRA_SPECS[int(rng.integers(len(INTRA_SPECS)))], "inter": spec}
    return spec


def _fitting_layout(layout: str, algorithm: str, size: int) -> str:
    """The drawn layout where it fits `size` ranks, else the found one."""
    if layout == "nodes" and (size < 2 or size % 2):
        return "found"
    if layout == "grid" and (size < 4 or size % 2 or not algorithm.startswith("torus")):
        return "found"
    return layout


def _draw_sparse(rng: np.random.Generator, index: int, comm: str, max_bytes: int) -> Call:
    kind = ("sparse_allgather", "sparse_allreduce")[int(rng.integers(2))]
    algorithm = ("allgatherv", "gtopk")[int(rng.integers(2))]
    dtype = SPARSE_VALUE_DTYPES[int(rng.integers(len(SPARSE_VALUE_DTYPES)))]
    index_dtype = ("int32", "int64")[int(rng.integers(2))]
    size = min(SPARSE_MAX_SIZE, max(1, _draw_count(rng, 8, max_bytes)))
    k = int(rng.integers(0, 64)) if algorithm == "gtopk" and rng.random() < 0.5 else None
    return Call(index, comm, kind, dtype, size, algorithm=algorithm, sparse_algorithm=algorithm,
                index_dtype=index_dtype, k=k)


# -- per-rank data ---------------------------------------------------------------------------

def dense_input(call: Call, rank: int) -> np.ndarray:
    """Rank `rank`'s input to `call` (any rank can make any other's).

    tests/arrays.py's rank_data keeps integer SUM/PROD far from overflow (8-bit sums
    included: Open MPI saturates them where C wraps); its `rank` seeds the values, so
    the call index goes in too, for different data in every call.
    """
    op = "sum" if call.op == "mean" else call.op
    x = rank_data(call.dtype, call.count, call.index * 4096 + rank, op)
    if op == "prod" and x.dtype == np.float16:
        # |x| in [1/2, 2]: a product that falls among float16's subnormals (< 6.1e-5) keeps
        # only a few bits, so its rounding depends on the order of the factors by more than
        # the reordering tolerance of `mismatch` allows
        x = (np.sign(x) * np.clip(np.abs(x), 0.5, 2)).astype(np.float16)
    return x


def sparse_input(call: Call, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s (indices, values): no pairs on about a third of the ranks."""
    rng = np.random.default_rng([call.index, rank, 7])
    most = min(call.count, SPARSE_MAX_NNZ[call.sparse_algorithm])
    nnz = 0 if rng.random() < 0.35 else int(rng.integers(1, most + 1))
    indices = rng.choice(call.count, nnz, replace=False).astype(call.index_dtype)
    return indices, rank_data(call.dtype, nnz, call.index * 4096 + rank)


# -- running and checking --------------------------------------------------------------------

class Communicators:
    """The communicators calls run on, and their topologies, made once (but fresh-dup)."""

    def __init__(self, world: MPI.Intracomm, threads: bool = False):
        rank, size = world.Get_rank(), world.Get_size()
        self.world = world
        self.kept = {
            "world": world,
            "dup": world.Dup(),
            "halves": world.Split(int(rank >= (size + 1) // 2), rank),
            "odd-even": world.Split(rank % 2, rank),
        }
        if threads:  # one communicator per thread of a "threads" unit
            self.kept.update({name: world.Dup() for name in THREAD_COMMS})
            for name in THREAD_COMMS:  # first zipcoll calls here, in one order on every rank:
                # Open MPI duplicates communicators one at a time (README, Calls in flight)
                zipcoll.allreduce(np.zeros(1), comm=self.kept[name])
        self.sizes = {name: c.Get_size() for name, c in self.kept.items()}
        self.sizes.update({"fresh-dup": size, **{name: size for name in THREAD_COMMS}})
        self._topologies: dict[tuple[str, str], zipcoll.Topology] = {}

    def get(self, name: str) -> MPI.Intracomm:
        return self.world.Dup() if name == "fresh-dup" else self.kept[name]

    def release(self, name: str, comm: MPI.Intracomm) -> None:
        if name == "fresh-dup":
            comm.Free()

    def topology(self, name: str, comm: MPI.Intracomm, layout: str) -> zipcoll.Topology:
        """The layout's topology (collective on first use for a kept communicator)."""
        held = self._topologies.get((name, layout))
        if held is not None:
            return held
        if layout == "nodes":
            topology = zipcoll.Topology.from_comm(comm, ranks_per_node=2)
        elif layout == "grid":
            topology = zipcoll.Topology.from_comm(comm, grid=(2, comm.Get_size() // 2))
        else:
            topology = zipcoll.Topology.from_comm(comm)
        if name != "fresh-dup":
            self._topologies[(name, layout)] = topology
        return topology

    def free(self) -> None:
        for name, comm in self.kept.items():
            if name != "world":
                comm.Free()


@dataclass
class Started:
    """A dense call on its way: its input, what to compare afterwards, where the result lands."""

    call: Call
    x: np.ndarray  # the caller's send buffer (the in-place buffer for in-place calls)
    sent: np.ndarray  # a copy of the input, taken before the call
    recv: np.ndarray | None = None  # a recvbuf given (out-of-place)
    request: Any = None
    result: Any = None


def start_dense(call: Call, comm: MPI.Intracomm, topology: zipcoll.Topology | None) -> Started:
    """Make the input and run (or start) the call."""
    x = dense_input(call, comm.Get_rank())
    s = Started(call, x, x.copy())
    op = call.op if call.op == "mean" else BY_NAME[call.op].mpi
    layout = {} if call.layout == "found" else {"topology": topology}
    codec = codec_argument(call)
    kwargs = dict(op=op, comm=comm, algorithm=call.algorithm, codec=codec, key=call.key,
                  **layout)
    if call.kind in ("out", "intracomm"):
        s.recv = np.zeros(call.count + SENTINEL_TAIL, x.dtype)
    if call.kind == "out":
        s.result = zipcoll.allreduce(x, s.recv, **kwargs)
    elif call.kind == "inplace":
        s.result = zipcoll.allreduce(MPI.IN_PLACE, x, **kwargs)
    elif call.kind == "new":
        s.result = zipcoll.allreduce(x, **kwargs)
    elif call.kind.startswith("intracomm"):
        zcomm = zipcoll.Intracomm(comm, algorithm=call.algorithm, codec=codec)
        if call.kind == "intracomm":
            zcomm.Allreduce(x, s.recv, op=op)
        else:
            zcomm.Allreduce(MPI.IN_PLACE, x, op=op)
    else:  # iallreduce: half into a recvbuf, half into a new array
        s.recv = np.zeros(call.count + SENTINEL_TAIL, x.dtype) if call.index % 2 else None
        s.request = zipcoll.iallreduce(x, s.recv, **kwargs)
    return s


def codec_argument(call: Call) -> Any:
    """The call's codec as `codec=` takes it: a spec, a config dict or a Codec (per level)."""
    def form(spec: Any) -> Any:
        if call.codec_form == "spec":
            return spec
        if call.codec_form == "feedback":
            # one object per thread: two threads using one at once would share residuals
            owner = (call.comm if call.comm in THREAD_COMMS else "", spec)
            if owner not in FEEDBACK_OBJECTS:
                FEEDBACK_OBJECTS[owner] = ErrorFeedback(zipcoll.get_codec(spec))
            return FEEDBACK_OBJECTS[owner]
        codec = zipcoll.get_codec(spec)
        return codec.get_config() if call.codec_form == "config" else codec

    if isinstance(call.codec, dict):
        return {level: form(spec) for level, spec in call.codec.items()}
    return None if call.codec is None else form(call.codec)


def result_of(s: Started) -> np.ndarray:
    """The call's result as a 1-D array of `count` items."""
    if s.call.kind in ("inplace", "intracomm-inplace"):
        return s.x
    if s.recv is not None:
        return s.recv[:s.call.count]
    return np.asarray(s.result).reshape(-1)


def check_dense(s: Started, comm: MPI.Intracomm, topology: zipcoll.Topology) -> list[str]:
    """Problems with a finished dense call (collective: the reference Allreduce)."""
    call, got = s.call, result_of(s)
    problems = []
    in_place = call.kind in ("inplace", "intracomm-inplace")
    if not in_place and not np.array_equal(s.x.view(np.uint8), s.sent.view(np.uint8)):
        problems.append("sendbuf was modified")
    if s.recv is not None and np.any(s.recv[call.count:]):
        problems.append("wrote past count into the receive buffer")
    if s.call.kind == "out" and s.result is not s.recv:
        problems.append("allreduce did not return recvbuf")
    ref_op = "sum" if call.op == "mean" else call.op
    ref = expected(comm, s.sent, ref_op)  # every rank, whatever the check below needs
    plan = s.request.plan if s.request is not None else make_plan(  # what the call ran
        s.sent, None, call.op, call.algorithm, call.codec, None, topology, context_for(comm).selector)
    if plan.codec is not None or plan.intra_codec is not None:  # auto: where the model says
        problems += _check_lossy(call, comm, topology, got, plan.name)
    else:
        problems += _check_lossless(call, comm, got, ref)
    return problems


def _check_lossless(call: Call, comm: MPI.Intracomm, got: np.ndarray,
                    ref: np.ndarray) -> list[str]:
    op = "sum" if call.op == "mean" else call.op
    parts = []
    if np.dtype(call.dtype).kind in "fc" and op in ("sum", "prod"):
        parts = [dense_input(call, r) for r in range(comm.Get_size())]
    if call.op == "mean":  # the sum divided by the ranks, in the dtype
        ref = ref / ref.dtype.type(comm.Get_size())
        parts = [p / p.dtype.type(comm.Get_size()) for p in parts]
    why = mismatch(got, ref, parts, op)
    return [why] if why else []


def _check_lossy(call: Call, comm: MPI.Intracomm, topology: zipcoll.Topology,
                 got: np.ndarray, algorithm: str) -> list[str]:
    """Finite; within test_compressed's bound where it bounds the codec and there is no key."""
    if not np.all(np.isfinite(got)):
        return ["non-finite result from finite input"]
    levels = call.codec.values() if isinstance(call.codec, dict) else [call.codec]
    feedback = call.key is not None or call.codec_form == "feedback"  # residuals carried in
    if feedback or any(spec not in BOUNDED.values() for spec in levels):
        return []
    parts = [dense_input(call, r) for r in range(comm.Get_size())]
    problems = check_bound(comm, parts, got, algorithm, topology, call.codec,
                           np.dtype(call.dtype), mean=call.op == "mean")
    # fp16 of float16 data (and bf16 of partial sums that fit) can be exact: not a problem
    return [p for p in problems if not p.startswith("error is 0")]


def run_sparse(call: Call, comm: MPI.Intracomm) -> tuple[list[str], dict[str, Any]]:
    """Run and check one sparse call: (problems, results to compare across ranks)."""
    indices, values = sparse_input(call, comm.Get_rank())
    sent = (indices.copy(), values.copy())
    kwargs = dict(comm=comm, algorithm=call.sparse_algorithm, k=call.k)
    parts = [sparse_input(call, r) for r in range(comm.Get_size())]
    problems = []
    if call.kind == "sparse_allgather":
        got_i, got_v, counts = zipcoll.sparse_allgather(values, indices, **kwargs)
        results = {"indices": got_i, "values": got_v}
        if call.sparse_algorithm == "gtopk":
            k = max(i.size for i, _ in parts) if call.k is None else call.k
            if as_pairs(got_i, got_v) != serial_gtopk(parts, k) or counts != [got_i.size]:
                problems.append("gtopk differs from the serial merge tree")
        elif (counts != [i.size for i, _ in parts]
              or not np.array_equal(got_i, np.concatenate([i for i, _ in parts]))
              or not np.array_equal(got_v.view(np.uint8),
                                    np.concatenate([v for _, v in parts]).view(np.uint8))):
            problems.append("allgatherv differs from the rank-order concatenation")
    else:
        got = zipcoll.sparse_allreduce(values, indices, call.count, **kwargs)
        results = {"dense": got}
        if call.sparse_algorithm == "gtopk":
            k = max(i.size for i, _ in parts) if call.k is None else call.k
            top = serial_gtopk(parts, k)
            ref = np.zeros(call.count, values.dtype)
            if top:
                ref = dense_of(np.array([i for i, _ in top]), np.array([v for _, v in top],
                                                                      values.dtype), call.count)
            if not np.array_equal(got, ref):
                problems.append("gtopk sparse_allreduce differs from the serial merge tree")
        else:
            ref = expected(comm, dense_of(indices, values, call.count), "sum")
            why = mismatch(got, ref, [dense_of(i, v, call.count) for i, v in parts], "sum")
            problems += [why] if why else []
    if not (np.array_equal(indices, sent[0]) and np.array_equal(values, sent[1])):
        problems.append("the caller's indices or values were modified")
    return problems, results


def complete(started: list[Started], how: str, order: list[int]) -> None:
    """Finish a batch of requests in `order`: wait() each, test() them round-robin,
    zipcoll.waitall, or zipcoll.waitany until none is left."""
    requests = [started[i].request for i in order]
    if how == "wait":
        results = [request.wait() for request in requests]
    elif how == "test":
        while not all([request.test() for request in requests]):
            pass
        results = [request.wait() for request in requests]  # complete: the results
    elif how == "waitall":
        results = zipcoll.waitall(requests)
    else:
        results, left = [None] * len(order), list(range(len(order)))
        while left:
            which, result = zipcoll.waitany([requests[i] for i in left])
            results[left.pop(which)] = result
    for i, result in zip(order, results):
        started[i].result = result


# -- the soak --------------------------------------------------------------------------------

@dataclass
class Options:
    calls: int = 1000
    seed: int = 1
    max_bytes: int = 16 << 20
    first: int = 0
    orders: str = "per-rank"  # or "same"
    many: int = 0  # calls outstanding at once in one batch in 25 (0: never)
    timeout: float | None = 300.0  # seconds a call or batch may take; None: no watchdog
    rss_every: int = 100
    progress: int = 0  # rank 0 prints a line every this many calls (0: never)
    warmup: int | None = None  # calls before the RSS baseline (default: a fifth)
    out: str | None = None
    cases: tuple[str, ...] = ("random",)  # kinds of unit (CASES); the command line: all
    max_growth_mib: float | None = None  # RSS growth after warm-up that fails the run


@dataclass
class Tally:
    """What one rank saw."""

    calls: int = 0
    by_kind: Counter = field(default_factory=Counter)
    by_algorithm: Counter = field(default_factory=Counter)
    by_codec: Counter = field(default_factory=Counter)
    by_comm: Counter = field(default_factory=Counter)
    by_dtype: Counter = field(default_factory=Counter)
    by_op: Counter = field(default_factory=Counter)
    by_case: Counter = field(default_factory=Counter)  # units of each case
    problems: list = field(default_factory=list)  # (call, problem)
    rss: list = field(default_factory=list)  # memory_sample()s
    notes: list = field(default_factory=list)  # cases not run, and why

    def count(self, call: Call) -> None:
        self.calls += 1
        self.by_kind[call.kind] += 1
        self.by_comm[call.comm] += 1
        self.by_dtype[call.dtype] += 1
        if not call.kind.startswith("sparse"):
            self.by_algorithm[call.algorithm] += 1
            self.by_op[call.op] += 1
            codec = "none (lossless)" if call.codec is None else json.dumps(call.codec)
            self.by_codec[codec + (" +key" if call.key else "")] += 1


class Watchdog:
    """Ends the job if one unit of work takes longer than `seconds`: says which, dumps stacks."""

    def __init__(self, seconds: float, rank: int, out: str | None):
        self.seconds, self.rank, self.out = seconds, rank, out
        self._what, self._deadline = "", None
        threading.Thread(target=self._watch, daemon=True, name="soak-watchdog").start()

    def arm(self, what: str) -> None:
        self._what, self._deadline = what, time.monotonic() + self.seconds

    def disarm(self) -> None:
        self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            deadline = self._deadline
            if deadline is None or time.monotonic() < deadline:
                continue
            message = (f"soak: HANG on rank {self.rank}: no progress for {self.seconds:.0f} s "
                       f"in {self._what}")
            print(message, file=sys.stderr, flush=True)
            faulthandler.dump_traceback(all_threads=True)
            if self.out:
                Path(self.out, f"hang-rank{self.rank}.json").write_text(
                    json.dumps({"hang": message}) + "\n")
            MPI.COMM_WORLD.Abort(HANG_STATUS)


def rss_kib(field: str = "VmRSS") -> int:
    """This process's resident set size (VmRSS), or its peak so far (VmHWM), KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def release_free_memory() -> None:
    """Collect garbage and hand glibc's free heap pages back, so that RSS counts live memory.

    glibc keeps freed blocks of up to 32 MiB on its heap (its mmap threshold rises to the
    largest block freed), which would show a 16 MiB message's temporaries as growth.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS includes the allocator's free pages
        pass


SAMPLE_FIELDS = ("calls", "rss_kib", "residuals_kib", "peak_rss_kib", "scratch_kib",
                 "contexts")


def memory_sample(calls: int) -> tuple[int, int, int, int, int, int]:
    """(calls, VmRSS KiB, KiB of error-feedback residuals zipcoll holds for live keys,
    VmHWM KiB, KiB of scratch zipcoll keeps between calls, zipcoll contexts alive).

    The residuals are memory held on purpose: one array per encode site of the last call
    on each key (the soak's keys, and one per ErrorFeedback object it keeps), as large as
    the largest recent message on that key, so they grow as large messages come by.
    VmHWM is the peak RSS since the process started (not lowered by malloc_trim).
    """
    release_free_memory()
    return (calls, rss_kib(), zipcoll.feedback.nbytes() >> 10, rss_kib("VmHWM"),
            _scratch_held() >> 10, _contexts_alive())


def _scratch_held() -> int:
    """Bytes of scratch zipcoll keeps between calls (per transport before it was one pool)."""
    from zipcoll import transport

    if hasattr(transport, "scratch_held"):
        return transport.scratch_held()
    return sum(o.scratch_bytes() for o in gc.get_objects() if isinstance(o, transport.Transport))


def _contexts_alive() -> int:
    from zipcoll.collectives.context import Context

    return sum(isinstance(o, Context) for o in gc.get_objects())


def enabled_cases(cases: tuple[str, ...], tally: Tally) -> tuple[str, ...]:
    """`cases` less those this MPI cannot run (noted in the tally)."""
    if "threads" in cases and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        tally.notes.append(f"threads: not run, MPI granted thread level {MPI.Query_thread()} "
                           f"(THREAD_MULTIPLE is {MPI.THREAD_MULTIPLE})")
        cases = tuple(c for c in cases if c != "threads")
    return cases


def soak(options: Options, world: MPI.Intracomm = MPI.COMM_WORLD) -> Tally:
    """Run options.calls calls from options.first on; every rank's tally."""
    tally = Tally()
    cases = enabled_cases(options.cases, tally)
    comms = Communicators(world, threads="threads" in cases)
    rank = world.Get_rank()
    watchdog = Watchdog(options.timeout, rank, options.out) if options.timeout else None
    tally.rss.append(memory_sample(0))
    index, end = options.first, options.first + options.calls
    next_sample, next_report, start = options.rss_every, options.progress, time.monotonic()
    try:
        while index < end:
            unit = draw(options.seed, index, options.max_bytes, comms.sizes, options.many,
                        cases)
            unit.calls = unit.calls[:end - index]
            if watchdog:
                watchdog.arm(describe(unit))
            _run_unit(unit, comms, options, tally)
            if watchdog:
                watchdog.disarm()
            index += len(unit.calls)
            if tally.calls >= next_sample:
                tally.rss.append(memory_sample(tally.calls))
                next_sample += options.rss_every
            if options.progress and rank == 0 and tally.calls >= next_report:
                print(f"soak: {tally.calls} calls, {time.monotonic() - start:.0f} s, "
                      f"{len(tally.problems)} problems, RSS {rss_kib() >> 10} MiB",
                      flush=True)
                next_report += options.progress
    finally:
        if watchdog:
            watchdog.disarm()
        comms.free()
    tally.rss.append(memory_sample(tally.calls))
    return tally


def describe(unit: Draw) -> str:
    """The calls of a unit (the first few of a big batch)."""
    text = " + ".join(str(c) for c in unit.calls[:6])
    more = len(unit.calls) - 6
    case = "" if unit.case == "random" else f"[{unit.case}] "
    return case + text + (f" + {more} more iallreduce" if more > 0 else "") + (
        f" (batch completed by {unit.completion})" if len(unit.calls) > 1 else "")


def _run_unit(unit: Draw, comms: Communicators, options: Options, tally: Tally) -> None:
    """Run one unit of work and check it; problems go to the tally."""
    if unit.case == "random":
        _run_random(unit, comms, options, tally)
    else:
        runner = {"orders": _run_orders, "blocking": _run_blocking, "threads": _run_threads,
                  "free": _run_free}[unit.case]
        started, problems = runner(unit, comms, options)
        _check_started(unit, started, problems, comms, tally)
    tally.by_case[unit.case] += 1
    for call in unit.calls:
        tally.count(call)


def _run_random(unit: Draw, comms: Communicators, options: Options, tally: Tally) -> None:
    """Run one call or batch on its communicator, check it; problems go to the tally."""
    name = unit.calls[0].comm
    comm = comms.get(name)
    try:
        problems, results = _run_checked(unit, comm, comms, options)
        for call, problem in problems:
            tally.problems.append((str(call), problem))
        for label in differing_across_ranks(comm, results):
            tally.problems.append((label, "not bit-identical across ranks"))
    finally:
        comms.release(name, comm)


def _run_checked(unit: Draw, comm: MPI.Intracomm, comms: Communicators, options: Options
                 ) -> tuple[list[tuple[Call, str]], dict[str, Any]]:
    """(problems, results by call) of one unit; an exception is a problem of its call."""
    problems: list[tuple[Call, str]] = []
    results: dict[str, Any] = {}
    call = unit.calls[0]
    if call.kind.startswith("sparse"):
        try:
            found, got = run_sparse(call, comm)
        except Exception as exc:  # noqa: BLE001 - a soak reports every failure and goes on
            return [(call, f"raised {type(exc).__name__}: {exc}")], {}
        return [(call, p) for p in found], {f"{call} {k}": v for k, v in got.items()}
    topologies = [comms.topology(call.comm, comm, c.layout) for c in unit.calls]
    started = []
    for c, topology in zip(unit.calls, topologies):
        try:
            started.append((start_dense(c, comm, topology), topology))
        except Exception as exc:  # noqa: BLE001
            problems.append((c, f"raised {type(exc).__name__}: {exc}"))
    if call.kind == "iallreduce":
        order = _completion_order(unit, comm, options)
        try:
            complete([s for s, _ in started], unit.completion,
                     [i for i in order if i < len(started)])
        except Exception as exc:  # noqa: BLE001
            why = f"completing the batch raised {type(exc).__name__}: {exc}"
            return problems + [(call, why)], {}
    for s, topology in started:
        problems += [(s.call, p) for p in check_dense(s, comm, topology)]
        results[str(s.call)] = result_of(s)
    return problems, results


def _completion_order(unit: Draw, comm: MPI.Intracomm, options: Options) -> list[int]:
    """The order this rank completes a batch in: its own, or the same on every rank."""
    mine = options.orders == "per-rank"
    who = comm.Get_rank() + 1 if mine else 0
    rng = np.random.default_rng([options.seed, unit.calls[0].index, who])
    return [int(i) for i in rng.permutation(len(unit.calls))]


# -- the cases: several communicators, threads, communicators freed -----------------------

# what a case's runner returns: the calls started (with the communicator and topology to
# check each on), and the problems found while running them
Run = tuple[list[tuple[Started, MPI.Intracomm, zipcoll.Topology]], list[tuple[Call, str]]]


def _topologies(unit: Draw, comms: Communicators) -> list[zipcoll.Topology]:
    """Each call's topology, in the unit's order (collective on first use: same everywhere)."""
    return [comms.topology(c.comm, comms.kept[c.comm], c.layout) for c in unit.calls]


def _start_in(calls: list[Call], unit: Draw, comm_of: Any, topologies: list) -> Run:
    """Start (or run, if blocking) `calls` in this order; each Started with where to check it."""
    started, problems = [], []
    for c in calls:
        i = unit.calls.index(c)
        try:
            started.append((start_dense(c, comm_of(c), topologies[i]), comm_of(c), topologies[i]))
        except Exception as exc:  # noqa: BLE001 - a soak reports every failure and goes on
            problems.append((c, f"raised {type(exc).__name__}: {exc}"))
    return started, problems


def _complete_in_flight(unit: Draw, started: list, options: Options,
                        problems: list) -> None:
    """Complete the started non-blocking calls in this rank's own order."""
    pending = [s for s, _, _ in started if s.request is not None]
    if not pending:
        return
    rank = MPI.COMM_WORLD.Get_rank() + 1 if options.orders == "per-rank" else 0
    order = np.random.default_rng([options.seed, unit.calls[0].index, rank, 2]).permutation(
        len(pending))
    try:
        complete(pending, unit.completion, [int(i) for i in order])
    except Exception as exc:  # noqa: BLE001
        problems.append((pending[0].call, f"completing raised {type(exc).__name__}: {exc}"))


def _run_orders(unit: Draw, comms: Communicators, options: Options) -> Run:
    """Calls on several communicators started in an order of this rank's own."""
    topologies = _topologies(unit, comms)
    names = list(dict.fromkeys(c.comm for c in unit.calls))
    queues = {name: [c for c in unit.calls if c.comm == name] for name in names}
    rng = np.random.default_rng([options.seed, unit.calls[0].index, MPI.COMM_WORLD.Get_rank()])
    order = []  # a random interleaving: each communicator's calls keep their order
    while any(queues.values()):
        name = [n for n in names if queues[n]][int(rng.integers(sum(map(bool, queues.values()))))]
        order.append(queues[name].pop(0))
    started, problems = _start_in(order, unit, lambda c: comms.kept[c.comm], topologies)
    _complete_in_flight(unit, started, options, problems)
    return started, problems


def _run_blocking(unit: Draw, comms: Communicators, options: Options) -> Run:
    """Blocking calls on B between non-blocking ones on A (even ranks), or before them."""
    topologies = _topologies(unit, comms)
    a = [c for c in unit.calls if c.kind == "iallreduce"]
    b = [c for c in unit.calls if c.kind != "iallreduce"]
    if MPI.COMM_WORLD.Get_rank() % 2:
        order = b + a
    else:  # A1 B1 A2 B2 ...: each blocking call while A's earlier calls are in flight
        order = [c for pair in zip(a, b + [None] * len(a)) for c in pair if c is not None]
        order += b[len(a):]
    started, problems = _start_in(order, unit, lambda c: comms.kept[c.comm], topologies)
    _complete_in_flight(unit, started, options, problems)
    return started, problems


def _run_threads(unit: Draw, comms: Communicators, options: Options) -> Run:
    """Each thread runs its calls on its own communicator; the checks run after both end."""
    topologies = _topologies(unit, comms)  # collective: here, before the threads start
    runs: dict[str, Run] = {}

    def thread(name: str) -> None:
        mine = [c for c in unit.calls if c.comm == name]
        started, problems = _start_in(mine, unit, lambda c: comms.kept[c.comm], topologies)
        _complete_in_flight(unit, started, options, problems)
        runs[name] = (started, problems)

    threads = [threading.Thread(target=thread, args=(name,), name=f"soak-{name}")
               for name in THREAD_COMMS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = [s for name in THREAD_COMMS for s in runs.get(name, ([], []))[0]]
    problems = [p for name in THREAD_COMMS for p in runs.get(name, ([], []))[1]]
    for name in THREAD_COMMS:
        if name not in runs:
            problems.append((unit.calls[0], f"thread on {name} died"))
    return started, problems


def _run_free(unit: Draw, comms: Communicators, options: Options) -> Run:
    """Calls on a new Dup of a kept communicator, freed while they are in flight; checked
    on the kept one (the same ranks)."""
    topologies = _topologies(unit, comms)
    twin_of = comms.kept[unit.calls[0].comm]
    twin = twin_of.Dup()
    started, problems = _start_in(unit.calls, unit, lambda c: twin, topologies)
    twin.Free()
    _complete_in_flight(unit, started, options, problems)
    return [(s, twin_of, t) for s, _, t in started], problems


def _check_started(unit: Draw, started: list, problems: list, comms: Communicators,
                   tally: Tally) -> None:
    """Check a case's calls in the unit's order (collective: the same order on every rank),
    then that each communicator's results are bit-identical across its ranks."""
    by_call = {id(s.call): (s, comm, topology) for s, comm, topology in started}
    results: dict[str, dict[str, Any]] = {}
    for call in unit.calls:
        if id(call) not in by_call:
            continue
        s, comm, topology = by_call[id(call)]
        problems += [(call, p) for p in check_dense(s, comm, topology)]
        results.setdefault(call.comm, {})[str(call)] = result_of(s)
    for call, problem in problems:
        tally.problems.append((f"{call} [{unit.case}]", problem))
    for name in dict.fromkeys(c.comm for c in unit.calls):
        for label in differing_across_ranks(comms.kept[name], results.get(name, {})):
            tally.problems.append((f"{label} [{unit.case}]", "not bit-identical across ranks"))


# -- reporting -------------------------------------------------------------------------------

def summarize(tallies: list[Tally], options: Options, seconds: float, load: tuple) -> dict:
    """One report of every rank's tally (rank 0's counts: every rank draws the same calls)."""
    first = tallies[0]
    warm = options.warmup if options.warmup is not None else options.calls // 5
    problems = [{"rank": r, "call": c, "problem": p}
                for r, t in enumerate(tallies) for c, p in t.problems]
    return {
        "command": "mpiexec -n %d python %s" % (len(tallies), " ".join(sys.argv)),
        "options": asdict(options),
        "ranks": len(tallies),
        "seconds": round(seconds, 1),
        "load_average_start_end": load,
        "calls": first.calls,
        "calls_by_kind": dict(first.by_kind),
        "calls_by_algorithm": dict(first.by_algorithm),
        "calls_by_codec": dict(first.by_codec),
        "calls_by_comm": dict(first.by_comm),
        "calls_by_dtype": dict(first.by_dtype),
        "calls_by_op": dict(first.by_op),
        "units_by_case": dict(first.by_case),
        "notes": first.notes,
        "calls_with_problems": len({(p["call"]) for p in problems}),
        "problems": problems,
        "hangs": 0,  # a hang ends the job before this is written (see hang-rank*.json)
        "warmup_calls": warm,
        "max_growth_mib": options.max_growth_mib,
        "rss_mib": [_rss_report(t.rss, warm) for t in tallies],
        "rss_sample_fields": SAMPLE_FIELDS,
        "rss_samples_kib": [t.rss for t in tallies],
    }


def _rss_report(samples: list[tuple], warm: int) -> dict:
    """RSS at the start, after `warm` calls, at the end and at most; growth after warm-up,
    and that growth less the growth of the feedback residuals zipcoll holds; the peak RSS
    (VmHWM) after warm-up and at the end; scratch and contexts held at those points."""
    later = [s for s in samples if s[0] >= warm] or samples[-1:]
    first, last = later[0], samples[-1]
    mib = lambda kib: round(kib / 1024, 1)  # noqa: E731
    return {"start": mib(samples[0][1]), "after_warmup": mib(first[1]), "end": mib(last[1]),
            "max_after_warmup": mib(max(s[1] for s in later)),
            "growth_after_warmup": mib(last[1] - first[1]),
            "residuals_after_warmup": mib(first[2]), "residuals_end": mib(last[2]),
            "growth_less_residuals": mib(last[1] - first[1] - (last[2] - first[2])),
            "peak_after_warmup": mib(first[3]), "peak_end": mib(last[3]),
            "peak_growth_after_warmup": mib(last[3] - first[3]),
            "scratch_after_warmup": mib(first[4]), "scratch_end": mib(last[4]),
            "contexts_after_warmup": first[5], "contexts_end": last[5]}


def over_limit(report: dict) -> list[int]:
    """Ranks whose RSS grew after warm-up by more than the report's limit (none: no limit)."""
    limit = report["max_growth_mib"]
    if limit is None:
        return []
    return [rank for rank, r in enumerate(report["rss_mib"])
            if r["growth_after_warmup"] > limit]


def format_summary(report: dict) -> str:
    lines = [f"soak: {report['calls']} calls on {report['ranks']} ranks in {report['seconds']} s "
             f"(load average start/end {report['load_average_start_end']})",
             f"command: {report['command']}"]
    for title in ("kind", "algorithm", "codec", "comm", "dtype", "op"):
        counts = report[f"calls_by_{title}"]
        lines.append(f"  by {title}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append("  units by case: " + ", ".join(f"{k} {v}" for k, v in
                                                sorted(report["units_by_case"].items())))
    lines += [f"  note: {note}" for note in report["notes"]]
    lines.append(f"mismatches: {report['calls_with_problems']} calls with problems "
                 f"({len(report['problems'])} reports)")
    lines += [f"  rank {p['rank']}: {p['call']}: {p['problem']}" for p in report["problems"][:30]]
    lines.append(f"hangs: {report['hangs']}")
    lines.append("RSS MiB per rank (start / after warm-up / end / max after warm-up; "
                 "growth after warm-up; feedback residuals held after warm-up -> end; "
                 "growth less residuals):")
    lines += [f"  rank {rank}: {r['start']} / {r['after_warmup']} / {r['end']} / "
              f"{r['max_after_warmup']}; {r['growth_after_warmup']:+}; "
              f"{r['residuals_after_warmup']} -> {r['residuals_end']}; "
              f"{r['growth_less_residuals']:+}"
              for rank, r in enumerate(report["rss_mib"])]
    lines.append(f"peak RSS (VmHWM) MiB per rank after warm-up ({report['warmup_calls']} calls) "
                 "-> end (growth); zipcoll scratch MiB and contexts alive, after warm-up -> end:")
    lines += [f"  rank {rank}: {r['peak_after_warmup']} -> {r['peak_end']} "
              f"({r['peak_growth_after_warmup']:+}); scratch {r['scratch_after_warmup']} -> "
              f"{r['scratch_end']}; contexts {r['contexts_after_warmup']} -> {r['contexts_end']}"
              for rank, r in enumerate(report["rss_mib"])]
    if report["max_growth_mib"] is not None:
        over = over_limit(report)
        lines.append(f"RSS growth after warm-up over {report['max_growth_mib']} MiB: "
                     + (f"ranks {over}" if over else "none"))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="zipcoll calls (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-bytes", type=parse_size, default=16 << 20,
                        help="largest message, e.g. 64K, 16M (default 16M)")
    parser.add_argument("--first", type=int, default=0, help="index of the first call (replay)")
    parser.add_argument("--orders", choices=("per-rank", "same"), default="per-rank",
                        help="non-blocking batches: each rank its own completion order, "
                             "or the same on every rank")
    parser.add_argument("--many", type=int, default=0,
                        help="one batch in 25: this many small calls outstanding (default 0: none)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one call or batch may take before the job is ended")
    parser.add_argument("--rss-every", type=int, default=100, help="calls between RSS samples")
    parser.add_argument("--progress", type=int, default=1000,
                        help="rank 0 prints a line every this many calls (0: never)")
    parser.add_argument("--warmup", type=int,
                        help="calls before the RSS baseline (default calls/5)")
    parser.add_argument("--out", help="folder for soak.json")
    parser.add_argument("--cases", type=_parse_cases, default=CASES,
                        help="kinds of unit, comma-separated, of " + ",".join(CASES)
                             + " (default: all; threads only where MPI grants THREAD_MULTIPLE)")
    parser.add_argument("--max-growth", type=float, default=32.0,
                        help="MiB of RSS growth after warm-up a rank may show before the run "
                             "fails (default 32; 0: no limit)")
    args = parser.parse_args(argv)
    return Options(args.calls, args.seed, args.max_bytes, args.first, args.orders, args.many,
                   args.timeout or None, args.rss_every, args.progress, args.warmup, args.out,
                   args.cases, args.max_growth or None)


def _parse_cases(text: str) -> tuple[str, ...]:
    cases = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise argparse.ArgumentTypeError(f"unknown case(s) {unknown}: expected some of {CASES}")
    return cases


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    world = MPI.COMM_WORLD
    if options.out and world.Get_rank() == 0:
        os.makedirs(options.out, exist_ok=True)
    world.Barrier()
    load = [os.getloadavg()[0]]
    start = time.monotonic()
    tally = soak(options, world)
    seconds = time.monotonic() - start
    load.append(os.getloadavg()[0])
    tallies = world.gather(tally, root=0)
    if world.Get_rank() != 0:
        return 0
    report = summarize(tallies, options, seconds, tuple(round(v, 2) for v in load))
    report["machine"] = machine()
    summary = format_summary(report)
    print(summary, flush=True)
    if options.out:
        Path(options.out, "soak.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        Path(options.out, "summary.txt").write_text(summary + "\n")
    return 1 if report["problems"] or over_limit(report) else 0


if __name__ == "__main__":
    sys.exit(main())

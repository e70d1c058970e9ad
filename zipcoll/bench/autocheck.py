"""zipcoll-bench autocheck: ``algorithm="auto"`` beside every plan it could have picked, measured.

    mpiexec -n 4 zipcoll-bench autocheck -m 8:64M --codec int8 --json autocheck.json
    ZIPCOLL_PROFILE=profile.json mpiexec -n 4 zipcoll-bench autocheck -m 1M:64M
    mpiexec -n 4 zipcoll-bench autocheck -m 64K:64M --codec int8 --online   # no profile

``--online``: auto as a fresh job gets it, with no profile: it tunes itself on its
first calls of each size (`planning.tuning`); at each size auto first makes
``--learn-calls`` calls (20) untimed, and is then timed beside the fixed plans (its
re-checks of runner-ups included); auto's pick is then what the tuning settled on.

At each size it times ``auto`` (lossless, and with ``--codec`` allowed) and every plan the
cost model may choose from (``planning.candidate_plans``: the lossless ones, and those that
carry the codec), in the same job, and prints auto's pick, the pick's time over the best
plan's (how good the choice is) and auto's own calls' time over it (the choice plus what
choosing costs a call). How, so that a shared or noisy machine misleads as little as possible:

- warm-up: every plan runs a few times at a small size first (Numba compiles, scratch);
- screening: at each size every plan runs once untimed (scratch for the size) and is
  timed over about ``SCREEN_SECONDS``; plans slower than ``KEEP`` x the fastest are out
  (a lossless plan: ``KEEP`` x the fastest lossless one), and the best of a mode is the
  fastest in the rounds;
- rounds: the rest, auto's picks, both autos and mpi4py's own Allreduce (for reference)
  are timed ``--rounds`` times in an order shuffled alike on every rank (each a few
  calls, OSU's way: a barrier before each call); a plan's time is the median over
  rounds of the slowest rank's mean;
- paired: the rounds choose a mode's best, but its time there is the least of many
  noisy medians, biased low (the fastest of twenty plans is also the luckiest), and a
  round's few calls meet the machine's stalls or miss them. So, mode by mode, auto, its
  pick and the mode's ``PAIRED`` fastest plans in the rounds are timed again, call by
  call in turn (a barrier before each call, the order shuffled alike on every rank each
  turn), for about ``PAIR_SECONDS`` each and at least ``MIN_PAIR_CALLS`` calls: a stall
  then falls on any of them alike. A plan's paired time is the mean of the slowest
  rank's time per call, every call counted (auto's re-checks of runner-ups too), a call
  over ``STALL`` x the median call of its mode counted as that much: a stall of the
  machine (hundreds of ms on a 0.4 ms call, 4 ranks on 2 cores) lands on one plan or
  another at random and would decide alone, and no plan auto may run costs that
  (it drops those over 2x its best). "auto/best paired" is auto's over the least of
  its mode's plans'; every call's time is in the JSON.
float32 SUM, different data on every rank. Results are not checked here: the tests do.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

import zipcoll
from zipcoll import settings
from zipcoll.bench.timing import message_sizes, parse_range, time_per_call
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning.tuning import key_of
from zipcoll.topologies import Topology
from zipcoll.collectives.api import explain
from zipcoll.collectives.planning import PlanShape, candidate_plans

SCREEN_SECONDS = 0.02   # timed per plan and size in the screening
ROUND_SECONDS = 0.05    # timed per plan and size in each round
KEEP = 1.5              # screened plans within this factor of the fastest go on to the rounds
MAX_CALLS = 200
PAIRED = 3              # each mode's fastest plans in the rounds timed again beside its auto
PAIR_SECONDS = 1.0      # timed per auto and plan, call by call in turn
MIN_PAIR_CALLS = 8      # however slow the calls
STALL = 5.0             # a paired call over this x its mode's median call is a stall
AUTO = "auto"
MPI_OWN = "MPI_Allreduce"  # mpi4py's call, for reference: not one of auto's choices


@dataclass
class SizeResult:
    """One size: each timed plan's median seconds, auto's picks and what they cost."""

    nbytes: int
    seconds: dict = field(default_factory=dict)     # plan label -> median seconds
    screened: dict = field(default_factory=dict)    # plan label -> screening seconds
    picks: dict = field(default_factory=dict)       # "lossless" / codec -> plan label
    predicted: dict = field(default_factory=dict)   # plan label -> model seconds
    tuned: dict = field(default_factory=dict)       # --online: auto -> what its tuning measured
    paired: dict = field(default_factory=dict)      # mode -> label -> mean seconds, timed
                                                    # call by call in turn with the mode's auto
    paired_calls: dict = field(default_factory=dict)  # mode -> calls each made there
    paired_ms: dict = field(default_factory=dict)   # mode -> label -> each call's ms there
    auto_ran: dict = field(default_factory=dict)    # mode -> the plan each of auto's calls
                                                    # there ran (its tuning's choice)
    tuning: dict = field(default_factory=dict)      # --online: mode -> "learned" / "end" ->
                                                    # its kind's state then (`tuning_state`)

    def best(self, labels: list[str]) -> tuple[str, float]:
        """The fastest of `labels` in the rounds (a screening time only where none of them
        was timed there: a few calls against a round's many)."""
        timed = [(self.seconds[x], x) for x in labels if x in self.seconds] or \
            [(self.screened.get(x, float("inf")), x) for x in labels]
        seconds, label = min(timed)
        return label, seconds


def label(plan: PlanShape) -> str:
    return str(plan)


def call_of(plan: PlanShape, send: np.ndarray, recv: np.ndarray, comm: MPI.Intracomm) -> Callable:
    """One all-reduce running exactly ``plan`` (auto: a PlanShape named "auto")."""
    codec = plan.inter_codec

    def call():
        zipcoll.allreduce(send, recv, algorithm=plan.name, codec=codec, comm=comm)
    return call


def slowest_mean(call: Callable, calls: int, comm: MPI.Comm) -> float:
    """The slowest rank's mean seconds per call over ``calls`` calls."""
    return comm.allreduce(time_per_call(call, calls, 0, comm), op=MPI.MAX)


def calls_for(seconds_each: float, budget: float) -> int:
    return int(min(MAX_CALLS, max(1, budget / max(seconds_each, 1e-7))))


def plans_to_time(topology: Topology, codec: str | None) -> tuple[list[PlanShape], list[PlanShape]]:
    """(candidate plans, the autos): lossless auto, and auto with the codec if one is given."""
    plans = candidate_plans(topology, codec)
    autos = [PlanShape(AUTO)] + ([PlanShape(AUTO, None, None, codec)] if codec else [])
    return plans, autos


def warm_up(plans: list[PlanShape], comm: MPI.Intracomm) -> None:
    """Every plan a few times at 64 KiB: compiles and first-use costs out of the timings."""
    send = np.ones(1 << 14, np.float32)
    recv = np.empty_like(send)
    for plan in plans:
        time_per_call(call_of(plan, send, recv, comm), 3, 0, comm)


def size_buffers(nbytes: int, seed: int, comm: MPI.Intracomm) -> tuple[np.ndarray, np.ndarray]:
    """(send, recv) float32 of ``nbytes``: send different on every rank (seeded by
    ``seed`` and the rank), recv uninitialised."""
    send = np.random.default_rng([seed, comm.Get_rank()]).standard_normal(
        max(1, nbytes // 4), dtype=np.float32)
    return send, np.empty_like(send)


def size_calls(nbytes: int, plans: list[PlanShape], comm: MPI.Intracomm) -> dict[str, Callable]:
    """Each plan's call at ``nbytes`` by its label, and mpi4py's own Allreduce
    (``MPI_OWN``), all on one pair of buffers (`size_buffers`)."""
    send, recv = size_buffers(nbytes, 7, comm)
    calls = {label(p): call_of(p, send, recv, comm) for p in plans}
    calls[MPI_OWN] = lambda: comm.Allreduce(send, recv)
    return calls


def measure_size(nbytes: int, plans: list[PlanShape], autos: list[PlanShape], rounds: int,
                 comm: MPI.Intracomm, keep: tuple = ()) -> SizeResult:
    """Screen every plan at ``nbytes``, then time the survivors, the autos and the plans
    named in ``keep`` (auto's picks) in rounds."""
    result = SizeResult(nbytes)
    calls = size_calls(nbytes, plans + autos, comm)
    for name, call in calls.items():
        first = slowest_mean(call, 1, comm)  # untimed in effect: scratch for this size
        result.screened[name] = slowest_mean(call, calls_for(first, SCREEN_SECONDS), comm)
    # each mode's own contenders: a lossless plan is judged against the fastest lossless
    # one (the best lossless plan must be timed in the rounds, as lossless auto is),
    # every plan against the fastest of all
    lossless = [label(p) for p in plans if p.inter_codec is None and p.intra_codec is None]
    fastest = min(result.screened[label(p)] for p in plans)
    fastest_lossless = min((result.screened[x] for x in lossless), default=fastest)
    finalists = [x for x in calls if x in keep or x.startswith(AUTO) or x == MPI_OWN
                 or result.screened[x] <= KEEP * fastest
                 or x in lossless and result.screened[x] <= KEEP * fastest_lossless]
    order = random.Random(nbytes)  # the same on every rank: collective calls must match
    samples: dict[str, list[float]] = {x: [] for x in finalists}
    for _ in range(rounds):
        order.shuffle(finalists)
        for name in finalists:
            each = result.screened[name]
            samples[name].append(slowest_mean(calls[name], calls_for(each, ROUND_SECONDS), comm))
    result.seconds = {x: statistics.median(v) for x, v in samples.items()}
    return result


def time_paired(nbytes: int, result: SizeResult, plans: list[PlanShape],
                autos: list[PlanShape], codec: str | None, comm: MPI.Intracomm) -> None:
    """Mode by mode, auto, its pick and the mode's PAIRED fastest plans of the rounds,
    timed again call by call in turn (`result.paired`, `result.paired_calls`)."""
    calls = size_calls(nbytes, plans + autos, comm)
    lossless = [label(p) for p in plans if p.inter_codec is None]
    ctx = context_for(comm)
    for mode, auto_label, allowed in _modes(plans, codec, lossless):
        fastest = sorted((result.seconds[x], x) for x in allowed if x in result.seconds)
        entrants = list(dict.fromkeys([auto_label, result.picks[mode]]
                                      + [x for _, x in fastest[:PAIRED]]))
        slowest = max(result.seconds[x] for x in entrants)
        turns = max(MIN_PAIR_CALLS, calls_for(slowest, PAIR_SECONDS))
        kind = ctx.tuner.kinds.get(key_of(nbytes, "float32", "sum",
                                          None if mode == "lossless" else mode, ctx.topology, True))
        ran: list[str] = []
        timed = [traced(calls[x], kind, ran) if x == auto_label else calls[x] for x in entrants]
        took = in_turn(timed, turns, random.Random(nbytes), comm)
        result.paired_ms[mode] = {x: [round(t * 1e3, 4) for t in took[i]]
                                  for i, x in enumerate(entrants)}
        result.paired[mode] = {x: ms * 1e-3 for x, ms in
                               capped_means(result.paired_ms[mode]).items()}
        result.paired_calls[mode] = turns
        result.auto_ran[mode] = ran


def tuning_state(kind: Any) -> dict | None:
    """What a kind's online tuning holds now: the plan settled on and the best, whether it
    learns or duels, its calls and re-checks, and per candidate its kept times (ms), its
    estimate, its tries and whether it is dropped; None where the kind is not tuned."""
    if kind is None:
        return None
    shown = kind.best()
    return {"settled": label(kind.settled) if kind.settled else None,
            "best": label(shown) if shown else None, "learning": kind.learning,
            "dueling": kind.dueling, "calls": kind.calls, "rechecks": kind.rechecks,
            "plans": {label(p): {"ms": [round(t * 1e3, 4) for t in kind.times.get(p, [])],
                                 "estimate_ms": (None if kind.estimate(p) is None
                                                 else round(kind.estimate(p) * 1e3, 4)),
                                 "tries": kind.tries.get(p, 0), "dropped": p in kind.dropped}
                      for p in kind.candidates}}


def tuning_states(nbytes: int, codec: str | None, comm: MPI.Intracomm) -> dict:
    """`tuning_state` of each mode's kind at ``nbytes`` (lossless, and with ``codec``)."""
    ctx = context_for(comm)
    tuner, topology = ctx.tuner, ctx.topology
    return {mode: tuning_state(tuner.kinds.get(key_of(nbytes, "float32", "sum", allowed,
                                                      topology, True)))
            for mode, allowed in [("lossless", None)] + ([(codec, codec)] if codec else [])}


def capped_means(calls: dict[str, list[float]]) -> dict[str, float]:
    """Each plan's mean time per call, a call over STALL x the median of all of them
    counted as that much."""
    cap = STALL * float(np.median(np.concatenate([np.asarray(v) for v in calls.values()])))
    return {x: float(np.minimum(np.asarray(v), cap).mean()) for x, v in calls.items()}


def traced(call: Callable, kind, ran: list[str]) -> Callable:
    """`call` (an auto's) that adds to `ran` the plan its tuning ran (the candidate whose
    tries grew; "model" where the kind is not tuned)."""
    tries = kind.tries if kind is not None else {}

    def run():
        before = dict(tries)
        call()
        grew = [p for p, n in tries.items() if n != before.get(p, 0)]
        ran.append(label(grew[0]) if grew else "model")
    return run


def in_turn(calls: list[Callable], turns: int, order: random.Random,
            comm: MPI.Intracomm) -> np.ndarray:
    """Each of `calls` once a turn, in an order shuffled each turn (`order`: seeded alike on
    every rank), a barrier before each: [call, turn] -> the slowest rank's seconds."""
    took = np.zeros((len(calls), turns))
    for turn in range(turns):
        sequence = list(range(len(calls)))
        order.shuffle(sequence)
        for i in sequence:
            comm.Barrier()
            start = MPI.Wtime()
            calls[i]()
            took[i, turn] = MPI.Wtime() - start
    comm.Allreduce(MPI.IN_PLACE, took, op=MPI.MAX)
    return took


def auto_picks(nbytes: int, topology: Topology, codec: str | None, comm: MPI.Intracomm) -> dict:
    """What auto runs at ``nbytes``: what its online tuning settled on, else the Selector's
    choice (rank 0's profile, cached per bucket)."""
    selector = context_for(comm).selector
    tuner = context_for(comm).tuner
    picks = {}
    for mode, allowed in [("lossless", None)] + ([(codec, codec)] if codec else []):
        kind = tuner.kinds.get(key_of(nbytes, "float32", "sum", allowed, topology, True))
        best = kind.best() if kind is not None else None
        picks[mode] = label(best or selector.choose(nbytes, topology, allowed))
    return picks


def learn(nbytes: int, autos: list[PlanShape], calls: int, comm: MPI.Intracomm) -> dict:
    """Each auto's first ``calls`` calls at ``nbytes`` (untimed: online tuning's learning);
    what the tuning measured then, per auto (plan label -> [ms, calls timed])."""
    send, recv = size_buffers(nbytes, 11, comm)
    topology, tuner = Topology.from_comm(comm), context_for(comm).tuner
    measured = {}
    for auto in autos:
        call = call_of(auto, send, recv, comm)
        for _ in range(calls):
            call()
        found = tuner.measured_for(nbytes, topology, auto.inter_codec)
        measured[label(auto)] = {label(p): [s * 1e3, n] for p, (s, n) in found.items()}
    return measured


def ratio_row(result: SizeResult, plans: list[PlanShape], codec: str | None) -> list[str]:
    """Cells of one size, for each auto: its pick, the best plan measured and its time, the
    pick's time over the best's, auto's own calls' time over the best's in the rounds, and
    auto's over its mode's best in the paired timing."""
    lossless = [label(p) for p in plans if p.inter_codec is None]
    cells = [_size_text(result.nbytes)]
    for mode, auto_label, allowed in _modes(plans, codec, lossless):
        best, best_s = result.best(allowed)
        pick = result.picks[mode]
        pick_s = result.best([pick])[1]
        cells += [pick, best, _ms(best_s), f"{pick_s / best_s:.2f}",
                  f"{result.seconds[auto_label] / best_s:.2f}",
                  f"{paired_ratio(result, mode, auto_label):.2f}"]
    return cells + [_ms(result.seconds[MPI_OWN])]


def paired_ratio(result: SizeResult, mode: str, auto_label: str) -> float:
    """auto's mean over the least mean of its mode's plans, in the paired timing."""
    times = result.paired[mode]
    return times[auto_label] / min(s for x, s in times.items() if x != auto_label)


def _modes(plans: list[PlanShape], codec: str | None, lossless: list[str]):
    yield "lossless", AUTO, lossless
    if codec:
        yield codec, label(PlanShape(AUTO, None, None, codec)), [label(p) for p in plans]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.1f}"


def _size_text(nbytes: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(nbytes)


def header(codec: str | None) -> list[str]:
    cols = ["size"]
    for mode in ["lossless"] + ([codec] if codec else []):
        cols += [f"auto ({mode}) picks", "best measured", "ms", "pick/best", "auto/best",
                 "auto/best paired"]
    return cols + ["MPI_Allreduce ms"]


def markdown(rows: list[list[str]], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipcoll-bench autocheck", description=__doc__.split("\n")[0])
    p.add_argument("-m", "--message-size", default="8:64M", help="[MIN:]MAX bytes, doubling")
    p.add_argument("--codec", help="also auto with this codec allowed (e.g. int8)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per size (median)")
    p.add_argument("--json", help="write every size's timings here")
    p.add_argument("--online", action="store_true",
                   help="auto tuning itself online (no profile): timed after --learn-calls calls")
    p.add_argument("--learn-calls", type=int, default=20,
                   help="--online: auto's untimed calls at each size before it is timed")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.online:
        zipcoll.configure(tune=False)  # auto from the profile alone: no online tuning
    comm = MPI.COMM_WORLD
    topology = Topology.from_comm(comm)
    plans, autos = plans_to_time(topology, args.codec)
    root = comm.Get_rank() == 0
    source = context_for(comm).selector.profile.source  # collective on first use
    if root:
        mode = (f"auto tuned online after {args.learn_calls} calls a size"
                if args.online else "auto from the profile")
        print(f"# zipcoll-bench autocheck: {comm.Get_size()} ranks, {topology.num_nodes} node(s), "
              f"{len(plans)} plans, profile: {source}; {mode}", flush=True)
    if args.online and not (settings.get().tune and settings.get().check):
        raise SystemExit("--online: ZIPCOLL_TUNE=0 (or ZIPCOLL_CHECK=0) turns the tuning off")
    warm_up(plans if args.online else plans + autos, comm)  # online: auto's calls are its own
    results, rows = [], []
    for nbytes in message_sizes(*parse_range(args.message_size, default_min=8)):
        tuned = learn(nbytes, autos, args.learn_calls, comm) if args.online else {}
        learned = tuning_states(nbytes, args.codec, comm) if args.online else {}
        picks = auto_picks(nbytes, topology, args.codec, comm)
        result = measure_size(nbytes, plans, autos, args.rounds, comm, tuple(picks.values()))
        result.picks = picks
        time_paired(nbytes, result, plans, autos, args.codec, comm)
        result.tuned = tuned
        if args.online:
            result.tuning = {mode: {"learned": learned[mode], "end": end}
                             for mode, end in tuning_states(nbytes, args.codec, comm).items()}
        result.predicted = {label(p): s for s, p in explain(nbytes, comm, args.codec,
                                                                     topology)}
        results.append(result)
        rows.append(ratio_row(result, plans, args.codec))
        if root:
            print(" | ".join(rows[-1]), flush=True)
    if root:
        print(markdown(rows, header(args.codec)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"argv": sys.argv, "ranks": comm.Get_size(),
                           "nodes": topology.num_nodes, "codec": args.codec,
                           "profile": source, "online": args.online,
                           "learn_calls": args.learn_calls if args.online else 0,
                           "sizes": [asdict(r) for r in results]}, f, indent=1)
    return 0

"""Online tuning: ``algorithm="auto"`` times the model's best few plans on the job's own calls.

The cost model prices plans from a profile; without a calibration run that profile is
the defaults, which may describe another network. So the first calls of each kind (size
bucket, dtype, op, codec allowed, layout, whether native plans may run: the Selector's
key) run the model's best few candidates in turn, each timed once before any is timed
twice, as the slowest rank saw it; a candidate's estimate is the mean of its latest
times but the slowest (of two, the lesser): one stalled call, on a shared machine whose
noise only ever slows a call, must not condemn a plan, but a plan whose calls stall
often costs what they take (a median would not see stalls in under half its calls).
A plan's first call at each size bucket (for a dtype) is its untimed warm-up, in
whichever kind of that bucket it comes first: on the communicator Numba compiles its
kernels and sub-communicators are split, and at a new size its scratch, the caller's
buffers and MPI's own temporaries are new, which can make that call several times the
plan's later ones. Then the fastest runs, timed on every call where its calls take
``TIME_ALL`` or more (else one in ``SAMPLE``), and one call in ``RECHECK`` runs a
runner-up, so a changed machine or network is noticed (another plan takes over once
``SWITCH`` x faster than the one settled on in a duel: a runner-up that looks that much
faster on a re-check from the kind's latest ``RECHECK`` calls, and by its estimate or
the re-check before (`Kind._challenge`; else it is the next re-check), runs in turn
with it until each has ``CONFIRM`` times from those calls, which alone then decide,
since the luckiest of several runner-ups' re-checks is no evidence, nor are times from
before the machine changed). A candidate more than ``DROP_AT_ONCE`` x the best so far
is dropped after its first timed call, for good; one more than ``DROP`` x after its
second, if its better time is (one call in several stalls 2-3x on a shared machine, and
the fastest plan must not go on one stall); and so is a best that becomes that slow. Once settled, a plan is dropped only on a time of its own:
where its latest and its estimate both are over ``DROP`` x the best's (a runner-up's
older times may be from before the machine changed).

Every rank must run the same plan for the same call, so a decision is a function of
agreed numbers only:

- each call's agreement (collectives/agreement.py: one small Iallreduce, posted in start
  order) carries, for each of the ``WINDOW`` calls before it, the time this rank took
  for that call if it has finished it, else 0 (`Tuner.slots`). The agreement gives the
  maximum (the slowest rank's time) and the minimum: a minimum of 0 means some rank had
  not finished that call yet (a non-blocking call still in flight); the time is then
  left to a later agreement, and lost after ``WINDOW`` of them (the candidate is tried
  again, at most ``TRIES`` times);
- agreements are read in start order (`Tuner.in_order`, `Tuner.learn`), whatever order
  they complete in on a rank, so the state they build is the same sequence on every rank;
- a call's plan is decided after its own agreement has been read (`Tuner.decide`), from
  that state: the same on every rank. What a rank measured alone never decides anything.

Which plans may be tried is fixed before any timing, from the model's ranking with plans
that run the same steps on the layout counted once (`_distinct`): the model's
``LOSSLESS`` best lossless plans, MPI's own Allreduce where the op and dtype allow it, and
with a codec allowed the model's ``CODED`` best that carry it and those it prices within
``TIE`` of their best, up to ``TIED`` (`_leading`). A lossless kind (no codec that may
pay) also tries the flat ring and the cheapest plan of each two-level schedule where
priced within ``HEDGE`` of the best (`_hedges`), then its near ties, then the next
plans in the model's order priced within ``HEDGE``, as far as ``LEARNABLE`` candidates
(at small sizes the model errs by per-step costs it leaves out: MPI's own, priced first
at 128 KiB on 2 x 2, ran 1.2x the two-level plans priced 1.6x it). All come from
`planning.candidate_plans` of the call's own arguments: never a plan they exclude,
never a lossy codec the caller did not pass. A call started before the last
agreement is read may get any candidate not yet dropped (`Tuner.possible`): that set
only shrinks as agreements are read, so what a call prepares for (MPI collectives in
start order) covers what it runs.

A kind the profile already measured (``Profile.plans`` of this layout has the model's
first choice near its size: ``zipcoll-bench calibrate --plans``, or a saved tuning) is not learned
again: it resumes settled on its fastest measured plan, with the plans measured within
``DROP`` of it as runner-ups, re-checked and dueled as after a learning (`_resumed`).
``Tuner.profile`` gives the profile with what was learned, to save and reload.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from zipcoll.collectives.planning.model import Shape
from zipcoll.collectives.planning.plans import (PlanShape, codec_idle, levels, measured_near,
                                                rank_plans)
from zipcoll.collectives.planning.profile import Profile
from zipcoll.collectives.planning.selector import bucket_size, size_bucket, spec_of
from zipcoll.collectives.progress import Gate
from zipcoll.collectives.registry import SCHEDULES
from zipcoll.collectives.slicing import slice_count

LOSSLESS = 3   # lossless candidates tried per kind
CODED = 4      # candidates carrying the allowed codec (their predictions err the most: one more)
TIE = 1.05     # plans the model prices within this of its cheapest are tried too, up to TIED
TIED = 5       # of each group (lossless, carrying the codec)
HEDGE = 2.0    # the flat ring and each two-level structure are tried within this of the best
LEARNABLE = 7  # a lossless kind's candidates: each a warm-up and TRIALS timed calls,
               # about its first 20 calls
TRIALS = 2     # timed calls of a candidate (not dropped) before the fastest is settled on
TRIES = 6      # calls of a candidate whose times keep getting lost (in flight) before it is judged
DROP = 2.0     # a candidate this much slower than the best so far is dropped
DROP_AT_ONCE = 3.0  # while learning: after its first timed call only where this much
                    # slower (a stalled call on this machine's emulated links takes 2-3x)
SWITCH = 1.03  # once settled, another candidate takes over only when this much faster,
CONFIRM = 6    # over this many calls run in turn with the one settled on (a duel): with
               # calls that vary 15% and one in ten stalled 2x, a runner-up 20% slower
               # wins 4% of duels of six calls each, 11% of three
               # (benchmarks/results/autocheck-online/overhead/duel_odds.py)
RECHECK = 32   # once settled, one call in RECHECK runs a runner-up (in turn)
SAMPLE = 16    # once settled, one call of the best in SAMPLE is timed where calls are short:
               # a timed call's bookkeeping (its time in the next agreement, the learning)
               # is some 8 us of Python a rank, 30-40 us a call on 4 ranks sharing 2 cores
TIME_ALL = 1e-3  # a best estimated at this or more is timed on every call: its bookkeeping
                 # is then under a few percent, and a plan whose calls turn slow half the
                 # time shows in its estimate within a few calls
KEEP = 8       # the latest times kept per candidate; its estimate is their mean but the slowest
WINDOW = 4     # a call's time rides in the agreements of the WINDOW calls after it
SLOTS = 2 * WINDOW  # numbers the agreement carries: (t, -t) per call, microseconds, 0: not done

log = logging.getLogger("zipcoll.tuning")
_UNKNOWN = object()  # a kind not met yet (None: a kind met, with nothing to tune)


def _estimate(times: list[float]) -> float:
    """The mean of `times` but the slowest (of one, itself; of two, the lesser). In duels
    of six calls a side (`benchmarks/results/autocheck-online/stall/duel_estimates.py`)
    it picks about as the lower median did between plans stalled alike, and where one
    of them stalls on 40% of its calls, the plan with the lower mean in 73-79% of duels
    (the lower median: 43-56%)."""
    if len(times) == 1:
        return times[0]
    return (sum(times) - max(times)) / (len(times) - 1)


@dataclass
class Kind:
    """One kind of call's tuning: its candidates (model order) and what their calls took.

    Its estimates, best and whether it is still learning are kept up to date as times
    come in (auto asks on every call). Once no candidate is owed a trial it never is
    again: tries and times only grow, candidates are only dropped.
    """

    label: str
    candidates: list[PlanShape]
    predicted: dict[PlanShape, float]
    dtype: str = "float32"
    bucket: int = 0  # its size bucket: a plan warms up once per (dtype, bucket)
    times: dict[PlanShape, list[float]] = field(default_factory=dict)
    sizes: dict[PlanShape, list[int]] = field(default_factory=dict)
    tries: dict[PlanShape, int] = field(default_factory=dict)
    pending: dict[PlanShape, int] = field(default_factory=dict)
    dropped: list[PlanShape] = field(default_factory=list)
    calls: int = 0
    rechecks: int = 0
    untimed: int = 0  # the settled best's short calls since its last timed one
    settled: PlanShape | None = None
    loud: bool = True  # logs what it learns (rank 0's)
    resumed: bool = False  # settled from a profile's measured times (`_resumed`)
    # (plan, dtype, bucket) that ran on the communicator already (the Tuner's, shared by
    # its kinds)
    warmed: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self._alive = list(self.candidates)
        self._estimates: dict[PlanShape, float] = {}
        self._best: PlanShape | None = None
        self._learning = True
        self._learned: dict[PlanShape, int] = {}  # times learned per plan, ever
        # the one settled on and a runner-up that looks faster, run in turn: each plan's
        # count of times learned when the duel began
        self._duel: dict[PlanShape, int] | None = None
        # a runner-up that looks faster than the one settled on, short of the evidence a
        # duel needs: the next re-check's (`_challenge`)
        self._suspect: PlanShape | None = None
        # the kind's calls when a plan's latest time came, where a re-check's
        self._rechecked_at: dict[PlanShape, int] = {}
        self.rechecking = False  # whether the plan chosen last is a re-check
        if self.resumed:
            self._learning = False

    def timed_here(self, plan: PlanShape) -> int:
        """`plan`'s calls timed in this job (a resumed kind's profile times not counted)."""
        return self._learned.get(plan, 0) - (TRIALS if self.resumed else 0)

    def resume(self, measured: dict[PlanShape, float], nbytes: int) -> None:
        """Each candidate's time from a profile, as TRIALS timed calls; settle on the fastest."""
        for plan, seconds in measured.items():
            self.times[plan], self.sizes[plan] = [seconds] * TRIALS, [nbytes] * TRIALS
            self._learned[plan] = TRIALS
            self._estimates[plan] = seconds
        self._refresh()
        self.settled = self._best

    def alive(self) -> list[PlanShape]:
        """The candidates not dropped, in model order."""
        return self._alive

    def estimate(self, plan: PlanShape) -> float | None:
        """The mean of `plan`'s latest KEEP times but the slowest (`_estimate`); None
        untimed."""
        return self._estimates.get(plan)

    def best(self) -> PlanShape | None:
        """The alive candidate with the lowest estimate (ties: model order), but that once
        settled the one settled on stays unless another is SWITCH x faster; None untimed."""
        return self._best

    @property
    def dueling(self) -> bool:
        """Whether a runner-up and the plan settled on are run in turn (`_refresh`)."""
        return self._duel is not None

    @property
    def learning(self) -> bool:
        """Whether a candidate still lacks its warm-up, or its TRIALS times (and has tries
        left)."""
        return self._learning

    def _owed(self, plan: PlanShape) -> bool:
        """Whether `plan` is still owed a call: its warm-up, or a trial (times learned or
        in flight short of TRIALS, and tries left)."""
        return self.cold(plan) or self._trial_due(plan, self._timed_or_due(plan))

    def _trial_due(self, plan: PlanShape, counted: int) -> bool:
        """Whether `plan`, with `counted` times, is owed another trial: short of TRIALS
        and tries left. A plan within DROP_AT_ONCE of the best gets its second whatever
        its first took: on a shared machine one call in several stalls (2-3x on the
        emulated link)."""
        return counted < TRIALS and self.tries.get(plan, 0) < TRIES

    def _timed_or_due(self, plan: PlanShape) -> int:
        """`plan`'s times learned or in flight (ties keep the model order: `min` is stable)."""
        return len(self.times.get(plan, ())) + self.pending.get(plan, 0)

    def cold(self, plan: PlanShape) -> bool:
        """Whether `plan`'s next call is its warm-up (its first at this size bucket)."""
        return (plan, self.dtype, self.bucket) not in self.warmed

    def _refresh(self) -> None:
        timed = [(self._estimates[c], i, c) for i, c in enumerate(self._alive)
                 if c in self._estimates]
        best = min(timed)[2] if timed else None
        held = self.settled
        # two plans that cost the same trade places as their estimates cross: keep the one
        # settled on until another is clearly faster, on calls run in turn with it (their
        # older times may be from another state of the machine, and one lucky re-check is
        # the fastest of several runner-ups' noisy draws)
        self._suspect = None
        if self._duel is not None:
            best = self._after_duel(held, best)
        elif held is not None and held in self._alive:
            self._challenge(held, timed)
            best = held
        self._best = best
        if self._learning:
            self._learning = any(self.cold(c) or self._trial_due(c, len(self.times.get(c, ())))
                                 for c in self._alive)

    def _challenge(self, held: PlanShape, timed: list[tuple[float, int, PlanShape]]) -> None:
        """A duel with the runner-up whose latest time is SWITCH x under the estimate of
        the one settled on, that time a re-check's from the kind's latest RECHECK calls,
        and so is its estimate or the time before (two re-checks in a row: its estimate
        may hold times of a stretch that has passed). The time must be new evidence from
        the state of the machine the held's latest are from: in a stretch where the
        machine is slow, the held's estimate rises while a runner-up's stays what its
        trials and re-checks, long before, made it; its learning's and duels' times were
        weighed already. A runner-up faster by one of them only is the next re-check
        (`_suspect`), but for one whose re-check just now was not faster."""
        bar = self._estimates[held] / SWITCH
        for estimate, _, plan in sorted(timed):
            latest = self.times[plan][-1]
            if plan == held or estimate >= bar and latest >= bar:
                continue
            fresh = self.calls - self._rechecked_at.get(plan, -RECHECK) < RECHECK
            if fresh and latest < bar and (estimate < bar or max(self.times[plan][-2:]) < bar):
                self._duel = {held: self._learned[held], plan: self._learned[plan]}
                return
            # a re-check just now no faster is evidence against: the next one goes to
            # another runner-up, not this one again
            if self._suspect is None and (latest < bar or not fresh):
                self._suspect = plan

    def _after_duel(self, held: PlanShape | None, best: PlanShape | None) -> PlanShape | None:
        """While the duel lasts, the plan settled on. Once each of the two has CONFIRM times
        from it, both keep only those (one stretch of calls, in turn) and the runner-up
        takes over if SWITCH x faster on them."""
        duel = self._duel
        if held not in duel or any(p not in self._alive for p in duel):
            self._duel = None  # one of them was dropped
            return held if held in self._alive else best
        if any(self._since(p) < CONFIRM for p in duel):
            return held
        for plan in duel:
            keep = self._since(plan)
            del self.times[plan][:-keep], self.sizes[plan][:-keep]
            self._estimates[plan] = _estimate(self.times[plan])
        self._duel = None
        runner_up = next(p for p in duel if p != held)
        if SWITCH * self._estimates[runner_up] >= self._estimates[held]:
            return held
        self.settled = runner_up
        if self.loud:
            log.info("auto %s: settled on %s, %.3f ms against %s's %.3f ms, run in turn",
                     self.label, runner_up, self._estimates[runner_up] * 1e3, held,
                     self._estimates[held] * 1e3)
        return runner_up

    def _in_duel(self, plan: PlanShape) -> int:
        """`plan`'s times learned since the duel began."""
        return self._learned.get(plan, 0) - self._duel[plan]

    def _since(self, plan: PlanShape) -> int:
        """`plan`'s times learned since the duel began that are kept (at most KEEP)."""
        return min(KEEP, self._in_duel(plan))

    def choose(self) -> PlanShape:
        """The next call's plan: of the candidates still owed a call, the first (model
        order) of those with the fewest times so far, so every candidate is timed once
        before any is timed twice and one much slower than the others is dropped after
        that one call; else the best (or, one call in RECHECK, a runner-up in turn), in
        a duel in turn with the runner-up that looks faster; then counts its try."""
        self.calls += 1
        self.rechecking = False
        plan = None
        if self._learning:
            owed = [c for c in self._alive if self._owed(c)]
            plan = min(owed, key=self._timed_or_due, default=None)
        if plan is None:
            plan = self._best or self._alive[0]
            others = len(self._alive) - 1
            duel = self._duel
            if duel is not None and plan in duel:
                runner_up = next(p for p in duel if p != plan)
                if self._due(runner_up) <= self._due(plan):
                    plan = runner_up
            elif not self._learning and others and self.calls % RECHECK == 0:
                self.rechecks += 1
                self.rechecking = True
                plan = self._suspect or [c for c in self._alive
                                         if c != plan][(self.rechecks - 1) % others]
        self.tries[plan] = self.tries.get(plan, 0) + 1
        if self._learning:
            self._refresh()
        return plan

    def untimed_call(self, plan: PlanShape) -> bool:
        """Whether a call of `plan` (just chosen) goes untimed: the settled best's short
        calls, but for one in SAMPLE of them (counted apart from the re-checks, which
        would otherwise take some of its turns)."""
        if (self._learning or self._duel is not None or plan != self._best
                or self._estimates[plan] >= TIME_ALL):
            return False
        self.untimed += 1
        if self.untimed < SAMPLE:
            return True
        self.untimed = 0
        return False

    def _due(self, plan: PlanShape) -> int:
        """`plan`'s duel calls: times learned since it began, and calls in flight."""
        return self._in_duel(plan) + self.pending.get(plan, 0)

    def learn(self, plan: PlanShape, seconds: float, nbytes: int, recheck: bool = False) -> None:
        """A call's agreed time: kept, then candidates over DROP x the best dropped: while
        learning, every one; once settled, only `plan`, where this time and its estimate
        both are. A runner-up's times are then from its trials and rare re-checks, the
        best's from its latest calls: on a machine that turned 2x faster since (this one's
        shared-memory calls change 2-4x within seconds) the best's would condemn every
        runner-up for good on times from before the change, though one of them is faster
        now; and one stalled re-check must not condemn a plan either."""
        self._learned[plan] = self._learned.get(plan, 0) + 1
        if recheck:
            self._rechecked_at[plan] = self.calls
        else:
            self._rechecked_at.pop(plan, None)
        times, sizes = self.times.setdefault(plan, []), self.sizes.setdefault(plan, [])
        times.append(seconds)
        sizes.append(nbytes)
        del times[:-KEEP], sizes[:-KEEP]
        self._estimates[plan] = _estimate(times)
        self._drop(None if self._learning else plan, seconds)

    def lost(self) -> None:
        """A call's time never reached every rank: drop candidates never timed that ran
        out of tries (none left is judged on nothing)."""
        self._drop()

    def _drop(self, only: PlanShape | None = None, latest: float = 0.0) -> None:
        dueling = self._duel is not None
        self._refresh()
        best = self._best
        alive = len(self._alive)
        for c in list(self._alive) if only is None else [only]:
            if len(self._alive) == 1 or c not in self._alive:
                break
            estimate = self.estimate(c) if only is None else min(self.estimate(c), latest)
            exhausted = estimate is None and self.tries.get(c, 0) >= TRIES and not self.pending.get(c)
            # while learning, a plan owed its second trial is judged on its first time
            # only where that is far beyond a stall
            owed = only is None and self._trial_due(c, len(self.times.get(c, ())))
            limit = DROP_AT_ONCE if owed else DROP
            slow = best is not None and estimate is not None and estimate > limit * self.estimate(best)
            if exhausted or slow:
                self.dropped.append(c)
                self._alive.remove(c)
                if self.loud:
                    log.info("auto %s: dropped %s (%s)", self.label, c,
                             "its times never reached every rank" if exhausted else
                             f"{estimate * 1e3:.3f} ms, over {limit:g}x {best}'s "
                             f"{self.estimate(best) * 1e3:.3f} ms")
        # again where a plan was dropped, or a duel ended (another may begin): else the
        # state is as the first refresh left it
        if len(self._alive) != alive or dueling and self._duel is None:
            self._refresh()
        if not self._learning and self.settled != self._best:
            self.settled = self._best
            if self.settled is not None and self.loud:
                log.info("auto %s: settled on %s, %.3f ms measured (the model predicted "
                         "%.3f ms)", self.label, self.settled,
                         self.estimate(self.settled) * 1e3, self.predicted[self.settled] * 1e3)


@dataclass
class _Ran:
    kind: Kind
    plan: PlanShape
    nbytes: int
    warm_up: bool  # a plan's first call at its size bucket: compiles, splits, first touch
    recheck: bool  # a runner-up's re-check (`Kind.choose`)


class Tuner:
    """One communicator's online tuning (kept on its Context).

    `measure(plan, seconds)`: what a call's time counts as (the identity; a test injects
    its own timer here: the communicator and MPI stay real). `clock`: the time source.
    """

    def __init__(self, rank: int = 0):
        self.kinds: dict[tuple, Kind | None] = {}  # None: one plan to run, not tuned
        self._ran: dict[int, _Ran] = {}  # turn -> what that call ran (the same on every rank)
        self._took: dict[int, float] = {}  # turn -> this rank's seconds (its own measurement)
        self._read = 0  # agreements read, in start order
        self._passed: set[int] = set()
        self._warmed: set = set()  # (plan, dtype, bucket) that ran here: warm-ups done
        self.rank = rank
        self.clock: Callable[[], float] = time.perf_counter
        self.measure: Callable[[PlanShape, float], float] = lambda plan, seconds: seconds

    # -- the agreement's part ----------------------------------------------------------
    def slots(self, turn: int) -> list[int]:
        """What call `turn`'s agreement carries: for each of the WINDOW calls before it,
        (t, -t) with t this rank's microseconds for it, 0 where not finished or not tuned."""
        out = [0] * SLOTS
        # the few timed calls kept (once settled, short calls are timed one in SAMPLE)
        for old, seconds in list(self._took.items()):
            back = turn - old
            if back > WINDOW:
                del self._took[old]
            elif back > 0:
                us = max(1, round(seconds * 1e6))
                out[2 * back - 2], out[2 * back - 1] = us, -us
        return out

    def in_order(self, turn: int) -> Gate | None:
        """A step that waits until every older call's agreement has been read (or passed);
        None when they have."""
        return None if self._read == turn else Gate(lambda: self._read == turn)

    def learn(self, turn: int, highs: Any) -> None:
        """Read call `turn`'s agreed slots (their maxima; in start order, after `in_order`):
        a time every rank had is the slowest rank's; one some rank lacked waits, and is
        lost once out of the window."""
        for old in sorted(self._ran):  # the calls waiting for their times, oldest first
            back = turn - old
            if back <= 0:
                break
            every = back <= WINDOW and -int(highs[2 * back - 1]) > 0  # every rank had it
            if not every and back < WINDOW:
                continue  # some rank had not finished it: a later agreement may carry it
            ran = self._ran.pop(old)  # learned, or out of the window: lost
            if every:
                self._took.pop(old, None)  # no later agreement needs it
            if ran.warm_up:  # a warm-up's time is not the plan's
                continue
            ran.kind.pending[ran.plan] -= 1
            if every:
                ran.kind.learn(ran.plan, int(highs[2 * back - 2]) * 1e-6, ran.nbytes, ran.recheck)
            else:
                ran.kind.lost()

    def done(self, turn: int) -> None:
        """Call `turn`'s agreement is read, or it has none (idempotent)."""
        if turn >= self._read:
            self._passed.add(turn)
        while self._read in self._passed:
            self._passed.discard(self._read)
            self._read += 1

    # -- the decision -------------------------------------------------------------------
    def kind(self, key: tuple, profile: Profile) -> Kind | None:
        """The tuning of one kind of call; None where there is nothing to choose from."""
        known = self.kinds.get(key, _UNKNOWN)  # one look-up for every call but the first
        if known is not _UNKNOWN:
            return known
        self.kinds[key] = found = _new_kind(key, profile)
        if found is not None:
            found.loud, found.warmed = self.rank == 0, self._warmed
        if found is not None and found.loud and found.resumed:
            log.info("auto %s: settled on %s as measured in the profile (%.3f ms); "
                     "re-checking %s", found.label, found.settled,
                     found.estimate(found.settled) * 1e3,
                     "; ".join(str(p) for p in found.candidates if p != found.settled))
        elif found is not None and found.loud:
            log.info("auto %s: learning, trying %s", found.label,
                     "; ".join(map(str, found.candidates)))
        return found

    def decide(self, turn: int, key: tuple, profile: Profile, nbytes: int) -> PlanShape | None:
        """Call `turn`'s plan (after its agreement is read: the same on every rank); None:
        not tuned, the model's choice stands."""
        kind = self.kind(key, profile)
        if kind is None:
            return None
        plan = kind.choose()
        if kind.untimed_call(plan):
            return plan
        warm_up = kind.cold(plan)
        if warm_up:
            self._warmed.add((plan, kind.dtype, kind.bucket))
        else:
            kind.pending[plan] = kind.pending.get(plan, 0) + 1
        self._ran[turn] = _Ran(kind, plan, nbytes, warm_up, kind.rechecking)
        return plan

    def possible(self, key: tuple, profile: Profile) -> list[PlanShape]:
        """Every plan a call of this kind started now may run (a superset of what it will)."""
        kind = self.kind(key, profile)
        return [] if kind is None else kind.alive()

    def finished(self, turn: int, seconds: float) -> None:
        """This rank's call `turn` ended after `seconds` of its steps (kept if tuned)."""
        ran = self._ran.get(turn)
        if ran is not None:
            self._took[turn] = self.measure(ran.plan, seconds)

    # -- what was learned ----------------------------------------------------------------
    def learning(self) -> list[str]:
        """The kinds still trying candidates."""
        return [k.label for k in self.kinds.values() if k is not None and k.learning]

    def measured(self, key: tuple) -> dict[PlanShape, tuple[float, int]]:
        """(estimate, calls timed in this job) of each candidate of one kind timed here
        (empty if untuned)."""
        kind = self.kinds.get(key)
        if kind is None:
            return {}
        timed = {c: kind.timed_here(c) for c in kind.candidates}
        return {c: (kind.estimate(c), timed[c]) for c in kind.candidates if timed[c]}

    def measured_for(self, nbytes: int, topology: Any, codec: Any = None,
                     dtype: Any = "float32", op: str = "sum",
                     native: bool = True) -> dict[PlanShape, tuple[float, int]]:
        """`measured` of the kind a call with these arguments belongs to."""
        return self.measured(key_of(nbytes, dtype, op, codec, topology, native))

    def profile(self, base: Profile) -> Profile:
        """`base` with what was learned as measured plans (``Profile.plans``, the form of
        ``calibrate --plans``): float32 SUM kinds, each plan at its calls' mean size, its
        estimate; where kinds share a plan at one size, the lower."""
        plans = {layout: dict(table) for layout, table in base.plans.items()}
        points: dict[tuple[str, str], dict[int, float]] = {}
        for key, kind in self.kinds.items():
            if kind is None or key[1] != "float32" or key[2] != "sum":
                continue
            for plan, times in kind.times.items():
                size = int(np.mean(kind.sizes[plan]))
                at = points.setdefault((key[4].label, str(plan)), {})
                at[size] = min(at.get(size, float("inf")), kind.estimate(plan))
        for (layout, plan), at in points.items():
            table = plans.setdefault(layout, {})
            merged = dict(table.get(plan, ()))
            merged.update(at)
            table[plan] = tuple(sorted(merged.items()))
        return replace(base, plans=plans, source=f"{base.source} + tuned online")


def key_of(nbytes: int, dtype: Any, op: str, codec: Any, topology: Any, native: bool) -> tuple:
    """A kind of call: the Selector's key (size bucket, dtype, op, codec spec, layout shape,
    native plans allowed), each part the same on every rank. On one node a codec allowed
    makes no kind of its own: auto tries no plan that carries one there (`_new_kind`),
    so those calls learn with the lossless ones."""
    shape = _shape_of(topology)
    return (size_bucket(nbytes), _dtype_name(dtype), "sum" if op in ("sum", "mean") else op,
            spec_of(codec) if shape.nodes > 1 else None, shape, bool(native))


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: Any) -> str:
    return np.dtype(dtype).name


@functools.lru_cache(maxsize=64)
def _shape_of(topology: Any) -> Shape:
    return Shape.of(topology)


def _leading(priced: list[tuple[float, PlanShape]], least: int) -> list[PlanShape]:
    """The `least` cheapest of `priced` (cheapest first), and more of those the model prices
    within TIE of the cheapest, up to TIED in all.

    At large sizes the model prices the bandwidth-optimal schedules (ring, two-phase,
    Rabenseifner, their hierarchical forms; flat and hierarchical alike over one rank a
    node) within a few percent of each other: they differ in its latency terms only.
    Which of them is fastest is then down to what it leaves out (Python per step, TCP on
    a shaped link), so the first `least` by its order would be a choice by name."""
    near = [p for s, p in priced if s <= priced[0][0] * TIE] if priced else []
    return [p for _, p in priced[:least]] + near[least:TIED]


_RING = PlanShape("ring")


def _hedges(priced: list[tuple[float, PlanShape]]) -> list[PlanShape]:
    """The flat ring and the cheapest plan of each two-level schedule, each where the model
    prices it within HEDGE of its cheapest.

    The model errs by structure more than by schedule. A ring rank sends to one neighbour
    at a time, so what the model leaves out (ranks sharing cores, flows sharing a TCP link,
    several senders at one receiver) slows it least: the model ranks it behind schedules
    that the machine then runs slower (on one node of 4 ranks on 2 cores, 1.1-1.3x slower
    at 8-64 MiB than the flat ring the model priced 1.4-1.6x theirs); it is also what
    most jobs run without zipcoll. A two-level plan runs in slices, several in flight,
    which the model prices by its busiest resource: on that node the hierarchical ring,
    priced 1.47x the torus plans at 64 MiB, ran 1.1-1.2x faster than they did. So each
    structure near the best gets one trial, and the timing decides."""
    cheapest = priced[0][0] if priced else 0.0
    found: dict[str, PlanShape] = {}
    for seconds, plan in priced:
        if seconds > HEDGE * cheapest:
            break
        structure = plan.algorithm if SCHEDULES[plan.algorithm].two_level else str(plan)
        if (plan == _RING or plan.inner is not None) and structure not in found:
            found[structure] = plan
    return list(found.values())


def _distinct(priced: list[tuple[float, PlanShape]], shape: Shape,
              unsliced: bool = False) -> list[tuple[float, PlanShape]]:
    """`priced` without the plans that run another's steps on this layout.

    A two-level plan whose inter level is one rank (a hierarchical plan on one node) runs
    its level-1 ring whatever its inner schedule: one of them stands for all (the ring
    inner, the default, where it is among them; one over a native inner level runs its
    slices one at a time, so it stays apart). A two-level plan whose level 1 is one rank
    (one rank a node) runs its inner schedule over every rank, as the flat plan of that
    schedule does, and where neither is cut in slices (`unsliced`: calls of one slice)
    their steps are the same: the flat plan stands for both. Trying
    each would spend the learning on one plan under several names, and leave out the
    schedules that differ."""
    kept: dict[tuple, int] = {}
    out: list[tuple[float, PlanShape]] = []
    for seconds, plan in priced:
        key = _steps_of(plan, shape, unsliced)
        if key not in kept:
            kept[key] = len(out)
            out.append((seconds, plan))
        elif plan.inner == "ring" and key[0] == plan.algorithm or tuple(plan) == key:
            out[kept[key]] = (out[kept[key]][0], plan)  # the ring inner; the flat plan
    return out


def _steps_of(plan: PlanShape, shape: Shape, unsliced: bool = False) -> tuple:
    """What names the steps `plan` runs on a layout of `shape` (`_distinct`)."""
    schedule = SCHEDULES[plan.algorithm]
    if schedule.two_level and plan.inner is not None:
        found = levels(schedule, shape)
        if found is not None and found.columns[0] == 1:
            return plan.algorithm, SCHEDULES[plan.inner].native, plan.intra_codec
        if (unsliced and found is not None and found.rows[0] == 1
                and found.columns[0] == shape.size and not SCHEDULES[plan.inner].native):
            return tuple(PlanShape(plan.inner, None, None, plan.inter_codec))
    return tuple(plan)


def _new_kind(key: tuple, profile: Profile) -> Kind | None:
    bucket, dtype, op, spec, shape, native = key
    if shape.size == 1:
        return None  # one rank: a copy
    ranked = rank_plans(bucket_size(bucket), shape, profile, spec, dtype, op, native)
    # measured near this size (not only extrapolated from another): resume, not learn
    measured = measured_near(profile.plans.get(shape.label, {}), ranked[0][1], bucket_size(bucket))
    # the bucket's calls all under one slice: a two-level call of them runs one
    ranked = _distinct(ranked, shape, unsliced=slice_count(2 ** bucket - 1) == 1)
    lossless = [(s, p) for s, p in ranked if p.inter_codec is None and p.intra_codec is None]
    # auto compresses only across nodes (a node's shared memory is faster than any codec
    # here): on one node no coded plan is tried either, lossy codec allowed or not
    coded = [] if shape.nodes == 1 else [(s, p) for s, p in ranked if p.inter_codec is not None
                                         and not codec_idle(p, shape)]
    label = (f"{bucket_size(bucket)} B {dtype} {op}" + (f" codec {spec}" if spec else "")
             + f" on {shape.label}")
    if measured:  # what a calibration or an earlier job measured decides: resume from it
        allowed = set(lossless + coded)
        return _resumed(label, [item for item in ranked if item in allowed],
                        profile.plans[shape.label], dtype, bucket)
    # MPI's own Allreduce too, where allowed: what the job would run without zipcoll
    own = [p for _, p in lossless if p.inner is None and SCHEDULES[p.algorithm].native]
    # with a codec that may pay, the lossless plans are the fallback for when none with it
    # does: the model's best LOSSLESS and MPI's own. Its near ties are the lossless kind's
    # to tell apart; here each would cost two calls more of the learning (a warm-up and a
    # timed call), which 20 calls did not cover with them
    if coded:
        chosen = set([p for _, p in lossless[:LOSSLESS]] + own + _leading(coded, CODED))
    else:  # then near ties, then the next within HEDGE, as far as LEARNABLE leaves room
        first = list(dict.fromkeys([p for _, p in lossless[:LOSSLESS]] + own + _hedges(lossless)))
        ties = [p for p in _leading(lossless, LOSSLESS) if p not in first]
        chosen = set(first + ties)
        near = [p for s, p in lossless if s <= HEDGE * lossless[0][0] and p not in chosen]
        chosen = set(first + (ties + near)[:max(0, LEARNABLE - len(first))])
    candidates = [p for _, p in ranked if p in chosen]  # model order
    if len(candidates) < 2:
        return None
    return Kind(label, candidates, {p: s for s, p in ranked}, dtype, bucket)


def _resumed(label: str, priced: list[tuple[float, PlanShape]], table: dict, dtype: str,
             bucket: int) -> Kind | None:
    """A kind the profile measured at its size, settled as if learned there: its measured
    plans within DROP of the fastest (at most LEARNABLE), each with its measured time as
    TRIALS timed calls. It runs the fastest from its first call, and re-checks and duels
    as a kind settled in this job does, so a changed machine or network is noticed
    (a saved tuning reloads as it was left, not frozen); None where one plan is left."""
    nbytes = bucket_size(bucket)
    near = [(s, p) for s, p in priced if measured_near(table, p, nbytes)]
    candidates = [p for s, p in near if s <= DROP * near[0][0]][:LEARNABLE] if near else []
    if len(candidates) < 2:
        return None
    kind = Kind(label, candidates, {p: s for s, p in priced}, dtype, bucket, resumed=True)
    kind.resume({p: s for s, p in near if p in candidates}, nbytes)
    return kind

"""planning.tuning without MPI: several Tuners stand for ranks, the agreement for what
MPI's Iallreduce would compute (the element-wise max of every rank's slots), and each
rank finishes its calls at its own moments. The decisions must be the same sequence on
every rank whatever those moments; losers go after one timed call; a kind the profile
measured is not tuned."""
import random
from dataclasses import replace

import numpy as np
import pytest

from zipcoll.collectives.planning import DEFAULT_PROFILE
from zipcoll.collectives.planning import tuning
from zipcoll.collectives.planning.plans import PlanShape
from zipcoll.collectives.planning.tuning import SLOTS, Tuner, key_of
from zipcoll.topologies import Topology

TOPOLOGY = Topology.from_layout(4, 0, ranks_per_node=1)
KEY = key_of(4 << 20, "float32", "sum", "int8", TOPOLOGY, True)


def agreed(rows):
    return np.max(np.array(rows, dtype=np.int64), axis=0)


def simulate(ranks, calls, in_flight, seed, table, key=KEY):
    """Every rank starts `calls` calls, at most `in_flight` unfinished; each rank finishes
    them in its own random order and at its own moments. The plans decided, per rank."""
    rng = random.Random(seed)
    tuners = [Tuner(rank) for rank in range(ranks)]
    for r, t in enumerate(tuners):
        t.measure = lambda plan, seconds, r=r: table(plan, r)
    decided = [[] for _ in range(ranks)]
    unfinished = [set() for _ in range(ranks)]
    for turn in range(calls):
        # each rank finishes some of its older calls first (its own choice of which)
        for r in range(ranks):
            while unfinished[r] and (len(unfinished[r]) >= in_flight or rng.random() < 0.4):
                done = rng.choice(sorted(unfinished[r]))
                unfinished[r].discard(done)
                tuners[r].finished(done, 0.0)
        highs = agreed([t.slots(turn) for t in tuners])
        for r, t in enumerate(tuners):
            t.learn(turn, highs[len(highs) - SLOTS:])
            plan = t.decide(turn, key, DEFAULT_PROFILE, 4 << 20)
            t.done(turn)
            decided[r].append(plan)
            unfinished[r].add(turn)
    return decided, tuners


@pytest.mark.parametrize("in_flight", [1, 2, 5, 9])
@pytest.mark.parametrize("seed", range(4))
def test_every_rank_decides_the_same_sequence_whenever_its_calls_finish(in_flight, seed):
    kind = Tuner().kind(KEY, DEFAULT_PROFILE)
    target = kind.candidates[-1]

    def table(plan, rank):  # each rank its own times; the slowest rank's make target fastest
        base = 1e-3 if plan == target else 1.7e-3
        return base * (1 + 0.1 * rank) if (rank + hash(str(plan))) % 3 else base * 0.3

    decided, tuners = simulate(3, 150, in_flight, seed, table)
    assert all(d == decided[0] for d in decided)
    kinds = [t.kinds[KEY] for t in tuners]
    assert all(k.times == kinds[0].times and k.dropped == kinds[0].dropped for k in kinds)
    if in_flight == 1:
        assert not kinds[0].learning and kinds[0].best() == target


def test_a_loser_runs_its_warm_up_and_one_timed_call():
    kind = Tuner().kind(KEY, DEFAULT_PROFILE)
    loser = kind.candidates[1]

    def table(plan, rank):
        return 5e-3 if plan == loser else 1e-3

    decided, tuners = simulate(2, 60, 1, 0, table)
    assert decided[0].count(loser) == 2
    assert loser in tuners[0].kinds[KEY].dropped


def test_a_kind_the_profile_measured_is_not_tuned():
    first = Tuner().kind(KEY, DEFAULT_PROFILE).candidates[0]
    measured = replace(DEFAULT_PROFILE, plans={"4x1": {str(first): ((4 << 20, 1e-3),)}})
    assert Tuner().kind(KEY, measured) is None
    assert Tuner().decide(0, KEY, measured, 4 << 20) is None


def test_what_was_learned_reloads_as_measured_plans():
    kind_table = {}

    def table(plan, rank):
        return kind_table.setdefault(plan, 1e-3 * (1 + len(kind_table)))

    _, tuners = simulate(2, 40, 1, 0, table)
    profile = tuners[0].profile(DEFAULT_PROFILE)
    assert "4x1" in profile.plans and "tuned online" in profile.source
    again = type(profile).from_dict(profile.to_dict())
    assert again.plans == profile.plans
    resumed = Tuner().kind(KEY, again)  # its first choice is measured now: not learned again
    learned = tuners[0].kinds[KEY]
    assert resumed.resumed and not resumed.learning and resumed.best() == learned.best()
    within = {p for p in learned.candidates
              if learned.estimate(p) is not None
              and learned.estimate(p) <= tuning.DROP * learned.estimate(learned.best())}
    assert set(resumed.candidates) == within  # its runner-ups: those within DROP


def test_a_job_slower_than_the_model_reloads_its_tuning_and_runs_what_it_settled_on():
    """Measured on a network slower than the profile describes (the defaults: 10 Gbit/s;
    an emulated 1 Gbit/s link takes several times the model's prices), the plans the
    job did not try keep the model's prices, under every measured time. Reloaded, the
    next job must still start tuned: not learn the kind again, and run the plan this one
    settled on, not an untried plan the model prices low."""
    from zipcoll.collectives.planning.plans import rank_plans, unmeasured_behind

    times = {}

    def table(plan, rank):  # 30-50 ms a call, the fourth candidate tried the fastest
        return times.setdefault(plan, 30e-3 * (1 + 0.1 * len(times)) if len(times) != 3
                                else 25e-3)

    _, tuners = simulate(2, 60, 1, 0, table)
    settled = tuners[0].kinds[KEY].settled
    assert settled == min(times, key=times.get)
    profile = type(DEFAULT_PROFILE).from_dict(tuners[0].profile(DEFAULT_PROFILE).to_dict())
    resumed = Tuner().kind(KEY, profile)
    assert resumed.resumed and not resumed.learning and resumed.best() == settled
    ranked = rank_plans(4 << 20, TOPOLOGY, profile, "int8")
    assert ranked[0][1] == settled, ranked[:3]
    cheapest_untried = min((s, p) for s, p in ranked if p not in times)
    assert cheapest_untried[0] < times[settled]  # the model prices it lower: it is behind
    assert cheapest_untried[1] in unmeasured_behind(ranked, 4 << 20, TOPOLOGY, profile)
    # at a size it never measured the model decides as before, and tuning runs there
    assert not unmeasured_behind(ranked, 64 << 20, TOPOLOGY, profile)
    assert Tuner().kind(key_of(64 << 20, "float32", "sum", "int8", TOPOLOGY, True),
                        profile) is not None


def test_a_resumed_kind_runs_its_best_at_once_and_notices_a_change():
    """Reloaded, a kind runs the plan the profile measured fastest from its first call
    (no learning), and still re-checks its runner-ups: when the machine changes and the
    runner-up turns faster, it takes over, as in the job that learned."""
    first, second = Tuner().kind(KEY, DEFAULT_PROFILE).candidates[:2]
    profile = replace(DEFAULT_PROFILE, plans={"4x1": {str(first): ((4 << 20, 10e-3),),
                                                      str(second): ((4 << 20, 15e-3),)}})
    tuner = Tuner()
    kind = tuner.kind(KEY, profile)
    assert kind.resumed and kind.candidates == [first, second] and kind.best() == first
    ran, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 10, {first: 10e-3, second: 15e-3}.get)
    assert set(ran) == {first}
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, 200, {first: 30e-3, second: 15e-3}.get)
    assert kind.best() == second and ran[-1] == second
    assert ran.index(second) < 40 and ran[-20:].count(first) <= 1, ran
    # a plan measured over DROP x the fastest is no runner-up; with none, nothing is tuned
    far = replace(profile, plans={"4x1": {str(first): ((4 << 20, 10e-3),),
                                          str(second): ((4 << 20, 25e-3),)}})
    assert Tuner().kind(KEY, far) is None
    # measured only at another size (here 64 MiB, priced flat below it): learned here
    elsewhere = replace(profile, plans={"4x1": {str(first): ((64 << 20, 1e-3),)}})
    from zipcoll.collectives.planning.plans import rank_plans
    assert rank_plans(4 << 20, TOPOLOGY, elsewhere, "int8")[0][1] == first
    learning = Tuner().kind(KEY, elsewhere)
    assert not learning.resumed and learning.learning


def learn_until_settled(tuner, key, nbytes, turn):
    """One rank's calls of one kind until it stops learning, each call's time 1 ms; the
    calls it took, and each plan's warm-ups among them (untimed: no time learned)."""
    kind = tuner.kind(key, DEFAULT_PROFILE)
    calls, warm_ups = 0, {}
    while kind.learning:
        tuner.finished(turn - 1, 0.0)
        highs = agreed([tuner.slots(turn)])
        tuner.learn(turn, highs[len(highs) - SLOTS:])
        cold = {p for p in kind.candidates if kind.cold(p)}
        plan = tuner.decide(turn, key, DEFAULT_PROFILE, nbytes)
        if plan in cold:
            warm_ups[plan] = warm_ups.get(plan, 0) + 1
        tuner.done(turn)
        turn, calls = turn + 1, calls + 1
    return calls, warm_ups, turn


def test_a_plan_warms_up_once_per_size_bucket_shared_by_its_kinds():
    """A plan's first call at a size bucket is its warm-up (untimed): at a new size its
    scratch and the caller's buffers are new. Kinds of one bucket (lossless, a codec
    allowed) share it; a kind of another bucket warms every candidate up again."""
    tuner = Tuner()
    tuner.measure = lambda plan, seconds: 1e-3
    lossless = key_of(4 << 20, "float32", "sum", None, TOPOLOGY, True)
    small = key_of(64 << 10, "float32", "sum", "int8", TOPOLOGY, True)
    turn, seen, shared_of = 0, [], {}
    for key, nbytes in ((lossless, 4 << 20), (KEY, 4 << 20), (small, 64 << 10)):
        calls, warm_ups, turn = learn_until_settled(tuner, key, nbytes, turn)
        kind = tuner.kinds[key]
        shared = [c for c in kind.candidates if (c, key[0]) in seen]
        expected = [c for c in kind.candidates if c not in shared]
        assert sorted(map(str, warm_ups)) == sorted(map(str, expected)), key
        assert all(n == 1 for n in warm_ups.values()), warm_ups
        # each candidate TRIALS timed calls, plus its warm-up where cold, plus one call
        # whose time the next agreement brings
        assert calls <= tuning.TRIALS * len(kind.candidates) + len(expected) + 1, (key, calls)
        seen += [(c, key[0]) for c in kind.candidates]
        shared_of[key] = shared
    # else the test would not tell the rules apart
    assert shared_of[KEY], "the kinds at 4 MiB share plans"
    assert set(tuner.kinds[small].candidates) & set(tuner.kinds[lossless].candidates)


def one_rank_calls(tuner, key, nbytes, turn, calls, seconds):
    """One rank's `calls` calls of one kind, each taking `seconds(plan)`: the plans run
    and the next turn; `seconds` is asked once per call the tuner times."""
    ran = []
    tuner.measure = lambda plan, _: seconds(plan)
    for _ in range(calls):
        tuner.finished(turn - 1, 0.0)
        highs = agreed([tuner.slots(turn)])
        tuner.learn(turn, highs[len(highs) - SLOTS:])
        ran.append(tuner.decide(turn, key, DEFAULT_PROFILE, nbytes))
        tuner.done(turn)
        turn += 1
    return ran, turn


def test_a_best_whose_calls_turn_slow_is_left_within_a_few_calls():
    """Once settled, a best of 1 ms or more is timed on every call: one whose calls turn
    slow two in three is left once its estimate of KEEP is slow and the runner-up's
    next re-check confirms it faster now, within a few calls and one re-check's turn
    (timed one call in SAMPLE, it would take SAMPLE x as many)."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, runner_up = kind.candidates[-1], kind.candidates[-2]
    base = {p: 15e-3 for p in kind.candidates}
    base[target], base[runner_up] = 10e-3, 12e-3
    ran, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 60, base.get)
    assert not kind.learning and kind.best() == target and ran[-1] == target
    count = iter(range(1000))

    def turned_slow(plan):
        return 40e-3 if plan == target and next(count) % 3 else base[plan]

    # its median turns slow within KEEP calls; the runner-up's times are the learning's:
    # it is the next re-check (within RECHECK calls), whose time starts a duel: the two
    # in turn, CONFIRM calls each
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn,
                            tuning.KEEP + tuning.RECHECK + 2 * tuning.CONFIRM + 6, turned_slow)
    assert ran[0] == target and ran[-4:] == [runner_up] * 4, ran
    assert ran.count(target) <= tuning.KEEP + tuning.RECHECK + tuning.CONFIRM + 2, ran


def test_a_machine_turned_slow_starts_no_duel_on_a_runner_ups_old_times():
    """The machine turns 2x slower for every plan: the settled best's estimate rises past
    the runner-up's, which is from the learning, long before. No duel on that (its calls
    would be lost on a plan no faster now): the runner-up is re-checked next, and its
    time now, no faster than the best's, starts none."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, runner_up = kind.candidates[-1], kind.candidates[-2]
    base = {p: 15e-3 for p in kind.candidates}
    base[target], base[runner_up] = 10e-3, 11e-3
    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 3 * tuning.RECHECK, base.get)
    assert not kind.learning and kind.best() == target
    slow = {p: 2 * t for p, t in base.items()}
    duels = []

    def timed(plan):
        duels.append(kind.dueling)
        return slow[plan]

    calls = 4 * tuning.RECHECK
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, calls, timed)
    assert not any(duels) and kind.best() == target, ran
    assert ran.count(target) >= calls - calls // tuning.RECHECK, ran
    assert runner_up in ran  # re-checked: the first re-check after the slow-down is its


def test_a_runner_up_fast_again_on_two_re_checks_in_a_row_duels_whatever_its_old_times():
    """A runner-up slow for a stretch holds only slow times; then it turns faster than the
    best. Its estimate would take KEEP re-checks to show it: two fast re-checks in a row
    (the second asked for at once, at the next re-check) start the duel, and it takes
    over."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, runner_up = kind.candidates[-1], kind.candidates[-2]
    seconds = {p: 25e-3 for p in kind.candidates}  # over DROP x the best: dropped
    seconds[target], seconds[runner_up] = 10e-3, 19e-3
    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, (tuning.KEEP + 2) * tuning.RECHECK,
                             seconds.get)
    assert kind.alive() == [runner_up, target] and kind.best() == target, kind.alive()
    assert kind.times[runner_up] == [19e-3] * tuning.KEEP
    seconds[runner_up] = 8e-3
    calls = 2 * tuning.RECHECK + 2 * tuning.CONFIRM + 8
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, calls, seconds.get)
    assert kind.best() == runner_up and ran[-1] == runner_up, ran


def test_a_duel_lost_is_fought_again_only_on_a_new_re_check():
    """A best whose calls run slow except while it duels: every duel keeps it, and its
    estimate then climbs past the loser's duel times. Those were weighed already: the
    loser duels again only on a re-check of its own, at most once per RECHECK calls."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, runner_up = kind.candidates[-1], kind.candidates[-2]
    seconds = {p: 25e-3 for p in kind.candidates}  # over DROP x the best: dropped
    seconds[target], seconds[runner_up] = 10e-3, 11e-3
    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 3 * tuning.RECHECK, seconds.get)
    assert kind.alive() == [runner_up, target] and kind.best() == target
    states = []

    def timed(plan):
        states.append(kind.dueling)
        return 10e-3 if plan == target and kind.dueling else 12e-3 if plan == target else 11e-3

    calls = 8 * tuning.RECHECK
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, calls, timed)
    starts = sum(1 for was, now in zip(states, states[1:]) if now and not was)
    assert 1 <= starts <= calls // tuning.RECHECK + 1, (starts, ran)
    assert kind.settled == target


def test_a_runner_up_slow_on_its_re_check_lets_the_next_be_re_checked():
    """The best turns slow; two runner-ups look faster on their learning's times. The
    first, re-checked, is slow now too (though its estimate, with its old times, still
    looks faster): the next re-check goes to the other, faster now, which takes over,
    not to the first again until its estimate shows it."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, first, second = kind.candidates[-1], kind.candidates[-2], kind.candidates[-3]
    seconds = {p: 25e-3 for p in kind.candidates}  # over DROP x the best: dropped
    seconds[target], seconds[first], seconds[second] = 10e-3, 10.5e-3, 10.6e-3
    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 3 * len(kind.candidates) + 1, seconds.get)
    assert set(kind.alive()) == {target, first, second} and kind.settled == target
    seconds[target], seconds[first], seconds[second] = 14e-3, 14.5e-3, 8e-3
    calls = 2 * tuning.RECHECK + 2 * tuning.CONFIRM + 8
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, calls, seconds.get)
    assert kind.settled == second and ran[-1] == second, ran
    assert ran[:ran.index(second)].count(first) == 1, ran  # once, then the other


def test_once_settled_a_machine_turned_faster_drops_no_runner_up_on_its_old_times():
    """On one node of 4 ranks at 256 KiB the learning timed MPI's own Allreduce at 0.64 ms
    and a torus plan at 0.55 ms; then the machine turned faster (its shared-memory calls
    change 2-4x within seconds): the torus plan 0.25 ms, MPI's own 0.20 ms. The torus
    plan's estimate, from its latest calls, is soon under half MPI's own, whose times are
    still the learning's: MPI's own must not be dropped for good on those; its re-checks
    show it faster, and it takes over. A runner-up whose re-checks stay over DROP x the
    best is dropped once they make up its estimate (of its latest KEEP)."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    key = key_of(256 << 10, "float32", "sum", None, one_node, True)
    tuner = Tuner()
    kind = tuner.kind(key, DEFAULT_PROFILE)
    own, torus = PlanShape("native"), PlanShape("torus", "native")
    assert {own, torus} <= set(kind.candidates), kind.candidates
    before = {p: 0.70e-3 for p in kind.candidates}
    before[own], before[torus] = 0.64e-3, 0.55e-3
    # each candidate a warm-up and two trials; the last trial's time comes a call later
    _, turn = one_rank_calls(tuner, key, 256 << 10, 0, 3 * len(kind.candidates) + 1, before.get)
    assert not kind.learning and kind.best() == torus
    after = {p: 0.30e-3 for p in kind.candidates}
    after[own], after[torus] = 0.20e-3, 0.25e-3
    ran, turn = one_rank_calls(tuner, key, 256 << 10, turn, 400, after.get)
    assert own not in kind.dropped and kind.best() == own and ran[-1] == own, kind.dropped
    doomed = kind.alive()[-1]
    slower = dict(after)
    slower[doomed] = 5e-3
    others = len(kind.alive()) - 1
    ran, _ = one_rank_calls(tuner, key, 256 << 10, turn, tuning.RECHECK * others * 6,
                            slower.get)
    assert doomed in kind.dropped and kind.best() == own
    assert ran.count(doomed) <= tuning.KEEP // 2 + 1, ran.count(doomed)


def test_a_candidate_gets_its_second_trial_unless_its_first_is_far_beyond_a_stall():
    """Every candidate is timed once; those within DROP_AT_ONCE of the best get their
    second trial whatever their first took (one call in several stalls 2-3x on a shared
    machine), and the lesser of two times is a plan's estimate: over DROP, dropped. One
    over DROP_AT_ONCE is dropped after its first."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target, stalled, slow, far = (kind.candidates[-1], kind.candidates[-2],
                                  kind.candidates[1], kind.candidates[0])
    behind = [p for p in kind.candidates if p not in (target, stalled, slow, far)]
    seconds = {p: 15e-3 for p in behind}  # 1.5x: behind, but within DROP
    seconds[target], seconds[slow], seconds[far] = 10e-3, 25e-3, 45e-3
    first = []

    def timed(plan):  # `stalled` runs as fast as the best, but its first call stalls (2.8x)
        if plan == stalled:
            first.append(plan)
            return 28e-3 if len(first) == 1 else 10.2e-3
        return seconds[plan]

    calls = 0
    while kind.learning:
        _, turn = one_rank_calls(tuner, KEY, 4 << 20, calls, 1, timed)
        calls += 1
    assert kind.best() == target and kind.estimate(stalled) == pytest.approx(10.2e-3)
    assert all(len(kind.times[p]) == tuning.TRIALS for p in behind + [stalled, slow]), kind.times
    assert sorted(map(str, kind.dropped)) == sorted(map(str, [slow, far])), kind.dropped
    assert len(kind.times[far]) == 1
    assert calls <= 3 * len(kind.candidates) + 2, calls


@pytest.mark.parametrize("layout", [(4, 1), (2, 2)])
def test_a_kind_that_may_compress_learns_within_20_calls_in_a_fresh_job(layout):
    """The DDP hook with codec="int8" and nothing before it: every candidate cold. Its
    lossless plans are the fallback (the model's best three and MPI's own, no near ties),
    so warm-ups, first trials and the close ones' second fit in the 20 calls the
    criterion allows, with the codec plans 4x faster than the lossless ones."""
    topology = Topology.from_layout(layout[0] * layout[1], 0, ranks_per_node=layout[1])
    key = key_of(4 << 20, "float32", "sum", "int8", topology, True)
    tuner = Tuner()
    kind = tuner.kind(key, DEFAULT_PROFILE)
    lossless = [p for p in kind.candidates if p.inter_codec is None]
    assert len(lossless) <= tuning.LOSSLESS + 1, lossless
    seconds = {p: 40e-3 if p.inter_codec is None else 10e-3 * (1 + 0.05 * i)
               for i, p in enumerate(kind.candidates)}
    ran, _ = one_rank_calls(tuner, key, 4 << 20, 0, 21, seconds.get)
    # the 20th call's time comes with the 21st call's agreement: that call runs the best
    assert not kind.learning, (kind.candidates, ran)
    assert ran[-1] == kind.best() and kind.best().inter_codec == "int8", ran


def test_a_short_best_is_timed_on_one_call_in_sample():
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    target = kind.candidates[-1]
    timed = []

    def seconds(plan):
        timed.append(plan)
        return 0.1e-3 if plan == target else 0.15e-3

    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 60, seconds)
    assert not kind.learning and kind.best() == target
    timed.clear()
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, 4 * tuning.SAMPLE * 4, seconds)
    best_calls = ran.count(target)
    assert best_calls // tuning.SAMPLE - 1 <= timed.count(target) <= best_calls // tuning.SAMPLE + 1


def test_every_candidate_is_timed_once_before_any_twice():
    """With int8 allowed the lossless candidates may be 4x slower: each runs its warm-up
    and one timed call only, whatever its place in the model's order."""
    key = key_of(4 << 20, "float32", "sum", "int8", TOPOLOGY, True)
    kind = Tuner().kind(key, DEFAULT_PROFILE)
    lossless = [p for p in kind.candidates if p.inter_codec is None]
    assert lossless and len(lossless) < len(kind.candidates)

    def table(plan, rank):
        return 4e-3 if plan.inter_codec is None else 1e-3

    decided, tuners = simulate(2, 60, 1, 0, table, key)
    learned = tuners[0].kinds[key]
    assert not learned.learning
    for plan in lossless:
        assert decided[0].count(plan) <= 2 and plan in learned.dropped, (plan, decided[0])


def test_on_one_node_no_plan_that_carries_the_codec_is_tried():
    """auto compresses only across nodes: with a codec allowed on one node, the tuning's
    candidates are lossless ones only (a flat plan would apply the codec there)."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    for spec in ("int8", "int2", "topk:ratio=0.01"):
        kind = Tuner().kind(key_of(4 << 20, "float32", "sum", spec, one_node, True),
                            DEFAULT_PROFILE)
        assert kind is not None and kind.candidates
        assert all(p.inter_codec is None and p.intra_codec is None for p in kind.candidates)
    across = Tuner().kind(KEY, DEFAULT_PROFILE)
    assert any(p.inter_codec for p in across.candidates)


def test_plans_the_model_prices_alike_are_all_tried_up_to_a_bound():
    names = ["ring", "twophase", "rabenseifner", "allgather", "bruck", "tree", "dbtree", "recdoubling"]
    plans = [PlanShape(n) for n in names]
    spread = [(1.0 + 0.005 * i, p) for i, p in enumerate(plans)]  # all within 4%
    assert tuning._leading(spread, 3) == plans[:tuning.TIED]
    beyond = spread[:4] + [(1.2, p) for p in plans[4:]]
    assert tuning._leading(beyond, 3) == plans[:4]  # those priced alike only
    far = [(1.0, plans[0]), (2.0, plans[1]), (2.01, plans[2]), (3.0, plans[3])]
    assert tuning._leading(far, 3) == plans[:3]  # the least are kept, however far
    assert tuning._leading([], 3) == []


def test_a_lossless_kind_fills_its_learning_with_the_plans_priced_within_the_hedge():
    """On 2 x 2 at 128 KiB the model prices MPI's own first and the rest 1.5-2x it; there
    the emulated cluster ran MPI's own and the plans the model ranked next 7-16% slower
    than two-level schedules ranked after them. With room left in the learning the next
    plans in the model's order are tried, as far as LEARNABLE, none priced over HEDGE x
    the best."""
    two_by_two = Topology.from_layout(4, 0, ranks_per_node=2)
    kind = Tuner().kind(key_of(128 << 10, "float32", "sum", None, two_by_two, True),
                        DEFAULT_PROFILE)
    assert len(kind.candidates) == tuning.LEARNABLE, kind.candidates
    cheapest = min(kind.predicted.values())
    assert all(kind.predicted[p] <= tuning.HEDGE * cheapest for p in kind.candidates)
    assert PlanShape("hierarchical", "rabenseifner") in kind.candidates
    within = sorted((s, str(p)) for p, s in kind.predicted.items() if s <= tuning.HEDGE * cheapest)
    assert len(within) > tuning.LEARNABLE  # more were near: the bound holds


def test_on_4x1_at_4m_the_schedules_the_model_ties_are_candidates():
    """There the model prices ring, two-phase and Rabenseifner (flat and hierarchical)
    within 2% of each other; which is fastest is for the timing to find."""
    kind = Tuner().kind(key_of(4 << 20, "float32", "sum", None, TOPOLOGY, True), DEFAULT_PROFILE)
    schedules = {p.inner or p.algorithm for p in kind.candidates}
    assert {"ring", "twophase", "rabenseifner"} <= schedules, kind.candidates
    # the near ties, MPI's own and the flat ring
    assert len([p for p in kind.candidates if p.inter_codec is None]) <= tuning.TIED + 2


def test_the_flat_ring_is_tried_where_the_model_prices_it_within_the_hedge():
    """On one node of 4 ranks at 64 MiB the model prices the flat ring 1.6x its best (a
    torus plan), far outside its near ties, and the machine runs the ring fastest: it is
    a candidate, it wins when its calls are the fastest, and within 20 calls. At 64 KiB,
    priced over HEDGE x the best, it is not tried."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    ring = PlanShape("ring")
    key = key_of(64 << 20, "float32", "sum", None, one_node, True)
    tuner = Tuner()
    kind = tuner.kind(key, DEFAULT_PROFILE)
    priced = sorted(kind.predicted.values())
    assert tuning.TIE * priced[0] < kind.predicted[ring] <= tuning.HEDGE * priced[0]
    assert ring in kind.candidates
    seconds = {p: (30e-3 if p == ring else 40e-3) * (1 + 0.01 * i)
               for i, p in enumerate(kind.candidates)}
    ran, turn = one_rank_calls(tuner, key, 64 << 20, 0, 20, seconds.get)
    assert kind.best() == ring  # (the last candidates' second trials still to come)
    ran, _ = one_rank_calls(tuner, key, 64 << 20, turn, 3, seconds.get)
    assert not kind.learning and kind.best() == ring and ran[-1] == ring, ran
    small = Tuner().kind(key_of(64 << 10, "float32", "sum", None, one_node, True),
                         DEFAULT_PROFILE)
    assert ring not in small.candidates
    assert small.predicted[ring] > tuning.HEDGE * min(small.predicted.values())


def test_each_structure_near_the_best_is_tried_once_under_one_name():
    """On one node of 4 ranks the model prices the torus plans first at 4-64 MiB and every
    hierarchical plan at 1.47x them (the machine ran those fastest). Every hierarchical
    plan runs the same level-1 ring there whatever its inner schedule, so one of them, the
    ring inner, is a candidate: the learning is not spent on one plan under eight names,
    and the kind still has at most LEARNABLE candidates."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    for nbytes in (4 << 20, 64 << 20):
        kind = Tuner().kind(key_of(nbytes, "float32", "sum", None, one_node, True),
                            DEFAULT_PROFILE)
        two_level = [p for p in kind.candidates if p.algorithm == "hierarchical"]
        assert two_level == [PlanShape("hierarchical", "ring")], kind.candidates
        priced = min(kind.predicted.values())
        assert tuning.TIE * priced < kind.predicted[two_level[0]] <= tuning.HEDGE * priced
        assert PlanShape("ring") in kind.candidates and PlanShape("native") in kind.candidates
        assert len(kind.candidates) <= tuning.LEARNABLE
    # across nodes the inner schedule is what differs: each stays a plan of its own
    across = Tuner().kind(key_of(64 << 20, "float32", "sum", None, TOPOLOGY, True),
                          DEFAULT_PROFILE)
    assert len([p for p in across.candidates if p.algorithm == "hierarchical"]) > 1


def test_one_rank_a_node_a_two_level_plan_of_one_slice_counts_as_its_flat_schedule():
    """On 4 x 1 a hierarchical plan's level 1 is one rank: it runs its inner schedule over
    all four ranks, the flat plan of that schedule's steps, where one slice holds the
    call. The flat one stands for both, so the four coded candidates at 256 KiB are four
    schedules, not two under two names each (the two-phase one among them: the machine
    ran it fastest there). From two slices up the two cut calls differently and stay
    apart; MPI's own inner level runs its slices one at a time and stays apart too."""
    def kind(nbytes, codec):
        return Tuner().kind(key_of(nbytes, "float32", "sum", codec, TOPOLOGY, True),
                            DEFAULT_PROFILE)

    coded = [p for p in kind(256 << 10, "int8").candidates if p.inter_codec is not None]
    assert all(p.inner is None for p in coded), coded
    assert len({p.algorithm for p in coded}) == len(coded) == tuning.CODED, coded
    assert PlanShape("twophase", inter_codec="int8") in coded
    lossless = kind(256 << 10, None).candidates
    assert PlanShape("ring") in lossless and PlanShape("hierarchical", "native") in lossless
    assert not any(p.algorithm == "hierarchical" and p.inner != "native" for p in lossless)
    sliced = kind(64 << 20, None).candidates  # 32 slices of a two-level call
    assert {PlanShape("rabenseifner"), PlanShape("hierarchical", "rabenseifner")} <= set(sliced)
    # on 2 x 2 both levels have two ranks: nothing merges
    two_by_two = Topology.from_layout(4, 0, ranks_per_node=2)
    ranked = tuning.rank_plans(256 << 10, tuning._shape_of(two_by_two), DEFAULT_PROFILE,
                               "int8", "float32", "sum", True)
    assert tuning._distinct(ranked, tuning._shape_of(two_by_two), unsliced=True) == ranked


def test_the_hedged_structure_wins_when_fastest():
    """The hierarchical plan the model priced 1.47x the best, at the times measured on one
    node (38 ms against 42-47): after 20 calls it is the best, and the runs settle on it
    once every close candidate has had its second trial, two calls later."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    key = key_of(64 << 20, "float32", "sum", None, one_node, True)
    tuner = Tuner()
    kind = tuner.kind(key, DEFAULT_PROFILE)
    fastest = PlanShape("hierarchical", "ring")
    seconds = {p: (38e-3 if p == fastest else 42e-3) * (1 + 0.02 * i)
               for i, p in enumerate(kind.candidates)}
    ran, turn = one_rank_calls(tuner, key, 64 << 20, 0, 20, seconds.get)
    assert kind.best() == fastest, [(str(p), kind.estimate(p)) for p in kind.candidates]
    ran, _ = one_rank_calls(tuner, key, 64 << 20, turn, 2, seconds.get)
    assert not kind.learning and ran[-1] == fastest, ran


def test_a_kind_that_may_compress_keeps_its_lossless_fallback_without_the_hedge():
    """Across nodes with int8 allowed the lossless plans are the fallback only (the
    model's best three and MPI's own): the 20 calls go to the plans that carry the codec."""
    for nbytes in (256 << 10, 1 << 20, 64 << 20):
        kind = Tuner().kind(key_of(nbytes, "float32", "sum", "int8", TOPOLOGY, True),
                            DEFAULT_PROFILE)
        lossless = [p for p in kind.candidates if p.inter_codec is None]
        assert len(lossless) <= tuning.LOSSLESS + 1, (nbytes, lossless)


def test_on_one_node_a_codec_allowed_learns_with_the_lossless_calls():
    """There auto tries no plan that carries the codec, so calls with one allowed are of
    the lossless calls' kind: one learning, not two of the same candidates. Across nodes
    they are kinds of their own."""
    one_node = Topology.from_layout(4, 0, ranks_per_node=4)
    tuner = Tuner()
    lossless = tuner.kind(key_of(16 << 20, "float32", "sum", None, one_node, True),
                          DEFAULT_PROFILE)
    for spec in ("int8", "topk:ratio=0.01"):
        assert tuner.kind(key_of(16 << 20, "float32", "sum", spec, one_node, True),
                          DEFAULT_PROFILE) is lossless
    across = [tuner.kind(key_of(16 << 20, "float32", "sum", spec, TOPOLOGY, True),
                         DEFAULT_PROFILE) for spec in (None, "int8")]
    assert across[0] is not across[1]


def test_a_runner_up_takes_over_only_on_calls_run_in_turn_with_the_best():
    """Once settled, every plan's calls become 20% slower (the machine changed): the best's
    own recent times show it, a runner-up's older times do not, so by them it looks
    faster. That is no evidence: it is the next re-check, whose time now, no faster,
    starts no duel. A runner-up that is faster on its re-checks duels the best, the two
    in turn, CONFIRM calls each, and those calls alone judge: it takes over."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    best, other = kind.candidates[-1], kind.candidates[-2]
    slower = [1.0]

    def seconds(plan):
        base = {best: 10e-3, other: 11e-3}.get(plan, 20e-3)
        return base * slower[0]

    ran, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 40, seconds)
    assert not kind.learning and kind.settled == best and len(kind.times[other]) == 2
    slower[0] = 1.2
    ran, turn = one_rank_calls(tuner, KEY, 4 << 20, turn, tuning.RECHECK + 8, seconds)
    assert ran.count(other) == 1 and not kind.dueling, ran  # its re-check, no duel
    assert kind.settled == best and kind.best() == best and ran[-1] == best
    duels = []

    def faster(plan):
        duels.append(kind.dueling)
        return 9e-3 if plan == other else seconds(plan)

    rounds = 4 * tuning.RECHECK
    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, rounds, faster)
    assert kind.settled == other and ran[-1] == other
    assert any(duels) and ran.count(other) >= tuning.CONFIRM, ran


def test_two_plans_that_cost_the_same_do_not_trade_places_once_settled():
    """Their medians cross now and then (here within 2% of each other); the one settled
    on stays. One that becomes clearly faster (10%) still takes over."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    first, second = kind.candidates[-1], kind.candidates[-2]
    calls = {first: 0, second: 0}

    def seconds(plan):
        if plan not in calls:
            return 40e-3
        calls[plan] += 1
        wobble = 1.01 if (calls[plan] // 3) % 2 else 0.99  # medians of the two cross
        return 20e-3 * wobble * (1.0 if plan == first else 1.005)

    _, turn = one_rank_calls(tuner, KEY, 4 << 20, 0, 40, seconds)
    assert not kind.learning and kind.best() in (first, second)
    held, changes = kind.settled, 0
    for _ in range(10):
        _, turn = one_rank_calls(tuner, KEY, 4 << 20, turn, 20, seconds)
        changes += kind.settled != held
        held = kind.settled
    assert changes == 0, changes
    other = second if held == first else first

    def faster(plan):
        return 18e-3 if plan == other else seconds(plan)

    ran, _ = one_rank_calls(tuner, KEY, 4 << 20, turn, 4 * tuning.RECHECK, faster)
    assert kind.best() == other and kind.settled == other and ran[-1] == other


def test_a_time_every_rank_had_leaves_the_later_agreements():
    """A call's time rides in the agreements after it only until every rank has it: a
    blocking call's time in the very next one, then zeros again (the agreement's vector
    unchanged, no new one to post), while a time some rank lacked stays in its slot."""
    tuner = Tuner()
    kind = tuner.kind(KEY, DEFAULT_PROFILE)
    tuner.measure = lambda plan, seconds: seconds
    assert tuner.decide(0, KEY, DEFAULT_PROFILE, 4 << 20) in kind.candidates
    tuner.done(0)
    tuner.finished(0, 2e-3)  # its warm-up: timed, carried, not learned
    assert tuner.slots(1)[:2] == [2000, -2000]
    tuner.learn(1, agreed([tuner.slots(1)]))  # every rank had it
    assert tuner.slots(2) == [0] * SLOTS
    assert tuner.decide(1, KEY, DEFAULT_PROFILE, 4 << 20) in kind.candidates
    tuner.done(1)
    tuner.finished(1, 3e-3)
    others = [0] * SLOTS  # another rank has not finished call 1 yet
    tuner.learn(2, agreed([tuner.slots(2), others]))
    assert tuner.slots(3)[2:4] == [3000, -3000]  # call 1 is two back from call 3

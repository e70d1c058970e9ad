"""The planner: which plans a call may run, what each costs, and which `auto` runs.

It prices the registry's schedules by their own formulas (`Schedule.cost`), reads the
layout from `zipcoll.topologies` and the machine from a `Profile`:

    profile.py    Link, Rate, CodecSpeed, Profile: a machine's speeds; load/save as JSON
    model.py      Shape, Span, Work: what a schedule's cost formula is given
    plans.py      PlanShape, candidate_plans, predict, rank_plans, bounds
    selector.py   Selector: algorithm="auto", cached per size bucket
    tuning.py     Tuner: auto timing the model's best few plans on the job's own calls
    lowrank.py    lowrank_cost: one PowerSGD step (zipcoll.lowrank) priced
    sharded.py    the reduce-scatter / all-gather plans, priced in slices as they run
    explain.py    what zipcoll.explain shows (Ranking), and the profile every rank loads alike
"""
from zipcoll.collectives.planning.explain import Ranking, ranking, shared_profile, sharded_ranking
from zipcoll.collectives.planning.model import Shape, Span, Work
from zipcoll.collectives.planning.plans import (PlanShape, bounds, candidate_plans, codec_idle, levels,
                                                codec_spec, predict, rank_plans,
                                                two_level_schedules)
from zipcoll.collectives.planning.profile import (DEFAULT_CODECS, DEFAULT_PROFILE, PROFILE_ENV, ProfileError,
                                                  CodecSpeed, Link, Profile, Rate, load_profile)
from zipcoll.collectives.planning.selector import Selector, bucket_size, choose, size_bucket
from zipcoll.collectives.planning.sharded import predict_sharded, rank_sharded, sharded_bounds

__all__ = [
    "Ranking", "ranking", "shared_profile", "sharded_ranking", "predict_sharded", "rank_sharded",
    "sharded_bounds", "Shape", "Span", "Work", "PlanShape", "bounds",
    "candidate_plans", "codec_idle", "codec_spec", "levels", "predict", "rank_plans",
    "two_level_schedules", "DEFAULT_CODECS", "DEFAULT_PROFILE", "PROFILE_ENV", "CodecSpeed",
    "Link", "Profile", "ProfileError", "Rate", "load_profile", "Selector", "bucket_size", "choose",
    "size_bucket",
]

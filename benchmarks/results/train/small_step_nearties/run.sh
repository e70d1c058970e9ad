#!/bin/bash
# The small-step check after the near-tie tuning change: the CNN, every config, 3 launches a config;
# the 25 M-parameter MLP, DDP and auto, with the tuning of 44508ea and of 22b6e7c in turn, 2 each.
# It swaps zipcoll/collectives/planning/tuning.py and puts it back (a copy in /tmp/tuning.new).
set -u
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
O=benchmarks/results/train/small_step_nearties
mkdir -p $O/cnn $O/mlp-before $O/mlp-after
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
bash benchmarks/train/small_step.sh $O/cnn 3 --label zipcoll-default
for r in 1 2; do
  git show 44508ea:zipcoll/collectives/planning/tuning.py > zipcoll/collectives/planning/tuning.py
  timeout 600 mpiexec -n 2 python benchmarks/train/small_step.py --rounds 1 --configs "DDP (gloo allreduce),zipcoll defaults (auto; tuned online)" --label "before " --out $O/mlp-before/r$r.json --model mlp25m --steps 10 --warmup 3
  cp /tmp/tuning.new zipcoll/collectives/planning/tuning.py
  timeout 600 mpiexec -n 2 python benchmarks/train/small_step.py --rounds 1 --configs "DDP (gloo allreduce),zipcoll defaults (auto; tuned online)" --label "after " --out $O/mlp-after/r$r.json --model mlp25m --steps 10 --warmup 3
done
cmp /tmp/tuning.new zipcoll/collectives/planning/tuning.py && echo restored
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"

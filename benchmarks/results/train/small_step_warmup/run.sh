#!/bin/bash
# The small-step check after the tuning's per-size warm-up (and its other changes of this
# series): the CNN, every config, 3 launches a config; the 25 M-parameter MLP, DDP and the
# default hook (auto, tuned online), 2 launches. One tree; the previous figures are in
# ../small_step_nearties (run the same way).
set -u
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
source scripts/mpienv.sh
O=benchmarks/results/train/small_step_warmup
mkdir -p $O/cnn $O/mlp
echo "# $(date -u +%FT%TZ) at $(git rev-parse --short HEAD) load: $(cut -d' ' -f1-3 /proc/loadavg)"
bash benchmarks/train/small_step.sh $O/cnn 3 --label zipcoll-default
for r in 1 2; do
  timeout 600 mpiexec -n 2 python benchmarks/train/small_step.py --rounds 1 --configs "DDP (gloo allreduce),zipcoll defaults (auto; tuned online)" --out $O/mlp/r$r.json --model mlp25m --steps 10 --warmup 3
done
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"

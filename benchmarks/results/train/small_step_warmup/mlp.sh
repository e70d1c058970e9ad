#!/bin/bash
# The 25 M-parameter MLP, DDP and the default hook, with zipcoll of 1a4756a (before this
# series of tuning changes; a git worktree at $BEFORE, put first on PYTHONPATH) and of this
# tree in turn, LAUNCHES (2) launches each.
set -u
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
source scripts/mpienv.sh
O=benchmarks/results/train/small_step_warmup
BEFORE=${BEFORE:-/tmp/wt-before}
mkdir -p $O/mlp-before $O/mlp-after
echo "# $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), before $(git -C $BEFORE rev-parse --short HEAD) load: $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # run PYTHONPATH LABEL OUT
  timeout 600 mpiexec -n 2 env PYTHONPATH="$1" python benchmarks/train/small_step.py --rounds 1 \
    --configs "DDP (gloo allreduce),zipcoll defaults (auto; tuned online)" --model mlp25m \
    --steps 10 --warmup 3 --label "$2" --out "$3"
}
for r in $(seq ${LAUNCHES:-2}); do
  run "$BEFORE" "before " $O/mlp-before/r$r.json
  run "$PWD" "after " $O/mlp-after/r$r.json
done
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"

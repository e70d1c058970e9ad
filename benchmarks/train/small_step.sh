#!/usr/bin/env bash
# small_step.py once a launch: each config in a process of its own, as a user's script is
# (a config's kernels must not slow the next config's torch), --rounds times in turn.
#   flock /tmp/zipcoll-heavy.lock bash benchmarks/train/small_step.sh OUTDIR ROUNDS [args]
# Each launch writes OUTDIR/<layer>-<config>-<round>.json; report with
#   python benchmarks/train/small_step.py --report OUTDIR
# NUMBA_THREADING_LAYER=omp before the command measures Numba's OpenMP layer instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/mpienv.sh
out=$1 rounds=$2; shift 2
mkdir -p "$out"
configs=("DDP (gloo allreduce)" "zipcoll lossless" "zipcoll defaults (auto; tuned online)" "zipcoll int8"
         "zipcoll sign+EF")
layer=${NUMBA_THREADING_LAYER:-default}
for round in $(seq "$rounds"); do
    for i in "${!configs[@]}"; do
        timeout 600 mpiexec -n "${RANKS:-2}" python benchmarks/train/small_step.py --rounds 1 \
            --configs "${configs[$i]}" --label "$layer " \
            --out "$out/$layer-$i-$round.json" "$@"
    done
done

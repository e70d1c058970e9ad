#!/usr/bin/env bash
# int8 at 16 and 64 MiB on the emulated 2 x 1 at 1 Gbit/s, several pipeline windows and slice sizes
set -uo pipefail
source "$(dirname "$0")/cluster_up.sh"
for combo in "hierarchical int8" "ring int8"; do
  run -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 16,64 8
  for w in 4 16 32; do run -x ZIPCOLL_PIPELINE_WINDOW=$w -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8; done
  for s in 1M 4M 8M; do run -x ZIPCOLL_SLICE_BYTES=$s -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8; done
  run -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 16,64 8
done

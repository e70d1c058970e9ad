#!/usr/bin/env bash
# int8 at 64 MiB on the emulated 2 x 1 at 1 Gbit/s: default against wider windows and smaller slices, interleaved rounds
set -uo pipefail
source "$(dirname "$0")/cluster_up.sh"
for round in 1 2 3; do
  for cfg in "" "-x ZIPCOLL_PIPELINE_WINDOW=16" "-x ZIPCOLL_PIPELINE_WINDOW=32" "-x ZIPCOLL_SLICE_BYTES=1M" "-x ZIPCOLL_SLICE_BYTES=1M -x ZIPCOLL_PIPELINE_WINDOW=16"; do
    for combo in "hierarchical int8" "ring int8"; do
      echo -n "round $round: "; run $cfg -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8
    done
  done
done

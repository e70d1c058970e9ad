#!/usr/bin/env bash
# int8 at 64 MiB on the emulated 2 x 1 at 1 Gbit/s: default against wider windows and smaller slices, interleaved rounds
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH ZC_PREFIX=zci
C=benchmarks/cluster/cluster.sh
uptime
$C up 2 --rate 1gbit >/dev/null
run() { nice -n -19 timeout 300 $C run -n 2 --ranks-per-node 1 "$@" 2>&1 | grep -E "median|Error|error" ; }
for round in 1 2 3; do
  for cfg in "" "-x ZIPCOLL_PIPELINE_WINDOW=16" "-x ZIPCOLL_PIPELINE_WINDOW=32" "-x ZIPCOLL_SLICE_BYTES=1M" "-x ZIPCOLL_SLICE_BYTES=1M -x ZIPCOLL_PIPELINE_WINDOW=16"; do
    for combo in "hierarchical int8" "ring int8"; do
      echo -n "round $round: "; run $cfg -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8
    done
  done
done
$C down >/dev/null
uptime

#!/usr/bin/env bash
# int8 at 16 and 64 MiB on the emulated 2 x 1 at 1 Gbit/s, several pipeline windows and slice sizes
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH ZC_PREFIX=zci
C=benchmarks/cluster/cluster.sh
uptime
$C up 2 --rate 1gbit >/dev/null
run() { nice -n -19 timeout 300 $C run -n 2 --ranks-per-node 1 "$@" 2>&1 | grep -E "median|Error|error" ; }
for combo in "hierarchical int8" "ring int8"; do
  run -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 16,64 8
  for w in 4 16 32; do run -x ZIPCOLL_PIPELINE_WINDOW=$w -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8; done
  for s in 1M 4M 8M; do run -x ZIPCOLL_SLICE_BYTES=$s -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 64 8; done
  run -- python benchmarks/results/int8-64m-2x1/time_call.py $combo 16,64 8
done
$C down >/dev/null
uptime

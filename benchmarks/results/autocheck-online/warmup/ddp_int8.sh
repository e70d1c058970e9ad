#!/bin/bash
# ddp_int8.py on the emulated 2 x 2 and 4 x 1 at 1 Gbit/s, each a fresh job; writes ddp_int8.log.
set -u
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH ZC_PREFIX=${ZC_PREFIX:-zcw}
source scripts/mpienv.sh
D=benchmarks/results/autocheck-online/warmup
for layout in "2 2" "4 1"; do
  set -- $layout
  echo "## $1 nodes x $2 ranks, 1 Gbit/s, at $(git rev-parse --short HEAD), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  benchmarks/cluster/cluster.sh up "$1" --rate 1gbit > /dev/null
  timeout 600 benchmarks/cluster/cluster.sh run -n $(($1 * $2)) --ranks-per-node "$2" -- \
      env OMP_NUM_THREADS=1 python -W ignore $D/ddp_int8.py
  benchmarks/cluster/cluster.sh down > /dev/null
done

#!/usr/bin/env bash
# The lossless ring's per-call floor on 2 ranks (one node), before and after: OSU's table
# of ring beside MPI's own Allreduce, 8 B - 4 MiB, ROUNDS runs of each tree in turn.
#   benchmarks/results/callfloor/compare.sh BEFORE_TREE AFTER_TREE OUT [ROUNDS]
# Each tree is a checkout of zipcoll (imported from there through PYTHONPATH).
set -euo pipefail
before=$1; after=$2; out=$3; rounds=${4:-3}
here=$(cd "$(dirname "$0")/../../.." && pwd)
source "$here/scripts/mpienv.sh"
export PATH=$here/.venv/bin:$PATH
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
    for which in before after; do
        tree=${!which}
        echo "# round $round, $which ($(git -C "$tree" log -1 --format=%h)), load $(cut -d' ' -f1-3 /proc/loadavg)"
        PYTHONPATH=$tree mpiexec -n 2 -x PYTHONPATH zipcoll-bench allreduce -m 8:4M --algorithm ring -f \
            --json "$out/$which-$round.json" | grep -v '^#'
    done
done

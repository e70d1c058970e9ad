#!/usr/bin/env bash
# 4 x 1 at 1 Gbit/s: a job learns and saves, the next reloads; at TREE (a checkout), twice.
#   flock /tmp/zipcoll-heavy.lock env TREE=/work/main benchmarks/results/autocheck-online/reload/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
source scripts/mpienv.sh
export ZC_PREFIX=zcr PYTHONPATH=${TREE:-$PWD}
benchmarks/cluster/cluster.sh up 4 --rate 1gbit > /dev/null
trap 'benchmarks/cluster/cluster.sh down > /dev/null' EXIT
run=(benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 1 --)
for round in 1 2; do
  tuned=$(mktemp -d)/tuned.json
  echo "== $(date -u +%T) $(git -C "$PYTHONPATH" rev-parse --short HEAD) round $round"
  "${run[@]}" env -u ZIPCOLL_PROFILE python "$here/reload.py" learn "$tuned" 2>&1 | grep -v -e CodecNotApplied -e "self.plan = "
  "${run[@]}" env ZIPCOLL_PROFILE="$tuned" python "$here/reload.py" reuse "$tuned" 2>&1 | grep -v -e CodecNotApplied -e "self.plan = "
done

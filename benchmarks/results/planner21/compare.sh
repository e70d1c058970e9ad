#!/usr/bin/env bash
# The ring at 1 MiB and 8 B on 2 ranks: two trees' zipcoll alternating in one run, 4 rounds.
#   git archive 9ea58e7 zipcoll | tar -x -C /tmp/old; git archive HEAD zipcoll | tar -x -C /tmp/new
#   flock /tmp/zipcoll-heavy.lock bash benchmarks/results/planner21/compare.sh /tmp/old /tmp/new
set -uo pipefail
OLD=${1:?old tree}; NEW=${2:?new tree}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PY=$ROOT/.venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm
cd /tmp  # neither tree on sys.path through the current directory
uptime
for round in 1 2 3 4; do
  for which in old new; do
    src=$([ "$which" = old ] && echo "$OLD" || echo "$NEW")
    for alg in "ring -m 1M:1M -i 300" "ring -m 8:8 -i 2000"; do
      printf "round %s %s: " $round $which
      PYTHONPATH=$src nice -n -19 timeout 300 "$ROOT/.venv/bin/mpiexec" -n 2 "$PY" -m zipcoll.bench allreduce -a $alg | grep -v '^#' || true
    done
  done
done
uptime

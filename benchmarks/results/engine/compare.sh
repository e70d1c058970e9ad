#!/usr/bin/env bash
# Per-call time of the old engine (a checkout at BASE) against this one, in one run, alternating:
#   bash benchmarks/results/engine/compare.sh /path/to/old/checkout
# Each round runs `zipcoll-bench allreduce` at 2 ranks for each algorithm, old then new.
set -euo pipefail
BASE=${1:?old checkout}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm
for round in 1 2 3; do
  for which in old new; do
    src=$([ "$which" = old ] && echo "$BASE" || echo "$ROOT")
    for alg in "ring -m 1M:1M -i 200" "native -m 8:64K -i 2000" "auto -m 8:64K -i 2000"; do
      echo "== round $round $which algorithm $alg"
      PYTHONPATH=$src timeout 300 "$(dirname "$PY")/mpiexec" -n 2 "$PY" -m zipcoll.bench allreduce -a $alg \
        | grep -v '^#' || true
    done
  done
done

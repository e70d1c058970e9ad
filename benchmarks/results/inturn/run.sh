#!/usr/bin/env bash
# The quickstart's table (mpiexec -n 2 zipcoll-bench allreduce -m 1M:64M --algorithm ring
# -f), its rows' MPI/ring ratio: BASE times MPI's calls, then the ring's, at each size
# (7e86b8b); NEW times them in turn, ten calls each. The two checkouts alternate, ROUNDS
# times, one job at a time under the heavy-work lock:
#   BASE=/work/base NEW=/work/run ROUNDS=6 bash benchmarks/results/inturn/run.sh > run.log
here=$(cd "$(dirname "$0")" && pwd)
new=${NEW:-$(cd "$here/../../.." && pwd)}; base=${BASE:?a checkout of 7e86b8b}
source "$new/.venv/bin/activate" 2>/dev/null || source /work/main/.venv/bin/activate
source "$new/scripts/mpienv.sh"
for round in $(seq "${ROUNDS:-6}"); do
    for tree in "$base" "$new"; do
        echo "== round $round $(date -u +%T) $(git -C "$tree" rev-parse --short HEAD)"
        flock /tmp/zipcoll-heavy.lock env PYTHONPATH="$tree" mpiexec -x PYTHONPATH -n 2 \
            python -m zipcoll.bench allreduce -m 1M:64M --algorithm ring -f 2>&1 |
            awk '/^[0-9]/ {printf "%9s ring %10s us  MPI %10s us  MPI/ring %s\n", $1, $2, $8, $9}'
    done
done

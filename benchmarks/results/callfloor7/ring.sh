#!/usr/bin/env bash
# ring_vs_mpi.py only, BASE and NEW in turn, ROUNDS times (the machine's state changes
# within seconds: compare only rounds where MPI's 1 MiB median is in the fast state)
here=$(cd "$(dirname "$0")" && pwd)
new=${NEW:-$(cd "$here/../../.." && pwd)}; base=${BASE:-/work/main}
source /work/main/.venv/bin/activate; source "$new/scripts/mpienv.sh"
for i in $(seq "${ROUNDS:-10}"); do
    for tree in "$base" "$new"; do
        echo -n "$(date -u +%T) $(git -C "$tree" rev-parse --short HEAD) "
        flock /tmp/zipcoll-heavy.lock env PYTHONPATH="$tree" mpiexec -x PYTHONPATH -n 2 \
            python "$here/ring_vs_mpi.py" 2>&1 | grep -v "^$"
    done
done

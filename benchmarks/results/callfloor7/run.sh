#!/usr/bin/env bash
# Before (BASE, default /work/main at b4f4dc8) and after (NEW, default this checkout), in
# turn, one job at a time under the heavy-work lock:
#   ring_vs_mpi.py on 2 ranks; auto_vs_named.py on 2 ranks (8 B) and 4 ranks (8 B, 64 KiB);
#   the quickstart table's 1 MiB row (zipcoll-bench allreduce -m 1M:1M --algorithm ring -f).
#     bash benchmarks/results/callfloor7/run.sh > benchmarks/results/callfloor7/run.log
here=$(cd "$(dirname "$0")" && pwd)
new=${NEW:-$(cd "$here/../../.." && pwd)}; base=${BASE:-/work/main}
source "$new/.venv/bin/activate" 2>/dev/null || source /work/main/.venv/bin/activate
source "$new/scripts/mpienv.sh"
lock=/tmp/zipcoll-heavy.lock
for tree in "$base" "$new" "$base" "$new" "$base" "$new"; do
    echo "== $(date -u +%T) $(git -C "$tree" rev-parse --short HEAD) ($tree)"
    run() { flock "$lock" env PYTHONPATH="$tree" mpiexec -x PYTHONPATH "$@" 2>&1 | grep -v "^$\|INFO"; }
    run -n 2 python "$here/ring_vs_mpi.py"
    run -n 2 python "$here/auto_vs_named.py" 8
    run -n 4 python "$here/auto_vs_named.py" 8
    run -n 4 python "$here/auto_vs_named.py" 65536
    run -n 2 python -m zipcoll.bench allreduce -m 1M:1M --algorithm ring -f | grep "^1048576" |
        awk '{print "quickstart 1 MiB row: ring", $2, "us, MPI", $8, "us, MPI/ring", $9}'
done

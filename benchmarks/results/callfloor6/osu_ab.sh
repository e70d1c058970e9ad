#!/usr/bin/env bash
# the quickstart's table at 1-4 MiB, alternately timing iallreduce+wait (c87e4c0) and the blocking call (main)
source /work/main/.venv/bin/activate; source /work/main/scripts/mpienv.sh
for i in 1 2 3 4 5; do
  for tree in /work/wt-old /work/main; do
    echo "== $(date -u +%T) $(git -C $tree rev-parse --short HEAD): mpiexec -n 2 zipcoll-bench allreduce -m 1M:4M --algorithm ring -f"
    flock /tmp/zipcoll-heavy.lock env PYTHONPATH=$tree mpiexec -n 2 -x PYTHONPATH python -m zipcoll.bench allreduce -m 1M:4M --algorithm ring -f 2>&1 | grep -v "^#"
  done
done

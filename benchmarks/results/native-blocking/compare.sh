#!/bin/bash
# compare.sh BEFORE_TREE AFTER_TREE: zipcoll native (blocking calls) on 2 ranks, each tree
# in turn, then MPI's own two forms. Run from the repository root, under the heavy lock.
set -e
here=$(dirname "$0")
source scripts/mpienv.sh
for size in 8192 1048576 16777216; do
  for tree in "$1" "$2"; do
    echo "== $size B, zipcoll from $tree ($(git -C "$tree" rev-parse --short HEAD))"
    PYTHONPATH="$tree" mpiexec -n 2 python "$here/time_native.py" "$size" native 100
  done
done
echo "== MPI's own Allreduce and Iallreduce"
mpiexec -n 2 python "$here/mpi_forms.py"

#!/usr/bin/env bash
# mpi4py's own Allreduce/Iallreduce tests (test_cco_buf.py, test_cco_nb_buf.py of the
# mpi4py 4.1.2 sdist) on zipcoll.Intracomm, for every algorithm, at 3 and 4 ranks, and its
# Allgather/ReduceScatter/ReduceScatterBlock tests for every algorithm of zipcoll.SHARDED
# (the "sharded" suite), next to
# mpi4py's own Intracomm ("mpi4py" rows), with mpi4py's fake GPU arrays (host memory
# exposing only __cuda_array_interface__) and its host arrays (array.array, NumPy).
#
#   benchmarks/peer/run_mpi4py_tests.sh [OUTPUT_FILE]
#   SUITES=sharded benchmarks/peer/run_mpi4py_tests.sh benchmarks/results/peer/mpi4py-4.1.2-sharded.txt
#
# Needs the sdist: downloaded once into ${MPI4PY_SDIST_DIR:-$HOME/.cache/zipcoll-peer}.
# (`pip download --no-binary=:all:` builds setuptools/Cython from source too, which takes
# minutes; --no-binary=mpi4py fetches the same sdist.) Exit status: non-zero if a test
# passes on mpi4py's Intracomm but fails on zipcoll's.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTPUT=${1:-benchmarks/results/peer/mpi4py-4.1.2.txt}
VERSION=4.1.2
CACHE=${MPI4PY_SDIST_DIR:-$HOME/.cache/zipcoll-peer}
PYTHON=${PYTHON:-python}
TESTDIR=$CACHE/mpi4py-$VERSION/test
if [ ! -d "$TESTDIR" ]; then
    mkdir -p "$CACHE"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary=mpi4py "mpi4py==$VERSION" -d "$CACHE"
    tar xzf "$CACHE/mpi4py-$VERSION.tar.gz" -C "$CACHE"
fi
[ -f scripts/mpienv.sh ] && source scripts/mpienv.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
ALGORITHMS="mpi4py $("$PYTHON" -c 'import zipcoll; print(*zipcoll.ALGORITHMS)')"
SHARDED_ALGORITHMS="mpi4py $("$PYTHON" -c 'import zipcoll; print(*zipcoll.SHARDED_ALGORITHMS)')"
mkdir -p "$(dirname "$OUTPUT")"
status=0
{
    echo "# mpi4py $VERSION test_cco_buf.py + test_cco_nb_buf.py, testAllreduce (blocking,"
    echo "# in place, Iallreduce) on COMM_SELF, COMM_WORLD and their Dups: 12 tests a run;"
    echo "# suite sharded: testAllgather, testReduceScatter, testReduceScatterBlock: 36 a run"
    echo "# command: SUITES=\"${SUITES:-allreduce sharded}\" MPI4PY_SDIST_DIR=$CACHE benchmarks/peer/run_mpi4py_tests.sh $OUTPUT"
    echo "# date: $(date -u +%FT%TZ); $(mpiexec --version 2>&1 | head -1); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-9s %-6s %-14s %-22s %s\n' suite ranks algorithm backends "result (per rank)"
} > "$OUTPUT"
for suite in ${SUITES:-allreduce sharded}; do
  names=$ALGORITHMS; [ $suite = sharded ] && names=$SHARDED_ALGORITHMS
  for ranks in 3 4; do
    for backends in FakeGPU ArrayArray,ArrayNumPy; do
        baseline_ok=1
        for algorithm in $names; do
            if log=$(timeout 300 mpiexec --oversubscribe -n "$ranks" "$PYTHON" \
                         benchmarks/peer/mpi4py_peer.py "$TESTDIR" "$algorithm" "$backends" \
                         "$suite" 2>&1); then
                result="pass: $(grep -m1 '^rank 0/' <<<"$log" | sed 's/.*]: //')"
            else
                result="FAIL: $(grep '^rank\|^  test' <<<"$log" | tr '\n' ' ' | cut -c1-400)"
                if [ "$algorithm" = mpi4py ]; then baseline_ok=0; elif [ $baseline_ok = 1 ]; then status=1; fi
            fi
            printf '%-9s %-6s %-14s %-22s %s\n' "$suite" "$ranks" "$algorithm" "$backends" \
                "$result" | tee -a "$OUTPUT"
        done
    done
  done
done
exit $status

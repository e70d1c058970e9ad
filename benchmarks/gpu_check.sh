#!/usr/bin/env bash
# One-shot GPU check (at most ~5 minutes on one GPU), with CuPy installed
# (pip install -e ".[dev,cuda12]"):
#   1. the real-GPU tests (pytest -m gpu) and the device-buffer tests, 4 ranks sharing the GPU;
#   2. codec encode / decode_add throughput against a device-to-device copy, 64 and 256 MiB;
#   3. zipcoll.allreduce of CuPy arrays, 4 ranks, with and without codecs, staged through
#      pinned host memory (lossless: in chunks, and whole for comparison) and (where MPI is
#      CUDA-aware) direct.
# A short table is printed last and written to DIR/table.txt, with each part's JSON and log.
#
#   benchmarks/gpu_check.sh [DIR]      DIR: default $OUT, else benchmarks/results/gpu/<date>
#   SIMULATE=1 benchmarks/gpu_check.sh DIR   Numba's CUDA simulator, tiny sizes, 2 ranks
#                                            (CI runs this: tests/test_gpu_check.py)
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-${OUT:-benchmarks/results/gpu/$(date -u +%Y%m%dT%H%M%SZ)}}
PYTHON=${PYTHON:-python}
mkdir -p "$DIR"
[ -f scripts/mpienv.sh ] && [ -z "${ZIPCOLL_SYSTEM_MPI:-}" ] && source scripts/mpienv.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "${SIMULATE:-0}" = 1 ]; then
    export NUMBA_ENABLE_CUDASIM=1
    export ZIPCOLL_STAGING_CHUNK_BYTES=16384  # "staged": 4 chunks of 64 KiB
    RANKS=2 CODEC_SIZES=4K ALLREDUCE_SIZES=64K ITERATIONS=1 CODECS="--codec int8 --codec fp16"
else
    RANKS=4 CODEC_SIZES=64M,256M ALLREDUCE_SIZES=64M ITERATIONS=5 CODECS=""
fi
status=0
run() {  # run SECONDS NAME COMMAND...: a part, its output in DIR/NAME.log
    local seconds=$1 name=$2; shift 2
    echo "== $name: $*"
    timeout "$seconds" "$@" > "$DIR/$name.log" 2>&1
    local rc=$?
    tail -n 5 "$DIR/$name.log"
    [ $rc = 0 ] || { echo "== $name failed (exit $rc)"; status=1; }
}
if [ "${SIMULATE:-0}" != 1 ]; then
    # tests/mpi turns Numba's CUDA simulator on unless told otherwise: here, the real GPU
    NUMBA_ENABLE_CUDASIM=0 run 100 tests mpiexec -n "$RANKS" "$PYTHON" -m pytest --with-mpi \
        -q -p no:cacheprovider tests/mpi/test_device_buffers.py -m "gpu or not gpu"
fi
run 100 codecs "$PYTHON" benchmarks/gpu_check.py codecs --sizes "$CODEC_SIZES" \
    -i "$ITERATIONS" $CODECS --json "$DIR/codecs.json"
run 100 allreduce mpiexec -n "$RANKS" "$PYTHON" benchmarks/gpu_check.py allreduce \
    --sizes "$ALLREDUCE_SIZES" -i "$ITERATIONS" --json "$DIR/allreduce.json"
echo
"$PYTHON" benchmarks/gpu_check.py table "$DIR/codecs.json" "$DIR/allreduce.json" \
    --out "$DIR/table.txt" --command "SIMULATE=${SIMULATE:-0} benchmarks/gpu_check.sh $DIR"
[ -f "$DIR/tests.log" ] && echo "tests: $(grep -E '(passed|failed)' "$DIR/tests.log" | tail -1)" | tee -a "$DIR/table.txt"
exit $status

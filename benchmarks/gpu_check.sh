#!/usr/bin/env bash
# One-shot GPU check (under 5 minutes on one GPU), with the GPU extra installed
# (pip install -e ".[dev,cuda12]": CuPy and numba-cuda; torch with CUDA for NCCL's row):
#   env        the GPUs, driver, CUDA, numba-cuda, CuPy, torch and NCCL, MPI, CUDA-awareness;
#   tests      the real-GPU tests (pytest -m gpu) and the device-buffer tests;
#   codecs     every codec's encode / decode_add throughput against a device-to-device copy;
#   allreduce  zipcoll.allreduce of device buffers, lossless (MPI's own and the ring) and
#              int8 / sign, staged through pinned host memory (lossless: in chunks, and
#              whole) and, where MPI is CUDA-aware, direct; lossless results are checked;
#   nccl       NCCL's all-reduce of the same buffers (torch.distributed, NCCL backend).
# Ranks: one a GPU, at least 2 (2 ranks share one GPU; NCCL then says why it is skipped).
# Each part runs under its own time limit and each case in its own try: a part or case that
# fails is a "failed: <error>" row, and the other parts still run. The environment is
# printed first and the table last; DIR gets table.txt, each part's JSON and log.
# (Reduce-scatter and all-gather join the allreduce part when they exist.)
#
#   benchmarks/gpu_check.sh [--simulate] [DIR]   DIR: default $OUT, else
#                                                benchmarks/results/gpu/<date>
#   --simulate (or SIMULATE=1): Numba's CUDA simulator, tiny sizes, 2 ranks; NCCL's row is
#   "skipped: no GPU" (CI runs this: tests/test_gpu_check.py)
set -uo pipefail
SIMULATE=${SIMULATE:-0}
if [ "${1:-}" = --simulate ]; then SIMULATE=1; shift; fi
cd "$(dirname "$0")/.."
DIR=${1:-${OUT:-benchmarks/results/gpu/$(date -u +%Y%m%dT%H%M%SZ)}}
PYTHON=${PYTHON:-python}
CHECK=benchmarks/gpu_check.py
mkdir -p "$DIR"
rm -f "$DIR/parts.jsonl"
[ -f scripts/mpienv.sh ] && [ -z "${ZIPCOLL_SYSTEM_MPI:-}" ] && source scripts/mpienv.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$SIMULATE" = 1 ]; then
    export NUMBA_ENABLE_CUDASIM=1
    export ZIPCOLL_STAGING_CHUNK_BYTES=16384  # "staged": 4 chunks of 64 KiB
    GPUS=0 RANKS=2 CODEC_SIZES=4K ALLREDUCE_SIZES=64K ITERATIONS=1
    CODECS="--codec int8 --codec fp16 --codec sign"
else
    export NUMBA_ENABLE_CUDASIM=0  # tests/mpi turns the simulator on unless told: here, the GPU
    GPUS=$(timeout 60 "$PYTHON" "$CHECK" gpus 2>/dev/null | tail -n 1)
    [[ "$GPUS" =~ ^[0-9]+$ ]] || GPUS=0
    RANKS=$(( GPUS > 2 ? GPUS : 2 ))
    CODEC_SIZES=64M,256M ALLREDUCE_SIZES=1M,64M ITERATIONS=5 CODECS=""
fi
status=0
run() {  # run SECONDS NAME COMMAND...: a part, its output in DIR/NAME.log, its exit in parts.jsonl
    local seconds=$1 name=$2; shift 2
    echo "== $name: $*"
    timeout -k 10 "$seconds" "$@" > "$DIR/$name.log" 2>&1
    local rc=$?
    printf '{"part": "%s", "rc": %d, "limit": %d}\n' "$name" "$rc" "$seconds" >> "$DIR/parts.jsonl"
    if [ "$name" = env ]; then cat "$DIR/$name.log"; else tail -n 5 "$DIR/$name.log"; fi
    [ $rc = 0 ] || { echo "== $name failed (exit $rc$( [ $rc = 124 ] && echo ", timed out after $seconds s"))"; status=1; }
}
# Limits: 30 + 60 + 70 + 90 + 50 = 300 s at most; a first run compiles the kernels.
run 30 env "$PYTHON" "$CHECK" env --json "$DIR/env.json"
if [ "$SIMULATE" != 1 ]; then
    run 60 tests mpiexec -n "$RANKS" "$PYTHON" -m pytest --with-mpi -q -p no:cacheprovider \
        tests/mpi/test_device_buffers.py -m "gpu or not gpu"
fi
run 70 codecs "$PYTHON" "$CHECK" codecs --sizes "$CODEC_SIZES" -i "$ITERATIONS" $CODECS \
    --json "$DIR/codecs.json"
run 90 allreduce mpiexec -n "$RANKS" "$PYTHON" "$CHECK" allreduce --sizes "$ALLREDUCE_SIZES" \
    -i "$ITERATIONS" --json "$DIR/allreduce.json"
run 50 nccl mpiexec -n "$RANKS" "$PYTHON" "$CHECK" nccl --sizes "$ALLREDUCE_SIZES" \
    -i "$ITERATIONS" --json "$DIR/nccl.json"
echo
"$PYTHON" "$CHECK" table "$DIR" --out "$DIR/table.txt" \
    --command "benchmarks/gpu_check.sh$( [ "$SIMULATE" = 1 ] && echo " --simulate") $DIR"
exit $status

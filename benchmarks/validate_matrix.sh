#!/usr/bin/env bash
# Issue 4's acceptance run: `zipcoll-bench allreduce -c` at 4 ranks for every compressed
# algorithm x every fixed-size codec (and allgather with topk and threshold).
# Hierarchical runs on 2 emulated nodes x 2 ranks (ZIPCOLL_RANKS_PER_NODE=2); torus on the
# default 2 x 2 grid. Writes one line per run to $OUT/summary.md and the bench output to $OUT/.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
source scripts/mpienv.sh
OUT=${OUT:-benchmarks/results/validation}
SIZES=${SIZES:-1M:64M}
mkdir -p "$OUT"
ALGORITHMS="ring tree dbtree twophase allgather hierarchical torus"
CODECS="none fp16 bf16 int8 int4 int2 qsgd terngrad sign topk:ratio=0.01 randomk:ratio=0.01"
summary="$OUT/summary.md"
{
  echo "# zipcoll-bench allreduce -c: every algorithm x codec at 4 ranks"
  echo
  echo "Command per row: \`mpiexec -n 4 zipcoll-bench allreduce -m $SIZES --algorithm A --codec C -c -i 1 -x 1\`"
  echo "(hierarchical with ZIPCOLL_RANKS_PER_NODE=2). Started $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| algorithm | codec | validation | largest rel. error |"
  echo "|---|---|---|---|"
} > "$summary"
run_one() {
  local algorithm=$1 codec=$2 log="$OUT/${1}-${2//[:=]/_}.txt" layout=""
  [ "$algorithm" = hierarchical ] && layout="ZIPCOLL_RANKS_PER_NODE=2"
  env $layout timeout 900 mpiexec -n 4 zipcoll-bench allreduce -m "$SIZES" --algorithm "$algorithm" \
      --codec "$codec" -c -i 1 -x 1 > "$log" 2>&1
  local rc=$? verdict
  verdict=$(grep -o '# Validation: [A-Z]*' "$log" | tail -1 | cut -d' ' -f3)
  grep -q "cannot use codec" "$log" && verdict="refused (ValueError: $(grep -o 'algorithms that can: [a-z, ]*' "$log" | head -1))"
  [ $rc -ne 0 ] && [ -z "$verdict" ] && verdict="ERROR (rc $rc)"
  local worst
  worst=$(awk '/^[0-9]/ {print $(NF-1)}' "$log" | sort -g | tail -1)
  echo "| $algorithm | $codec | ${verdict:-?} | ${worst:-?} |" >> "$summary"
  echo "$algorithm $codec ${verdict:-?} ${worst:-?}"
}
for algorithm in $ALGORITHMS; do
  for codec in $CODECS; do run_one "$algorithm" "$codec"; done
done
run_one allgather threshold:tau=1.0
echo "Finished $(date -u +%FT%TZ)." >> "$summary"

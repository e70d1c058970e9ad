#!/usr/bin/env bash
# auto against every plan it could pick, on one layout: calibrate (with --plans) then
# autocheck with that profile, each in its own job. Writes OUT/LAYOUT.{profile.json,
# calibrate.log,json,md}.
#
#   benchmarks/autocheck.sh 1x4 [OUT]           # one node, 4 ranks, shared memory
#   benchmarks/autocheck.sh 2x2 [OUT] 1gbit     # emulated cluster (root; benchmarks/cluster/)
#
# Environment: CODEC (default int8), SIZES (default 8:64M), ZC_PREFIX (cluster names).
set -euo pipefail
layout=$1; out=${2:-benchmarks/results/autocheck}; rate=${3:-1gbit}
codec=${CODEC:-int8}; sizes=${SIZES:-8:64M}
nodes=${layout%x*}; per_node=${layout#*x}; ranks=$((nodes * per_node))
cd "$(dirname "$0")/.."
source scripts/mpienv.sh
mkdir -p "$out"
name=$layout; ((nodes > 1)) && name=$layout-$rate
if ((nodes > 1)); then
    export ZC_PREFIX=${ZC_PREFIX:-zca}
    benchmarks/cluster/cluster.sh up "$nodes" --rate "$rate"
    trap 'benchmarks/cluster/cluster.sh down' EXIT
    launch=(benchmarks/cluster/cluster.sh run -n "$ranks" --ranks-per-node "$per_node" --)
else
    launch=(mpiexec -n "$ranks")
fi
profile=$out/$name.profile.json
{ echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "${launch[@]}" zipcoll-bench calibrate --plans "$codec" --plan-sizes "$sizes" -o "$profile"
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/$name.calibrate.log" 2>&1
{ echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "${launch[@]}" env ZIPCOLL_PROFILE="$profile" zipcoll-bench autocheck -m "$sizes" \
      --codec "$codec" --json "$out/$name.json"
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/$name.md" 2>&1
tail -30 "$out/$name.md"

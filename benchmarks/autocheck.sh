#!/usr/bin/env bash
# auto against every plan it could pick, on one layout: calibrate (with --plans) then
# autocheck with that profile, each in its own job. Writes OUT/LAYOUT.{profile.json,
# calibrate.log,json,md}.
#
#   benchmarks/autocheck.sh 1x4 [OUT]           # one node, 4 ranks, shared memory
#   benchmarks/autocheck.sh 2x2 [OUT] 1gbit     # emulated cluster (root; benchmarks/cluster/)
#   ONLINE=1 benchmarks/autocheck.sh 4x1 [OUT] 1gbit   # no calibration: auto tuning itself
#       online in a fresh job with no profile, timed after its first LEARN (20) calls a size;
#       writes OUT/LAYOUT.online.{json,md}
#
# Environment: CODEC (default int8), SIZES (default 8:64M; 64K:64M with ONLINE=1),
# ONLINE, LEARN, ROUNDS (autocheck --rounds, default 5), ZC_PREFIX (cluster names).
set -euo pipefail
layout=$1; out=${2:-benchmarks/results/autocheck}; rate=${3:-1gbit}
codec=${CODEC:-int8}; online=${ONLINE:-}; learn=${LEARN:-20}; rounds=${ROUNDS:-5}
sizes=${SIZES:-$([[ -n $online ]] && echo 64K:64M || echo 8:64M)}
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
if [[ -n $online ]]; then
    { echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
      echo "# ${launch[*]} env -u ZIPCOLL_PROFILE zipcoll-bench autocheck -m $sizes --codec $codec --online --learn-calls $learn --rounds $rounds --json $out/$name.online.json"
      "${launch[@]}" env -u ZIPCOLL_PROFILE zipcoll-bench autocheck -m "$sizes" --codec "$codec" \
          --online --learn-calls "$learn" --rounds "$rounds" --json "$out/$name.online.json"
      echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/$name.online.md" 2>&1
    tail -30 "$out/$name.online.md"
    exit 0
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

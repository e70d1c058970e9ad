#!/usr/bin/env bash
# Reproduces the link and Allreduce figures of README.md (root; leaves no cluster up).
#   benchmarks/cluster/measure.sh [links|pingpong|allreduce|all] | tee benchmarks/cluster/results/...
set -euo pipefail

HERE="$(cd "${BASH_SOURCE[0]%/*}" && pwd)"
CLUSTER="$HERE/cluster.sh"
PY="${PYTHON:-python3}"
export ZC_PREFIX=zcm                   # own prefix: leaves a cluster under "zc" alone
trap '"$CLUSTER" down >/dev/null 2>&1' EXIT

# One TCP stream node0 -> node1, three times, under `up 2 <options>`.
link() {
    local mib=$1; shift
    "$CLUSTER" up 2 "$@" 2>/dev/null
    echo "## up 2 $*: $(tc -n zcm-node0 qdisc show dev zcm0 | head -1)"
    for _ in 1 2 3; do
        ip netns exec zcm-node1 "$PY" "$HERE/linktest.py" serve 198.18.0.2 &
        timeout 60 ip netns exec zcm-node0 "$PY" "$HERE/linktest.py" send 198.18.0.2 --mib "$mib"
        wait
    done
}

links() {
    link 128 --rate 1gbit
    link 2048 --rate 10gbit --burst 64kb
    link 2048 --rate 10gbit --burst 1mb
    link 2048 --rate 10gbit
    link 2048 --rate 20gbit
    link 2048 --rate none
}

# Native float32 Allreduce, slowest rank, median of 7, on NODES x K at RATE.
allreduce_on() {
    local nodes=$1 k=$2 rate=$3
    "$CLUSTER" up "$nodes" --rate "$rate" 2>/dev/null
    echo "## $nodes nodes x $k ranks, rate $rate"
    timeout 300 "$CLUSTER" run -n $((nodes * k)) --ranks-per-node "$k" -- \
        "$PY" "$HERE/probe.py" --sizes 4M,16M,64M --rate "$rate" | grep Allreduce
}

# Small and 1 MiB ping-pongs, same node and across the link, 2 nodes x 2 ranks at 1gbit.
pingpong() {
    "$CLUSTER" up 2 --rate 1gbit 2>/dev/null
    echo "## 2 nodes x 2 ranks, rate 1gbit"
    local b
    for b in 8 1048576; do
        timeout 120 "$CLUSTER" run -n 4 --ranks-per-node 2 -- "$PY" "$HERE/probe.py" --pingpong "$b" | grep ping-pong
    done
}

allreduce() {
    allreduce_on 2 2 1gbit
    allreduce_on 2 2 none
    allreduce_on 4 1 1gbit
    allreduce_on 4 1 none
}

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cores; $0 ${1:-all}"
case ${1:-all} in
    links) links ;;
    pingpong) pingpong ;;
    allreduce) allreduce ;;
    all) links; pingpong; allreduce ;;
    *) echo "usage: $0 [links|pingpong|allreduce|all]" >&2; exit 1 ;;
esac

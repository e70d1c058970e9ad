#!/bin/bash
# 2 x 2, 1 Gbit/s: each call's time of hierarchical:{bruck,twophase,allgather} + int8 at 64 MiB (barrier
# before each), with the tbf drops and TCP retransmits of each node around it; then 4 x 1:
# back-to-back calls at 4 MiB in the order the tuning's learning makes them (seq.py).
set -u
cd "$(dirname "$0")/../../../../.."
export PATH=$PWD/.venv/bin:$PATH
source scripts/mpienv.sh
export ZC_PREFIX=zcb
benchmarks/cluster/cluster.sh up 2 --rate 1gbit
counters() {
  for i in 0 1; do
    d=$(tc -s -n zcb-node$i qdisc show dev zcb0 | grep -o 'dropped [0-9]*')
    t=$(ip netns exec zcb-node$i nstat -az TcpExtTCPTimeouts TcpRetransSegs 2>/dev/null | awk 'NR>1{printf "%s=%s ", $1, $2}')
    echo "  node$i: tbf $d; $t"
  done
}
for round in 1 2; do
for alg in hierarchical:bruck hierarchical:twophase hierarchical:allgather; do
  echo "== $alg round $round, before:"; counters
  benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 2 -- python benchmarks/results/autocheck-online/idle/spikes/percall.py $alg int8 64 10
  echo "   after:"; counters
done
done
benchmarks/cluster/cluster.sh down
export ZC_PREFIX=zcs
benchmarks/cluster/cluster.sh up 4 --rate 1gbit
for i in 0 1 2 3; do tc -s -n zcs-node$i qdisc show dev zcs0 | grep -o 'dropped [0-9]*' | sed "s/^/  node$i before: /"; done
benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 1 -- python benchmarks/results/autocheck-online/idle/spikes/seq.py
for i in 0 1 2 3; do tc -s -n zcs-node$i qdisc show dev zcs0 | grep -o 'dropped [0-9]*' | sed "s/^/  node$i after: /"; done
benchmarks/cluster/cluster.sh down

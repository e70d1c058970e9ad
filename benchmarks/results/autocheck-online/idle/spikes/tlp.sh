#!/bin/bash
# 2 x 2, 1 Gbit/s: hierarchical:bruck + int8 at 64 MiB, 3 runs of 10 calls, with each node's TCP
# retransmissions, tail-loss probes, SACK recoveries and receive drops around each run, then
# the links' own RX/TX drop counters.
set -u
cd "$(dirname "$0")/../../../../.."
export PATH=$PWD/.venv/bin:$PATH
source scripts/mpienv.sh
export ZC_PREFIX=zcb
benchmarks/cluster/cluster.sh up 2 --rate 1gbit 2>/dev/null
rt() { for i in 0 1; do ip netns exec zcb-node$i nstat -az TcpRetransSegs TcpExtTCPRcvQDrop TcpExtTCPBacklogDrop TcpExtTCPSackRecovery TcpExtTCPLossProbes 2>/dev/null | awk -v n=$i 'NR>1{printf "n%s %s=%s ", n, $1, $2}'; done; }
for r in 1 2 3; do
  echo "before: $(rt)"
  benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 2 -- python benchmarks/results/autocheck-online/idle/spikes/percall.py hierarchical:bruck int8 64 10
  echo "after:  $(rt)"
done
for i in 0 1; do ip -n zcb-node$i -s link show zcb0 | grep -A1 -E "RX|TX" | tr -s ' ' | paste - - ; done
ip -n zcb-br -s link show | grep -A1 -E "RX|TX" | tr -s ' ' | paste - - | head -8
benchmarks/cluster/cluster.sh down 2>/dev/null

#!/usr/bin/env bash
# step_time.py on the emulated cluster: 2 nodes x 1 rank at 1 Gbit/s (root: namespaces).
#   flock /tmp/zipcoll-heavy.lock bash benchmarks/train/step_time_cluster.sh [step_time.py args]
# Brings its own cluster up under the prefix zctr (subnet 198.18.9.0/24) and always down.
# Both "nodes" share this machine's cores: one thread a rank for torch and for zipcoll's
# kernels (zipcoll would give its one rank a node every core, and Numba's OpenMP thread
# count is torch's too: they share libgomp).
set -euo pipefail
cd "$(dirname "$0")/../.."
export ZC_PREFIX=zctr ZC_SUBNET=198.18.9
C=benchmarks/cluster/cluster.sh
trap '$C down' EXIT
$C up 2 --rate 1gbit
$C run -n 2 --ranks-per-node 1 \
    -x OMP_WAIT_POLICY=PASSIVE -x NUMBA_NUM_THREADS=1 -x GLOO_SOCKET_IFNAME=zctr0 -x MASTER_ADDR=198.18.9.1 -- \
    python benchmarks/train/step_time.py "$@"

#!/usr/bin/env bash
# step_time.py on the emulated cluster at 1 Gbit/s (root: namespaces); default 2 nodes x 1 rank.
#   flock /tmp/zipcoll-heavy.lock bash benchmarks/train/step_time_cluster.sh [step_time.py args]
#   NODES=2 PER_NODE=2 flock /tmp/zipcoll-heavy.lock bash benchmarks/train/step_time_cluster.sh ...
#   SCRIPT=benchmarks/train/time_to_accuracy.py ... : another script, the same cluster
# Brings its own cluster up under the prefix $ZC_PREFIX (default zctr, subnet $ZC_SUBNET,
# default 198.18.9) and always down.
# Both "nodes" share this machine's cores: one thread a rank for torch, NumPy's BLAS (PowerSGD) and zipcoll's
# kernels (zipcoll would give its one rank a node every core). No MASTER_ADDR: init_process_group finds
# node 0's address itself (GLOO_SOCKET_IFNAME's, the cluster interface).
set -euo pipefail
cd "$(dirname "$0")/../.."
export ZC_PREFIX=${ZC_PREFIX:-zctr} ZC_SUBNET=${ZC_SUBNET:-198.18.9}
NODES=${NODES:-2} PER_NODE=${PER_NODE:-1} SCRIPT=${SCRIPT:-benchmarks/train/step_time.py}
C=benchmarks/cluster/cluster.sh
trap '$C down' EXIT
$C up "$NODES" --rate 1gbit
$C run -n $((NODES * PER_NODE)) --ranks-per-node "$PER_NODE" \
    -x OMP_WAIT_POLICY=PASSIVE -x NUMBA_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x GLOO_SOCKET_IFNAME=${ZC_PREFIX}0 \
    -- python "$SCRIPT" "$@"

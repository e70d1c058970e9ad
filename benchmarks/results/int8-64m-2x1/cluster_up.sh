# Sourced by sweep.sh and sweep_loaded.sh: the emulated 2 x 1 at 1 Gbit/s up (taken down on
# exit), and run ARGS -- CMD: one mpiexec on it, printing only the result lines.
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH ZC_PREFIX=zci
C=benchmarks/cluster/cluster.sh
uptime
$C up 2 --rate 1gbit >/dev/null
trap '$C down >/dev/null; uptime' EXIT
run() { nice -n -19 timeout 300 $C run -n 2 --ranks-per-node 1 "$@" 2>&1 | grep -E "median|Error|error" ; }
